#!/usr/bin/env bash
# bench/noop_apply.sh - a no-op `tfprov apply` on a stack with 10,000 recorded
# files (whole process, warm), side by side with Ansible making the same
# size+mtime checks on the same files, and a bare `find -printf` floor.
#
# How the 10k-file stack is made: the cuda step (fetch + unpack) has not landed,
# so the script applies a small env-only stack with tfprov itself, then creates
# 10,000 files under <root>/opt/tfprov/bench/ and INSERTs one row per file into
# the state db's `files` table (path, sha256, size, mode, mtime_ns), owned by the
# stack's env resource. A no-op apply then stats all 10,001 recorded files.
#
# Usage: bench/noop_apply.sh [N_FILES]   (default 10000)
#   TFPROV_BIN=path   use this binary (default: a Release build in build-bench/)
#   RUNS=20           measured runs per tool (>= 10); WARMUP=3
#   ANSIBLE_RUNS=5    measured Ansible runs
#   ANSIBLE_STAT_LOOP=1  also time one run of the per-file `stat` loop (slow: minutes)
# Reads limits.md's traps: files are created once in a fresh directory and never
# deleted during the measurement (trap 1); warm-up runs are discarded (trap 2);
# medians are reported (trap 3).
set -euo pipefail

N=${1:-10000}
RUNS=${RUNS:-20}
WARMUP=${WARMUP:-3}
ANSIBLE_RUNS=${ANSIBLE_RUNS:-5}
REPO=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3

if [[ -z "${TFPROV_BIN:-}" ]]; then
	cmake -S "$REPO" -B "$REPO/build-bench" -DCMAKE_BUILD_TYPE=Release -DTFPROV_TESTS=OFF >/dev/null
	cmake --build "$REPO/build-bench" --target tfprov -j2 >/dev/null
	TFPROV_BIN="$REPO/build-bench/tfprov"
fi
command -v hyperfine >/dev/null || { echo "hyperfine missing (scripts/install-deps.sh)"; exit 1; }
command -v ansible-playbook >/dev/null || { echo "ansible-playbook missing (scripts/install-deps.sh)"; exit 1; }

WORK=$(mktemp -d /tmp/tfprov-bench.XXXXXX)
ROOT="$WORK/root"
mkdir -p "$ROOT"
cat >"$WORK/m.yaml" <<'EOF'
schema: 1
stack:
  name: bench-10k
  platform: linux-x86_64
versions:
  tensorflow: 2.15.1
driver:
  policy: skip
env:
  vars:
    TF_CPP_MIN_LOG_LEVEL: "1"
EOF

"$TFPROV_BIN" --root "$ROOT" -q apply -y "$WORK/m.yaml" >/dev/null 2>&1

# 10k files, 6 levels deep like limits.md row 5a, 1-4 KiB each; rows in `files`.
"$PY" - "$ROOT" "$N" "$WORK" <<'EOF'
import hashlib, json, os, sqlite3, sys
root, n, work = sys.argv[1], int(sys.argv[2]), sys.argv[3]
db = sqlite3.connect(os.path.join(root, "var/lib/tfprov/state.db"))
rid = db.execute("SELECT r.id FROM resources r JOIN stacks s ON s.id = r.stack_id "
                 "WHERE s.name = 'bench-10k' AND r.addr = 'env'").fetchone()[0]
