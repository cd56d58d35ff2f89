"""The shipped manifests (manifests/*.yaml) against the reference data they are built from.

"Never invent a hash" as a check: every sha256, url and size in a shipped manifest
must come from manifests/data/ (a committed copy of the team's reference data, so
that a clean clone can run this), and each must belong to the same record there.
Then `tfprov validate` must accept every shipped manifest (exit 0, warnings allowed).

Run with Debian's pytest: /usr/bin/python3 -m pytest tests/system/test_shipped_manifests.py
The binary comes from $TFPROV_BIN (set by ctest), else build/tfprov.
"""

import csv
import json
import os
import re
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

try:  # Debian: python3-yaml
    import yaml
except ImportError:  # pragma: no cover - reported as a failure, never skipped
    yaml = None

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
DATA = MANIFESTS / "data"

CUDA_REDIST = "https://developer.download.nvidia.com/compute/cuda/redist/"
CUDNN_REDIST = "https://developer.download.nvidia.com/compute/cudnn/redist/"

SHIPPED = ["stable-2.21.yaml", "stable-2.20.yaml", "stable-2.15.yaml", "stable-2.12.yaml",
           "stable-2.9.yaml", "legacy-1.15.yaml"]
# Stacks whose pip section must be a complete lock (the whole closure, every hash),
# whose interpreter is pinned, and that `tfprov lock --check` accepts.
COMPLETE = ["stable-2.21.yaml", "stable-2.20.yaml", "stable-2.15.yaml", "stable-2.12.yaml",
            "stable-2.9.yaml"]
# CUDA from nvidia-*-cu12 wheels (tensorflow[and-cuda]): no cuda/cudnn sections.
PIP_CUDA = ["stable-2.21.yaml"]

HEX64 = re.compile(r"(?<![0-9A-Za-z])[0-9a-fA-F]{64}(?![0-9A-Za-z])")


# --------------------------------------------------------------------------- reference


class Ref:
    """Every pinned file the reference data knows, by URL."""

    def __init__(self):
        self.by_url = {}  # url -> dict(sha256, size or None, name, source)
        self.hashes = set()  # every 64-hex token in any data file
        self.wheels = {}  # sha256 -> (normalized name, version, filename, url)
        self.closures = {}  # closure tsv name -> {(name, version): {sha256...}}
        for p in sorted(DATA.rglob("*")):
            if p.is_file():
                self.hashes.update(h.lower() for h in HEX64.findall(p.read_text(errors="replace")))
        self._redist()
        self._legacy()
        self._pypi()
        self._conda()

    def add(self, url, sha256, size, name, source):
        old = self.by_url.get(url)
        rec = dict(sha256=sha256, size=size, name=name, source=source)
        if old is not None and (old["sha256"], old["size"]) != (sha256, size):
            # The same URL twice must agree (e.g. Spack and the redist JSON for
            # cuDNN 8.9.7.29). Keep the record that has a size.
            assert old["sha256"] == sha256, f"reference data disagrees on {url}"
            if old["size"] is not None:
                return
        self.by_url[url] = rec

    def _redist(self):
        for p in sorted((DATA / "nvidia-redist").glob("*.json")):
            base = CUDNN_REDIST if p.name.startswith("cudnn") else CUDA_REDIST
            doc = json.loads(p.read_text())
            for comp, body in doc.items():
                if not isinstance(body, dict) or "name" not in body:
                    continue
                for plat, ent in body.items():
                    if not isinstance(ent, dict):
                        continue
                    entries = [ent] if "relative_path" in ent else [
                        v for k, v in ent.items() if isinstance(v, dict) and "relative_path" in v
                    ]
                    for e in entries:
                        self.add(base + e["relative_path"], e["sha256"], int(e["size"]), comp,
                                 f"{p.name} {comp} {plat}")

    def _legacy(self):
        for r in _tsv(DATA / "legacy-artifacts.tsv"):
            self.add(r["url"], r["sha256"], None, f"{r['product']} {r['version']}",
                     "legacy-artifacts.tsv")

    def _pypi(self):
        urls = {r["filename"]: r for r in _tsv(DATA / "pypi-urls.tsv")}
        for r in _tsv(DATA / "pypi-pins.tsv"):
            u = urls[r["filename"]]
            size = int(u["size"]) if u["size"].strip() else None
            self.add(u["url"], r["sha256"], size, r["name"], "pypi-pins.tsv")
            self.wheels[r["sha256"]] = (pep503(r["name"]), r["version"], r["filename"], u["url"])

        for p in sorted(DATA.glob("pypi-closure-*.tsv")):
            for r in _tsv(p):
                size = int(r["size"]) if r["size"].strip() else None
                if r["url"].strip():
                    self.add(r["url"], r["sha256"], size, r["name"], p.name)
                old = self.wheels.get(r["sha256"])
                rec = (pep503(r["name"]), r["version"], r["filename"], r["url"] or None)
                assert old is None or old[:3] == rec[:3], f"{p.name}: {r['sha256']} twice"
                if old is None or old[3] is None:
                    self.wheels[r["sha256"]] = rec
                # One closure: every file of every package, for complete locks.
                self.closures.setdefault(p.name, {}).setdefault(
                    (pep503(r["name"]), r["version"]), set()).add(r["sha256"])

    def _conda(self):
        for p in sorted((DATA / "conda").glob("python-*-linux-64.tsv")):
            for r in _tsv(p):
                self.add(r["url"], r["sha256"], None, r["name"], f"conda/{p.name}")


