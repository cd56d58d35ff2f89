"""The tfprov.gpu collection under Ansible's own checks, and the stack module
on one host (localhost, connection local) with a --root sandbox.

Checks: ansible-lint (production profile), `ansible-test sanity` validate-modules
and pep8, run offline by scripts/ansible-sanity.sh (Debian's ansible-core,
ansible-lint, python3-voluptuous, pycodestyle); ansible-doc for every module
and filter plugin.
Default stack: the stack module's `default` option and `default_stack` result,
tfprov.gpu.default_stack (idempotent, check and diff mode), on env-only stacks
applied for real in a --root sandbox.
Module: `src:` carries the manifest's .minisig and its side file (a pip
requirements_file in a subdirectory) to the host, where a policy requires
signatures (ROOT/etc/tfprov/trusted-keys.d, policy.yaml); check mode plans
(exit 2, nothing written) and a tampered side file or an unsigned manifest is
refused with exit 5; check mode on a root that does not exist yet plans for an
empty root and creates nothing. The real binary, real ansible; the pip index
is never reached (plan only).
"""
import json
import os
import shutil
import subprocess

import pytest

from lib_provision import out

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(REPO, "build"))
TFPROV = os.environ.get("TFPROV_BIN", os.path.join(BUILD, "tfprov"))
COLLECTIONS = os.path.join(REPO, "ansible")
COLL = os.path.join(COLLECTIONS, "ansible_collections", "tfprov", "gpu")
SANITY = os.path.join(REPO, "scripts", "ansible-sanity.sh")
PYVER = subprocess.run(["/usr/bin/python3", "-c", "import sys;print('%d.%d'%sys.version_info[:2])"],
                       capture_output=True, text=True, check=True).stdout.strip()

need_ansible = pytest.mark.skipif(not shutil.which("ansible-doc", path="/usr/bin"),
                                  reason="needs ansible-core (scripts/install-deps.sh)")


def sanity(*tests):
    return subprocess.run([SANITY] + list(tests), capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, ANSIBLE_NOCOLOR="1"))


@pytest.mark.skipif(not os.path.exists("/usr/bin/ansible-test")
                    or subprocess.run(["/usr/bin/python3", "-c", "import voluptuous"],
                                      capture_output=True).returncode != 0
                    or not os.path.exists("/usr/bin/pycodestyle"),
                    reason="needs ansible-core, python3-voluptuous, pycodestyle "
                           "(scripts/install-deps.sh)")
def test_ansible_test_sanity_validate_modules_and_pep8():
    p = sanity("validate-modules", "pep8")
    assert p.returncode == 0, out(p)
    assert 'Running sanity test "validate-modules"' in p.stdout, out(p)
    assert 'Running sanity test "pep8"' in p.stdout, out(p)
    assert "ERROR" not in p.stdout + p.stderr, out(p)


@pytest.mark.skipif(not os.path.exists("/usr/bin/ansible-lint"),
                    reason="needs ansible-lint (scripts/install-deps.sh)")
def test_ansible_lint_production_profile():
    p = sanity("lint")
    assert p.returncode == 0, out(p)
    assert "Passed with production profile" in p.stdout + p.stderr, out(p)


@need_ansible
def test_every_plugin_is_documented():
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1")
    mods = [f[:-3] for f in os.listdir(os.path.join(COLL, "plugins", "modules"))
            if f.endswith(".py") and f != "__init__.py"]
    assert sorted(mods) == ["default_stack", "facts", "stack"]
    plugins = [("module", "tfprov.gpu." + m) for m in mods]
    # every filter the plugin exports, read from the plugin itself
    src = open(os.path.join(COLL, "plugins", "filter", "fleet.py")).read()
    filters = [n for n in ("fleet_rows", "fleet_markdown") if '"%s":' % n in src]
    assert len(filters) == src.count('": fleet_'), "a filter without a name here"
    plugins += [("filter", "tfprov.gpu." + f) for f in filters]
    for kind, name in plugins:
        p = subprocess.run(["ansible-doc", "-t", kind, name], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode == 0 and "ERROR" not in p.stderr, (name, out(p))
        assert "EXAMPLES" in p.stdout and "RETURN" in p.stdout, (name, p.stdout)
    for f in ("LICENSE", "meta/runtime.yml", "CHANGELOG.md"):
        assert os.path.getsize(os.path.join(COLL, f)) > 0, f


# ------------------------------------------------------------ the stack module, one host

def module(args, *, check=False, diff=False, cwd, name="tfprov.gpu.stack"):
    """Runs a tfprov.gpu module (stack unless named) on localhost; returns (rc, result dict)."""
    argv = ["ansible", "localhost", "-c", "local", "-m", name, "-a", json.dumps(args)]
    if check:
        argv.append("--check")
    if diff:
        argv.append("--diff")
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=COLLECTIONS, ANSIBLE_NOCOLOR="1",
               ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="tfprov_json",
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(HERE, "ansible_callbacks"),
               ANSIBLE_LOCALHOST_WARNING="0", ANSIBLE_INVENTORY_UNPARSED_WARNING="0",
               ANSIBLE_PYTHON_INTERPRETER="/usr/bin/python3")
    p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, cwd=str(cwd))
    try:
        res = json.loads(p.stdout[p.stdout.index("{"):])
        r = res["plays"][0]["tasks"][0]["hosts"]["localhost"]
    except (ValueError, KeyError, IndexError):
        raise AssertionError("no result from ansible (rc %d): %s" % (p.returncode, out(p)))
    return p.returncode, r


