#!/bin/sh
# Install what tfprov needs to build and test on Debian 12, idempotently.
# Only Debian packages; nothing is fetched from anywhere else.
set -eu

PKGS="build-essential cmake pkg-config clang-format
libyaml-dev libcurl4-openssl-dev libarchive-dev libssl-dev libsqlite3-dev
libjansson-dev libzstd-dev liblzma-dev libcmocka-dev
python3 python3-venv python3-pip python3-pytest python3-wheel python3-setuptools python3-yaml
curl xz-utils zstd bzip2 gzip zip unzip sqlite3 openssl ansible-core hyperfine"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing="$missing $p"
	fi
done

if [ -n "$missing" ]; then
	echo "install-deps: installing:$missing"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq || true
	# shellcheck disable=SC2086
	apt-get install -y -qq --no-install-recommends $missing
fi
