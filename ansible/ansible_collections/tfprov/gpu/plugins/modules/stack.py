#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, tfprov maintainers
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: stack
short_description: Apply, roll back or destroy a TensorFlow GPU stack with tfprov
version_added: "0.1.0"
description:
  - Runs the installed C(tfprov) with C(--json) on the host and returns Ansible's
    contract from its result event. C(state=present) runs C(tfprov apply -y), then
    C(verify) and, when asked, C(bench). C(state=absent) runs C(tfprov destroy -y).
  - In check mode it runs C(tfprov plan --detailed-exitcode) instead and reports what
    would change without changing anything; with C(--diff) the plan is the diff.
  - A host can hold several stacks side by side; one of them is the host's default
    stack, the one login shells enter (C(/etc/profile.d/tfprov.sh)). The first stack
    applied on a host becomes its default whatever C(default) says; a later one only
    with C(default=true) (C(tfprov apply --default)); C(default=false) leaves the
    default as it is. Every result says the host's default afterwards
    (C(default_stack)); the M(tfprov.gpu.default_stack) module switches it alone.
  - tfprov's exit codes become distinct messages. Exit 6 (precondition failed,
    driver or GPU), 5 (integrity failure), 4 (state locked), 3 (manifest invalid)
    and 8 (verify or benchmark failed) fail the task; exit 7 (reboot required)
    does not fail it and sets C(reboot_required).
options:
  manifest:
    description:
      - Path of the manifest on the host. Required for C(state=present) unless
        C(src) or C(generation) is given.
    type: path
  src:
    description:
      - Path of the manifest on the controller. The action plugin reads it and the
        module writes it to C(manifest_dir)/<basename> on the host before applying.
    type: path
  content:
    description:
      - The manifest text (what C(src) is turned into; rarely set by hand).
    type: str
  signature:
    description:
      - The manifest's minisign signature (the text of C(src).minisig, which the action
        plugin sends when that file exists). Written beside the manifest as
        <basename>.minisig; when it is not given, a signature left there by an earlier
        run is removed, so tfprov never checks the manifest against a stale one.
    type: str
  side_files:
    description:
      - The manifest's side files (C(python.lock_file), C(pip.requirements_file)) as a
        mapping of the path written in the manifest, relative to its directory, to the
        file's text; the action plugin fills it from C(src). Written beside the manifest
        in C(manifest_dir). An absolute path or one with C(..) is refused.
    type: dict
    default: {}
  manifest_dir:
    description: Where C(src)/C(content), its signature and side files are written on the host.
    type: path
    default: /var/lib/tfprov/manifests
  name:
    description:
      - The stack's name. Required for C(state=absent) and C(generation); otherwise
        taken from the state after apply.
    type: str
  state:
    description: C(present) applies the manifest, C(absent) destroys the stack.
    type: str
    choices: [present, absent]
    default: present
  generation:
    description:
      - Roll the stack back to this earlier generation (C(tfprov rollback --generation)).
        Unchanged when the current generation already has that generation's manifest.
    type: int
  previous:
    description:
      - Roll the stack back to its previous generation, C(name) required. When the last
        attempted generation failed (a partial apply), that is the current generation,
        re-applied; otherwise the last successful generation before the current one
        whose manifest differs.
    type: bool
    default: false
  mirror:
    description: Mirror URLs or directories tried before the origin (C(--mirror), in order).
    type: list
    elements: str
    default: []
  offline:
    description: Never touch the network (C(--offline)); everything must be in the cache.
    type: bool
    default: false
  no_gpu:
    description: Provision without a GPU; every GPU check is reported as skipped (C(--no-gpu)).
    type: bool
    default: false
  verify_no_gpu:
    description:
      - Pass C(--no-gpu) to verify only (files and libraries checked, GPU compute skipped),
        e.g. on a host whose driver reports no GPU, while apply still checks the driver.
        Defaults to C(no_gpu).
    type: bool
  config:
    description:
      - Fleet settings written by the C(tfprov.gpu.node) role (JSON with C(mirror), a list
        of URLs); used when C(mirror) is empty.
      - With C(root), the path is under C(root), resolved as tfprov resolves every path
        there (a symlink to C(/x) means C(root/x)); nothing outside C(root) is read.
    type: path
    default: /etc/tfprov/fleet.json
  root:
    description: Put every path of the manifest and the state under this directory (C(--root)).
    type: path
  default:
    description:
      - Make this stack the host's default stack, the one login shells enter
        (C(tfprov apply --default); after C(generation) or C(previous), C(tfprov default
        NAME)). C(changed) is true when the default changes, even where the stack itself
        was already as the manifest says.
      - With C(false) the default is left as it is, except that the first stack applied
        on a host becomes its default anyway (tfprov does that); destroying the default
        stack (C(state=absent)) leaves the host without one.
    type: bool
    default: false
  verify:
    description: Run C(tfprov verify) after a successful apply.
    type: bool
    default: true
  bench:
    description: Run C(tfprov bench) after apply and return its results.
    type: bool
    default: false
  lock_timeout:
    description: Seconds to wait for another tfprov run holding the state lock (C(--lock-timeout)).
    type: int
  binary:
    description: The tfprov executable.
    type: str
    default: tfprov
