#!/bin/sh
# Builds the Debian package tfprov_<version>_amd64.deb into OUTDIR (default
# ./dist) from a release build with Debian's hardening flags (dpkg-buildflags),
# installed under /usr, then runs lintian on it (tags printed, not fatal).
#   TFPROV_MAINTAINER="Name <mail>" sets the package's Maintainer field.
set -eu
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
cd "$(dirname "$0")/.."
OUT=$(realpath -m "${1:-dist}")
B=${TFPROV_DEB_BUILD_DIR:-build-deb}
# _FORTIFY_SOURCE adds warn_unused_result to calls the engine makes best
# effort on purpose; reported as warnings, not build failures.
CFLAGS="$(dpkg-buildflags --get CFLAGS) -Wno-error=unused-result"
CPPFLAGS=$(dpkg-buildflags --get CPPFLAGS)
LDFLAGS=$(dpkg-buildflags --get LDFLAGS)
set -- -DCMAKE_BUILD_TYPE=None -DCMAKE_INSTALL_PREFIX=/usr -DTFPROV_TESTS=OFF \
	-DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON \
	"-DCMAKE_C_FLAGS=$CFLAGS $CPPFLAGS" "-DCMAKE_EXE_LINKER_FLAGS=$LDFLAGS"
if [ -n "${TFPROV_MAINTAINER:-}" ]; then
	set -- "$@" "-DTFPROV_MAINTAINER=$TFPROV_MAINTAINER"
fi
cmake -S . -B "$B" "$@" >/dev/null
cmake --build "$B" -j"$(nproc)" --target tfprov tfprov_docs
mkdir -p "$OUT"
(cd "$B" && cpack -G DEB -B "$OUT" >/dev/null)
rm -rf "$OUT/_CPack_Packages"
deb=$(ls "$OUT"/tfprov_*_amd64.deb)
echo "build-deb: $deb"
if command -v lintian >/dev/null; then
	lintian -I --pedantic "$deb" || true
fi
