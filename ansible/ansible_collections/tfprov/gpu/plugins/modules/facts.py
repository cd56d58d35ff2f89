#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, tfprov maintainers
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: facts
short_description: Gather tfprov facts (stacks, generations, driver, GPUs, bench, drift)
version_added: "0.1.0"
description:
  - Returns C(ansible_facts.tfprov) for the host. Stacks, generations, the last
    benchmark results and the default stack (the one login shells enter) are read from tfprov's state database (read-only, SQLite); the
    driver, the GPUs and their compute capabilities are asked of NVML
    (C(libnvidia-ml.so.1), the library tfprov itself loads); drift is C(tfprov status)'s
    verdict (exit 2 means drift).
  - Changes nothing; safe in check mode.
options:
  root:
    description: tfprov's C(--root) on this host.
    type: path
  drift:
    description: Run C(tfprov status) to report drift per host.
    type: bool
    default: true
  binary:
    description: The tfprov executable.
    type: str
    default: tfprov
author:
  - tfprov maintainers (@tfprov)
"""

EXAMPLES = r"""
- tfprov.gpu.facts:
- ansible.builtin.debug:
    msg: "{{ ansible_facts.tfprov.stacks | dict2items | map(attribute='value.generation') }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts under the key C(tfprov).
  returned: always
  type: complex
  contains:
    tfprov:
      description: >-
        installed (bool), version (tfprov --version, or null), driver, cuda_driver,
        gpus (list of index/name/compute_capability), nvml_error, stacks (name ->
        manifest, generation, generations, bench), default_stack (the stack login shells
        enter, or null), drift (bool or null), drift_rc.
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.tfprov.gpu.plugins.module_utils.tfprov import (
    global_args, nvml_info, read_default, read_stacks, run_json)


def main():
    module = AnsibleModule(
        argument_spec=dict(root=dict(type="path"), drift=dict(type="bool", default=True),
                           binary=dict(type="str", default="tfprov")),
        supports_check_mode=True,
    )
    p = module.params
    facts = nvml_info()
    binary = module.get_bin_path(p["binary"])
    facts["installed"] = binary is not None
    facts["version"] = None
    if binary:
        rc, out, _ = module.run_command([binary, "--version"])
        if rc == 0 and out.strip():
            facts["version"] = out.strip().splitlines()[0]
    try:
        facts["stacks"] = read_stacks(p)
        facts["default_stack"] = read_default(p)[0]
    except Exception as e:  # an unreadable state is a fact, not a crash
        facts["stacks"] = {}
        facts["default_stack"] = None
        facts["state_error"] = str(e)
    facts["drift"] = None
    facts["drift_rc"] = None
    if p["drift"] and binary and facts["stacks"]:
        argv = global_args(dict(binary=binary, root=p["root"], lock_timeout=30)) + ["status"]
        rc, _, _, _ = run_json(module, argv)
        facts["drift_rc"] = rc
        facts["drift"] = rc == 2 if rc in (0, 2) else None
    module.exit_json(changed=False, ansible_facts=dict(tfprov=facts))


if __name__ == "__main__":
    main()