def _tsv(path):
    """Rows of a data TSV; '#' lines before the header (source notes) are skipped."""
    with open(path, newline="") as f:
        lines = [l for l in f if not l.startswith("#")]
    return list(csv.DictReader(lines, delimiter="\t"))


def pep503(name):
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def ref():
    return Ref()


# --------------------------------------------------------------------------- manifests


def stack_manifests():
    """manifests/*.yaml that describe a stack (compat.yaml and other data files are not)."""
    out = []
    for p in sorted(MANIFESTS.glob("*.yaml")):
        if p.name == "compat.yaml":
            continue
        if re.search(r"(?m)^stack:", p.read_text()):
            out.append(p)
    return out


MANIFEST_PATHS = stack_manifests()
IDS = [p.name for p in MANIFEST_PATHS]


def load(path):
    assert yaml is not None, "python3-yaml is needed (Debian package python3-yaml)"
    return yaml.safe_load(path.read_text())


def artifacts(doc):
    """(where, mapping) for every pinned file of the manifest outside python/pip."""
    out = []
    cuda = doc.get("cuda") or {}
    for i, a in enumerate(cuda.get("artifacts") or []):
        out.append((f"cuda.artifacts[{i}] {a.get('name', '')}".strip(), a))
    if "runfile" in cuda:
        out.append(("cuda.runfile", cuda["runfile"]))
    if "redist" in cuda:
        out.append(("cuda.redist", cuda["redist"]))
    cudnn = doc.get("cudnn") or {}
    if "artifact" in cudnn:
        out.append(("cudnn.artifact", cudnn["artifact"]))
    if "redist" in cudnn:
        out.append(("cudnn.redist", cudnn["redist"]))
    return out


def conda_lines(doc, path):
    py = doc.get("python") or {}
    text = py.get("lock")
    if text is None and py.get("lock_file"):
        text = (path.parent / py["lock_file"]).read_text()
    if not text:
        return []
    return [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith(("#", "@"))]


def pip_requirements(doc, path):
    """[(spec, [sha256...])] from pip.requirements / requirements_file (pip's format)."""
    pip = doc.get("pip") or {}
    text = pip.get("requirements")
    if text is None and pip.get("requirements_file"):
        text = (path.parent / pip["requirements_file"]).read_text()
    if not text:
        return []
    logical, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        logical.append(cur + s)
        cur = ""
    if cur.strip():
        logical.append(cur)
    out = []
    for l in logical:
        toks = l.split()
        hashes = [t.split(":", 1)[1] for t in toks if t.startswith("--hash=sha256:")]
        spec = " ".join(t for t in toks if not t.startswith("--"))
        out.append((spec, hashes))
    return out


