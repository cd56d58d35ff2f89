"""Signed manifests and mirror indexes, interoperating with the real `minisign`.

Scenario: a team signs its manifests (and the side files they name) with
minisign or with `tfprov sign`; machines trust the team's public key through
--trusted-key or ROOT/etc/tfprov/trusted-keys.d, and a policy
(--require-signature, ROOT/etc/tfprov/policy.yaml) refuses anything else with
exit 5 before a byte is fetched. Keys and signatures come from Debian's
minisign binary (scripts/install-deps.sh) as well as from tfprov itself.
"""
import base64
import hashlib
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import Tfprov
from lib_http import HttpServer

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SHIPPED = os.path.join(REPO, "manifests", "stable-2.15.yaml")
MAKE_STACK = os.path.join(REPO, "tests", "fixtures", "make_stack.py")
BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))
STUBS = os.path.join(BUILD, "stubs", "cuda12")

pytestmark = pytest.mark.skipif(shutil.which("minisign") is None,
                                reason="minisign not installed (scripts/install-deps.sh)")


def minisign(*args, input=None, check=True):
    p = subprocess.run(["minisign", *map(str, args)], capture_output=True, text=True,
                       input=input, timeout=300)
    if check:
        assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def key_id(pub):
    """The key id minisign prints in a public key's comment line."""
    return pub.read_text().splitlines()[0].rsplit(" ", 1)[1]


@pytest.fixture
def keys(tmp_path):
    """Two unencrypted minisign key pairs (`minisign -G -W`): a (trusted), b (not)."""
    out = {}
    for name in ("a", "b"):
        pub, sec = tmp_path / (name + ".pub"), tmp_path / (name + ".key")
        minisign("-G", "-W", "-p", pub, "-s", sec)
        out[name] = (pub, sec)
    return out


@pytest.fixture
def split_manifest(tmp_path):
    """The shipped 2.15 manifest with its conda lock and pip requirements moved into
    side files (python.lock_file, pip.requirements_file) beside it."""
    d = tmp_path / "repo"
    d.mkdir()
    doc = yaml.safe_load(open(SHIPPED).read())
    (d / "conda.lock").write_text(doc["python"].pop("lock"))
    (d / "requirements.txt").write_text(doc["pip"].pop("requirements"))
    doc["python"]["lock_file"] = "conda.lock"
    doc["pip"]["requirements_file"] = "requirements.txt"
    m = d / "stack.yaml"
    m.write_text(yaml.safe_dump(doc, sort_keys=False))
    return m


def side_comment(m):
    """minisign -t text covering m's side files (the fields manifests/SCHEMA.md names)."""
    d = m.parent
    return "file:%s\tpython.lock_file=sha256:%s\tpip.requirements_file=sha256:%s" % (
        m.name, sha(d / "conda.lock"), sha(d / "requirements.txt"))


def flip_byte(path, old, new):
    """Changes one byte of a file (old -> new, first occurrence); returns the original."""
    data = path.read_bytes()
    i = data.index(old.encode())
    path.write_bytes(data[:i] + new.encode() + data[i + 1:])
    return data


def validate(tfprov, m, *opts, check):
    return tfprov.run(*opts, "validate", m, check=check)


def test_minisign_signed_manifest_and_side_files_accepted_one_byte_refused(
        tfprov, keys, split_manifest):
    m = split_manifest
    pub, sec = keys["a"]
    minisign("-S", "-s", sec, "-m", m, "-t", side_comment(m))
    trust = ("--trusted-key", pub, "--require-signature")
    r = validate(tfprov, m, *trust, check=0)
    assert "signed by trusted key %s" % key_id(pub) in r.stdout

    # One byte of the manifest (a digit of its description).
    orig = flip_byte(m, "TensorFlow 2.15.1", "t")
    r = validate(tfprov, m, *trust, check=5)
    assert "does not match the file" in r.stderr and key_id(pub) in r.stderr
    m.write_bytes(orig)

    # One byte of each side file (a hex digit of a pinned hash), each still valid.
    for side, key, old in (("requirements.txt", "pip.requirements_file", "ea290e43"),
                           ("conda.lock", "python.lock_file", "fe51de61")):
        p = m.parent / side
        orig = flip_byte(p, old, "0" if old[0] != "0" else "1")
        tfprov.run("validate", m, check=0)  # valid without the policy: only the hash differs
        r = validate(tfprov, m, *trust, check=5)
        assert "%s (%s) is not the file that was signed" % (key, side) in r.stderr
        p.write_bytes(orig)
    validate(tfprov, m, *trust, check=0)


