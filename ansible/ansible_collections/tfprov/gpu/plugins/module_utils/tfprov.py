# -*- coding: utf-8 -*-
# Copyright: (c) 2026, tfprov maintainers
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Shared by the tfprov.gpu modules: run tfprov with --json, read its events,
read its state database (read-only: stacks, generations, bench results, the
default stack) and ask NVML what driver and GPUs exist.

tfprov prints one JSON object per line with --json; the last one, of type
"result", carries exit_code/changed/failed. Error events carry the message.
"""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import json
import os
import sqlite3

# tfprov's exit codes (README "Exit codes") and what a fleet operator reads.
EXIT_MEANING = {
    1: "tfprov failed",
    2: "changes pending or drift",
    3: "manifest invalid",
    4: "state locked by another tfprov run",
    5: "integrity failure (hash, size or unsafe archive): nothing unverified was placed",
    6: "precondition failed (NVIDIA driver or GPU) before anything changed",
    7: "applied; reboot required",
    8: "applied, but verify or benchmark failed",
    64: "tfprov rejected the command line the module built (is the tfprov on this host "
        "older than the collection?)",
    130: "interrupted; state consistent",
}


def global_args(params):
    """Global options from the common module parameters."""
    argv = [params.get("binary") or "tfprov", "--json", "--no-color"]
    if params.get("root"):
        argv += ["--root", params["root"]]
    if params.get("no_gpu"):
        argv.append("--no-gpu")
    if params.get("offline"):
        argv.append("--offline")
    for m in params.get("mirror") or []:
        argv += ["--mirror", m]
    if params.get("lock_timeout") is not None:
        argv += ["--lock-timeout", str(params["lock_timeout"])]
    return argv


def run_json(module, argv):
    """Runs tfprov; returns (rc, events, result event or None, error messages)."""
    rc, out, err = module.run_command(argv, environ_update={"NO_COLOR": "1"})
    events = []
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    result = None
    errors = []
    for ev in events:
        if ev.get("type") == "result":
            result = ev
        elif ev.get("@level") == "error" and ev.get("@message"):
            errors.append(ev["@message"].strip())
    if not errors and rc != 0 and err.strip():
        errors = [l for l in err.strip().splitlines() if l.strip()][-5:]
    return rc, events, result, errors


def failure_message(rc, errors, what="tfprov"):
    meaning = EXIT_MEANING.get(rc, "tfprov failed")
    detail = "; ".join(errors) if errors else "no message"
    return "%s: exit %d: %s: %s" % (what, rc, meaning, detail)


def in_root(root, path):
    """The host path of PATH under ROOT as a process chrooted into ROOT sees it, as
    tfprov resolves every path under --root (engine/base/inroot.c): a symlink to /x
    means ROOT/x and ".." never climbs above ROOT. What does not exist yet is
    appended as it is. Without a root (or "/"), PATH itself."""
    if not root or os.path.abspath(root) == "/":
        return path
    root = os.path.abspath(root)
    todo = [c for c in path.split("/") if c not in ("", ".")][::-1]
    done = []
    links = 0
    while todo:
        comp = todo.pop()
        if comp == "..":
            if done:
                done.pop()
            continue
        done.append(comp)
        host = os.path.join(root, *done)
        if not os.path.islink(host):
            if not os.path.lexists(host):
                break
            continue
        links += 1
        if links > 40:
            raise OSError(40, "too many levels of symbolic links", path)
        target = os.readlink(host)
        done.pop()
        if target.startswith("/"):
            done = []
        todo.extend([c for c in target.split("/") if c not in ("", ".")][::-1])
    for comp in todo[::-1]:
        if comp == "..":
            if done:
                done.pop()
        else:
            done.append(comp)
    return os.path.join(root, *done)


def state_path(params):
    return in_root(params.get("root"), "/var/lib/tfprov/state.db")


def _connect(params):
    path = state_path(params)
    if not os.path.exists(path):
        return None
    db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=30)
    db.row_factory = sqlite3.Row
    return db


def read_stacks(params):
    """Stacks with their generations and last bench results, from state.db."""
    db = _connect(params)
    if db is None:
        return {}
    try:
        out = {}
        for s in db.execute("SELECT id, name, manifest_path, current_gen FROM stacks"):
            gens = [dict(number=i + 1, id=g["id"], manifest=g["manifest_path"],
                         manifest_sha256=g["manifest_sha256"], started=g["started"],
                         finished=g["finished"], result=g["result"])
                    for i, g in enumerate(db.execute(
                        "SELECT id, manifest_path, manifest_sha256, started, finished, result "
                        "FROM generations WHERE stack_id = ? ORDER BY id", (s["id"],)))]
            bench = {}
            for b in db.execute(
                    "SELECT gpu, precision, ms_per_step, images_per_sec, source, at "
                    "FROM bench_results WHERE stack_id = ? ORDER BY id", (s["id"],)):
                key = "%s %s" % (b["source"] or "native", b["precision"] or "-")
                bench[key] = dict(gpu=b["gpu"], precision=b["precision"], source=b["source"],
                                  ms_per_step=b["ms_per_step"],
                                  images_per_sec=b["images_per_sec"], at=b["at"])
            current = None
            for g in gens:
                if g["id"] == s["current_gen"]:
                    current = g["number"]
            out[s["name"]] = dict(name=s["name"], manifest=s["manifest_path"],
                                  generation=current, generations=gens, bench=bench)
        return out
    finally:
        db.close()


def read_default(params):
    """The host's default stack, the one login shells enter: (name or None,
    chosen). chosen is False while no default was ever set on the host (no
    stack applied yet): the next stack applied then becomes the default.
    After `tfprov default --none`, or destroying the default stack, it is
    (None, True) and only `default`/`apply --default` set one."""
    db = _connect(params)
    if db is None:
        return None, False
    try:
        try:
            row = db.execute("SELECT value FROM settings WHERE key = 'default_stack'").fetchone()
        except sqlite3.OperationalError:  # a state older than several stacks per machine
            return None, False
        if row is None:
            return None, False
        return (row["value"] or None), True
    finally:
        db.close()


def nvml_info():
    """Driver version and GPUs through libnvidia-ml.so.1 (what tfprov dlopens)."""
    info = dict(driver=None, cuda_driver=None, gpus=[], nvml_error=None)
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as e:
        info["nvml_error"] = "libnvidia-ml.so.1 not loadable: %s" % e
        return info
    try:
        init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
        rc = init()
        if rc != 0:
            lib.nvmlErrorString.restype = ctypes.c_char_p
            info["nvml_error"] = "nvmlInit_v2: %s (%d)" % (
                (lib.nvmlErrorString(rc) or b"?").decode(errors="replace"), rc)
            return info
        buf = ctypes.create_string_buffer(96)
        if lib.nvmlSystemGetDriverVersion(buf, 96) == 0:
            info["driver"] = buf.value.decode(errors="replace")
        v = ctypes.c_int()
        if lib.nvmlSystemGetCudaDriverVersion(ctypes.byref(v)) == 0:
            info["cuda_driver"] = "%d.%d" % (v.value // 1000, (v.value % 1000) // 10)
        n = ctypes.c_uint()
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(n)) == 0:
            for i in range(n.value):
                dev = ctypes.c_void_p()
                if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(dev)) != 0:
                    continue
                name = ctypes.create_string_buffer(96)
                lib.nvmlDeviceGetName(dev, name, 96)
                maj, mi = ctypes.c_int(), ctypes.c_int()
                lib.nvmlDeviceGetCudaComputeCapability(dev, ctypes.byref(maj), ctypes.byref(mi))
                info["gpus"].append(dict(index=i, name=name.value.decode(errors="replace"),
                                         compute_capability="%d.%d" % (maj.value, mi.value)))
        lib.nvmlShutdown()
    except Exception as e:  # a broken NVML must not break fact gathering
        info["nvml_error"] = "NVML: %s" % e
    return info
