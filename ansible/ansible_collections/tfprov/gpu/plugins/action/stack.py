# -*- coding: utf-8 -*-
"""Action plugin for tfprov.gpu.stack: `src` names a manifest on the controller;
its text is sent to the module as `content` (manifests are small text files)."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars)
        args = dict(self._task.args)
        src = args.get("src")
        if src:
            try:
                path = self._find_needle("files", src)
            except Exception as e:
                raise AnsibleActionFail("src %s: %s" % (src, to_text(e)))
            with open(path, "rb") as f:
                args["content"] = to_text(f.read(), errors="surrogate_or_strict")
        result.update(self._execute_module(module_name="tfprov.gpu.stack", module_args=args,
                                           task_vars=task_vars))
        return result