def test_minisign_signature_without_side_file_hashes_refused(tfprov, keys, split_manifest):
    pub, sec = keys["a"]
    minisign("-S", "-s", sec, "-m", split_manifest)  # minisign's default trusted comment
    minisign("-V", "-p", pub, "-m", split_manifest)
    r = validate(tfprov, split_manifest, "--trusted-key", pub, check=5)
    assert "the signature does not cover python.lock_file (conda.lock)" in r.stderr


def test_legacy_signature_accepted(tfprov, keys, tmp_path):
    m = tmp_path / "stack.yaml"
    shutil.copy(SHIPPED, m)
    pub, sec = keys["a"]
    minisign("-S", "-l", "-s", sec, "-m", m)
    line = (tmp_path / "stack.yaml.minisig").read_text().splitlines()[1]
    assert base64.b64decode(line)[:2] == b"Ed"  # the legacy form, not the prehashed "ED"
    validate(tfprov, m, "--trusted-key", pub, "--require-signature", check=0)
    with open(m, "a") as f:
        f.write("# one more line\n")
    r = validate(tfprov, m, "--trusted-key", pub, check=5)
    assert "does not match the file" in r.stderr


def test_tfprov_keygen_and_sign_verified_by_minisign(tfprov, split_manifest, tmp_path):
    sec, pub = tmp_path / "team.key", tmp_path / "team.pub"
    r = tfprov.run("keygen", "--key", sec, check=0)
    assert key_id(pub) in r.stdout
    assert os.stat(sec).st_mode & 0o777 == 0o600
    tfprov.run("keygen", "--key", sec, check=1)  # never overwritten

    tfprov.run("sign", "--key", sec, split_manifest, check=0)
    v = minisign("-V", "-p", pub, "-m", split_manifest)
    assert "python.lock_file=sha256:%s" % sha(split_manifest.parent / "conda.lock") in v.stdout
    validate(tfprov, split_manifest, "--trusted-key", pub, "--require-signature", check=0)
    p = split_manifest.parent / "requirements.txt"
    flip_byte(p, "ea290e43", "0")
    validate(tfprov, split_manifest, "--trusted-key", pub, check=5)

    # minisign reads tfprov's secret key file, and tfprov verifies what it signs.
    other = tmp_path / "other.yaml"
    shutil.copy(SHIPPED, other)
    minisign("-S", "-s", sec, "-m", other)
    validate(tfprov, other, "--trusted-key", pub, check=0)


def test_sign_refuses_an_invalid_manifest(tfprov, keys, tmp_path):
    m = tmp_path / "bad.yaml"
    m.write_text("schema: 1\nstack: [\n")
    tfprov.run("sign", "--key", keys["a"][1], m, check=3)
    assert not (tmp_path / "bad.yaml.minisig").exists()
    tfprov.run("sign", m, check=64)


def test_password_protected_minisign_key(tfprov, tmp_path):
    pub, sec = tmp_path / "enc.pub", tmp_path / "enc.key"
    minisign("-G", "-p", pub, "-s", sec, input="s3cret\ns3cret\n")
    m = tmp_path / "stack.yaml"
    shutil.copy(SHIPPED, m)
    r = tfprov.run("sign", "--key", sec, m, input="wrong\n", check=1)
    assert "wrong password" in r.stderr and not (tmp_path / "stack.yaml.minisig").exists()
    r = tfprov.run("sign", "--key", sec, m, input="", check=1)
    assert "no password" in r.stderr
    tfprov.run("sign", "--key", sec, m, input="s3cret\n", check=0)
    minisign("-V", "-p", pub, "-m", m)
    validate(tfprov, m, "--trusted-key", pub, check=0)


