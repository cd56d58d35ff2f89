# -*- coding: utf-8 -*-
# Copyright: (c) 2026, tfprov maintainers
# MIT License (see LICENSE or https://opensource.org/licenses/MIT)
"""Filters for report.yml: one row per host and stack from ansible_facts.tfprov,
the fleet median of each benchmark, and the Markdown table."""
from __future__ import absolute_import, division, print_function

__metaclass__ = type

import statistics


def _bench(stack, precisions):
    """ms/step for one precision, TensorFlow's run preferred over the native probe."""
    best = None
    for key, b in (stack.get("bench") or {}).items():
        if b.get("precision") not in precisions or b.get("ms_per_step") is None:
            continue
        if best is None or (b.get("source") == "tensorflow" and best[0] != "tensorflow"):
            best = (b.get("source"), b["ms_per_step"])
    return best[1] if best else None


def fleet_rows(hosts, hostvars, margin=25):
    """Rows of the report; a host is flagged when a bench is more than margin
    percent slower (more ms/step) than the fleet median for that precision."""
    rows = []
    for h in hosts:
        f = ((hostvars.get(h) or {}).get("ansible_facts") or {}).get("tfprov")
        if f is None:
            rows.append(dict(host=h, stack=None, reachable=False, flagged=False, flags=[]))
            continue
        gpus = f.get("gpus") or []
        gpu = ", ".join("%s (%s)" % (g["name"], g["compute_capability"]) for g in gpus) or None
        stacks = f.get("stacks") or {}
        for name in sorted(stacks) or [None]:
            s = stacks.get(name) or {}
            cur = [g for g in s.get("generations", []) if g["number"] == s.get("generation")]
            rows.append(dict(
                host=h, stack=name, reachable=True, generation=s.get("generation"),
                result=cur[0]["result"] if cur else None, driver=f.get("driver"), gpu=gpu,
                fp32_ms=_bench(s, ("fp32",)), fp16_ms=_bench(s, ("fp16", "mixed_float16")),
                drift=f.get("drift"), flagged=False, flags=[]))
    for col in ("fp32_ms", "fp16_ms"):
        for stack in {r["stack"] for r in rows}:
            vals = [r[col] for r in rows if r["stack"] == stack and r.get(col) is not None]
            if not vals:
                continue
            med = statistics.median(vals)
            for r in rows:
                if r["stack"] == stack and r.get(col) is not None:
                    r[col + "_median"] = med
                    if r[col] > med * (1 + float(margin) / 100):
                        r["flagged"] = True
                        r["flags"].append("%s %.3f ms/step is %.0f%% slower than the fleet median "
                                          "%.3f" % (col[:4], r[col], (r[col] / med - 1) * 100,
                                                    med))
    return rows


def _cell(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.3f" % v
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v).replace("|", "\\|")


def fleet_markdown(rows):
    cols = [("host", "host"), ("stack", "stack"), ("generation", "gen"), ("result", "verify"),
            ("drift", "drift"), ("driver", "driver"), ("gpu", "GPU"),
            ("fp32_ms", "FP32 ms/step"), ("fp16_ms", "FP16 ms/step"), ("flags", "flag")]
    out = ["# tfprov fleet report", "",
           "| " + " | ".join(c[1] for c in cols) + " |",
           "|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for key, _ in cols:
            if key == "flags":
                cells.append("**SLOW**: " + "; ".join(r["flags"]) if r.get("flagged") else "")
            elif key == "stack" and not r.get("reachable", True):
                cells.append("unreachable")
            else:
                cells.append(_cell(r.get(key)))
        out.append("| " + " | ".join(cells) + " |")
    flagged = [r["host"] for r in rows if r.get("flagged")]
    out += ["", "%d host(s), %d flagged%s" % (len({r["host"] for r in rows}), len(flagged),
                                              (": " + ", ".join(flagged)) if flagged else ""), ""]
    return "\n".join(out)


class FilterModule(object):
    def filters(self):
        return {"fleet_rows": fleet_rows, "fleet_markdown": fleet_markdown}