SIDE = ("schema: 1\nstack:\n  name: side\n  platform: linux-x86_64\nprefix: /opt/tfprov\n"
        "versions:\n  tensorflow: 2.15.1\n  python: \"{py}\"\n"
        "driver:\n  policy: skip\n"
        "python:\n  manager: venv\n  name: tf\n  version: \"{py}\"\n"
        "pip:\n  index_url: http://127.0.0.1:9/simple\n  complete: true\n"
        "  requirements_file: locks/requirements.txt\n")


@pytest.fixture
def signed(tmp_path):
    """A signed manifest with a side file on the 'controller', and a host root
    whose policy requires signatures by that key."""
    ctl = tmp_path / "ctl"
    (ctl / "locks").mkdir(parents=True)
    m = ctl / "side.yaml"
    m.write_text(SIDE.format(py=PYVER))
    (ctl / "locks" / "requirements.txt").write_text(
        "tfprov-alpha==1.0.0 --hash=sha256:%s\n" % ("ab" * 32))
    key = tmp_path / "team.key"
    subprocess.run([TFPROV, "keygen", "--key", str(key)], check=True, capture_output=True)
    p = subprocess.run([TFPROV, "sign", "--key", str(key), str(m)], capture_output=True,
                       text=True)
    assert p.returncode == 0, out(p)
    root = tmp_path / "host"
    (root / "etc" / "tfprov" / "trusted-keys.d").mkdir(parents=True)
    shutil.copy(tmp_path / "team.pub", root / "etc" / "tfprov" / "trusted-keys.d" / "team.pub")
    (root / "etc" / "tfprov" / "policy.yaml").write_text("require_signature: true\n")
    return ctl, m, root


@need_ansible
def test_src_carries_signature_and_side_files(signed, tmp_path):
    ctl, m, root = signed
    rc, r = module({"src": str(m), "root": str(root), "binary": TFPROV, "no_gpu": True},
                   check=True, cwd=tmp_path)
    assert r.get("failed") is not True and r["rc"] == 2 and r["changed"] is True, r
    assert "venv" in r["plan"] or "pip" in r["plan"], r
    # check mode wrote nothing on the host
    assert not (root / "var" / "lib" / "tfprov" / "manifests").exists()

    # Tampered side file on the controller: the signature no longer covers it.
    (ctl / "locks" / "requirements.txt").write_text(
        "tfprov-alpha==1.0.0 --hash=sha256:%s\n" % ("cd" * 32))
    rc, r = module({"src": str(m), "root": str(root), "binary": TFPROV, "no_gpu": True},
                   check=True, cwd=tmp_path)
    assert r["failed"] is True and r["rc"] == 5, r
    assert "integrity failure" in r["msg"] and "requirements" in r["msg"], r["msg"]


@need_ansible
def test_unsigned_manifest_refused_and_stale_signature_removed(signed, tmp_path):
    ctl, m, root = signed
    # A real apply (not check mode) writes manifest, side file and signature...
    dest = root / "var" / "lib" / "tfprov" / "manifests"
    os.remove(str(m) + ".minisig")
    rc, r = module({"src": str(m), "root": str(root), "binary": TFPROV, "no_gpu": True},
                   cwd=tmp_path)
    assert r["failed"] is True and r["rc"] == 5, r
    assert "signature" in r["msg"], r["msg"]
    assert (dest / "locks" / "requirements.txt").read_text() == \
        (ctl / "locks" / "requirements.txt").read_text()
    assert not (dest / "side.yaml.minisig").exists()
    # nothing placed: no stack, no state
    assert not (root / "opt").exists(), os.listdir(root)


@need_ansible
def test_src_whose_side_file_is_missing_fails_on_the_controller(signed, tmp_path):
    ctl, m, root = signed
    os.remove(ctl / "locks" / "requirements.txt")
    rc, r = module({"src": str(m), "root": str(root), "binary": TFPROV}, check=True,
                   cwd=tmp_path)
    assert r["failed"] is True and "side file locks/requirements.txt does not exist" in r["msg"], r


