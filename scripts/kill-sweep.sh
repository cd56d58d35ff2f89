#!/bin/sh
# The long kill -9 sweep of a pip-installer switch (tests/system/test_wheel_kill.py,
# issue 28): both switches (A->B, B->A) of a venv whose lock is installed by pip,
# each killed at POINTS crash points of its own operations (lib_killpoint.py;
# spread over tfprov before pip, pip's own process, tfprov after it), or at
# every point with "all"; after each kill, recovery must leave the env byte for
# byte as it was or exactly the target. MODULES sizes the big test package
# (the suite's default is 200; fewer modules, fewer points inside pip).
# POINTS is N (spread), "all", or "python+N" (every point inside pip, N more).
# Usage: scripts/kill-sweep.sh [POINTS] [MODULES] [SEED]   (default python+200 20 random)
set -eu
cd "$(dirname "$0")/.."
POINTS=${1:-python+200}
MODULES=${2:-20}
if [ ! -x build/tfprov ]; then
	cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build build -j"$(nproc)"
fi
export TFPROV_BIN="${TFPROV_BIN:-$PWD/build/tfprov}" TFPROV_KILL_SAMPLE="$POINTS" TFPROV_KILL_MODULES="$MODULES"
export TFPROV_KILL_CONVERGE_EVERY="${TFPROV_KILL_CONVERGE_EVERY:-10}"
[ $# -ge 3 ] && export TFPROV_KILL_SEED="$3"
exec /usr/bin/python3 -m pytest -q -s -p no:cacheprovider \
	"tests/system/test_wheel_kill.py::test_kill_9_during_install[pip]"
