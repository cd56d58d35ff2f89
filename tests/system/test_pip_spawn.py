"""engine/base/spawn.c: what a child sees and what comes back (the base of pip runs)."""
import json
import os
import subprocess

BUILD = os.environ.get("TFPROV_BUILD_DIR", os.path.join(os.getcwd(), "build"))
TOOL = os.path.join(BUILD, "py_tool")


def spawn(*args, env=None):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([TOOL, "spawn", *args], capture_output=True, text=True, env=e,
                          timeout=60)


def test_python_environment_drops_pip_and_python_variables():
    r = spawn("--python", "--", "env", env={"PIP_INDEX_URL": "http://bogus/",
                                            "PIP_FIND_LINKS": "/bogus",
                                            "PYTHONPATH": "/bogus", "PYTHONHOME": "/bogus",
                                            "SECRET_TOKEN": "x"})
    assert r.returncode == 0, r.stderr
    env = dict(l.split("=", 1) for l in json.loads(r.stdout)["out"].splitlines())
    assert not {k for k in env if k.startswith("PIP_")} - {
        "PIP_CONFIG_FILE", "PIP_DISABLE_PIP_VERSION_CHECK", "PIP_NO_INPUT"}
    assert env["PIP_CONFIG_FILE"] == "/dev/null" and env["PYTHONNOUSERSITE"] == "1"
    assert "PYTHONPATH" not in env and "PYTHONHOME" not in env
    assert "SECRET_TOKEN" not in env  # a clean list, not a filtered copy of ours
    assert env["LC_ALL"] == "C.UTF-8" and env["PATH"]


def test_exit_status_stderr_and_cwd(tmp_path):
    r = spawn("--cwd", str(tmp_path), "--", "sh", "-c", "pwd; echo oops >&2; exit 7")
    out = json.loads(r.stdout)
    assert out["status"] == 7 and out["out"] == f"{tmp_path}\n" and out["err"] == "oops\n"


def test_argv_is_never_a_shell():
    r = spawn("--", "echo", "$HOME; rm -rf /")
    assert json.loads(r.stdout)["out"] == "$HOME; rm -rf /\n"


def test_timeout_kills_the_child():
    out = json.loads(spawn("--timeout", "0.5", "--", "sleep", "30").stdout)
    assert out["timed_out"] is True and out["term_sig"] == 15


def test_output_is_bounded_keeping_the_tail():
    out = json.loads(spawn("--max", "1000", "--", "sh", "-c",
                           "seq 1 100000; echo LAST").stdout)
    assert out["out_truncated"] is True and len(out["out"]) == 1000
    assert out["out"].endswith("LAST\n")


def test_missing_program_is_an_error():
    r = spawn("--", "no-such-program-tfprov")
    assert r.returncode == 1 and "not found on PATH" in r.stderr