@need_ansible
def test_src_with_escaping_side_file_is_refused(signed, tmp_path):
    ctl, m, root = signed
    m.write_text(SIDE.format(py=PYVER).replace("locks/requirements.txt", "../secret.txt"))
    (tmp_path / "secret.txt").write_text("do not send\n")
    rc, r = module({"src": str(m), "root": str(root), "binary": TFPROV}, check=True,
                   cwd=tmp_path)
    assert r["failed"] is True and "not inside the manifest's directory" in r["msg"], r


@need_ansible
def test_check_mode_on_a_fresh_root_plans(tmp_path):
    m = tmp_path / "env.yaml"
    m.write_text("schema: 1\nstack:\n  name: fresh\n  platform: linux-x86_64\n"
                 "prefix: /opt/tfprov\nversions:\n  tensorflow: 2.15.1\n  python: \"3.10\"\n"
                 "driver:\n  policy: skip\nenv:\n  vars:\n    X: \"1\"\n")
    root = tmp_path / "new" / "root"
    rc, r = module({"src": str(m), "root": str(root), "binary": TFPROV}, check=True,
                   cwd=tmp_path)
    assert r.get("failed") is not True and r["rc"] == 2 and r["changed"] is True, r
    assert "/opt/tfprov/stacks/fresh/activate.sh" in r["plan"], r
    assert "usage error" not in json.dumps(r)
    assert not (tmp_path / "new").exists()


ENV_ONLY = ("schema: 1\nstack:\n  name: {name}\n  platform: linux-x86_64\n"
            "prefix: /opt/tfprov\nversions:\n  tensorflow: 2.15.1\n  python: \"3.10\"\n"
            "driver:\n  policy: skip\nenv:\n  vars:\n    X: \"{name}\"\n")


