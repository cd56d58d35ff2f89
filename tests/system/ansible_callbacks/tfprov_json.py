# -*- coding: utf-8 -*-
"""A stdout callback for the fleet tests: one JSON document at the end with
every task result per host and the play stats (ansible-core ships no json
callback). Shape: {"plays": [{"tasks": [{"task": {"name"}, "hosts": {h: res}}]}],
"stats": {h: {...}}}."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: tfprov_json
type: stdout
short_description: JSON results for the tfprov fleet tests
description: Prints every task result per host and the stats as one JSON document.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "tfprov_json"

    def __init__(self):
        super(CallbackModule, self).__init__()
        self.plays = []

    def v2_playbook_on_play_start(self, play):
        self.plays.append({"play": {"name": play.get_name()}, "tasks": []})

    def v2_playbook_on_task_start(self, task, is_conditional):
        if not self.plays:
            self.plays.append({"play": {"name": ""}, "tasks": []})
        self.plays[-1]["tasks"].append({"task": {"name": task.get_name()}, "hosts": {}})

    def v2_playbook_on_handler_task_start(self, task):
        self.v2_playbook_on_task_start(task, False)

    def _record(self, result, **extra):
        r = dict(result._result)
        r.update(extra)
        name = result._task.get_name()
        tasks = self.plays[-1]["tasks"] if self.plays else []
        for t in reversed(tasks):
            if t["task"]["name"] == name:
                t["hosts"][result._host.get_name()] = r
                return
        tasks.append({"task": {"name": name}, "hosts": {result._host.get_name(): r}})

    def v2_runner_on_ok(self, result, **kw):
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors=False, **kw):
        self._record(result, failed=True)

    def v2_runner_on_skipped(self, result, **kw):
        self._record(result, skipped=True)

    def v2_runner_on_unreachable(self, result, **kw):
        self._record(result, unreachable=True)

    def v2_playbook_on_stats(self, stats):
        out = {h: stats.summarize(h) for h in sorted(stats.processed.keys())}
        self._display.display(json.dumps({"plays": self.plays, "stats": out},
                                          default=str, sort_keys=True))