# --------------------------------------------------------------------------- tests


def test_reference_copy_present():
    for rel in ["README.md", "legacy-artifacts.tsv", "pypi-pins.tsv", "pypi-urls.tsv",
                "nvidia-redist/README.md", "conda/python-3.10-linux-64.explicit.txt"]:
        assert (DATA / rel).is_file(), f"manifests/data/{rel} is missing"


def test_every_shipped_manifest_exists():
    names = {p.name for p in MANIFEST_PATHS}
    for n in SHIPPED:
        assert n in names, f"manifests/{n} is missing"


@pytest.mark.parametrize("path", MANIFEST_PATHS, ids=IDS)
def test_no_invented_hash(path, ref):
    """Every 64-hex string anywhere in the file (values and comments) is in the data."""
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        for h in HEX64.findall(line):
            assert h == h.lower(), f"{path.name}:{lineno}: sha256 not lowercase: {h}"
            assert h in ref.hashes, \
                f"{path.name}:{lineno}: sha256 {h} is not in manifests/data (invented?)"


@pytest.mark.parametrize("path", MANIFEST_PATHS, ids=IDS)
def test_header_comment(path):
    """A manifest begins with a comment block saying what it is and where its hashes come from."""
    lines = path.read_text().splitlines()
    head = []
    for l in lines:
        if not l.startswith("#"):
            break
        head.append(l)
    assert len(head) >= 5, f"{path.name}: no header comment block"
    text = "\n".join(head)
    assert "manifests/data" in text, f"{path.name}: the header does not say where the hashes come from"
    assert re.search(r"(?i)missing", text), f"{path.name}: the header does not say what is missing"


@pytest.mark.parametrize("path", MANIFEST_PATHS, ids=IDS)
def test_identity(path):
    doc = load(path)
    assert doc.get("schema") == 1
    assert doc["stack"]["name"] == path.stem
    assert doc["stack"]["platform"] in ("linux-x86_64", "wsl2", "windows-x86_64")
    v = doc["versions"]
    for k in ("tensorflow", "cuda", "cudnn", "python"):
        assert isinstance(v.get(k), str), f"versions.{k} must be a string (quote \"3.10\")"
    if path.name in PIP_CUDA:
        assert "cuda" not in doc and "cudnn" not in doc, \
            f"{path.name}: CUDA comes from the nvidia-*-cu12 wheels, not from sections"
    else:
        assert doc["cuda"].get("version", v["cuda"]) == v["cuda"]
        assert doc["cudnn"].get("version", v["cudnn"]) == v["cudnn"]
    assert str(doc["python"].get("version", v["python"])) == v["python"]


@pytest.mark.parametrize("path", MANIFEST_PATHS, ids=IDS)
def test_artifacts_match_reference(path, ref):
    """url, sha256 and size of each artifact are one record of the reference data."""
    doc = load(path)
    arts = artifacts(doc)
    if path.name in PIP_CUDA:
        assert not arts, f"{path.name}: CUDA from wheels carries no archives"
        return
    assert arts, f"{path.name}: no CUDA/cuDNN artifacts"
    for where, a in arts:
        label = f"{path.name}: {where}"
        assert isinstance(a, dict), label
        assert "url" in a and "sha256" in a, f"{label}: url and sha256 are required"
        r = ref.by_url.get(a["url"])
        assert r is not None, f"{label}: url {a['url']} is not in manifests/data"
        assert a["sha256"] == r["sha256"], \
            f"{label}: sha256 {a['sha256']} != {r['sha256']} ({r['source']})"
        if r["size"] is None:
            assert "size" not in a, f"{label}: size {a.get('size')} is not in the data (invented?)"
        else:
            assert a.get("size") == r["size"], \
                f"{label}: size {a.get('size')} != {r['size']} ({r['source']}); the data has it"
        if where.startswith("cuda.artifacts"):
            assert a.get("name") == r["name"], \
                f"{label}: name {a.get('name')} but the url is component {r['name']}"
        if urlparse(a["url"]).path.endswith((".tar.xz", ".tgz", ".tar.gz", ".zip")):
            assert a.get("strip") == 1, f"{label}: archives in the data have one top directory: strip: 1"


