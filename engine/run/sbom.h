/*
 * sbom.h - a stack's bill of materials as a CycloneDX 1.6 JSON document,
 * built from what the state says was placed (`tfprov sbom`).
 *
 * Sources, each a fact tfprov recorded, never a guess:
 *  - the stack and its current generation (state), its recorded manifest
 *    (stackinfo: generations.manifest_text);
 *  - CUDA: the cuda step's attrs (archive name -> sha256 placed), matched with
 *    the recorded manifest's inline artifacts or with the redistrib JSON the
 *    cache holds under its pinned sha256 (version, URL, NVIDIA's license field);
 *  - cuDNN: the recorded manifest's artifact or its redist JSON, as above;
 *  - conda: the env's conda-meta/<dist>.json (url, sha256, license, depends);
 *  - pip: the pip step's attrs (installed name, version, sha256), each wheel's
 *    *.dist-info/METADATA in the env (License-Expression, License,
 *    classifiers), and the lock's pip.requires for the dependency edges.
 * A license nobody stated is left out and said in a "tfprov:license" property
 * ("unknown"), so a scanner never reads a made-up license name.
 *
 * Deterministic: components in step order, then by name; objects keep their
 * insertion order; the timestamp is `epoch`; serialNumber is a UUID made from
 * the sha256 of the document without it and without the timestamp.
 */
#ifndef TFPROV_SBOM_H
#define TFPROV_SBOM_H

#include <stdint.h>

#include "ctx.h"
#include "error.h"

struct json_t;

enum sbom_flags {
	SBOM_FILES = 1 << 0, /* each component lists the files it placed, with sha256 */
};

/*
 * Builds stack `name`'s document into *out (the caller json_decref's it).
 * tool_version: tfprov's, for metadata.tools. epoch: the metadata timestamp (unix seconds). 0; -ENOENT when there is no
 * such stack; TF_EMANIFEST (with why) when its recorded manifest no
 * longer parses; TF_ESTATE. why is the caller's to clear.
 */
int sbom_build(struct ctx *c, const char *name, const char *tool_version, int64_t epoch,
               unsigned flags, struct json_t **out, struct why *why);

#endif
