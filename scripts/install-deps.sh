#!/bin/sh
# Install what tfprov needs to build and test on Debian 12, idempotently.
# Only Debian packages; nothing is fetched from anywhere else.
set -eu

# openssh-server and nginx: the fleet test starts its own sshd and nginx on
# 127.0.0.x (the packages' own services are not used); strace: the fleet test
# holds tfprov at a syscall so that its kill -9 lands during placement;
# lintian: scripts/build-deb.sh. ansible-lint, python3-voluptuous, pycodestyle:
# Ansible's own checks of the collection, offline (scripts/ansible-sanity.sh);
# debootstrap: the package's install/purge test in a clean bookworm root.
# fuse3 and python3-fusepy: the power-loss harness (tests/system/lib_lazyfs.py,
# test_power_loss.py) mounts a FUSE filesystem that drops every write not made
# durable.
# zsh and fish: test_stack_env.py evals `tfprov env --shell zsh|fish` in them.
# python3-jsonschema: test_sbom.py validates `tfprov sbom` against the CycloneDX
# 1.6 schema (tests/fixtures/cyclonedx), offline.
PKGS="ansible-lint python3-voluptuous pycodestyle debootstrap
build-essential cmake pkg-config clang-format
libyaml-dev libcurl4-openssl-dev libarchive-dev libssl-dev libsqlite3-dev
libjansson-dev libzstd-dev liblzma-dev libcmocka-dev libzip-dev libdeflate-dev
python3 python3-venv python3-pip python3-pytest python3-wheel python3-setuptools python3-yaml
python3-setuptools-whl python3-wheel-whl
curl xz-utils zstd bzip2 gzip zip unzip sqlite3 openssl ansible-core hyperfine tmux
openssh-server openssh-client nginx strace lintian dpkg-dev fakeroot
clang libclang-rt-14-dev minisign fuse3 python3-fusepy zsh fish python3-jsonschema"

# skopeo and oci-image-tool: test_image.py reads and validates the OCI images
# `tfprov image build` writes. podman and runc: test_image_podman.py loads one
# and runs it (runc: crun fails on these machines with "cgroups in hybrid mode
# not supported").
PKGS="$PKGS skopeo oci-image-tool podman runc"

# debootstrap and rpm (rpmbuild): scripts/build-release.sh and its test
# (the Debian 11 build root, the Debian 11/13 test roots, the .rpm).
PKGS="$PKGS debootstrap rpm"

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

# Real NVIDIA libraries from Debian's non-free archive, for the GPU tests
# (tests/system/test_gpu_*.py): NVML of driver 535 and the CUDA 11.8 runtime
# and cuBLAS. Without a GPU they fail as users' machines do (nvmlInit_v2 = 9,
# cudaGetDeviceCount = 35). Debian 12 only; a separate deb822 file adds the
# contrib/non-free components next to the system's debian.sources. Failure
# here is not fatal: those tests skip, saying why.
NV_PKGS="libnvidia-ml1 libcudart11.0 libcublas11 libcublaslt11"
NV_SOURCES=/etc/apt/sources.list.d/tfprov-nonfree.sources
if [ -r /etc/os-release ] && . /etc/os-release && [ "${VERSION_CODENAME:-}" = bookworm ]; then
	nv_missing=""
	for p in $NV_PKGS; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
			nv_missing="$nv_missing $p"
		fi
	done
	if [ -n "$nv_missing" ]; then
		if [ ! -e "$NV_SOURCES" ]; then
			uri=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
			cat >"$NV_SOURCES" <<SRC
Types: deb
URIs: ${uri:-http://deb.debian.org/debian}
Suites: bookworm bookworm-updates
Components: contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
		fi
		echo "install-deps: installing NVIDIA non-free libraries:$nv_missing"
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq || true
		# shellcheck disable=SC2086
		apt-get install -y -qq --no-install-recommends $nv_missing ||
			echo "install-deps: warning: NVIDIA non-free libraries not installed; GPU tests will skip them" >&2
	fi
fi
