"""`tfprov diff OLD NEW` and `tfprov diff --generation N STACK MANIFEST`: what
changes for the machine, grouped by step, as a reviewer reads it.

The expected changes are computed here independently from the YAML (python3-yaml)
and compared with tfprov's --json output; the text form is checked for the lines
a reviewer looks for. Reads only; the --generation case applies the small
env-only stack into a --root sandbox first (no GPU: driver.policy skip).
"""
import json
import os
import re
import shutil

import pytest

try:
    import yaml
except ImportError:  # pragma: no cover
    yaml = None

from lib_provision import out

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
M212 = os.path.join(REPO, "manifests", "stable-2.12.yaml")
M215 = os.path.join(REPO, "manifests", "stable-2.15.yaml")


def load(p):
    assert yaml is not None, "python3-yaml is needed"
    with open(p) as f:
        return yaml.safe_load(f)


def norm(n):
    return re.sub(r"[-_.]+", "-", n).lower()


def pins(doc):
    """{name: (version, frozenset(hashes))} of a pip lock."""
    text = doc["pip"]["requirements"].replace("\\\n", " ")
    outp = {}
    for line in text.splitlines():
        toks = line.split()
        if not toks or toks[0].startswith("#"):
            continue
        name, ver = toks[0].split("==")
        outp[norm(name)] = (ver, frozenset(t.split(":", 1)[1] for t in toks[1:]))
    return outp


def vkey(v):
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.]", v))


def expected_pip(a, b):
    pa, pb = pins(a), pins(b)
    exp = {}
    for n in pa.keys() - pb.keys():
        exp[n] = ("removed", pa[n][0], None)
    for n in pb.keys() - pa.keys():
        exp[n] = ("added", None, pb[n][0])
    for n in pa.keys() & pb.keys():
        (va, ha), (vb, hb) = pa[n], pb[n]
        if va != vb:
            exp[n] = ("downgraded" if vkey(va) > vkey(vb) else "upgraded", va, vb)
        elif ha != hb:
            exp[n] = ("rehashed", va, vb)
    return exp


def steps_of(doc):
    return {g["step"]: g["changes"] for g in doc["steps"]}


def diff_doc(stdout):
    """The diff document among the --json lines (the run starts with a version event)."""
    docs = [json.loads(ln) for ln in stdout.splitlines()]
    return [d for d in docs if d.get("type") == "diff"][0]


def test_stable_212_to_215_json_matches_the_yaml(tfprov):
    """Every pip change (added, removed, upgraded, downgraded, re-hashed) and every
    CUDA archive change equals what the two YAML files say; the cuDNN and Python
    versions are reported."""
    p = tfprov.run("--json", "diff", M212, M215, root=False)
    assert p.returncode == 0, out(p)
    doc = diff_doc(p.stdout)
    assert doc["type"] == "diff" and doc["old"] == M212 and doc["new"] == M215
    st = steps_of(doc)
    a, b = load(M212), load(M215)

    got_pip = {c["name"]: (c["change"], c.get("old"), c.get("new")) for c in st["pip"]}
    assert got_pip == expected_pip(a, b)

    arts_a = {x["name"]: x for x in a["cuda"]["artifacts"]}
    arts_b = {x["name"]: x for x in b["cuda"]["artifacts"]}
    got_cuda = {c["name"]: c for c in st["cuda"]}
    assert got_cuda.pop("version") == {"change": "changed", "name": "version",
                                       "old": a["cuda"]["version"], "new": b["cuda"]["version"]}
    assert set(got_cuda) == {n for n in arts_a.keys() | arts_b.keys()
                             if n not in arts_a or n not in arts_b
                             or arts_a[n]["sha256"] != arts_b[n]["sha256"]}
    for n, c in got_cuda.items():
        if n in arts_a:
            assert c["old_size"] == arts_a[n]["size"]
            assert c["old"] in arts_a[n]["url"]
        if n in arts_b:
            assert c["new_size"] == arts_b[n]["size"]
            assert c["new"] in arts_b[n]["url"]
        assert c["change"] == ("added" if n not in arts_a else
                               "removed" if n not in arts_b else "changed")

    assert {"change": "changed", "name": "version", "old": a["cudnn"]["version"],
            "new": b["cudnn"]["version"]} in st["cudnn"]
    assert {"change": "changed", "name": "python", "old": a["python"]["version"],
            "new": b["python"]["version"]} in st["pyenv"]
    assert "env" not in st  # the same TF_FORCE_GPU_ALLOW_GROWTH in both


