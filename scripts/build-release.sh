#!/bin/sh
# Builds the portable release into OUTDIR (default ./dist):
#   tfprov-VERSION-linux-x86_64.tar.gz  bin/tfprov and share/ (data beside it)
#   tfprov-VERSION-linux-x86_64.debug   the binary's debug information
#   tfprov-VERSION-1.x86_64.rpm         the same files under /usr (packaging/rpm/)
#   SHA256SUMS                          of the three
#
#   scripts/build-release.sh [OUTDIR]        (as root: debootstrap, chroot)
#
# Which systems: x86_64 Linux with glibc 2.31 or later. The binary is
# compiled inside a Debian 11 (bullseye) build root, the oldest release whose
# archive deb.debian.org still serves (buster's is gone), so it asks for no
# glibc symbol newer than bullseye's 2.31: Debian 11+, Ubuntu 20.04+ (2.31),
# RHEL/Rocky/Alma 9 (2.34), Fedora 32+; not RHEL 8 or Debian 10 (2.28), nor
# Ubuntu 18.04 (2.27). README.md "Portable binary" has the sources.
#
# What is linked in: nothing of bullseye's but glibc's own startup code
# (libc_nonshared.a) and gcc's libgcc: Debian 11's long-term support ended on
# 2026-08-31 (data/support-lines.tsv), so its libraries get no security
# updates. Every library is built here, static, from a Debian source package
# with Debian's patches applied:
#   - OpenSSL 3.5 LTS from Debian 13's (bullseye's 1.1.1 has had no upstream
#     support since 2023-09-11; see below);
#   - from Debian 12's (security support, LTS, to 2028-06-30), the newest
#     version of bookworm and bookworm-security (where LTS updates go) that
#     the mirror serves (tfprov-debsrc below): libcurl (HTTP and HTTPS over
#     that OpenSSL; bullseye's libcurl.a needs krb5, LDAP, RTMP, SSH, PSL and
#     IDN, which have no static builds, and its 7.74 lacks
#     CURLOPT_PROTOCOLS_STR), libarchive (bullseye's .a drags in libxml2 and
#     ICU), libzip, SQLite (the state store uses RETURNING, 3.35; bullseye
#     has 3.34), and the libraries tfprov, libcurl, libarchive and libzip use:
#     zlib, liblzma (xz-utils), libzstd, bzip2, lz4, libyaml, jansson and
#     libdeflate; each in as little a configuration as those need (no tools,
#     docs, NLS, shared libraries; zstd without its legacy formats).
# Each goes to /opt/PKG of the build root; curl, libarchive, libzip and
# tfprov find them there (pkg-config, CPPFLAGS/LDFLAGS), and the root has no
# -dev package of any of them, so nothing can fall back to bullseye's: the
# link's map is checked for archives from anywhere else. The binary's
# `--version --verbose` names each library with the version it reports at run
# time and the Debian source it was built from (gen/tfprov_libsources.h,
# cli/version.c), which scripts/check-eol.py judges (test_release.py).
# glibc stays dynamic: NVML and the CUDA libraries
# are dlopen()ed (engine/gpu/gpu_probe.c, engine/gpu/libcheck.c), which a static glibc
# cannot do reliably. HTTPS finds the host's CA bundle on Debian's, RHEL's,
# SUSE's and Alpine's paths (engine/artifact/private/cabundle.h).
#
# The build root, with the libraries built from source, is cached in
# $TFPROV_RELEASE_CACHE (default /var/cache/tfprov-release), one directory per
# hash of the package list and suites, so a second run only recompiles tfprov
# (about a minute). Runs sharing the cache take turns (flock).
# TFPROV_RELEASE_MIRROR and TFPROV_RELEASE_SECURITY_MIRROR override Debian's
# mirrors.
set -eu
cd "$(dirname "$0")/.."
SRC=$(pwd)
OUT=$(realpath -m "${1:-dist}")
CACHE=${TFPROV_RELEASE_CACHE:-/var/cache/tfprov-release}
MIRROR=${TFPROV_RELEASE_MIRROR:-http://deb.debian.org/debian}
SECURITY=${TFPROV_RELEASE_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
SUITE=bullseye
# Debian 12's source packages of every library but OpenSSL
# (https://packages.debian.org/source/bookworm/curl and so on), fetched with
# apt-get source from bookworm's and bookworm-security's signed Sources indexes.
SRC_SUITE=bookworm
# The build root's packages: tools only (compiler, glibc's headers, autotools,
# tclsh for SQLite's amalgamation, cmake for libzip, perl for OpenSSL's
# Configure). No library's -dev package: each library is built from source.
PKGS="gcc libc6-dev make pkg-config dpkg-dev xz-utils file autoconf automake libtool tcl
cmake perl"
NICE="nice -n 10"

need() { command -v "$1" >/dev/null || { echo "build-release: $1 not found (scripts/install-deps.sh)" >&2; exit 69; }; }
need debootstrap
need chroot
need rpmbuild
if [ "$(id -u)" != 0 ]; then
	echo "build-release: run as root (debootstrap and chroot)" >&2
	exit 77
fi

# v2: bullseye's -dev libraries dropped, everything built from source (a
# root cached before holds them and builds against them: not reused).
key=$(printf '%s\n' "$SUITE" "$PKGS" "$SRC_SUITE" "v2" | sha256sum | cut -c1-16)
ROOT=$CACHE/root-$SUITE-$key
mkdir -p "$CACHE"

# Serialises runs sharing the cache (the test suite and a manual build).
exec 9>"$CACHE/.lock"
flock 9

in_root() { chroot "$ROOT" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 "$@"; }

if [ ! -e "$ROOT/.tfprov-ready" ]; then
	echo "build-release: creating the $SUITE build root (once; cached in $ROOT)"
	if [ ! -e "$ROOT.tmp/.debootstrapped" ]; then
		rm -rf "$ROOT.tmp"
		$NICE debootstrap --variant=minbase "$SUITE" "$ROOT.tmp" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 ||
			{ tail -n 20 "$CACHE/debootstrap.log" >&2; exit 1; }
		touch "$ROOT.tmp/.debootstrapped"
	fi
	cat >"$ROOT.tmp/etc/apt/sources.list" <<SRCS
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
deb-src [signed-by=/etc/apt/bookworm-archive-keyring.gpg] $MIRROR $SRC_SUITE main
deb-src [signed-by=/etc/apt/bookworm-archive-keyring.gpg] $SECURITY $SRC_SUITE-security main
SRCS
	cp /usr/share/keyrings/debian-archive-keyring.gpg "$ROOT.tmp/etc/apt/bookworm-archive-keyring.gpg"
	cp /etc/resolv.conf "$ROOT.tmp/etc/resolv.conf"
	ROOT=$ROOT.tmp
	in_root apt-get update -qq
	# shellcheck disable=SC2086
	in_root sh -c "DEBIAN_FRONTEND=noninteractive $NICE apt-get install -y -qq --no-install-recommends $(echo $PKGS) && DEBIAN_FRONTEND=noninteractive apt-get -y -qq upgrade" >"$CACHE/apt.log" 2>&1 ||
		{ tail -n 20 "$CACHE/apt.log" >&2; exit 1; }
	ROOT=${ROOT%.tmp}
	mv "$ROOT.tmp" "$ROOT"
	touch "$ROOT/.tfprov-ready"
fi

# Packages added to the build after roots were first cached: installed on top
# of a cached root once (a marker per list), so adding one does not rebuild
# the root and its static libraries from nothing.
EXTRA_PKGS=""
extra=$(printf '%s\n' "$EXTRA_PKGS" | sha256sum | cut -c1-16)
if [ -n "$EXTRA_PKGS" ] && [ ! -e "$ROOT/.tfprov-extra-$extra" ]; then
	# shellcheck disable=SC2086
	in_root sh -c "DEBIAN_FRONTEND=noninteractive $NICE apt-get install -y -qq --no-install-recommends $(echo $EXTRA_PKGS)" >"$CACHE/apt-extra.log" 2>&1 ||
		{ in_root apt-get update -qq && in_root sh -c "DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(echo $EXTRA_PKGS)" >"$CACHE/apt-extra.log" 2>&1; } ||
		{ tail -n 20 "$CACHE/apt-extra.log" >&2; exit 1; }
	touch "$ROOT/.tfprov-extra-$extra"
fi

# tfprov-debsrc PKG SUITE, in the root: unpacks Debian's source of PKG into the
# current directory (dpkg-source applies Debian's patches), the newer of SUITE's
# and SUITE-security's versions: Debian LTS publishes its updates only to
# SUITE-security, and point releases, which fold them into SUITE, end with the
# regular support. A mirror may list a version before its pool has the files
# (deb.debian.org answered 404 for zlib's and libzstd's bookworm-security
# sources on 2026-12-07): the other suite's is taken then, and the build says
# so (a warning, and BUILT-WITH names the version it could not get).
mkdir -p "$ROOT/usr/local/bin"
cat >"$ROOT/usr/local/bin/tfprov-debsrc" <<'DEBSRC'
#!/bin/sh
set -u
pkg=$1 suite=$2
version() { # the version SUITE's index lists (the .dsc's name, without an epoch)
	apt-get source --print-uris -qq "$pkg/$1" 2>/dev/null |
		sed -n "s/^'[^']*' ${pkg}_\(.*\)\.dsc .*/\1/p" | head -n 1
}
sec=$(version "$suite-security")
rel=$(version "$suite")
if [ -n "$sec" ] && { [ -z "$rel" ] || dpkg --compare-versions "$sec" gt "$rel"; }; then
	order="$suite-security $suite"
else
	order="$suite $suite-security"
fi
for s in $order; do
	[ -n "$(version "$s")" ] || continue
	rm -rf "${pkg}"_* "$pkg"-*/
	if apt-get source -qq "$pkg/$s"; then
		echo "tfprov-debsrc: $pkg $(basename "${pkg}"_*.dsc .dsc | cut -d_ -f2) from $s"
		exit 0
	fi
	echo "tfprov-debsrc: $pkg/$s is not on the mirror; trying the other suite" >&2
	echo "$pkg $(version "$s") $s" >>tfprov-debsrc.skipped # named by build-release.sh
done
echo "tfprov-debsrc: no source of $pkg in $suite or $suite-security" >&2
exit 1
DEBSRC
chmod 755 "$ROOT/usr/local/bin/tfprov-debsrc"

# from_debsrc PKG "BUILD AND INSTALL": Debian 12's source of PKG (Debian's
# patches applied) unpacked in /build/PKG, built and installed into /opt/PKG by
# the commands given, run in the source tree; once (the cache keeps it).
# PKG may be PKG:DIR, built in /build/DIR into /opt/DIR.
from_debsrc() {
	pkg=${1%%:*}
	dir=${1#*:}
	[ -e "$ROOT/opt/$dir/.tfprov-ready" ] && return 0
	echo "build-release: building a static $pkg from Debian's $SRC_SUITE source (once)"
	t0=$(date +%s)
	in_root sh -ec "
		rm -rf /build/$dir /opt/$dir && mkdir -p /build/$dir && cd /build/$dir
		# A second build of a package (curl over another OpenSSL) unpacks the
		# source the first one fetched: the same version, no mirror needed.
		if [ $dir != $pkg ] && ls /build/$pkg/${pkg}_*.dsc >/dev/null 2>&1; then
			cp /build/$pkg/${pkg}_* . && dpkg-source -q -x ${pkg}_*.dsc >/dev/null
		else
			/usr/local/bin/tfprov-debsrc $pkg $SRC_SUITE
		fi
		cd $pkg-*/
		$2
		touch /opt/$dir/.tfprov-ready
	" >"$CACHE/$dir.log" 2>&1 || { tail -n 30 "$CACHE/$dir.log" >&2; exit 1; }
	echo "build-release: $pkg built in $(($(date +%s) - t0)) s" | tee -a "$CACHE/$dir.log"
	skipped "$dir" | while read -r p v s; do
		echo "build-release: warning: $s lists $p $v, which the mirror does not serve: built the older one" >&2
	done
}
# The newer versions tfprov-debsrc could not fetch for /build/DIR: "PKG VERSION SUITE" lines.
skipped() {
	cat "$ROOT/build/$1/tfprov-debsrc.skipped" 2>/dev/null || true
}

# from_source PKG "PREPARE" "BUILD AND INSTALL" CONFIGURE-ARGS...: from_debsrc
# for an autoconf package: prepared, configured static into /opt/PKG, then
# built and installed by the commands given.
from_source() {
	from_debsrc "$1" "$2
		$NICE ./configure -q --prefix=/opt/${1#*:} --disable-shared --enable-static $(shift 3; echo "$@")
		$3"
}

# The compression libraries libcurl, libarchive and libzip use, and the YAML,
# JSON and DEFLATE libraries tfprov calls; as their build systems want.
# zlib: its own configure script, not autoconf's.
from_debsrc zlib "CFLAGS='-O2 -g' $NICE ./configure --static --prefix=/opt/zlib >/dev/null
		$NICE make -s -j\$(nproc) libz.a >/dev/null
		make -s install >/dev/null"
# liblzma only (no xz, xzdec, lzmainfo, scripts, docs, translations). Debian's
# patches touch no build file: the shipped configure is used.
from_source xz-utils "" "$NICE make -s -j\$(nproc) -C src/liblzma >/dev/null
		make -s -C src/liblzma install >/dev/null" \
	--disable-xz --disable-xzdec --disable-lzmadec --disable-lzmainfo \
	--disable-lzma-links --disable-scripts --disable-doc --disable-nls
# libzstd.a alone (single-threaded, upstream's default for the static library),
# without the legacy (pre-v0.8, 2016) frame decoders no archive tfprov reads uses.
from_debsrc libzstd "$NICE make -s -j\$(nproc) -C lib libzstd.a ZSTD_LEGACY_SUPPORT=0 >/dev/null
		make -s -C lib install-static install-includes install-pc PREFIX=/opt/libzstd >/dev/null"
# libbz2.a with Debian's flags (debian/rules); bzip2 ships no .pc file: one is
# written so that pkg-config finds it like the others.
from_debsrc bzip2 "$NICE make -s -j\$(nproc) libbz2.a \
			CFLAGS='-Wall -Winline -O2 -g -D_REENTRANT -D_FILE_OFFSET_BITS=64' >/dev/null
		install -d /opt/bzip2/include /opt/bzip2/lib/pkgconfig
		install -m644 bzlib.h /opt/bzip2/include/
		install -m644 libbz2.a /opt/bzip2/lib/
		printf '%s\\n' 'prefix=/opt/bzip2' 'libdir=\${prefix}/lib' 'includedir=\${prefix}/include' '' \
			'Name: bzip2' 'Description: bzip2 compression library (static)' \
			\"Version: \${PWD##*/bzip2-}\" 'Libs: -L\${libdir} -lbz2' 'Cflags: -I\${includedir}' \
			>/opt/bzip2/lib/pkgconfig/bzip2.pc"
# liblz4.a and its headers (lib/Makefile's install target builds the shared
# library too).
from_debsrc lz4 "$NICE make -s -j\$(nproc) -C lib liblz4.a >/dev/null
		make -s -C lib liblz4.pc PREFIX=/opt/lz4 >/dev/null
		install -d /opt/lz4/include /opt/lz4/lib/pkgconfig
		install -m644 lib/liblz4.a /opt/lz4/lib/
		install -m644 lib/lz4.h lib/lz4hc.h lib/lz4frame.h /opt/lz4/include/
		install -m644 lib/liblz4.pc /opt/lz4/lib/pkgconfig/"
# libyaml and jansson: their tarballs have no configure; autoreconf as
# debian/rules does (dh_autoreconf). The library and its headers only.
from_source libyaml "autoreconf -fi" "$NICE make -s -j\$(nproc) -C include >/dev/null
		$NICE make -s -j\$(nproc) -C src >/dev/null
		make -s -C include install >/dev/null && make -s -C src install >/dev/null
		make -s install-pkgconfigDATA >/dev/null"
from_source jansson "autoreconf -fi" "$NICE make -s -j\$(nproc) -C src >/dev/null
		make -s -C src install >/dev/null && make -s install-pkgconfigDATA >/dev/null"
# libdeflate: upstream's Makefile (Debian's rules add a profile-guided pass,
# a speed-up only); its install also builds the two small gzip programs.
from_debsrc libdeflate "$NICE make -s -j\$(nproc) DISABLE_SHARED=1 PREFIX=/opt/libdeflate install >/dev/null"
# Where libcurl, libarchive and libzip find them.
DEPS="zlib xz-utils libzstd bzip2 lz4"
DEPS_CPPFLAGS=$(for d in $DEPS; do printf ' -I/opt/%s/include' "$d"; done)
DEPS_LDFLAGS=$(for d in $DEPS; do printf ' -L/opt/%s/lib' "$d"; done)

# OpenSSL 3.5 (LTS, supported to 2030-04-08: data/support-lines.tsv) from
# Debian 13's source package (https://packages.debian.org/source/trixie/openssl),
# Debian's patches applied: bullseye's 1.1.1 has had no upstream support since
# 2023-09-11. Built static and minimal, as much as libcurl's TLS client and
# tfprov's digests and signatures (EVP, Ed25519) need: no shared libraries,
# apps, tests, docs, loadable modules or legacy provider. OPENSSLDIR is
# Debian's (/usr/lib/ssl); tfprov finds the host's CA bundle itself. Installed
# in /opt/openssl, and libcurl over it in /opt/curl-openssl3 (a name from the
# time a 1.1.1 build sat beside it in /opt/curl).
TRIXIE_SRC=/etc/apt/sources.list.d/tfprov-trixie-src.list
if [ ! -e "$ROOT$TRIXIE_SRC" ]; then
	cp /usr/share/keyrings/debian-archive-keyring.gpg "$ROOT/etc/apt/trixie-archive-keyring.gpg"
	cat >"$ROOT$TRIXIE_SRC.tmp" <<SRCS
deb-src [signed-by=/etc/apt/trixie-archive-keyring.gpg] $MIRROR trixie main
deb-src [signed-by=/etc/apt/trixie-archive-keyring.gpg] $SECURITY trixie-security main
SRCS
	mv "$ROOT$TRIXIE_SRC.tmp" "$ROOT$TRIXIE_SRC"
	in_root apt-get update -qq
fi
if [ ! -e "$ROOT/opt/openssl/.tfprov-ready" ]; then
	echo "build-release: building a static OpenSSL 3.5 from Debian's trixie source (once)"
	t0=$(date +%s)
	in_root sh -ec "
		rm -rf /build/openssl /opt/openssl && mkdir -p /build/openssl && cd /build/openssl
		# The newest 3.5 the indexes list whose files the mirror serves (a
		# mirror may list a security update before its pool has it).
		for v in \$(apt-cache showsrc openssl | sed -n 's/^Version: \\(3\\.5\\..*\\)/\\1/p' | sort -rV); do
			apt-get source -qq openssl=\$v && break
		done
		cd openssl-3.5*/
		$NICE ./Configure linux-x86_64 --prefix=/opt/openssl --libdir=lib \
			--openssldir=/usr/lib/ssl no-shared no-tests no-docs no-apps no-module \
			no-legacy no-dso no-engine no-comp no-ssl3 >/dev/null
		$NICE make -s -j\$(nproc) build_libs >/dev/null
		make -s install_dev >/dev/null
		touch /opt/openssl/.tfprov-ready
	" >"$CACHE/openssl.log" 2>&1 || { tail -n 30 "$CACHE/openssl.log" >&2; exit 1; }
	echo "build-release: OpenSSL built in $(($(date +%s) - t0)) s" | tee -a "$CACHE/openssl.log"
fi

# libcurl: only HTTP and HTTPS over OpenSSL: bullseye's libcurl.a pulls in
# krb5, LDAP, RTMP, SSH, PSL and IDN, which have no static builds, and
# bullseye's 7.74 lacks CURLOPT_PROTOCOLS_STR (7.85). No CA path is compiled
# in (--with-ca-fallback: OpenSSL's default paths, which honour
# SSL_CERT_FILE/SSL_CERT_DIR); tfprov picks the host's bundle itself
# (engine/artifact/private/cabundle.h), so Debian's and RHEL's paths both work.
# Debian's last two patches (90_gnutls, 99_nss) make its GnuTLS and NSS
# flavours; debian/rules pops them for the OpenSSL one, and so do we.
from_source curl:curl-openssl3 "for p in 99_nss 90_gnutls; do patch -R -s -p1 <debian/patches/\$p.patch; done
		export PKG_CONFIG_PATH=/opt/openssl/lib/pkgconfig:/opt/zlib/lib/pkgconfig LIBS=-pthread" \
	"$NICE make -s -j\$(nproc) -C lib >/dev/null
		make -s -C lib install >/dev/null && make -s -C include install >/dev/null
		make -s install-pkgconfigDATA >/dev/null" \
	--with-openssl=/opt/openssl --with-zlib=/opt/zlib --without-ca-bundle --without-ca-path --with-ca-fallback \
	--disable-ftp --disable-file --disable-ldap --disable-ldaps --disable-rtsp \
	--disable-dict --disable-telnet --disable-tftp --disable-pop3 --disable-imap \
	--disable-smtp --disable-gopher --disable-mqtt --disable-smb --disable-manual \
	--without-libpsl --without-libidn2 --without-nghttp2 --without-nghttp3 \
	--without-brotli --without-zstd --without-librtmp --without-libssh2 \
	--without-libssh --without-libgsasl --without-gssapi
# libarchive: the reader tfprov uses (tar, zip; gzip, xz, zstd, bzip2, lz4),
# without ACLs, xattrs, XML (xar), Nettle or OpenSSL (encrypted zips) and
# without the bsdtar tools: bullseye's libarchive.a drags in libxml2 and ICU,
# and its security update 3.4.3-2+deb11u5 is no longer on the mirror.
# Debian's patches touch configure.ac: regenerate as debian/rules does (dh_autoreconf).
# The compression libraries are those built above (its configure looks for
# them with the compiler, not pkg-config: CPPFLAGS, LDFLAGS).
from_source libarchive "export CPPFLAGS='$DEPS_CPPFLAGS' LDFLAGS='$DEPS_LDFLAGS' LIBS=-pthread
		autoreconf -fi >/dev/null 2>&1" "$NICE make -s -j\$(nproc) libarchive.la >/dev/null
		make -s install-libLTLIBRARIES install-includeHEADERS install-pkgconfigDATA >/dev/null" \
	--without-xml2 --without-expat --without-nettle --without-openssl \
	--without-mbedtls --without-lzo2 --without-cng --without-libb2 --disable-acl \
	--disable-xattr --disable-bsdtar --disable-bsdcpio --disable-bsdcat \
	--with-zlib --with-bz2lib --with-lzma --with-zstd --with-lz4

# libzip: the wheel installer reads a wheel's central directory with it
# (engine/artifact/unpack.c, unpack_zip_parallel). Debian ships no libzip.a; Debian 12's
# source built static with only zlib (/opt/zlib; wheels are stored or
# deflated), no crypto, no tools. libzip builds with CMake, not configure.
if [ ! -e "$ROOT/opt/libzip/.tfprov-ready" ]; then
	echo "build-release: building a static libzip from Debian's $SRC_SUITE source (once)"
	in_root sh -ec "
		rm -rf /build/libzip /opt/libzip && mkdir -p /build/libzip && cd /build/libzip
		/usr/local/bin/tfprov-debsrc libzip $SRC_SUITE
		cd libzip-*/
		mkdir b && cd b
		$NICE cmake .. -DCMAKE_INSTALL_PREFIX=/opt/libzip -DCMAKE_INSTALL_LIBDIR=lib \
			-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
			-DCMAKE_POSITION_INDEPENDENT_CODE=ON -DZLIB_ROOT=/opt/zlib -DENABLE_COMMONCRYPTO=OFF \
			-DENABLE_GNUTLS=OFF -DENABLE_MBEDTLS=OFF -DENABLE_OPENSSL=OFF \
			-DENABLE_WINDOWS_CRYPTO=OFF -DENABLE_BZIP2=OFF -DENABLE_LZMA=OFF \
			-DENABLE_ZSTD=OFF -DBUILD_TOOLS=OFF -DBUILD_REGRESS=OFF \
			-DBUILD_EXAMPLES=OFF -DBUILD_DOC=OFF >/dev/null
		$NICE make -s -j\$(nproc) >/dev/null
		make -s install >/dev/null
		touch /opt/libzip/.tfprov-ready
	" >"$CACHE/libzip.log" 2>&1 || { tail -n 30 "$CACHE/libzip.log" >&2; exit 1; }
	skipped libzip | while read -r p v s; do
		echo "build-release: warning: $s lists $p $v, which the mirror does not serve: built the older one" >&2
	done
fi

# SQLite: the state database uses RETURNING (SQLite 3.35); bullseye has
# 3.34. The amalgamation is generated with tclsh; the compile-time options
# are those of Debian's own build (debian/rules).
from_source sqlite3 "export CFLAGS='-O2 -g -DSQLITE_SECURE_DELETE -DSQLITE_ENABLE_COLUMN_METADATA \
	-DSQLITE_ENABLE_FTS3 -DSQLITE_ENABLE_FTS3_PARENTHESIS -DSQLITE_ENABLE_RTREE=1 -DSQLITE_SOUNDEX=1 \
	-DSQLITE_ENABLE_UNLOCK_NOTIFY -DSQLITE_OMIT_LOOKASIDE=1 -DSQLITE_ENABLE_DBSTAT_VTAB \
	-DSQLITE_ALLOW_ROWID_IN_VIEW -DSQLITE_ENABLE_UPDATE_DELETE_LIMIT=1 -DSQLITE_ENABLE_LOAD_EXTENSION \
	-DSQLITE_ENABLE_JSON1 -DSQLITE_LIKE_DOESNT_MATCH_BLOBS -DSQLITE_THREADSAFE=1 \
	-DSQLITE_ENABLE_FTS3_TOKENIZER=1 -DSQLITE_USE_URI=1 -DSQLITE_MAX_SCHEMA_RETRY=25 \
	-DSQLITE_ENABLE_PREUPDATE_HOOK -DSQLITE_ENABLE_SESSION -DSQLITE_ENABLE_STMTVTAB \
	-DSQLITE_MAX_VARIABLE_NUMBER=250000'" \
	"$NICE make -s -j\$(nproc) libsqlite3.la sqlite3.h >/dev/null
		make -s lib_install >/dev/null
		install -d /opt/sqlite3/include /opt/sqlite3/lib/pkgconfig
		install -m644 sqlite3.h src/sqlite3ext.h /opt/sqlite3/include/
		install -m644 sqlite3.pc /opt/sqlite3/lib/pkgconfig/" \
	--disable-tcl --disable-readline --disable-editline

# tfprov itself: the sources CMakeLists.txt globs (cli/ engine/*/ state/
# modules/), with its warning flags and Debian's hardening flags. One
# compiler call sees every folder's headers: the layering is checked by the
# CMake build, which gives each folder only its own private headers.
VERSION=$(sed -n 's/^project(tfprov VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
NAME=tfprov-$VERSION-linux-x86_64
B=$ROOT/build/tfprov
rm -rf "$B"
mkdir -p "$B/gen"
cp -a cli engine state modules "$B/"
cmake -DSRC="$SRC" -DOUT="$B/gen/tfprov_commit.h" -P scripts/commit-header.cmake

# What is linked in, a word each: the name `tfprov --version --verbose` gives
# it (cli/version.c), its Debian source package, the directory it was built in
# (/build/DIR, /opt/DIR), the Debian suite of that source.
LINKED="openssl:openssl:openssl:trixie libssl:openssl:openssl:trixie
libcurl:curl:curl-openssl3:$SRC_SUITE libarchive:libarchive:libarchive:$SRC_SUITE
libzip:libzip:libzip:$SRC_SUITE sqlite:sqlite3:sqlite3:$SRC_SUITE
libyaml:libyaml:libyaml:$SRC_SUITE jansson:jansson:jansson:$SRC_SUITE
libdeflate:libdeflate:libdeflate:$SRC_SUITE zlib:zlib:zlib:$SRC_SUITE
liblzma:xz-utils:xz-utils:$SRC_SUITE zstd:libzstd:libzstd:$SRC_SUITE
bzip2:bzip2:bzip2:$SRC_SUITE lz4:lz4:lz4:$SRC_SUITE"
debian_release() {
	case $1 in bullseye) echo 11 ;; bookworm) echo 12 ;; trixie) echo 13 ;;
	*) echo "build-release: which Debian release is $1?" >&2; exit 1 ;; esac
}
# The Debian version of the source package built in /build/DIR ("1:1.2.13.dfsg-1").
source_version() {
	v=$(sed -n 's/^Version: //p' "$ROOT/build/$1/$2"_*.dsc | head -n 1)
	[ -n "$v" ] || { echo "build-release: no $2 source in /build/$1" >&2; exit 1; }
	echo "$v"
}
# gen/tfprov_libsources.h: the listing names each library's source, which
# scripts/check-eol.py judges by that Debian release's security support.
{
	echo "/* Generated by scripts/build-release.sh: the Debian source package each"
	echo " * library linked in was built from (cli/version.c). */"
	printf '#define TFPROV_LIBSOURCES'
	for l in $LINKED; do
		name=${l%%:*}; rest=${l#*:}; pkg=${rest%%:*}; rest=${rest#*:}
		dir=${rest%%:*}; suite=${rest#*:}
		release=$(debian_release "$suite") # (a failure here stops the script: set -e)
		version=$(source_version "$dir" "$pkg")
		printf ' \\\n\t{"%s", "Debian %s source %s %s"},' "$name" "$release" "$pkg" "$version"
	done
	echo
} >"$B/gen/tfprov_libsources.h"
# Each library's .pc file (/opt/DIR/lib/pkgconfig), and no other.
PCPATH=$(for l in $LINKED; do r=${l#*:*:}; echo "/opt/${r%%:*}/lib/pkgconfig"; done | sort -u | paste -sd: -)
echo "build-release: compiling tfprov $VERSION ($(sed 's/.*"\(.*\)"/\1/' "$B/gen/tfprov_commit.h")) in the $SUITE root"
in_root sh -ec "
	cd /build/tfprov
	export PKG_CONFIG_PATH=$PCPATH
	pcs='yaml-0.1 libcurl libarchive libcrypto sqlite3 jansson libzip libdeflate zlib liblzma libzstd liblz4 bzip2'
	# Every library static except glibc's own (libc, libm, libdl, libpthread, librt).
	static=''; glibc=''
	for l in \$(pkg-config --static --libs-only-l \$pcs); do
		case \$l in -lc|-lm|-ldl|-lpthread|-lrt) glibc=\"\$glibc \$l\" ;; *) static=\"\$static \$l\" ;; esac
	done
	$NICE gcc -std=gnu11 -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow -Wformat=2 \
		-Wno-error=unused-result -D_GNU_SOURCE -fno-strict-aliasing \
		-fstack-protector-strong -D_FORTIFY_SOURCE=2 -fPIE \
		-DTFPROV_VERSION='\"$VERSION\"' -DTFPROV_RELEASE_SOURCES \$(pkg-config --cflags \$pcs) \
		-Icli -Igen \$(find engine state modules -type d -printf ' -I%p') \
		cli/*.c engine/*/*.c state/*.c modules/*.c \
		-pie -Wl,-z,relro,-z,now -Wl,--as-needed \
		\$(pkg-config --static --libs-only-L \$pcs) \
		-Wl,-Bstatic -Wl,--start-group \$static -Wl,--end-group -Wl,-Bdynamic \$glibc -ldl -lpthread -lm \
		-Wl,-Map=tfprov.map -o tfprov
	objcopy --only-keep-debug tfprov tfprov.debug
	strip --strip-unneeded tfprov
	objcopy --add-gnu-debuglink=tfprov.debug tfprov
"
# The archives the link took members from (the map's first section): the
# libraries built here (/opt), each of them, glibc's lib*_nonshared.a and gcc's
# libgcc; never a bullseye package's.
archives=$(sed -n 's/^\(\/[^ (]*\.a\)(.*/\1/p' "$B/tfprov.map" | sort -u)
for a in $archives; do
	case $a in
	/opt/*/lib/*.a) ;;
	*/lib*_nonshared.a | */libgcc.a | */libgcc_eh.a) ;;
	*)
		echo "build-release: the link used $a, not a library built here" >&2
		exit 1
		;;
	esac
done
for d in $(echo "$PCPATH" | tr : '\n'); do
	case $archives in *"${d%/pkgconfig}/"*) ;; *)
		echo "build-release: the link used nothing of ${d%/lib/pkgconfig}" >&2
		exit 1
		;;
	esac
