#!/usr/bin/env bash
# bench/run_cost.sh - what `tfprov run` and `eval "$(tfprov env)"` cost, side
# by side with the command alone: `tfprov run STACK -- true` against `true`,
# and a shell that evals `tfprov env STACK` against the same shell doing
# nothing (hyperfine, medians). `run` stands before every command a user
# runs; the goal is at most 5 ms added.
#
# The stacks: an env-only stack applied by tfprov (a 12-line manifest), and
# the same stack whose recorded generation holds the shipped
# manifests/stable-2.15.yaml's text (the size of a real lock: CUDA
# components, conda packages, pip pins), which `run` parses on every start.
# Both are in the root's state as an apply leaves them.
#
# Usage: bench/run_cost.sh
#   TFPROV_BIN=path   use this binary (default: a Release build in build-bench/)
#   RUNS=50 WARMUP=5  hyperfine's runs
# Follows bench/README.md "Measuring on this machine": warm-up runs discarded,
# medians reported, nothing else running.
set -euo pipefail

RUNS=${RUNS:-50}
WARMUP=${WARMUP:-5}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3

if [[ -z "${TFPROV_BIN:-}" ]]; then
	cmake -S "$REPO" -B "$REPO/build-bench" -DCMAKE_BUILD_TYPE=Release -DTFPROV_TESTS=OFF >/dev/null
	cmake --build "$REPO/build-bench" --target tfprov -j2 >/dev/null
	TFPROV_BIN="$REPO/build-bench/tfprov"
fi
command -v hyperfine >/dev/null || { echo "hyperfine missing (scripts/install-deps.sh)"; exit 1; }

WORK=$(mktemp -d /tmp/tfprov-runcost.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/root"
mkdir -p "$ROOT"
for name in small shipped; do
	cat >"$WORK/$name.yaml" <<EOF
schema: 1
stack:
  name: $name
  platform: linux-x86_64
versions:
  tensorflow: 2.15.1
driver:
  policy: skip
env:
  vars:
    TF_CPP_MIN_LOG_LEVEL: "1"
EOF
	"$TFPROV_BIN" --root "$ROOT" -q apply -y "$WORK/$name.yaml" >/dev/null 2>&1
done
# The second stack's generation records the shipped 2.15 manifest, as if applied.
"$PY" - "$ROOT" "$REPO/manifests/stable-2.15.yaml" <<'EOF'
import sqlite3, sys
root, path = sys.argv[1], sys.argv[2]
text = open(path).read()
db = sqlite3.connect(root + "/var/lib/tfprov/state.db")
with db:
    db.execute("UPDATE generations SET manifest_text = ? WHERE stack_id = "
               "(SELECT id FROM stacks WHERE name = 'shipped')", (text,))
print("recorded manifest of 'shipped': %d bytes, %d lines" % (len(text), text.count("\n")))
EOF
T="$TFPROV_BIN --root $ROOT"
$T run shipped -- true
$T run small -- true

echo "== tfprov run STACK -- true, against true"
hyperfine -N -w "$WARMUP" -r "$RUNS" --export-json "$WORK/run.json" \
	"true" "$T run small -- true" "$T run shipped -- true" "$T --version"
echo "== a shell that evals tfprov env STACK, against the shell alone"
hyperfine -N -w "$WARMUP" -r "$RUNS" --export-json "$WORK/env.json" \
	"sh -c :" "sh -c 'eval \"\$($T env small --shell sh)\"'" \
	"sh -c 'eval \"\$($T env shipped --shell sh)\"'"
"$PY" - "$TFPROV_BIN" "$ROOT" "$WORK/run.json" "$WORK/env.json" <<'EOF'
import json, statistics, sys
tfprov, root = sys.argv[1], sys.argv[2]
for f in sys.argv[3:]:
    rs = json.load(open(f))["results"]
    base = statistics.median(rs[0]["times"]) * 1e3
    print()
    print("| command | median | added | min | max |")
    print("|---|---|---|---|---|")
    for r in rs:
        med = statistics.median(r["times"]) * 1e3
        label = r["command"].replace(tfprov + " --root " + root, "tfprov")
        print("| `%s` | %.1f ms | %+.1f ms | %.1f ms | %.1f ms |" % (
            label, med, med - base, min(r["times"]) * 1e3, max(r["times"]) * 1e3))
EOF