@pytest.mark.parametrize("path", MANIFEST_PATHS, ids=IDS)
def test_conda_lock_matches_reference(path, ref):
    doc = load(path)
    for line in conda_lines(doc, path):
        url, _, frag = line.partition("#")
        r = ref.by_url.get(url)
        assert r is not None, f"{path.name}: conda package {url} is not in manifests/data"
        assert frag.startswith("sha256:"), f"{path.name}: {url} is not pinned by sha256"
        assert frag[len("sha256:"):] == r["sha256"], f"{path.name}: {url}: sha256 differs from the data"


@pytest.mark.parametrize("path", MANIFEST_PATHS, ids=IDS)
def test_pip_pins_match_reference(path, ref):
    """Each --hash is a wheel of that very project and version (or that very URL)."""
    doc = load(path)
    for spec, hashes in pip_requirements(doc, path):
        assert hashes, f"{path.name}: '{spec}' has no --hash"
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(.*)$", spec)
        assert m, spec
        name, rest = pep503(m.group(1)), m.group(2).strip()
        for h in hashes:
            assert h in ref.wheels, f"{path.name}: {spec}: hash {h} is not a wheel in manifests/data"
            wname, wver, wfile, wurl = ref.wheels[h]
            assert wname == name, f"{path.name}: {spec}: hash {h} belongs to {wfile}"
            if rest.startswith("=="):
                assert rest[2:].split(";")[0].strip() == wver, \
                    f"{path.name}: {spec}: hash {h} belongs to {wfile}"
            elif rest.startswith("@"):
                url = rest[1:].split(";")[0].strip()
                assert url == wurl, f"{path.name}: {spec}: hash {h} belongs to {wurl}"
                assert unquote(urlparse(url).path).endswith(wfile)
            else:
                pytest.fail(f"{path.name}: '{spec}' is neither ==-pinned nor a direct URL")


def pinned(doc, path):
    """{normalized name: (version, {sha256...})} of a ==-pinned pip lock."""
    out = {}
    for spec, hashes in pip_requirements(doc, path):
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([^\s;]+)$", spec)
        assert m, f"{path.name}: '{spec}' is not a plain name==version pin"
        name = pep503(m.group(1))
        assert name not in out, f"{path.name}: {name} is pinned twice"
        out[name] = (m.group(2), set(hashes))
    return out


def conda_names(doc, path):
    """Names of the packages in the manifest's conda explicit lock."""
    names = set()
    for line in conda_lines(doc, path):
        fn = urlparse(line.partition("#")[0]).path.rsplit("/", 1)[-1]
        fn = re.sub(r"\.(conda|tar\.bz2)$", "", fn)
        names.add(pep503(fn.rsplit("-", 2)[0]))
    return names


def own_closure(doc, path, ref):
    """The closure in manifests/data a lock was written from. Several hold the same
    tensorflow file (with and without [and-cuda]; Linux and Windows): the lock's own
    holds every pinned file, and each of its packages is pinned or in the conda lock."""
    pins = pinned(doc, path)
    files = {h for _, hs in pins.values() for h in hs}
    from_conda = conda_names(doc, path)
    cands = []
    for c, pk in ref.closures.items():
        have = set().union(*pk.values())
        if not files <= have:
            continue
        if all(p in pins or p in from_conda for p, _ in pk):
            cands.append(c)
    assert len(cands) == 1, f"{path.name}: the lock matches closures {cands}"
    return cands[0]


