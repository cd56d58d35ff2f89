#!/usr/bin/env bash
# bench/noop_100k.sh - no-op `tfprov apply` and `tfprov status` on a stack of
# 100,000 recorded files, beside `find -printf '%s %T@\n'` over the same tree
# (one walk, one stat per file: the floor for a size+mtime check).
#
# The stack: an env-only manifest applied by tfprov, then N files created under
# <root>/opt/tfprov/big/ in the shape of a large site-packages (250 files per
# directory, 1-4 KiB) and one row per file INSERTed into the state db's `files`
# table (as bench/noop_apply.sh does for 10k). The script checks that apply
# says "No changes" and that status exits 0 before timing anything.
#
# Usage: bench/noop_100k.sh [N_FILES]   (default 100000)
#   TFPROV_BIN=path   the binary (default: build/tfprov)
#   RUNS=10 WARMUP=2  hyperfine runs per command
# Prints the load average before and after: on a shared machine the ratios
# (same invocation, same cache state) are what to compare, not the times.
# The tree is created once in a fresh directory and deleted at the end (trap 1
# in bench/README.md: nothing is created after the deletion).
set -euo pipefail
N=${1:-100000}
RUNS=${RUNS:-10}
WARMUP=${WARMUP:-2}
REPO=$(cd "$(dirname "$0")/.." && pwd)
TFPROV_BIN=${TFPROV_BIN:-$REPO/build/tfprov}
PY=/usr/bin/python3
command -v hyperfine >/dev/null || { echo "hyperfine missing (scripts/install-deps.sh)"; exit 1; }
WORK=$(mktemp -d /tmp/tfprov-noop100k.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
ROOT="$WORK/root"
mkdir -p "$ROOT"
"$PY" "$REPO/bench/recorded_tree.py" --manifest >"$WORK/m.yaml"
"$TFPROV_BIN" --root "$ROOT" -q apply -y "$WORK/m.yaml" >/dev/null 2>&1
"$PY" "$REPO/bench/recorded_tree.py" "$ROOT" "$N"
out=$("$TFPROV_BIN" --root "$ROOT" apply "$WORK/m.yaml" 2>&1)
grep -q "No changes" <<<"$out" || { echo "not a no-op:"; echo "$out"; exit 1; }
"$TFPROV_BIN" --root "$ROOT" -q status >/dev/null 2>&1 || { echo "status failed"; exit 1; }
recorded=$("$PY" -c "import sqlite3,sys;print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM files').fetchone()[0])" "$ROOT/var/lib/tfprov/state.db")
stats() { # hyperfine JSON -> "median-wall min max mean-cpu(user+sys)" in ms
	"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; t=sorted(r["times"]); print("%.1f %.1f %.1f %.1f" % (r["median"]*1e3, t[0]*1e3, t[-1]*1e3, (r["user"]+r["system"])*1e3))' "$1"
}
echo "load before: $(cat /proc/loadavg)"
# Interleaved: find, apply, status, three times over, so drift hits all alike.
declare -A MED CPU
for round in 1 2 3; do
	for who in find apply status; do
		case $who in
		find) cmd="find $ROOT/opt/tfprov/big -type f -printf '%s %T@\n'" ;;
		apply) cmd="$TFPROV_BIN --root $ROOT -q apply $WORK/m.yaml" ;;
		status) cmd="$TFPROV_BIN --root $ROOT -q status" ;;
		esac
		hyperfine -N -i -w "$WARMUP" -r "$RUNS" --export-json "$WORK/$who.$round.json" "$cmd" >/dev/null 2>&1
		read -r med _ _ cpu < <(stats "$WORK/$who.$round.json")
		MED[$who.$round]=$med
		CPU[$who.$round]=$cpu
	done
done
echo "load after: $(cat /proc/loadavg)"
echo "no-op at $recorded recorded files ($(nproc) cores, $(uname -r), $TFPROV_BIN)"
printf "| round | find -printf | tfprov apply (no-op) | tfprov status | apply / find | status / find | CPU: find / apply / status | CPU apply / find | CPU status / find |\n|---|---|---|---|---|---|---|---|---|\n"
for round in 1 2 3; do
	f=${MED[find.$round]} a=${MED[apply.$round]} s=${MED[status.$round]}
	cf=${CPU[find.$round]} ca=${CPU[apply.$round]} cs=${CPU[status.$round]}
	printf "| %d | %.0f ms | %.0f ms | %.0f ms | %.2f | %.2f | %.0f / %.0f / %.0f ms | %.2f | %.2f |\n" \
		"$round" "$f" "$a" "$s" "$(echo "$a/$f" | bc -l)" "$(echo "$s/$f" | bc -l)" \
		"$cf" "$ca" "$cs" "$(echo "$ca/$cf" | bc -l)" "$(echo "$cs/$cf" | bc -l)"
done
echo "(wall: medians of $RUNS runs after $WARMUP warm-up per cell; CPU: mean user+sys of those runs,"
echo " less distorted by other jobs than wall time; target: apply and status <= 2x find)"