def test_stable_212_to_215_text(tfprov):
    """The text a reviewer reads: CUDA, cuDNN, Python and pip changes under their step."""
    p = tfprov.run("diff", M212, M215, root=False)
    assert p.returncode == 0, out(p)
    text = p.stdout
    groups = dict(re.findall(r"(?m)^(\w+):\n((?:  .*\n)+)", text))
    assert "~ version: 11.8.0 -> 12.3.2" in groups["cuda"]
    assert re.search(r"\+ libnvjitlink 12\.3\.101 \(26484404 bytes\)", groups["cuda"])
    assert re.search(r"~ cuda_cudart: 11\.8\.89 -> 12\.3\.101 \(913876 -> 1088388 bytes\)",
                     groups["cuda"])
    assert "~ version: 8.6.0.163 -> 8.9.7.29" in groups["cudnn"]
    assert "~ python: 3.9 -> 3.10" in groups["pyenv"]
    assert "~ conda python: 3.9.19-h0755675_0_cpython -> 3.10.13-hd12c33a_0_cpython" \
        in groups["pyenv"]
    assert "~ tensorflow: 2.12.0 -> 2.15.1 (upgraded)" in groups["pip"]
    assert "- jax 0.4.13" in groups["pip"]
    assert re.search(r"\n\d+ changes in \d+ steps\.\n\nApplying .* creates a second stack", text)


def test_a_new_stack_or_env_name_is_shown_and_called_what_it_is(tfprov, tmp_path):
    """stable-2.12 -> stable-2.15 is not an upgrade: the names differ, so applying
    the second manifest installs a second stack beside the first. diff shows the
    stack and env names and says so (text and JSON); an env renamed within one stack
    builds a new env; the same names are an update."""
    p = tfprov.run("--json", "diff", M212, M215, root=False, check=0)
    doc = diff_doc(p.stdout)
    st = steps_of(doc)
    assert {"change": "changed", "name": "name", "old": "stable-2.12",
            "new": "stable-2.15"} in st["stack"]
    assert {"change": "changed", "name": "name", "old": "tf-2.12", "new": "tf-2.15"} \
        in st["pyenv"]
    assert doc["applying"] == "second_stack"
    p = tfprov.run("diff", M212, M215, root=False, check=0)
    assert ("creates a second stack, stable-2.15, beside stable-2.12: it is not an upgrade "
            "of it") in p.stdout
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text(open(M215).read().replace("name: tf-2.15", "name: tf-other", 1))
    p = tfprov.run("--json", "diff", M215, renamed, root=False, check=0)
    doc = diff_doc(p.stdout)
    assert doc["applying"] == "new_env"
    assert steps_of(doc)["pyenv"] == [{"change": "changed", "name": "name", "old": "tf-2.15",
                                       "new": "tf-other"}]
    p = tfprov.run("diff", M215, renamed, root=False, check=0)
    assert "builds a new Python env, tf-other, for stack stable-2.15" in p.stdout
    p = tfprov.run("--json", "diff", M215, M215, root=False, check=0)
    assert diff_doc(p.stdout)["applying"] == "update"


def test_identical_and_detailed_exitcode(tfprov):
    p = tfprov.run("--detailed-exitcode", "diff", M215, M215, root=False)
    assert p.returncode == 0 and "No differences." in p.stdout, out(p)
    p = tfprov.run("--detailed-exitcode", "diff", M212, M215, root=False)
    assert p.returncode == 2, out(p)


def test_diff_against_an_applied_generation(tfprov, tmp_path, repo):
    """The old side is the manifest generation 1 was applied from (kept in the state),
    even after the file on disk changed."""
    m = tmp_path / "env.yaml"
    shutil.copy(os.path.join(repo, "tests", "manifests", "env-only.yaml"), m)
    tfprov.run("apply", "-y", m, check=0)
    m.write_text(m.read_text().replace('TF_CPP_MIN_LOG_LEVEL: "1"',
                                       'TF_CPP_MIN_LOG_LEVEL: "2"\n    EXTRA_VAR: "x"'))
    p = tfprov.run("--json", "diff", "--generation", "1", "demo-env", m)
    assert p.returncode == 0, out(p)
    doc = diff_doc(p.stdout)
    assert doc["old"].startswith("demo-env generation 1")
    assert steps_of(doc) == {"env": [
        {"change": "changed", "name": "TF_CPP_MIN_LOG_LEVEL", "old": "1", "new": "2"},
        {"change": "added", "name": "EXTRA_VAR", "new": "x"}]}


@pytest.mark.parametrize("args,code,msg", [
    (["diff", "only-one.yaml"], 64, "usage: tfprov diff"),
    (["diff", "--generation", "1", "no-such-stack", M215], 1, "no stack named 'no-such-stack'"),
    (["diff", "--generation", "7", "demo-env", M215], 1, "has no generation 7"),
    (["diff", "/nonexistent/a.yaml", M215], 3, "/nonexistent/a.yaml"),
])
def test_diff_errors(tfprov, repo, args, code, msg):
    tfprov.run("apply", "-y", os.path.join(repo, "tests", "manifests", "env-only.yaml"), check=0)
    p = tfprov.run(*args)
    assert p.returncode == code, out(p)
    assert msg in out(p)
