#!/bin/sh
# A clean Debian 12 (bookworm) root for the package lifecycle test
# (tests/system/test_deb_lifecycle.py), cached as one tarball:
#   make-bookworm-root.sh OUT.tar.zst [DEB]
# debootstrap --variant=minbase from Debian's archive, apt sources as a fresh
# install has them (bookworm, bookworm-updates, bookworm-security), `apt-get
# update` done; with DEB, the packages it depends on are downloaded into the
# root's apt cache (not installed), so the test's `apt-get install ./DEB`
# installs them as on a clean machine without fetching them every run.
# The tarball is written to OUT.tar.zst.tmp and renamed: an interrupted run
# leaves no half cache. Needs root, debootstrap, zstd.
set -eu
out=$1
deb=${2:-}
mirror=${TFPROV_DEBIAN_MIRROR:-http://deb.debian.org/debian}
work=$(mktemp -d /var/tmp/tfprov-bookworm.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
root="$work/root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 || {
	tail -n 20 "$work/debootstrap.log" >&2
	exit 1
}
cat >"$root/etc/apt/sources.list" <<SRC
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb ${mirror%/debian}/debian-security bookworm-security main
SRC
cp /etc/resolv.conf "$root/etc/resolv.conf"
in_root() {
	unshare -m --propagation private sh -c \
		'mount -t proc proc "$0/proc" && mount --rbind /dev "$0/dev" && exec chroot "$0" "$@"' \
		"$root" "$@"
}
in_root apt-get update -qq
if [ -n "$deb" ]; then
	cp "$deb" "$root/tmp/"
	in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --download-only \
		"/tmp/$(basename "$deb")" >/dev/null
	rm -f "$root/tmp/$(basename "$deb")"
fi
rm -f "$root/etc/resolv.conf"
tar -C "$root" --numeric-owner -cf - . | zstd -q -T0 -10 -o "$out.tmp"
mv "$out.tmp" "$out"