done

# The tarball: bin/tfprov and share/tfprov/ as `make install` lays them out
# (engine/base/datadir.h finds <exe>/../share/tfprov), plus the licences of what
# is linked in.
S=$B/stage/$NAME
mkdir -p "$S/bin" "$S/share/tfprov/data" "$S/share/tfprov/bench" \
	"$S/share/doc/tfprov/third-party" "$S/share/man/man1" "$S/share/bash-completion/completions"
cp "$B/tfprov" "$S/bin/tfprov"
cp -a manifests "$S/share/tfprov/manifests"
cp data/compat.yaml "$S/share/tfprov/data/"
cp bench/reference.yaml bench/bench_conv.py "$S/share/tfprov/bench/"
# The man page and completion are generated from the binary's own help, as
# the CMake build does (scripts/gen-docs.py); the release binary runs here.
python3 scripts/gen-docs.py "$B/tfprov" "$PWD" "$B/gen"
cp "$B/gen/tfprov.1" "$S/share/man/man1/"
cp "$B/gen/tfprov.bash-completion" "$S/share/bash-completion/completions/tfprov"
cp README.md packaging/copyright "$S/share/doc/tfprov/"
mkdir -p "$S/share/doc/tfprov/third-party/libc6"
cp "$ROOT/usr/share/doc/libc6/copyright" "$S/share/doc/tfprov/third-party/libc6/"
BW=$S/share/doc/tfprov/third-party/BUILT-WITH
in_root sh -c "dpkg-query -W -f='\${Package} \${Version} (Debian $SUITE, the build root)\n' $(echo $PKGS $EXTRA_PKGS) | sort" >"$BW"
seen=" "
for l in $LINKED; do
	rest=${l#*:}; pkg=${rest%%:*}; rest=${rest#*:}; dir=${rest%%:*}; suite=${rest#*:}
	case $seen in *" $pkg "*) continue ;; esac
	seen="$seen$pkg "
	mkdir -p "$S/share/doc/tfprov/third-party/$pkg"
	cp "$ROOT/build/$dir/$pkg"-*/debian/copyright "$S/share/doc/tfprov/third-party/$pkg/"
	release=$(debian_release "$suite")
	version=$(source_version "$dir" "$pkg")
	note=$(skipped "$dir" | while read -r p v s; do printf '; %s lists %s, which the mirror did not serve' "$s" "$v"; done)
	echo "$pkg $version (Debian $release $suite source, built static here$note)" >>"$BW"