notes:
  - Needs tfprov on the host (the C(tfprov.gpu.node) role installs the Debian package).
  - Signed roll-outs, the C(tfprov.gpu.node) role places the trusted keys in
    C(/etc/tfprov/trusted-keys.d) and the policy in C(/etc/tfprov/policy.yaml); with
    C(require_signature) true a manifest without a valid signature fails with exit 5
    before anything changes.
  - In check mode with a C(root) that does not exist yet, tfprov plans for an empty root.
author:
  - tfprov maintainers (@tfprov)
attributes:
  check_mode:
    support: full
    description: Runs C(tfprov plan --detailed-exitcode); nothing is written on the host.
      C(changed) and C(default_stack) say what the run would do, the default included.
  diff_mode:
    support: full
    description: The plan is the diff (C(prepared)); C(before) and C(after) are the host's
      default stack.
  action:
    support: full
    description: The action plugin reads C(src), its signature and side files on the controller.
"""

EXAMPLES = r"""
- name: Roll the stack out from the fleet mirror
  tfprov.gpu.stack:
    src: manifests/stable-2.15.yaml
    mirror: ["http://mirror.internal:8080/"]
    lock_timeout: 60
  register: tf

- name: Put a second stack beside the first and make it the default
  tfprov.gpu.stack:
    src: manifests/stable-2.21.yaml
    default: true
  register: tf
- name: Show the stack that login shells enter now
  ansible.builtin.debug:
    msg: "{{ tf.default_stack }}"

- name: Roll back to generation 3
  tfprov.gpu.stack:
    name: stable-2.15
    generation: 3

- name: Remove the stack
  tfprov.gpu.stack:
    name: stable-2.15
    state: absent
"""

RETURN = r"""
changed:
  description: Whether tfprov changed anything (the result event's C(changed)).
  returned: always
  type: bool
rc:
  description: tfprov's exit code.
  returned: always
  type: int
msg:
  description: What happened; on failure the meaning of the exit code and tfprov's error.
  returned: always
  type: str
stack:
  description: The stack's name.
  returned: when known
  type: str
generation:
  description: The stack's current generation number after the run.
  returned: when the stack exists
  type: int
previous_generation:
  description: The stack's generation number before the run (null when it did not exist).
  returned: always
  type: int
steps:
  description: The steps tfprov changed (C(apply_complete) events with changed true), or in
    check mode the planned changes.
  returned: always
  type: list
  elements: dict
  sample: [{"step": "cuda", "action": "create", "changed": true}]
plan:
  description: The plan as text (check mode and diff mode).
  returned: check mode
  type: str
verify:
  description: Result of C(tfprov verify) (rc, ok, messages).
  returned: when verify ran
  type: dict
bench:
  description: Benchmark results recorded in state, keyed "SOURCE PRECISION".
  returned: when bench ran
  type: dict
reboot_required:
  description: True when tfprov exited 7 (applied, reboot required). Not a failure.
  returned: always
  type: bool
default_stack:
  description: The host's default stack after the run (in check mode, after the run that
    would happen), the one login shells enter; null when the host has none.
  returned: always
  type: str
  sample: stable-2.21
previous_default_stack:
  description: The host's default stack before the run; null when it had none.
  returned: always
  type: str