rows, sizes, mtimes = [], {}, {}
for i in range(n):
    rel = "/opt/tfprov/bench/%02d/%02d/%02d/%02d/f%05d.so" % (
        i % 7, i // 7 % 11, i // 77 % 13, i // 1001 % 10, i)
    host = root + rel
    os.makedirs(os.path.dirname(host), exist_ok=True)
    data = (b"%d\n" % i) * (256 + i % 768)
    with open(host, "wb") as f:
        f.write(data)
    st = os.stat(host)
    rows.append((rel, rid, "f", hashlib.sha256(data).hexdigest(), st.st_size, 0o644,
                 st.st_mtime_ns))
    sizes[host] = st.st_size
    mtimes[host] = st.st_mtime
    os.chmod(host, 0o644)
with db:
    db.executemany("INSERT INTO files(path, resource_id, type, sha256, size, mode, mtime_ns) "
                   "VALUES (?,?,?,?,?,?,?)", rows)
db.close()
# What Ansible compares against: the same recorded sizes and mtimes.
json.dump({"expected_sizes": sizes, "expected_mtimes": mtimes},
          open(os.path.join(work, "expected.json"), "w"))
with open(os.path.join(work, "paths.txt"), "w") as f:
    f.write("\n".join(sizes) + "\n")
EOF

# Sanity: the stack really is a no-op with N+1 recorded files, and verify agrees.
out=$("$TFPROV_BIN" --root "$ROOT" apply "$WORK/m.yaml" 2>/dev/null)
grep -q "No changes" <<<"$out" || { echo "not a no-op:"; echo "$out"; exit 1; }
recorded=$(sqlite3 "$ROOT/var/lib/tfprov/state.db" "SELECT count(*) FROM files" 2>/dev/null ||
	"$PY" -c "import sqlite3,sys;print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM files').fetchone()[0])" "$ROOT/var/lib/tfprov/state.db")
"$TFPROV_BIN" --root "$ROOT" verify >/dev/null 2>&1 || { echo "verify failed"; exit 1; }

stats() { # hyperfine JSON -> "median min max" in ms
	"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; t=sorted(r["times"]); print("%.1f %.1f %.1f" % (r["median"]*1e3, t[0]*1e3, t[-1]*1e3))' "$1"
}

hyperfine -N -w "$WARMUP" -r "$RUNS" --export-json "$WORK/tfprov.json" \
	"$TFPROV_BIN --root $ROOT -q apply $WORK/m.yaml" >/dev/null 2>&1
read -r T_MED T_MIN T_MAX < <(stats "$WORK/tfprov.json")

hyperfine -N -w "$WARMUP" -r "$RUNS" --export-json "$WORK/find.json" \
	"find $ROOT/opt/tfprov/bench -type f -printf '%s %T@\n'" >/dev/null 2>&1
read -r F_MED F_MIN F_MAX < <(stats "$WORK/find.json")

# Ansible: one `find` module call over the tree (size + mtime of every file, no
# checksums), then one assert that sizes and mtimes equal the recorded ones --
# the cheapest way Ansible can make the same per-file check.
cat >"$WORK/play.yml" <<EOF
- hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [ "$WORK/expected.json" ]
  tasks:
    - ansible.builtin.find:
        paths: "$ROOT/opt/tfprov/bench"
        recurse: true
        file_type: file
        get_checksum: false
      register: found
    - ansible.builtin.assert:
        that:
          - (found.files | items2dict(key_name='path', value_name='size')) == expected_sizes
          - (found.files | items2dict(key_name='path', value_name='mtime')) == expected_mtimes
        quiet: true
EOF
export ANSIBLE_LOCALHOST_WARNING=False ANSIBLE_INVENTORY_UNPARSED_WARNING=False
ansible-playbook -i localhost, "$WORK/play.yml" >"$WORK/ansible.out" 2>&1 ||
	{ echo "the Ansible play failed:"; cat "$WORK/ansible.out"; exit 1; }
hyperfine -N -w 1 -r "$ANSIBLE_RUNS" --export-json "$WORK/ansible.json" \
	"ansible-playbook -i localhost, $WORK/play.yml" >/dev/null 2>&1
read -r A_MED A_MIN A_MAX < <(stats "$WORK/ansible.json")

echo "no-op apply, synthetic tree: $recorded recorded files, one file per 4-deep directory (rows INSERTed into files)"
echo "  machine: $(nproc) cores, $(uname -r); binary: $TFPROV_BIN"
printf "  %-44s median %8.1f ms  min %8.1f  max %8.1f  (%d runs, %d warm-up)\n" \
	"tfprov apply (whole process)" "$T_MED" "$T_MIN" "$T_MAX" "$RUNS" "$WARMUP"
printf "  %-44s median %8.3f s   min %8.3f  max %8.3f  (%d runs)\n" \
	"ansible-playbook find+assert (size, mtime)" \
	"$(echo "$A_MED/1000" | bc -l)" "$(echo "$A_MIN/1000" | bc -l)" "$(echo "$A_MAX/1000" | bc -l)" "$ANSIBLE_RUNS"
printf "  %-44s median %8.1f ms  min %8.1f  max %8.1f\n" "floor: find -printf '%s %T@' (one walk)" "$F_MED" "$F_MIN" "$F_MAX"
printf "  ratio ansible/tfprov: %.1fx   target: tfprov <= 30 ms and >= 30x\n" "$(echo "$A_MED/$T_MED" | bc -l)"

if [[ "${ANSIBLE_STAT_LOOP:-0}" == 1 ]]; then
	cat >"$WORK/loop.yml" <<EOF
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.stat: { path: "{{ item }}", get_checksum: false }
      loop: "{{ lookup('file', '$WORK/paths.txt').splitlines() }}"
EOF
	t0=$(date +%s%N)
	ansible-playbook -i localhost, "$WORK/loop.yml" >/dev/null 2>&1
	t1=$(date +%s%N)
	printf "  %-44s one run  %8.1f s\n" "ansible-playbook stat loop (one per file)" \
		"$(echo "($t1-$t0)/1000000000" | bc -l)"
fi
# Second case: a real CUDA-layout stack installed by the engine itself
# (fetch + verify + unpack + place from a loopback mirror), 10k filler headers
# in NVIDIA's include/ layout plus the CUDA/cuDNN libraries: files sit by the
# hundred in a few directories, as in a real toolkit.
MIR="$WORK/mirror"
mkdir -p "$MIR"
"$PY" "$REPO/tests/system/lib_http.py" --dir "$MIR" --port-file "$WORK/port" >/dev/null 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null || true' EXIT
for _ in $(seq 50); do [[ -s "$WORK/port" ]] && break; sleep 0.1; done
STUBS="${TFPROV_STUBS:-$(dirname "$TFPROV_BIN")/stubs/cuda12}"
[[ -d "$STUBS" ]] || STUBS="$REPO/build/stubs/cuda12"
"$PY" "$REPO/tests/fixtures/make_stack.py" --stubs "$STUBS" --cuda 12.3.2 --cudnn 8.9.7.29 \
	--out "$MIR" --url-base "http://127.0.0.1:$(cat "$WORK/port")" --manifest "$WORK/cuda.yaml" \
	--name bench-cuda --driver-policy skip --extra-files "$N" >/dev/null
ROOT2="$WORK/root2"
"$TFPROV_BIN" --root "$ROOT2" -q apply -y "$WORK/cuda.yaml" >/dev/null 2>&1
out=$("$TFPROV_BIN" --root "$ROOT2" apply "$WORK/cuda.yaml" 2>/dev/null)
grep -q "No changes" <<<"$out" || { echo "cuda stack is not a no-op:"; echo "$out"; exit 1; }
rec2=$("$PY" -c "import sqlite3,sys;print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM files').fetchone()[0])" "$ROOT2/var/lib/tfprov/state.db")
hyperfine -N -w "$WARMUP" -r "$RUNS" --export-json "$WORK/tfprov2.json" \
	"$TFPROV_BIN --root $ROOT2 -q apply $WORK/cuda.yaml" >/dev/null 2>&1
read -r C_MED C_MIN C_MAX < <(stats "$WORK/tfprov2.json")
hyperfine -N -w "$WARMUP" -r "$RUNS" --export-json "$WORK/find2.json" \
	"find $ROOT2/opt -printf '%s %T@\n'" >/dev/null 2>&1
read -r G_MED G_MIN G_MAX < <(stats "$WORK/find2.json")
echo "no-op apply, CUDA-layout stack installed by tfprov: $rec2 recorded files"
printf "  %-44s median %8.1f ms  min %8.1f  max %8.1f  (%d runs, %d warm-up)\n" \
	"tfprov apply (whole process)" "$C_MED" "$C_MIN" "$C_MAX" "$RUNS" "$WARMUP"
printf "  %-44s median %8.1f ms  min %8.1f  max %8.1f\n" "floor: find -printf over the same tree" \
	"$G_MED" "$G_MIN" "$G_MAX"
printf "  ratio ansible(synthetic, 10k files)/tfprov: %.1fx\n" "$(echo "$A_MED/$C_MED" | bc -l)"
echo "  work dir (kept for inspection): $WORK"