def test_untrusted_key_refused(tfprov, keys, tmp_path):
    m = tmp_path / "stack.yaml"
    shutil.copy(SHIPPED, m)
    minisign("-S", "-s", keys["b"][1], "-m", m)
    r = validate(tfprov, m, "--trusted-key", keys["a"][0], check=5)
    assert "signed by key %s, which is not trusted" % key_id(keys["b"][0]) in r.stderr
    assert key_id(keys["a"][0]) in r.stderr  # the trusted ones are listed
    # A signature that cannot be parsed is refused too, saying why.
    (tmp_path / "stack.yaml.minisig").write_text("untrusted comment: x\nnot base64!\n")
    r = validate(tfprov, m, "--trusted-key", keys["a"][0], check=5)
    assert "is not a minisign signature" in r.stderr


def test_policy_files_under_the_root(tfprov, keys, tmp_path):
    m = tmp_path / "stack.yaml"
    shutil.copy(SHIPPED, m)
    etc = tmp_path / "root" / "etc" / "tfprov"
    (etc / "trusted-keys.d").mkdir(parents=True)
    shutil.copy(keys["a"][0], etc / "trusted-keys.d" / "team.pub")
    (etc / "trusted-keys.d" / "README").write_text("not a key, not read\n")

    (etc / "policy.yaml").write_text("require_signature: true\n")
    r = validate(tfprov, m, check=5)
    assert str(etc / "policy.yaml") in r.stderr and "not signed" in r.stderr
    minisign("-S", "-s", keys["a"][1], "-m", m)
    r = validate(tfprov, m, check=0)
    assert "trusted-keys.d/team.pub" in r.stdout

    os.unlink(str(m) + ".minisig")
    (etc / "policy.yaml").write_text("require_signature: false\n")
    validate(tfprov, m, check=0)
    validate(tfprov, m, "--require-signature", check=5)  # the flag wins over the file

    (etc / "policy.yaml").write_text("# typo\nrequire_signatures: true\n")
    r = validate(tfprov, m, check=1)
    assert "policy.yaml:2:1: unknown key" in r.stderr
    (etc / "policy.yaml").write_text("require_signature: yes please\n")
    r = validate(tfprov, m, check=1)
    assert "require_signature must be true or false" in r.stderr

    (etc / "policy.yaml").unlink()
    (etc / "trusted-keys.d" / "broken.pub").write_text("untrusted comment: x\nRWQ=\n")
    r = validate(tfprov, m, check=1)
    assert "broken.pub is not a minisign public key" in r.stderr


def test_require_signature_without_trusted_key(tfprov, keys, tmp_path):
    m = tmp_path / "stack.yaml"
    shutil.copy(SHIPPED, m)
    minisign("-S", "-s", keys["a"][1], "-m", m)
    r = validate(tfprov, m, "--require-signature", check=5)
    assert "no key is trusted" in r.stderr
    r = validate(tfprov, m, "--trusted-key", tmp_path / "missing.pub", check=1)
    assert "missing.pub" in r.stderr


@pytest.fixture
def origin(tmp_path):
    """An NVIDIA-layout origin on loopback and a manifest pinning it (stand-in libraries)."""
    if not os.path.isdir(STUBS):
        pytest.skip("stub libraries not built (%s)" % STUBS)
    out = tmp_path / "origin"
    srv = HttpServer(root=str(out)).start()
    m = tmp_path / "stack.yaml"
    subprocess.run([sys.executable, MAKE_STACK, "--stubs", STUBS, "--cuda", "12.3.2",
                    "--cudnn", "8.9.7.29", "--out", str(out), "--url-base", srv.url(""),
                    "--manifest", str(m), "--form", "redist", "--driver-policy", "skip"],
                   check=True, capture_output=True, timeout=120)
    yield {"srv": srv, "manifest": m}
    srv.stop()


def test_required_signature_refused_before_any_fetch_then_signed_applies(
        origin, tfprov, keys):
    m, srv = origin["manifest"], origin["srv"]
    pub, sec = keys["a"]
    trust = ("--trusted-key", pub, "--require-signature", "--no-gpu")
    for cmd in (("plan",), ("apply", "-y")):
        r = tfprov.run(*trust, *cmd, m, check=5)
        assert "not signed" in r.stderr
    minisign("-S", "-s", keys["b"][1], "-m", m)
    tfprov.run(*trust, "apply", "-y", m, check=5)
    assert srv.requests == []
    assert not os.path.exists(tfprov.path("/opt/tfprov"))

    minisign("-S", "-s", sec, "-m", m)
    tfprov.run(*trust, "apply", "-y", m, check=0)
    assert os.path.exists(tfprov.path("/opt/tfprov/cuda/12.3.2/lib/libcudart.so.12"))
    assert srv.requests