"""

import atexit
import json
import os
import re
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfprov.gpu.plugins.module_utils.tfprov import (
    failure_message, global_args, in_root, read_default, read_stacks, run_json)


def _stack_by_manifest(stacks, manifest):
    for s in stacks.values():
        if s["manifest"] and os.path.realpath(s["manifest"]) == os.path.realpath(manifest):
            return s
    return None


def _previous(cur):
    """The generation a rollback returns to (see the option previous)."""
    gens = cur["generations"]
    if not gens or cur["generation"] is None:
        return None
    if gens[-1]["result"] != "ok" or gens[-1]["number"] != cur["generation"]:
        return cur["generation"]
    now = gens[-1]["manifest_sha256"]
    for g in reversed(gens[:-1]):
        if g["result"] == "ok" and g["manifest_sha256"] != now:
            return g["number"]
    return None


def _exit(module, **res):
    """exit_json with failed=False said explicitly: Ansible marks any result
    with a non-zero rc failed unless it carries 'failed' (check mode's rc 2 and
    rc 7, reboot required, are not failures)."""
    res["failed"] = False
    module.exit_json(**res)


def _manifest_stack_name(path):
    """The stack name a manifest declares (stack.name), or None; for check mode, where
    nothing is applied to ask the state. PyYAML when the host has it, else the block
    form every manifest uses."""
    try:
        with open(path) as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    try:
        import yaml
        doc = yaml.safe_load(text)
        name = doc["stack"]["name"]
        return name if isinstance(name, str) else None
    except ImportError:
        m = re.search(r"^stack:[ \t]*\n(?:[ \t]+.*\n)*?[ \t]+name:[ \t]*[\"']?([^\"'#\s]+)",
                      text, re.M)
        return m.group(1) if m else None
    except Exception:  # tfprov reports a manifest that does not parse, with its position
        return None


def _default_diff(before, after, prepared=""):
    """Diff mode: the default stack before and after; the plan, when there is one."""
    return dict(before="default stack: %s\n" % (before or "(none)"),
                after="default stack: %s\n" % (after or "(none)"), prepared=prepared)


def _set_default(module, p, g, res, name):
    """tfprov default NAME after a rollback (check mode: only says so)."""
    if res.get("default_stack") == name:
        return
    if not module.check_mode:
        rc, _, _, errors = run_json(module, g + ["default", name])
        if rc != 0:
            module.fail_json(msg=failure_message(rc, errors, "tfprov default"), **res)
        name = read_default(p)[0]
    res["default_stack"] = name
    res["changed"] = True


def _plan_text(events):
    lines = []
    for ev in events:
        if ev.get("type") in ("planned_change", "change_summary", "log") and "@message" in ev:
            if ev.get("@level") == "debug":
                continue
            lines.append(ev["@message"].rstrip("\n"))
    return "\n".join(lines) + "\n"


def _safe_name(name):
    parts = name.replace("\\", "/").split("/")
    return name.strip() != "" and not os.path.isabs(name) and ".." not in parts


def _put(path, data):
    """Writes data to path unless it already holds it (temp file, fsync, rename)."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except OSError:
        pass
    d = os.path.dirname(path)
    if not os.path.isdir(d):
        os.makedirs(d, mode=0o755)
    tmp = path + ".tmp.%d" % os.getpid()
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def _write_content(module, p):
    """The manifest, its side files and its signature, as tfprov reads them: side files
    relative to the manifest's directory, the signature at MANIFEST.minisig."""
    name = os.path.basename(p.get("src") or "manifest.yaml")
    side = p.get("side_files") or {}
    for rel in side:
        if not _safe_name(rel):
            module.fail_json(msg="side file %s is not inside the manifest's directory" % rel)
    files = {name: p["content"].encode()}
    for rel, text in side.items():
        files[rel] = (text or "").encode()
    if p.get("signature") is not None:
        files[name + ".minisig"] = p["signature"].encode()
    d = p["manifest_dir"]
    if p.get("root"):
        d = in_root(p["root"], d)
    same = True
    for rel, data in files.items():
        try:
            with open(os.path.join(d, rel), "rb") as f:
                same = same and f.read() == data
        except OSError:
            same = False
    stale_sig = p.get("signature") is None and os.path.exists(os.path.join(d, name + ".minisig"))
    if module.check_mode and (not same or stale_sig):
        # Nothing may change in check mode: plan from a private copy.
        tmpdir = tempfile.mkdtemp(prefix="tfprov-check-")
        atexit.register(shutil.rmtree, tmpdir, True)
        for rel, data in files.items():
            _put(os.path.join(tmpdir, rel), data)
        return os.path.join(tmpdir, name)
    if module.check_mode:
        return os.path.join(d, name)
    for rel, data in files.items():
        _put(os.path.join(d, rel), data)
    if stale_sig:
        os.unlink(os.path.join(d, name + ".minisig"))
    return os.path.join(d, name)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            manifest=dict(type="path"), src=dict(type="path"), content=dict(type="str", no_log=False),
            signature=dict(type="str", no_log=False),
            side_files=dict(type="dict", default={}),
            manifest_dir=dict(type="path", default="/var/lib/tfprov/manifests"),
            name=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            generation=dict(type="int"), previous=dict(type="bool", default=False), mirror=dict(type="list", elements="str", default=[]),
            offline=dict(type="bool", default=False), no_gpu=dict(type="bool", default=False),
            verify_no_gpu=dict(type="bool"),
            config=dict(type="path", default="/etc/tfprov/fleet.json"),
            root=dict(type="path"), verify=dict(type="bool", default=True),
            bench=dict(type="bool", default=False), lock_timeout=dict(type="int"),
            binary=dict(type="str", default="tfprov"), default=dict(type="bool", default=False),
        ),
        mutually_exclusive=[("manifest", "content"), ("manifest", "generation"),
                            ("content", "generation")],
        supports_check_mode=True,
    )
    p = module.params
    if module.get_bin_path(p["binary"]) is None and not os.path.isfile(p["binary"]):
        module.fail_json(msg="tfprov is not installed on this host (%s not found); "
                             "the tfprov.gpu.node role installs it" % p["binary"], rc=127)
    config = in_root(p["root"], p["config"]) if p["config"] else None
    if not p["mirror"] and config and os.path.isfile(config):
        try:
            with open(config) as f:
                p["mirror"] = list(json.load(f).get("mirror") or [])
        except (OSError, ValueError, AttributeError) as e:
            module.fail_json(msg="%s: %s" % (config, e), rc=1)
    g = global_args(p)
    before = read_stacks(p)
    before_default, default_chosen = read_default(p)
    res = dict(changed=False, rc=0, steps=[], reboot_required=False, previous_generation=None,
               default_stack=before_default, previous_default_stack=before_default)

    if p["state"] == "absent" or p["generation"] is not None or p["previous"]:
        if not p["name"]:
            module.fail_json(msg="name is required with state=absent, generation or previous",
                             **res)
        cur = before.get(p["name"])
        res["stack"] = p["name"]
        res["previous_generation"] = cur["generation"] if cur else None
        if p["state"] == "absent":
            if cur is None:
                _exit(module, msg="stack %s is not present" % p["name"], **res)
            if p["default"]:
                module.fail_json(msg="default=true with state=absent: a destroyed stack cannot "
                                     "be the default", **res)
            argv = g + ["destroy", "-y", p["name"]]
        else:
            if cur is None:
                module.fail_json(msg="stack %s is not present: nothing to roll back" % p["name"],
                                 **res)
            gens = cur["generations"]
            if p["previous"] and p["generation"] is None:
                p["generation"] = _previous(cur)
                if p["generation"] is None:
                    module.fail_json(msg="stack %s has no previous generation to roll back to"
                                     % p["name"], **res)
            target = [x for x in gens if x["number"] == p["generation"]]
            if not target:
                module.fail_json(msg="stack %s has no generation %d (it has %s)" % (
                    p["name"], p["generation"], [x["number"] for x in gens]), **res)
            last = gens[-1]
            if last["number"] == cur["generation"] and last["result"] == "ok" \
                    and last["manifest_sha256"] == target[0]["manifest_sha256"]:
                res["generation"] = cur["generation"]
                if p["default"]:
                    _set_default(module, p, g, res, p["name"])
                if module._diff:
                    res["diff"] = _default_diff(before_default, res["default_stack"])
                _exit(module, msg="stack %s already runs generation %d's manifest" % (
                    p["name"], p["generation"]), **res)
            argv = g + ["rollback", "-y", p["name"], "--generation", str(p["generation"])]
        if module.check_mode:
            res["changed"] = True
            if p["state"] == "absent" and before_default == p["name"]:
                res["default_stack"] = None
            elif p["default"]:
                _set_default(module, p, g, res, p["name"])
            if module._diff:
                res["diff"] = _default_diff(before_default, res["default_stack"])
            _exit(module, msg="would run: %s" % " ".join(argv[len(g):]), **res)
        rc, events, result, errors = run_json(module, argv)
        after = read_stacks(p).get(p["name"])
        res.update(rc=rc, changed=bool(result and result.get("changed")) or rc == 0,
                   generation=after["generation"] if after else None,
                   default_stack=read_default(p)[0])
        res["steps"] = [dict(step=e.get("step"), action=e.get("action"), changed=True)
                        for e in events if e.get("type") == "apply_complete" and e.get("changed")]
        if rc not in (0, 7):
            module.fail_json(msg=failure_message(rc, errors, "tfprov " + argv[len(g)]), **res)
        res["reboot_required"] = rc == 7
        if p["default"]:
            _set_default(module, p, g, res, p["name"])
        if module._diff:
            res["diff"] = _default_diff(before_default, res["default_stack"])
        _exit(module, msg="%s %s: done" % (argv[len(g)], p["name"]), **res)

    if p["content"] is not None:
        manifest = _write_content(module, p)
    elif p["manifest"]:
        manifest = p["manifest"]
    else:
        module.fail_json(msg="state=present needs manifest, src or generation", **res)
    manifest = os.path.abspath(manifest)
    cur = before.get(p["name"]) if p["name"] else _stack_by_manifest(before, manifest)
    res["previous_generation"] = cur["generation"] if cur else None
    name = p["name"] or (cur["name"] if cur else None) or _manifest_stack_name(manifest)
    # What apply does to the default (cli/apply.c): --default makes this stack it; so
    # does the first apply on a host, where no default was ever chosen.
    would_default = name is not None and (p["default"] or not default_chosen) \
        and before_default != name

    if module.check_mode:
        rc, events, result, errors = run_json(module, g + ["plan", "--detailed-exitcode", manifest])
        res["rc"] = rc
        res["plan"] = _plan_text(events)
        res["steps"] = [dict(step=e.get("step"), action=e.get("action"), changed=False)
                        for e in events if e.get("type") == "planned_change"
                        and e.get("action") not in ("noop", "read")]
        if rc not in (0, 2):
            module.fail_json(msg=failure_message(rc, errors, "tfprov plan"), **res)
        res["changed"] = rc == 2 or would_default
        if would_default:
            res["default_stack"] = name
        if module._diff:
            res["diff"] = _default_diff(before_default, res["default_stack"], res["plan"])
        _exit(module, msg="plan: %s%s" % ("changes pending" if rc == 2 else "no changes",
                                          "; default stack %s" % name if would_default else ""),
              **res)

    rc, events, result, errors = run_json(
        module, g + ["apply", "-y"] + (["--default"] if p["default"] else []) + [manifest])
    res["rc"] = rc
    res["default_stack"] = read_default(p)[0]
    res["changed"] = bool(result and result.get("changed")) or res["default_stack"] != before_default
    res["steps"] = [dict(step=e.get("step"), action=e.get("action"), changed=True)
                    for e in events if e.get("type") == "apply_complete" and e.get("changed")]
    after = read_stacks(p)
    st = after.get(p["name"]) if p["name"] else _stack_by_manifest(after, manifest)
    if st:
        res["stack"] = st["name"]
        res["generation"] = st["generation"]
    if module._diff:
        res["diff"] = _default_diff(before_default, res["default_stack"], _plan_text(
            [e for e in events if e.get("type") in ("planned_change", "change_summary")]))
    if rc == 7:
        res["reboot_required"] = True
    elif rc != 0:
        module.fail_json(msg=failure_message(rc, errors, "tfprov apply"), **res)

    if p["verify"] and st:
        vp = dict(p)
        if p["verify_no_gpu"] is not None:
            vp["no_gpu"] = p["verify_no_gpu"]
        vrc, _, _, verrors = run_json(module, global_args(vp) + ["verify", st["name"]])
        res["verify"] = dict(rc=vrc, ok=vrc == 0, messages=verrors)
        if vrc != 0:
            module.fail_json(msg=failure_message(vrc, verrors, "tfprov verify"), **res)
    if p["bench"] and st:
        brc, _, _, berrors = run_json(module, g + ["bench", st["name"]])
        res["bench"] = read_stacks(p).get(st["name"], {}).get("bench", {})
        if brc != 0:
            module.fail_json(msg=failure_message(brc, berrors, "tfprov bench"), **res)
    msg = "reboot required" if rc == 7 else ("applied" if res["changed"] else "no changes")
    if res["default_stack"] != before_default:
        msg += "; default stack %s" % (res["default_stack"] or "none")
    _exit(module, msg=msg, **res)


if __name__ == "__main__":
    main()
