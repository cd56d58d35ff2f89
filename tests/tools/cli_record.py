#!/usr/bin/env python3
"""Records what a tfprov binary prints on a fixed set of invocations, so that
two builds (main before and after a refactor) can be compared byte for byte:

    tests/tools/cli_record.py --bin OLD/tfprov --stubs build/stubs/driver --out /tmp/rec-old
    tests/tools/cli_record.py --bin NEW/tfprov --stubs build/stubs/driver --out /tmp/rec-new
    diff -r /tmp/rec-old /tmp/rec-new

Each invocation runs offline in a fresh sandbox (its own --root, a copy of
this tree's manifests as relative paths, HOME inside it, a fixed
environment: LC_ALL=C, no colour, PATH=/usr/bin:/bin), and writes
OUT/NN-name.{stdout,stderr,rc}. The sandbox's path is replaced by
<SANDBOX>, the binary's by <BIN>, its data directory (the source tree its
tfprov-datadir link names) by <DATADIR>, JSON timestamps by <TIME> and the
commit tfprov reports by <COMMIT>, so that only what the code prints differs. The set: help and every command's help, --version (and
-v), usage errors, validate of every shipped manifest (text and JSON) and of
broken ones, plan on an empty root, init variants, doctor with the stand-in
NVML (--stubs: the build's stubs/driver), status, show, verify, sbom, default,
env, diff, lock --check of every shipped manifest.
"""
import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

BROKEN = {
    "unknown-key.yaml": "version: 1\nstack:\n  name: x\n  platform: linux-x86_64\n  colour: red\n",
    "bad-yaml.yaml": "version: 1\nstack: [\n",
    "wrong-type.yaml": "version: one\nstack:\n  name: 5\n",
    "empty.yaml": "",
    "duplicate.yaml": "version: 1\nversion: 1\nstack:\n  name: x\n",
}

COMMANDS = ["validate", "plan", "apply", "status", "verify", "destroy", "gc", "rollback", "show",
            "bench", "doctor", "lock", "diff", "mirror", "sign", "keygen", "run", "env", "shell",
            "default", "init", "sbom", "image", "nosuch"]


def invocations(manifests, stubs):
    """(name, argv after the binary, extra environment)."""
    standin = {"LD_LIBRARY_PATH": stubs, "TFPROV_STUB_DRIVER": "545.23.08",
               "TFPROV_STUB_CUDA": "12030", "TFPROV_STUB_GPUS": "NVIDIA GeForce RTX 4070 Ti:8.9"}
    nogpu = {"TFPROV_PROC_DRIVER_NVIDIA": "/nonexistent/proc/driver/nvidia"}
    out = [("help", ["help"], {}), ("dash-help", ["--help"], {}), ("no-args", [], {}),
           ("version", ["--version"], {}), ("version-verbose", ["--version", "-v"], {}),
           ("unknown-command", ["frobnicate"], {}), ("unknown-option", ["--frob", "status"], {})]
    out += [(f"help-{c}", ["help", c], {}) for c in COMMANDS]
    out += [(f"{c}-dash-help", [c, "--help"], {}) for c in COMMANDS[:-1]]
    for m in manifests:
        base = os.path.splitext(os.path.basename(m))[0]
        out.append((f"validate-{base}", ["validate", m], {}))
        out.append((f"validate-json-{base}", ["--json", "validate", m], {}))
        out.append((f"lock-check-{base}", ["--offline", "lock", "--check", m], {}))
        out.append((f"plan-{base}", ["--offline", "--no-gpu", "plan", m], nogpu))
        out.append((f"plan-json-{base}", ["--offline", "--no-gpu", "--json", "plan", m], nogpu))
    for b in sorted(BROKEN):
        out.append((f"validate-broken-{b[:-5]}", ["validate", "broken/" + b], {}))
        out.append((f"plan-broken-{b[:-5]}", ["--offline", "--no-gpu", "plan", "broken/" + b], nogpu))
    out.append(("validate-missing-file", ["validate", "nonexistent.yaml"], {}))
    out.append(("validate-all", ["validate"] + manifests, {}))
    if len(manifests) >= 2:
        out.append(("diff", ["diff", manifests[0], manifests[-1]], {}))
        out.append(("diff-json", ["--json", "diff", manifests[0], manifests[-1]], {}))
    for tf in ("2.20", "2.15", "2.12", "2.9", "1.15", "9.99"):
        out.append((f"init-{tf}", ["--offline", "init", "--tensorflow", tf], {}))
    out += [("init-2.20-py312", ["--offline", "init", "--tensorflow", "2.20", "--python", "3.12"], {}),
            ("init-2.21-cuda-pip", ["--offline", "init", "--tensorflow", "2.21", "--cuda-from", "pip"], {}),
            ("init-gpu-4090", ["--offline", "init", "--tensorflow", "2.20", "--gpu",
                               "NVIDIA GeForce RTX 4090"], {}),
            ("init-gpu-auto", ["--offline", "init", "--tensorflow", "2.20", "--gpu", "auto"], standin),
            ("init-no-version", ["--offline", "init"], {}),
            ("init-to-file", ["--offline", "init", "--tensorflow", "2.20", "-o", "out.yaml"], {})]
    out += [("doctor-standin", ["doctor"], standin),
            ("doctor-standin-manifest", ["doctor", manifests[-1]], standin),
            ("doctor-no-gpu", ["--no-gpu", "doctor"], nogpu),
            ("doctor-nvml-init-fails", ["doctor"], dict(standin, TFPROV_STUB_NVML_INIT="18")),
            ("plan-standin", ["--offline", "plan", manifests[-1]], standin),
            ("status", ["status"], {}), ("status-json", ["--json", "status"], {}),
            ("show-none", ["show", "nosuch"], {}), ("verify-none", ["verify"], {}),
            ("sbom-all", ["sbom", "--all"], {}), ("default-show", ["default"], {}),
            ("env-unset", ["env", "--unset"], {}), ("env-none", ["env"], {}),
            ("destroy-none", ["destroy", "nosuch"], {}), ("gc-empty", ["--offline", "gc"], {}),
            ("rollback-none", ["rollback", "nosuch"], {}),
            ("bench-history", ["bench", "--history"], {}),
            ("run-none", ["run", "--", "true"], {}),
            ("image-inspect-none", ["image", "inspect", "nosuch"], {})]
    return out