def test_mirror_index_signed_by_build_and_checked_by_mirror(origin, tfprov, keys, tmp_path):
    pub, sec = keys["a"]
    d = tmp_path / "bundle"
    tfprov.run("mirror", "build", d, origin["manifest"], "--key", sec, check=0)
    sig = d / "index.json.minisig"
    minisign("-V", "-p", pub, "-m", d / "index.json")
    before = sig.read_bytes()
    r = tfprov.run("mirror", "build", d, origin["manifest"], "--key", sec, check=0)
    assert "signed and current" in r.stdout and sig.read_bytes() == before

    origin["srv"].stop()
    fresh = Tfprov(tmp_path / "fresh")
    os.makedirs(fresh.root)
    mirror = ("--offline", "--mirror", d, "--no-gpu")
    r = fresh.run(*mirror, "--trusted-key", pub, "plan", origin["manifest"], check=0)
    assert "index.json: signed by trusted key %s" % key_id(pub) in r.stdout

    # Trusted key, wrong signer: refused; no trusted key: not checked.
    r = fresh.run(*mirror, "--trusted-key", keys["b"][0], "plan", origin["manifest"], check=5)
    assert "index.json.minisig: signed by key %s, which is not trusted" % key_id(pub) in r.stderr
    fresh.run(*mirror, "plan", origin["manifest"], check=0)

    # One byte of the index changed: refused before anything is read from the mirror.
    orig = flip_byte(d / "index.json", "cudnn", "C")
    r = fresh.run(*mirror, "--trusted-key", pub, "apply", "-y", origin["manifest"], check=5)
    assert "index.json.minisig: signature by key %s" % key_id(pub) in r.stderr
    assert not os.path.exists(fresh.path("/opt/tfprov"))
    assert not os.path.exists(fresh.path("/var/cache/tfprov/sha256")) or not os.listdir(
        fresh.path("/var/cache/tfprov/sha256"))

    # Rebuilding re-signs the changed index; the mirror is accepted again.
    (d / "index.json").write_bytes(orig)
    os.unlink(sig)
    tfprov.run("--offline", "mirror", "build", d, origin["manifest"], "--key", sec, check=0)
    fresh.run(*mirror, "--trusted-key", pub, "apply", "-y", origin["manifest"], check=0)
    assert os.path.exists(fresh.path("/opt/tfprov/cuda/12.3.2/lib/libcudart.so.12"))


def test_url_mirror_index_checked_before_any_artifact(origin, tfprov, keys, tmp_path):
    pub, sec = keys["a"]
    d = tmp_path / "bundle"
    tfprov.run("mirror", "build", d, origin["manifest"], "--key", sec, check=0)
    origin["srv"].stop()
    fresh = Tfprov(tmp_path / "fresh")
    os.makedirs(fresh.root)
    with HttpServer(root=str(d)) as srv:
        url = srv.url("/")
        r = fresh.run("--mirror", url, "--no-gpu", "--trusted-key", pub, "plan",
                      origin["manifest"], check=0)
        assert "index.json: signed by trusted key %s" % key_id(pub) in r.stdout

        orig = flip_byte(d / "index.json", "cudnn", "C")
        srv.requests.clear()
        r = fresh.run("--mirror", url, "--no-gpu", "--trusted-key", pub, "apply", "-y",
                      origin["manifest"], check=5)
        assert "signature by key %s" % key_id(pub) in r.stderr
        assert sorted(q[1] for q in srv.requests) == ["/index.json", "/index.json.minisig"]
        assert not os.path.exists(fresh.path("/opt/tfprov"))

        # A mirror without a signature: fine unless signatures are required.
        (d / "index.json").write_bytes(orig)
        os.unlink(d / "index.json.minisig")
        fresh.run("--mirror", url, "--no-gpu", "--trusted-key", pub, "plan",
                  origin["manifest"], check=0)
        minisign("-S", "-s", sec, "-m", origin["manifest"])
        r = fresh.run("--mirror", url, "--no-gpu", "--trusted-key", pub,
                      "--require-signature", "plan", origin["manifest"], check=5)
        assert "index.json.minisig: HTTP 404" in r.stderr