def default_state(root):
    """(the default stack, the stack the login script enters) of a --root host."""
    login = root / "etc" / "profile.d" / "tfprov.sh"
    entered = None
    if login.exists():
        text = login.read_text()
        entered = text.split("/opt/tfprov/stacks/", 1)[1].split("/", 1)[0]
    p = subprocess.run([TFPROV, "--root", str(root), "--json", "default"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, out(p)
    ev = [json.loads(l) for l in p.stdout.splitlines() if '"default_stack"' in l]
    return ev[0]["data"]["stack"], entered


@need_ansible
def test_stack_default_option_and_default_stack_module(tmp_path):
    """The first stack is the default whatever `default` says; a second goes beside
    it and becomes the default only with default=true, which is a change even when
    the stack itself is as the manifest says; check mode says so and changes
    nothing; tfprov.gpu.default_stack switches and clears it, changed only when the
    default changes; destroying the default stack leaves none."""
    root = tmp_path / "host"
    root.mkdir()
    m = {}
    for n in ("alpha", "beta"):
        m[n] = tmp_path / (n + ".yaml")
        m[n].write_text(ENV_ONLY.format(name=n))

    def stack(n, check=False, diff=False, **kw):
        args = dict(manifest=str(m[n]), root=str(root), binary=TFPROV, verify=False)
        args.update(kw)
        return module(args, check=check, diff=diff, cwd=tmp_path)[1]

    def default(check=False, diff=False, **kw):
        args = dict(root=str(root), binary=TFPROV)
        args.update(kw)
        return module(args, check=check, diff=diff, cwd=tmp_path, name="tfprov.gpu.default_stack")[1]

    r = stack("alpha", check=True)
    assert r["changed"] is True and r["default_stack"] == "alpha", r  # the first stack
    assert r["previous_default_stack"] is None and not (root / "var").exists(), r
    r = stack("alpha")
    assert r["changed"] is True and r["default_stack"] == "alpha", r
    assert default_state(root) == ("alpha", "alpha")

    r = stack("beta")
    assert r["changed"] is True and r["default_stack"] == "alpha", r
    assert r["previous_default_stack"] == "alpha", r
    assert default_state(root) == ("alpha", "alpha")
    assert stack("beta")["changed"] is False

    login = root / "etc" / "profile.d" / "tfprov.sh"
    mtime = login.stat().st_mtime_ns
    r = stack("beta", check=True, diff=True, default=True)
    assert r["changed"] is True and r["rc"] == 0 and r["steps"] == [], r  # the default only
    assert r["default_stack"] == "beta" and r["previous_default_stack"] == "alpha", r
    assert r["diff"]["before"] == "default stack: alpha\n", r
    assert r["diff"]["after"] == "default stack: beta\n", r
    assert default_state(root) == ("alpha", "alpha") and login.stat().st_mtime_ns == mtime
    r = stack("beta", default=True)
    assert r["changed"] is True and r["steps"] == [] and r["default_stack"] == "beta", r
    assert default_state(root) == ("beta", "beta")
    r = stack("beta", default=True)
    assert r["changed"] is False and r["default_stack"] == "beta", r

    r = default(name="alpha", check=True, diff=True)
    assert r["changed"] is True and r["default_stack"] == "alpha", r
    assert r["previous_default_stack"] == "beta" and r["stacks"] == ["alpha", "beta"], r
    assert r["diff"] == {"before": "default stack: beta\n", "after": "default stack: alpha\n"}, r
    assert default_state(root) == ("beta", "beta")
    r = default(name="alpha")
    assert r["changed"] is True and r["default_stack"] == "alpha", r
    assert default_state(root) == ("alpha", "alpha")
    assert default(name="alpha")["changed"] is False
    r = default(name="gamma")
    assert r["failed"] is True and "stack gamma is not on this host" in r["msg"], r
    assert default(name="beta", state="absent")["changed"] is False  # beta is not the default
    r = default(state="absent", check=True)
    assert r["changed"] is True and r["default_stack"] is None, r
    assert default_state(root) == ("alpha", "alpha")
    r = default(state="absent")
    assert r["changed"] is True and r["default_stack"] is None, r
    assert default_state(root) == (None, None)
    assert default(state="absent")["changed"] is False
    # No default chosen on purpose: an apply does not make one.
    r = stack("beta")
    assert r["changed"] is False and r["default_stack"] is None, r

    # Destroying the default stack leaves the host without one.
    assert default(name="beta")["default_stack"] == "beta"
    r = stack("beta", check=True, state="absent", name="beta")
    assert r["changed"] is True and r["default_stack"] is None, r
    assert default_state(root) == ("beta", "beta")
    r = stack("beta", state="absent", name="beta")
    assert r["changed"] is True and r["default_stack"] is None, r
    assert default_state(root) == (None, None)


@need_ansible
def test_module_rollback_keeps_the_signature_policy_and_reads_config_in_the_root(tmp_path):
    """The module's rollback path (generation=N runs `tfprov rollback`) meets apply's
    signature policy: an unsigned generation under require_signature fails with rc 5
    and nothing changes. The fleet file under root is read as in a chroot: a symlink
    to /x or to ../../.. never leads out of the root."""
    root = tmp_path / "host"
    root.mkdir()
    m = tmp_path / "alpha.yaml"
    for x in ("alpha", "beta"):
        m.write_text(ENV_ONLY.replace('X: "{name}"', 'X: "%s"' % x).format(name="alpha"))
        r = module(dict(manifest=str(m), root=str(root), binary=TFPROV, verify=False),
                   cwd=tmp_path)[1]
        assert r.get("failed") is not True, r
    etc = root / "etc" / "tfprov"
    (etc / "trusted-keys.d").mkdir(parents=True)
    key = tmp_path / "team.key"
    subprocess.run([TFPROV, "keygen", "--key", str(key)], check=True, capture_output=True)
    shutil.copy(tmp_path / "team.pub", etc / "trusted-keys.d" / "team.pub")
    (etc / "policy.yaml").write_text("require_signature: true\n")
    act = root / "opt" / "tfprov" / "stacks" / "alpha" / "activate.sh"
    before = act.read_text()
    r = module(dict(name="alpha", generation=1, root=str(root), binary=TFPROV), cwd=tmp_path)[1]
    assert r["failed"] is True and r["rc"] == 5, r
    assert "integrity failure" in r["msg"] and "not signed" in r["msg"], r["msg"]
    assert act.read_text() == before and r["generation"] == 2, r

    # The fleet file: outside the root it is not JSON (reading it fails the task).
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "fleet.json").write_text("read from outside the root\n")
    (etc / "policy.yaml").unlink()
    for target in (str(outside / "fleet.json"), "../../../../../../outside/fleet.json"):
        link = etc / "fleet.json"
        if link.is_symlink():
            link.unlink()
        os.symlink(target, link)
        r = module(dict(manifest=str(m), root=str(root), binary=TFPROV, verify=False,
                        config="/etc/tfprov/fleet.json"), cwd=tmp_path)[1]
        assert r.get("failed") is not True, (target, r)
    # Resolved inside the root: <root>/<outside path>/fleet.json is what is read.
    inside = root / str(outside).lstrip("/")
    inside.mkdir(parents=True)
    (inside / "fleet.json").write_text("not JSON either, but inside\n")
    os.unlink(etc / "fleet.json")
    os.symlink(str(outside / "fleet.json"), etc / "fleet.json")
    r = module(dict(manifest=str(m), root=str(root), binary=TFPROV, verify=False,
                    config="/etc/tfprov/fleet.json"), cwd=tmp_path)[1]
    assert r["failed"] is True and str(inside / "fleet.json") in r["msg"], r
