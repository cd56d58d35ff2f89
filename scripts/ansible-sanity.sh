#!/bin/sh
# Ansible's own checks of the tfprov.gpu collection, offline:
#   ansible-test sanity --test validate-modules   (module docs, argument specs)
#   ansible-test sanity --test pep8               (pycodestyle, Ansible's settings)
#   ansible-lint --profile production
# ansible-test runs each sanity test in a virtual environment that it fills
# with pip from PyPI. Offline (CI, the test suite) that cannot work, so this
# script lets ansible-test name that environment (its path is a hash of the
# requirements), then makes it a venv over Debian's packages
# (python3-voluptuous, python3-jinja2, python3-yaml, pycodestyle:
# scripts/install-deps.sh) and marks it complete, as ansible-test itself
# would after pip. Everything happens in a temporary HOME and a copy of the
# collection; nothing outside them is touched.
#   usage: scripts/ansible-sanity.sh [validate-modules|pep8|lint]...
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
coll="$here/ansible/ansible_collections/tfprov/gpu"
tests=${*:-validate-modules pep8 lint}
PATH=/usr/bin:/bin:/usr/sbin:/sbin
export PATH
tmp=$(mktemp -d /tmp/tfprov-ansible-sanity.XXXXXX)
trap 'rm -rf "$tmp"' EXIT INT TERM
HOME="$tmp/home"
export HOME
mkdir -p "$HOME" "$tmp/ansible_collections/tfprov"
cp -r "$coll" "$tmp/ansible_collections/tfprov/gpu"
cd "$tmp/ansible_collections/tfprov/gpu"
pyver=$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
rc=0
for t in $tests; do
	if [ "$t" = lint ]; then
		echo "== ansible-lint --profile production"
		ANSIBLE_COLLECTIONS_PATH="$tmp" ansible-lint --offline -p --nocolor \
			--profile production || rc=1
		continue
	fi
	echo "== ansible-test sanity --test $t"
	venvs="$HOME/.ansible/test/venv/sanity.$t/$pyver"
	if ! ls -d "$venvs"/*/marker.txt >/dev/null 2>&1; then
		# The first try only names the environment (pip cannot reach PyPI).
		ansible-test sanity --test "$t" --python "$pyver" --local >/dev/null 2>&1 || true
		dir=$(ls -d "$venvs"/* 2>/dev/null | head -n 1)
		if [ -z "$dir" ]; then
			echo "ansible-sanity: ansible-test did not name a venv for $t" >&2
			exit 1
		fi
		rm -rf "$dir"
		/usr/bin/python3 -m venv --system-site-packages --without-pip "$dir"
		echo '[]' >"$dir/meta.install.json"
		/usr/bin/python3 -c 'import yaml; print("true" if yaml.__with_libyaml__ else "false")' \
			>"$dir/meta.yaml.json"
		: >"$dir/marker.txt"
	fi
	ansible-test sanity --test "$t" --python "$pyver" --local --color no || rc=1
done
exit $rc