def test_key_ids_are_not_unique(tfprov, keys, tmp_path):
    """A trusted key that shares the signer's key id but not its public key does not
    hide the real one, and alone it is refused as an invalid signature."""
    m = tmp_path / "stack.yaml"
    shutil.copy(SHIPPED, m)
    minisign("-S", "-s", keys["a"][1], "-m", m)
    a = base64.b64decode(keys["a"][0].read_text().splitlines()[1])
    b = base64.b64decode(keys["b"][0].read_text().splitlines()[1])
    twin = tmp_path / "twin.pub"
    twin.write_text("untrusted comment: same id, other key\n%s\n" %
                    base64.b64encode(a[:10] + b[10:]).decode())
    validate(tfprov, m, "--trusted-key", twin, "--trusted-key", keys["a"][0], check=0)
    r = validate(tfprov, m, "--trusted-key", twin, check=5)
    assert "signature by key %s (%s) is not valid" % (key_id(keys["a"][0]), twin) in r.stderr


def test_policy_that_cannot_be_read_is_an_error(tfprov, keys, tmp_path):
    m = tmp_path / "stack.yaml"
    shutil.copy(SHIPPED, m)
    etc = tmp_path / "root" / "etc" / "tfprov"
    etc.mkdir(parents=True)
    (etc / "trusted-keys.d").write_text("a file, not a directory\n")
    r = validate(tfprov, m, check=1)
    assert "trusted-keys.d: Not a directory" in r.stderr
    (etc / "trusted-keys.d").unlink()
    for text, want in (("require_signature: [true\n", "policy.yaml:2:1: did not find expected"),
                       ("- require_signature\n", "policy.yaml:1:1: the policy must be a mapping"),
                       ("require_signature: 'true'\n", "must be true or false")):
        (etc / "policy.yaml").write_text(text)
        r = validate(tfprov, m, check=1)
        assert want in r.stderr, (text, r.stderr)
    (etc / "policy.yaml").unlink()
    (etc / "policy.yaml").mkdir()
    r = validate(tfprov, m, check=1)
    assert "policy.yaml: Is a directory" in r.stderr


def test_signature_that_cannot_be_read_or_has_a_bad_field(tfprov, keys, split_manifest):
    m = split_manifest
    pub, sec = keys["a"]
    sig = m.parent / "stack.yaml.minisig"
    sig.mkdir()
    r = validate(tfprov, m, "--trusted-key", pub, check=5)
    assert "cannot read %s" % sig in r.stderr
    sig.rmdir()
    comment = side_comment(m).replace("python.lock_file=sha256:", "python.lock_file=sha256:zz")
    minisign("-S", "-s", sec, "-m", m, "-t", comment)
    r = validate(tfprov, m, "--trusted-key", pub, check=5)
    assert "trusted comment's python.lock_file field is malformed" in r.stderr


def test_sign_and_keygen_errors(tfprov, keys, tmp_path):
    m = tmp_path / "stack.yaml"
    shutil.copy(SHIPPED, m)
    r = tfprov.run("sign", "--key", tmp_path / "nope.key", m, check=1)
    assert "nope.key: No such file or directory" in r.stderr
    r = tfprov.run("sign", "--key", keys["a"][0], m, check=1)  # a public key
    assert "not the base64 of a minisign secret key" in r.stderr
    (tmp_path / "stack.yaml.minisig").mkdir()  # the signature's name is taken
    r = tfprov.run("sign", "--key", keys["a"][1], m, check=1)
    assert "cannot write %s.minisig" % m in r.stderr
    assert not [n for n in os.listdir(tmp_path) if "tfprov-tmp" in n]

    tfprov.run("keygen", check=64)
    k = tmp_path / "k.key"
    k.write_text("precious\n")
    r = tfprov.run("keygen", "--key", k, check=1)
    assert "tfprov does not overwrite a key" in r.stderr
    assert k.read_text() == "precious\n" and not (tmp_path / "k.pub").exists()