def clean_env(home, extra):
    env = {"PATH": "/usr/bin:/bin", "HOME": home, "LC_ALL": "C", "NO_COLOR": "1",
           "TFPROV_WSL_LIB_DIR": "/nonexistent/wsl/lib", "TERM": "dumb"}
    env.update(extra)
    return env


def scrub(text, sandbox, binary):
    """What differs between two builds without the code differing: where the
    sandbox, the binary and its data directory are, the commit, the time."""
    datadir = os.path.join(os.path.dirname(binary), "tfprov-datadir")
    if os.path.islink(datadir):
        text = text.replace(os.path.realpath(datadir) + "/", "<DATADIR>/")
    text = text.replace(sandbox, "<SANDBOX>").replace(binary, "<BIN>")
    text = re.sub(r'"@timestamp":"[^"]*"', '"@timestamp":"<TIME>"', text)
    return re.sub(r"\(commit [^)]*\)", "(commit <COMMIT>)", text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stubs", default=os.path.join(REPO, "build", "stubs", "driver"),
                    help="the stand-in NVML's directory (a build's stubs/driver)")
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    os.makedirs(args.out, exist_ok=True)
    manifests = sorted(os.path.basename(m) for m in glob.glob(os.path.join(REPO, "manifests", "*.yaml")))
    manifests = ["manifests/" + m for m in manifests]
    for k, (name, argv, extra) in enumerate(invocations(manifests, os.path.abspath(args.stubs))):
        # One fixed sandbox path, made again for each invocation, so that paths
        # printed are the same from one recording to the next.
        sandbox = os.path.join(tempfile.gettempdir(), "tfprov-cli-record")
        shutil.rmtree(sandbox, ignore_errors=True)
        os.makedirs(os.path.join(sandbox, "root"))
        os.makedirs(os.path.join(sandbox, "home"))
        shutil.copytree(os.path.join(REPO, "manifests"), os.path.join(sandbox, "manifests"))
        os.makedirs(os.path.join(sandbox, "broken"))
        for b, text in BROKEN.items():
            with open(os.path.join(sandbox, "broken", b), "w") as f:
                f.write(text)
        full = [binary, "--root", os.path.join(sandbox, "root")] + argv if argv and argv[0] not in (
            "help", "--help", "--version") else [binary] + argv
        try:
            p = subprocess.run(full, cwd=sandbox, env=clean_env(os.path.join(sandbox, "home"), extra),
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
            so, se, rc = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"), p.returncode
        except subprocess.TimeoutExpired:
            so, se, rc = "", "", "timeout"
        stem = os.path.join(args.out, f"{k:03d}-{name}")
        for ext, text in (("stdout", so), ("stderr", se), ("rc", f"{rc}\n")):
            with open(f"{stem}.{ext}", "w") as f:
                f.write(scrub(text, sandbox, binary))
        if name == "init-to-file" and os.path.exists(os.path.join(sandbox, "out.yaml")):
            shutil.copy(os.path.join(sandbox, "out.yaml"), f"{stem}.file")
    shutil.rmtree(os.path.join(tempfile.gettempdir(), "tfprov-cli-record"), ignore_errors=True)
    print(f"cli_record: {k + 1} invocations of {binary} recorded in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
