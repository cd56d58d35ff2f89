"""Validates a document against the official CycloneDX 1.6 JSON schema, offline.

The schema files are those of the npm package @cyclonedx/cyclonedx-library
(tests/fixtures/cyclonedx/README.md says which version and where from); the
validator is Debian's python3-jsonschema (scripts/install-deps.sh).
"""
import json
import os

import jsonschema

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "cyclonedx")
BASE = "http://cyclonedx.org/schema/"


def _load(name):
    with open(os.path.join(HERE, name)) as f:
        return json.load(f)


def validator():
    bom = _load("bom-1.6.SNAPSHOT.schema.json")
    store = {BASE + n: _load(n) for n in ("spdx.SNAPSHOT.schema.json",
                                          "jsf-0.82.SNAPSHOT.schema.json")}
    store[bom["$id"]] = bom
    resolver = jsonschema.RefResolver(bom["$id"], bom, store=store)
    cls = jsonschema.validators.validator_for(bom)
    return cls(bom, resolver=resolver, format_checker=jsonschema.FormatChecker())


def errors(doc):
    """Every schema violation of doc, as 'path: message' lines (empty: valid)."""
    return ["/".join(str(p) for p in e.absolute_path) + ": " + e.message
            for e in validator().iter_errors(doc)]