def test_mirror_index_errors(origin, tfprov, keys, tmp_path):
    pub, sec = keys["a"]
    d = tmp_path / "bundle"
    r = tfprov.run("mirror", "build", d, origin["manifest"], "--key", tmp_path / "nope.key",
                   check=1)
    assert "nope.key" in r.stderr and not d.exists()  # refused before anything is copied

    m = origin["manifest"]
    minisign("-S", "-s", sec, "-m", m)
    empty = tmp_path / "empty"
    empty.mkdir()
    r = tfprov.run("--mirror", empty, "--trusted-key", pub, "--require-signature", "--no-gpu",
                   "plan", m, check=5)
    assert "a signed index is required by --require-signature" in r.stderr
    # A URL mirror that cannot be reached: warned about, and not used.
    r = tfprov.run("--mirror", "http://127.0.0.1:1/", "--trusted-key", pub, "--no-gpu",
                   "plan", m, check=0)
    assert "index not checked" in r.stderr


ENV_STACK = ("schema: 1\nstack:\n  name: sig\n  platform: linux-x86_64\n"
             "prefix: /opt/tfprov\nversions:\n  tensorflow: 2.15.1\n  python: \"3.10\"\n"
             "driver:\n  policy: skip\nenv:\n  vars:\n    X: \"{x}\"\n")


def _generations(tfprov):
    import sqlite3
    db = sqlite3.connect(tfprov.state_db)
    try:
        return db.execute("SELECT id, result FROM generations ORDER BY id").fetchall()
    finally:
        db.close()


def test_rollback_checks_the_policy_apply_checks(tfprov, keys, tmp_path):
    """rollback re-applies a generation's recorded manifest: under
    require_signature it needs that manifest's trusted signature (the one apply
    kept, or one beside the recorded path that signs exactly those bytes), or it
    exits 5 as apply does, with nothing changed."""
    m = tmp_path / "sig.yaml"
    act = tfprov.path("/opt/tfprov/stacks/sig/activate.sh")
    for x in ("1", "2"):  # two unsigned generations, applied before any policy
        m.write_text(ENV_STACK.format(x=x))
        tfprov.run("apply", "-y", m, check=0)
    etc = tfprov.path("/etc/tfprov")
    os.makedirs(os.path.join(etc, "trusted-keys.d"))
    shutil.copy(keys["a"][0], os.path.join(etc, "trusted-keys.d", "a.pub"))
    with open(os.path.join(etc, "policy.yaml"), "w") as f:
        f.write("require_signature: true\n")
    before, gens = open(act).read(), _generations(tfprov)
    assert "export X='2'" in before, before

    r = tfprov.run("rollback", "-y", "sig", "--generation", "1", check=5)
    assert "generation 1" in r.stderr and "not signed" in r.stderr, r.stderr
    assert "policy.yaml" in r.stderr, r.stderr
    assert open(act).read() == before and _generations(tfprov) == gens

    # Signed by an untrusted key beside the recorded path: still refused.
    m.write_text(ENV_STACK.format(x="1"))
    minisign("-S", "-s", keys["b"][1], "-m", m)
    r = tfprov.run("rollback", "-y", "sig", "--generation", "1", check=5)
    assert "not trusted" in r.stderr, r.stderr
    assert open(act).read() == before and _generations(tfprov) == gens
    # A trusted signature beside the recorded path that signs exactly those bytes: accepted.
    minisign("-S", "-s", keys["a"][1], "-m", m)
    tfprov.run("rollback", "-y", "sig", "--generation", "1", check=0)
    assert "export X='1'" in open(act).read()

    # Signed generations applied under the policy keep their signature: rollback
    # works after the files beside the manifest are gone or changed.
    m2 = tmp_path / "sig3.yaml"
    m2.write_text(ENV_STACK.format(x="3"))
    minisign("-S", "-s", keys["a"][1], "-m", m2)
    tfprov.run("apply", "-y", m2, check=0)
    m2.write_text(ENV_STACK.format(x="4"))
    minisign("-S", "-s", keys["a"][1], "-m", m2)
    tfprov.run("apply", "-y", m2, check=0)
    n3 = len(_generations(tfprov)) - 1  # generation numbers count from 1
    os.unlink(str(m2) + ".minisig")
    m2.write_text("changed after the apply\n")
    r = tfprov.run("rollback", "-y", "sig", "--generation", str(n3), check=0)
    assert "signed by trusted key" in r.stdout + r.stderr
    assert "export X='3'" in open(act).read()