@pytest.mark.parametrize("name", COMPLETE)
def test_complete_lock_is_a_closure_from_the_data(name, ref):
    """A complete lock is one closure of the data: each package with every hash of its
    files for the target (not only one), and every package of the closure present,
    except what the stack's conda lock supplies."""
    path = MANIFESTS / name
    doc = load(path)
    assert doc["pip"].get("complete") is True, f"{name}: pip.complete must be true"
    pins = pinned(doc, path)
    tf = pins.get("tensorflow")
    assert tf and tf[0] == doc["versions"]["tensorflow"], f"{name}: tensorflow pin"
    cands = [own_closure(doc, path, ref)]
    closure = ref.closures[cands[0]]
    for pkg, (ver, hashes) in pins.items():
        assert (pkg, ver) in closure, f"{name}: {pkg}=={ver} is not in {cands[0]}"
        want = closure[(pkg, ver)]
        assert hashes == want, (f"{name}: {pkg}=={ver}: hashes {sorted(hashes)} but "
                                f"{cands[0]} has {sorted(want)} (every file for the target)")
    from_conda = conda_names(doc, path)
    for pkg, ver in closure:
        if pkg in pins:
            continue
        assert pkg in from_conda, \
            f"{name}: {pkg}=={ver} of {cands[0]} is neither pinned nor in the conda lock"


@pytest.mark.parametrize("name", COMPLETE)
def test_setuptools_below_82(name):
    """TensorBoard up to 2.20 imports pkg_resources, which setuptools 82 removed: every
    setuptools a stack installs (pip pin or conda lock) is older. (stable-2.21 has no
    TensorBoard; it takes the conda lock's setuptools all the same.)"""
    path = MANIFESTS / name
    doc = load(path)
    found = []
    pin = pinned(doc, path).get("setuptools")
    if pin:
        found.append(pin[0])
    for line in conda_lines(doc, path):
        m = re.search(r"/setuptools-([0-9][^-]*)-", line)
        if m:
            found.append(m.group(1))
    assert found, f"{name}: no setuptools at all (TensorBoard needs pkg_resources)"
    for v in found:
        assert int(v.split(".")[0]) < 82, f"{name}: setuptools {v} has no pkg_resources"


@pytest.mark.parametrize("path", MANIFEST_PATHS, ids=IDS)
def test_gaps_are_declared(path, ref):
    """A stack whose data lacks pins says so under `missing:` (validate turns them into warnings)."""
    doc = load(path)
    missing = doc.get("missing") or []
    assert all(isinstance(m, str) and m.strip() for m in missing)
    pip = doc.get("pip") or {}
    if pip and pip.get("complete") is not True:
        assert any(m.startswith("pip:") for m in missing), \
            f"{path.name}: pip pins are incomplete but no `missing:` entry says what is missing"
    if (doc.get("python") or {}).get("manager") == "venv":
        assert any(m.startswith("python:") for m in missing), \
            f"{path.name}: a venv interpreter is not pinned; say so under `missing:`"


# --------------------------------------------------------------------------- tfprov validate


def tfprov_bin():
    b = os.environ.get("TFPROV_BIN") or str(REPO / "build" / "tfprov")
    assert os.access(b, os.X_OK), f"tfprov binary not found at {b} (set TFPROV_BIN)"
    return b


def run(*args, timeout=60):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, NO_COLOR="1"))


@pytest.fixture(scope="module")
def validate_bin():
    """The binary, if it has a `validate` subcommand; skip (saying why) only if it has not."""
    b = tfprov_bin()
    helped = run(b, "validate", "--help")
    bogus = run(b, "no-such-subcommand-xyz")
    if helped.returncode != 0:
        pytest.skip(f"`tfprov validate --help` exits {helped.returncode}: validate not implemented yet")
    if bogus.returncode == 0:
        # A CLI that accepts any word has no subcommand dispatch yet (the skeleton).
        pytest.skip("tfprov accepts any subcommand (exit 0): no subcommand dispatch yet, "
                    "so `validate` is not implemented")
    return b


@pytest.mark.parametrize("path", MANIFEST_PATHS, ids=IDS)
def test_validate_accepts(path, validate_bin):
    p = run(validate_bin, "validate", str(path))
    out = p.stdout + p.stderr
    assert p.returncode == 0, f"tfprov validate {path.name} exited {p.returncode}:\n{out}"
    assert not re.search(r":\d+:\d+: error:", out), f"errors reported:\n{out}"


