#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, tfprov maintainers
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: default_stack
short_description: Choose the tfprov stack that login shells enter on a host
version_added: "1.1.0"
description:
  - A host can hold several tfprov stacks side by side; its default stack is the one
    login shells enter (C(/etc/profile.d/tfprov.sh) sources that stack's
    C(activate.sh)). C(tfprov run STACK) and C(tfprov shell STACK) reach any stack
    whatever the default is.
  - C(state=present) makes C(name) the default (C(tfprov default NAME)); the stack must
    be on the host already (M(tfprov.gpu.stack) puts it there). C(state=absent) leaves
    the host without a default (C(tfprov default --none)); with C(name), only when
    C(name) is the default.
  - C(changed) is true only when the default changes; the stacks themselves are never
    touched.
options:
  name:
    description: The stack. Required with C(state=present).
    type: str
  state:
    description: C(present) makes C(name) the default, C(absent) leaves no default.
    type: str
    choices: [present, absent]
    default: present
  root:
    description: tfprov's C(--root) on this host.
    type: path
  lock_timeout:
    description: Seconds to wait for another tfprov run holding the state lock (C(--lock-timeout)).
    type: int
  binary:
    description: The tfprov executable.
    type: str
    default: tfprov
notes:
  - Needs tfprov on the host (the C(tfprov.gpu.node) role installs the Debian package).
  - A shell already running keeps the stack it entered; new login shells get the new
    default.
author:
  - tfprov maintainers (@tfprov)
attributes:
  check_mode:
    support: full
    description: Reads the state and says whether the default would change; nothing is written.
  diff_mode:
    support: full
    description: The default stack before and after.
"""

EXAMPLES = r"""
- name: Login shells enter the new stack
  tfprov.gpu.default_stack:
    name: stable-2.21
    lock_timeout: 60

- name: Login shells enter no tfprov stack
  tfprov.gpu.default_stack:
    state: absent
"""

RETURN = r"""
changed:
  description: Whether the default stack changed (would change, in check mode).
  returned: always
  type: bool
default_stack:
  description: The host's default stack after the run (in check mode, after the run that
    would happen); null when it has none.
  returned: always
  type: str
  sample: stable-2.21
previous_default_stack:
  description: The host's default stack before the run; null when it had none.
  returned: always
  type: str
  sample: stable-2.20
stacks:
  description: The names of the stacks on the host.
  returned: always
  type: list
  elements: str
rc:
  description: tfprov's exit code (0 when tfprov was not run).
  returned: always
  type: int
msg:
  description: What happened; on failure tfprov's error.
  returned: always
  type: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfprov.gpu.plugins.module_utils.tfprov import (
    failure_message, global_args, read_default, read_stacks, run_json)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str"),
            state=dict(type="str", choices=["present", "absent"], default="present"),
            root=dict(type="path"), lock_timeout=dict(type="int"),
            binary=dict(type="str", default="tfprov"),
        ),
        required_if=[("state", "present", ("name",))],
        supports_check_mode=True,
    )
    p = module.params
    if module.get_bin_path(p["binary"]) is None and not os.path.isfile(p["binary"]):
        module.fail_json(msg="tfprov is not installed on this host (%s not found); "
                             "the tfprov.gpu.node role installs it" % p["binary"], rc=127)
    stacks = sorted(read_stacks(p))
    before = read_default(p)[0]
    res = dict(changed=False, rc=0, default_stack=before, previous_default_stack=before,
               stacks=stacks)
    if module._diff:
        res["diff"] = dict(before="default stack: %s\n" % (before or "(none)"))

    if p["state"] == "present":
        if p["name"] not in stacks:
            module.fail_json(msg="stack %s is not on this host (it has %s): apply it first "
                                 "(tfprov.gpu.stack)" % (p["name"], ", ".join(stacks) or "none"),
                             **res)
        want, argv = p["name"], ["default", p["name"]]
    else:
        want, argv = None, ["default", "--none"]
        if p["name"] and before != p["name"]:
            want = before  # name is not the default: nothing to clear
    if want == before:
        msg = "default stack is %s" % (before or "none")
    elif module.check_mode:
        res.update(changed=True, default_stack=want)
        msg = "would run: tfprov %s" % " ".join(argv)
    else:
        rc, _, _, errors = run_json(module, global_args(p) + argv)
        res["rc"] = rc
        if rc != 0:
            module.fail_json(msg=failure_message(rc, errors, "tfprov default"), **res)
        res["default_stack"] = read_default(p)[0]
        res["changed"] = res["default_stack"] != before
        msg = "default stack %s (was %s)" % (res["default_stack"] or "none", before or "none")
    if module._diff:
        res["diff"]["after"] = "default stack: %s\n" % (res["default_stack"] or "(none)")
    module.exit_json(msg=msg, **res)


if __name__ == "__main__":
    main()
