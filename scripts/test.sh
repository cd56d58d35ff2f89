#!/bin/sh
# README command 2 (and the only thing .ci/run calls): install what is
# missing, build, and pass every test: once normally, once under
# AddressSanitizer + UndefinedBehaviorSanitizer, the clang-format check, and
# a bounded libFuzzer run of the manifest parser and the unpack path.
set -eu
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
JOBS=$(nproc)

cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$JOBS"
cmake --build build --target check-format
(cd build && ctest --output-on-failure -j"$JOBS" --timeout 900)

if [ "${TFPROV_SKIP_SANITIZE:-0}" != 1 ]; then
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTFPROV_SANITIZE=ON >/dev/null
	cmake --build build-asan -j"$JOBS"
	# Child processes (pip's python) must not inherit the ASan runtime.
	(cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
		UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
		ctest --output-on-failure -j"$JOBS" --timeout 1800)
fi
# libFuzzer (clang, ASan+UBSan) on the manifest parser and the unpack path,
# bounded: TFPROV_FUZZ_SECONDS per target (default 60).
if [ "${TFPROV_SKIP_FUZZ:-0}" != 1 ]; then
	./tests/fuzz/run.sh
fi
echo "tfprov: all tests passed"