done

mkdir -p "$OUT"
tarball=$OUT/$NAME.tar.gz
# Reproducible metadata: fixed owner, sorted names, mtime of the commit.
mtime=$(git log -1 --format=%ct 2>/dev/null || date +%s)
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" \
	-C "$B/stage" -cf - "$NAME" | gzip -9n >"$tarball.tmp"
mv "$tarball.tmp" "$tarball"
cp "$B/tfprov.debug" "$OUT/$NAME.debug"

# The .rpm: the same binary and data under /usr (packaging/rpm/), built with
# CPack and rpmbuild on this host.
rm -rf "$B/rpm"
cmake -S packaging/rpm -B "$B/rpm" -DTFPROV_RELEASE_DIR="$S" -DTFPROV_VERSION="$VERSION" >/dev/null
(cd "$B/rpm" && cpack -G RPM -B "$B/rpm/out" >/dev/null)
RPM=tfprov-$VERSION-1.x86_64.rpm
cp "$B/rpm/out/$RPM" "$OUT/$RPM"

(cd "$OUT" && sha256sum "$NAME.tar.gz" "$NAME.debug" "$RPM" >SHA256SUMS)
echo "build-release: $tarball"
echo "build-release: $OUT/$RPM"
echo "build-release: $OUT/SHA256SUMS"