@pytest.mark.parametrize("name", COMPLETE)
def test_validate_no_pip_gap(name, validate_bin):
    """A completely locked stack has no `pins.missing` warning about pip."""
    p = run(validate_bin, "validate", str(MANIFESTS / name))
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    bad = [l for l in out.splitlines() if "[pins.missing]" in l and "not pinned: pip" in l]
    assert not bad, f"{name}: pip gaps reported:\n" + "\n".join(bad)


@pytest.mark.parametrize("path", MANIFEST_PATHS, ids=IDS)
def test_validate_names_every_gap(path, validate_bin):
    """Each `missing:` entry and each artifact without a size comes back as a warning."""
    doc = load(path)
    p = run(validate_bin, "validate", str(path))
    out = p.stdout + p.stderr
    warnings = [l for l in out.splitlines() if re.search(r":\d+:\d+: warning:", l)]
    lines = path.read_text().splitlines()
    for gap in doc.get("missing") or []:
        # The entry's own line: the warning points at it.
        ln = next(i for i, l in enumerate(lines, 1) if l.lstrip().startswith("- ") and gap in l)
        hit = [w for w in warnings if f":{ln}:" in w]
        assert hit, f"no warning at line {ln} for missing entry {gap!r}:\n{out}"
    marks = artifact_lines(path)
    for where, a in artifacts(doc):
        if "size" in a:
            continue
        ln = marks[where]
        keys = [str(a.get("name") or ""), a["url"]]
        hit = [w for w in warnings if "size" in w and
               (f":{ln}:" in w or any(k and k in w for k in keys))]
        assert hit, f"{where} (line {ln}) has no size but validate does not warn about it:\n{out}"


def artifact_lines(path):
    """1-based line of each artifact mapping, keyed like artifacts()."""
    root = yaml.compose(path.read_text())
    top = {k.value: v for k, v in root.value}
    out = {}

    def sub(node, key):
        for k, v in node.value:
            if k.value == key:
                return v
        return None

    cuda, cudnn = top.get("cuda"), top.get("cudnn")
    if cuda is not None:
        arts = sub(cuda, "artifacts")
        for i, n in enumerate(arts.value if arts is not None else []):
            name = sub(n, "name")
            out[f"cuda.artifacts[{i}] {name.value if name is not None else ''}".strip()] = \
                n.start_mark.line + 1
        for key in ("runfile", "redist"):
            n = sub(cuda, key)
            if n is not None:
                out[f"cuda.{key}"] = n.start_mark.line + 1
    if cudnn is not None:
        for key in ("artifact", "redist"):
            n = sub(cudnn, key)
            if n is not None:
                out[f"cudnn.{key}"] = n.start_mark.line + 1
    return out


@pytest.mark.parametrize("name,prefix,needle", [
    ("legacy-1.15.yaml", "pip:", "setuptools and wheel for Python 3.7"),
    ("legacy-1.15.yaml", "python:", "conda explicit lock for Python 3.7"),
], ids=["1.15-setuptools-wheel", "1.15-python-3.7"])
def test_known_gaps_warned(name, prefix, needle, validate_bin):
    """What the data still lacks stays under `missing:` and validate warns about it at
    the entry's line: legacy-1.15's setuptools/wheel for Python 3.7 (its pip section is
    not complete, so apply refuses it without --allow-incomplete-lock) and its
    Python 3.7 interpreter."""
    path = MANIFESTS / name
    lines = path.read_text().splitlines()
    ln = next(i for i, l in enumerate(lines, 1)
              if l.lstrip().startswith(f'- "{prefix}') and needle in l)
    p = run(validate_bin, "validate", str(path))
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(rf"{re.escape(str(path))}:{ln}:\d+: warning: not pinned: {prefix}.*"
                     rf"{re.escape(needle)}.*\[pins\.missing\]", p.stderr), p.stderr


# --------------------------------------------------------------------------- current stacks