def _link(path, target):
    if os.path.lexists(path):
        os.unlink(path)
    os.symlink(target, path)


@pytest.mark.parametrize("walk", ["0", "1"], ids=["openat2", "walk"])
@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_policy_and_keys_are_read_inside_the_root(tfprov, keys, tmp_path, how, walk):
    """ROOT/etc/tfprov/policy.yaml, trusted-keys.d/NAME.pub and trusted-keys.d itself as
    symlinks out of the root (to /X, or ../../../../X climbing past the root) are
    read as in a chroot: at ROOT/X, or refused when nothing is there. A key outside
    the root is never trusted and a policy outside it never applies."""
    env = {"TFPROV_INROOT_WALK": walk}
    m = tmp_path / "stack.yaml"
    shutil.copy(SHIPPED, m)
    minisign("-S", "-s", keys["a"][1], "-m", m)  # signed by a, whose key is outside
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(keys["a"][0], outside / "a.pub")
    (outside / "policy.yaml").write_text("require_signature: true\n")
    (outside / "keys").mkdir()
    shutil.copy(keys["a"][0], outside / "keys" / "a.pub")
    etc = tfprov.path("/etc/tfprov")
    os.makedirs(os.path.join(etc, "trusted-keys.d"))
    up = "../" * (str(tfprov.root).count("/") + 4)  # past the root, whatever its depth

    def target(name):
        return str(outside / name) if how == "absolute" else up + str(outside / name)[1:]

    # Where the link leads inside the root: ROOT/<outside>/...
    inside = tfprov.path(str(outside))

    # 1. A key out of the root: refused (exit 1), naming where it was looked for.
    _link(os.path.join(etc, "trusted-keys.d", "a.pub"), target("a.pub"))
    r = tfprov.run("validate", "--require-signature", m, env=env, check=1)
    assert "a.pub: a symbolic link to" in r.stderr and inside in r.stderr, r.stderr
    assert "signed by trusted key" not in r.stdout + r.stderr
    # ... resolved inside the root when something is there: key b, so a's signature fails.
    os.makedirs(inside)
    shutil.copy(keys["b"][0], os.path.join(inside, "a.pub"))
    r = tfprov.run("validate", "--require-signature", m, env=env, check=5)
    assert "which is not trusted" in r.stderr and key_id(keys["b"][0]) in r.stderr, r.stderr
    os.unlink(os.path.join(etc, "trusted-keys.d", "a.pub"))

    # 2. The key directory itself out of the root: refused, never a's key.
    os.rmdir(os.path.join(etc, "trusted-keys.d"))
    _link(os.path.join(etc, "trusted-keys.d"), target("keys"))
    r = tfprov.run("validate", "--require-signature", m, env=env, check=1)
    assert "trusted-keys.d: a symbolic link to" in r.stderr, r.stderr
    os.makedirs(os.path.join(inside, "keys"))  # inside and empty: no key trusted
    r = tfprov.run("validate", "--require-signature", m, env=env, check=5)
    assert "no key is trusted" in r.stderr, r.stderr
    shutil.copy(keys["a"][0], os.path.join(inside, "keys", "a.pub"))
    r = tfprov.run("validate", "--require-signature", m, env=env, check=0)
    assert "signed by trusted key %s" % key_id(keys["a"][0]) in r.stdout + r.stderr

    # 3. A policy out of the root is refused, not applied; inside, it applies.
    os.unlink(str(m) + ".minisig")
    _link(os.path.join(etc, "policy.yaml"), target("policy.yaml"))
    r = tfprov.run("validate", m, env=env, check=1)
    assert "policy.yaml: a symbolic link to" in r.stderr and inside in r.stderr, r.stderr
    with open(os.path.join(inside, "policy.yaml"), "w") as f:
        f.write("require_signature: false\n")
    tfprov.run("validate", m, env=env, check=0)  # the root's policy, not the outside one
    with open(os.path.join(inside, "policy.yaml"), "w") as f:
        f.write("require_signature: true\n")
    r = tfprov.run("validate", m, env=env, check=5)
    assert "not signed" in r.stderr and "policy.yaml" in r.stderr, r.stderr
