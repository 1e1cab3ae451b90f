#!/usr/bin/env bash
# CI check that `make uninstall` mirrors `make install`: both into a scratch
# DESTDIR, with a PREFIX other than the default; afterwards only the config
# (which the operator may have edited) may remain.
set -euo pipefail
cd "$(dirname "$0")/../.."

dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
make -s build
make -s install DESTDIR="$dest" PREFIX=/opt/splatd >/dev/null
for f in /opt/splatd/bin/splatd /etc/systemd/system/splatd.service /usr/lib/sysusers.d/splatd.conf \
	/usr/lib/tmpfiles.d/splatd.conf /etc/splatd/config.yaml /opt/splatd/share/man/man1/splatd.1 \
	/opt/splatd/share/bash-completion/completions/splatd /opt/splatd/share/zsh/site-functions/_splatd \
	/opt/splatd/share/fish/vendor_completions.d/splatd.fish; do
	[ -f "$dest$f" ] || { echo "install: FAIL: $f was not installed" >&2; exit 1; }
done
grep -q '^ExecStart=/opt/splatd/bin/splatd run ' "$dest/etc/systemd/system/splatd.service" ||
	{ echo "install: FAIL: the unit does not run /opt/splatd/bin/splatd" >&2; exit 1; }

make -s uninstall DESTDIR="$dest" PREFIX=/opt/splatd >/dev/null
left=$(cd "$dest" && find . -type f | sort)
if [ "$left" != "./etc/splatd/config.yaml" ]; then
	echo "install: FAIL: after make uninstall, want only ./etc/splatd/config.yaml, have:" >&2
	echo "$left" >&2
	exit 1
fi
echo "install: ok: make uninstall removes what make install wrote, except the config"