@pytest.mark.parametrize("name", COMPLETE + ["legacy-1.15.yaml"])
def test_min_glibc_is_the_data_floor(name, ref):
    """pip.min_glibc is the glibc the lock's wheels need, recomputed here from the file
    names of the closure in manifests/data (scripts/closure-to-requirements.py --glibc):
    per package the lowest manylinux floor among its pinned files, the highest over the lock."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "c2r", REPO / "scripts" / "closure-to-requirements.py")
    c2r = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(c2r)
    doc = load(MANIFESTS / name)
    pins = {h for _, hs in pip_requirements(doc, MANIFESTS / name) for h in hs}
    per_pkg = {}
    for r in c2r.rows(DATA / own_closure(doc, MANIFESTS / name, ref)):
        if r["sha256"] not in pins:
            continue
        fl = c2r.file_floor(r["filename"])
        old = per_pkg.get(r["name"], "unset")
        per_pkg[r["name"]] = fl if old == "unset" else (
            None if fl is None or old is None else min(old, fl))
    need = max(f for f in per_pkg.values() if f is not None)
    assert doc["pip"].get("min_glibc") == "%d.%d" % need, (name, need)


def test_file_floor_reads_pep600_and_legacy_tags():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "c2r", REPO / "scripts" / "closure-to-requirements.py")
    c2r = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(c2r)
    assert c2r.file_floor("h5py-3.16.0-cp312-cp312-manylinux_2_28_x86_64.whl") == (2, 28)
    assert c2r.file_floor(
        "wrapt-2.2.2-cp312-cp312-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl"
    ) == (2, 5)
    assert c2r.file_floor("tensorflow-1.15.4-cp37-cp37m-manylinux2010_x86_64.whl") == (2, 12)
    assert c2r.file_floor("grpcio-1.81.1-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl") == (2, 17)
    assert c2r.file_floor("six-1.17.0-py2.py3-none-any.whl") is None
    assert c2r.file_floor("termcolor-1.1.0.tar.gz") is None


@pytest.mark.parametrize("name", COMPLETE)
def test_no_gap_for_pip_or_interpreter(name):
    """The current and classic stacks lock their interpreter (conda) and their whole pip closure."""
    doc = load(MANIFESTS / name)
    assert doc["python"]["manager"] == "conda", f"{name}: the interpreter is not pinned"
    for gap in doc.get("missing") or []:
        assert not gap.startswith(("pip:", "python:")), f"{name}: {gap}"


@pytest.mark.parametrize("name", COMPLETE)
def test_lock_check_accepts(name, validate_bin):
    p = run(validate_bin, "lock", "--check", str(MANIFESTS / name))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "complete" in p.stdout, p.stdout


def test_pip_cuda_stack_pins_the_and_cuda_wheels(ref):
    """stable-2.21 takes CUDA from the 12 nvidia-*-cu12 wheels of its [and-cuda] closure,
    declares the releases they carry (cudart 12.9.79 -> CUDA 12.9, cuDNN 9.23.2.1), and
    its env sets no LD_LIBRARY_PATH of its own."""
    doc = load(MANIFESTS / "stable-2.21.yaml")
    pins = pinned(doc, MANIFESTS / "stable-2.21.yaml")
    nvidia = sorted(n for n in pins if re.fullmatch(r"nvidia-.+-cu12", n))
    assert len(nvidia) == 12, nvidia
    rt = pins["nvidia-cuda-runtime-cu12"][0]
    assert doc["versions"]["cuda"] == ".".join(rt.split(".")[:2])
    assert doc["versions"]["cudnn"] == pins["nvidia-cudnn-cu12"][0]
    assert "LD_LIBRARY_PATH" not in (doc.get("env") or {}).get("vars", {})


def test_current_stacks_driver_floors():
    """Each driver floor is the toolkit minimum of the CUDA the stack carries (data/compat.yaml)."""
    kb = load(REPO / "data" / "compat.yaml")
    rows = {r["cuda"]: r["linux"] for r in kb["cuda"]["min_driver"]["toolkits"]}
    assert load(MANIFESTS / "stable-2.20.yaml")["driver"]["min_version"] == rows["12.5.1"]
    # cudart 12.9.79: the newest 12.9 row (12.9 Update 1).
    assert load(MANIFESTS / "stable-2.21.yaml")["driver"]["min_version"] == rows["12.9.1"]
