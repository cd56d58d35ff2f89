# -*- coding: utf-8 -*-
# Copyright: tfprov maintainers
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Action plugin for tfprov.gpu.stack: C(src) names a manifest on the controller.
Its text is sent to the module as C(content), with what a signed roll-out
needs beside it: the minisign signature C(src).minisig when it exists
(C(signature)) and the side files the manifest names, C(python.lock_file) and
C(pip.requirements_file), relative to the manifest's directory
(C(side_files)). Manifests, signatures and lock files are small text files."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase

try:
    import yaml
except ImportError:  # ansible-core depends on PyYAML; keep the plugin importable anyway
    yaml = None

SIDE_KEYS = (("python", "lock_file"), ("pip", "requirements_file"))


def _read(path):
    with open(path, "rb") as f:
        return to_text(f.read(), errors="surrogate_or_strict")


def side_file_names(text):
    """The side files a manifest names (relative paths as written), or [] when it
    does not parse: tfprov then reports the manifest itself, with its position."""
    if yaml is None:
        return []
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError:
        return []
    names = []
    if not isinstance(doc, dict):
        return names
    for section, key in SIDE_KEYS:
        sec = doc.get(section)
        if isinstance(sec, dict) and isinstance(sec.get(key), str):
            names.append(sec[key])
    return names


def safe_relative(name):
    """A side file must stay inside the manifest's directory (manifests/SCHEMA.md)."""
    parts = name.replace("\\", "/").split("/")
    return not os.path.isabs(name) and ".." not in parts and name.strip() != ""


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
            args["content"] = _read(path)
            sig = path + ".minisig"
            args["signature"] = _read(sig) if os.path.isfile(sig) else None
            side = {}
            base = os.path.dirname(os.path.abspath(path))
            for name in side_file_names(args["content"]):
                if not safe_relative(name):
                    raise AnsibleActionFail(
                        "src %s: side file %s is not inside the manifest's directory "
                        "(tfprov refuses it too: schema.side-file)" % (src, name))
                full = os.path.join(base, name)
                if not os.path.isfile(full):
                    raise AnsibleActionFail("src %s: its side file %s does not exist on the "
                                            "controller (%s)" % (src, name, full))
                side[name] = _read(full)
            args["side_files"] = side
        result.update(self._execute_module(module_name="tfprov.gpu.stack", module_args=args,
                                           task_vars=task_vars))
        return result
