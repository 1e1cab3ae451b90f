#!/usr/bin/env bash
# CI check of the .deb (.ci/run calls it): builds it with `make deb`, checks
# its control fields, conffiles, files and modes, then installs it with dpkg
# into a scratch root (dpkg --root, maintainer scripts run with DPKG_ROOT set,
# so nothing on this machine changes), checks the user, the capture folder and
# the binary there, upgrades it over an edited config and purges it.
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() { echo "deb: FAIL: $*" >&2; exit 1; }

make -s deb
debs=(bin/splatd_*.deb)
[ ${#debs[@]} -eq 1 ] || fail "want one bin/splatd_*.deb, have: ${debs[*]}"
deb=${debs[0]}
want_version=$(deploy/deb/version.sh)
want_arch=$(go env GOARCH)
echo "deb: checking $deb"

# Control fields and conffiles.
field() { dpkg-deb --field "$deb" "$1"; }
[ "$(field Package)" = splatd ] || fail "Package: $(field Package)"
[ "$(field Version)" = "$want_version" ] || fail "Version: $(field Version), want $want_version"
[ "$(field Architecture)" = "$want_arch" ] || fail "Architecture: $(field Architecture), want $want_arch"
[ -z "$(field Depends)" ] || fail "Depends: $(field Depends) (the binary is static)"
[ -n "$(field Maintainer)" ] && [ -n "$(field Description)" ] || fail "no Maintainer or Description"
ctl=$(mktemp -d)
trap 'rm -rf "$ctl" "${root:-}"' EXIT
dpkg-deb --control "$deb" "$ctl"
[ "$(cat "$ctl/conffiles")" = /etc/splatd/config.yaml ] || fail "conffiles: $(cat "$ctl/conffiles")"
for s in postinst prerm postrm; do
	[ -x "$ctl/$s" ] || fail "no executable $s"
	sh -n "$ctl/$s" || fail "$s: syntax"
done

# Files, modes and owners: "mode owner path" for each regular file.
got=$(dpkg-deb --contents "$deb" | awk '$1 ~ /^-/ {print $1, $2, $6}' | sort -k3)
want=$(sort -k3 <<'LIST'
-rwxr-xr-x root/root ./usr/bin/splatd
-rw-r--r-- root/root ./usr/lib/systemd/system/splatd.service
-rw-r--r-- root/root ./usr/lib/sysusers.d/splatd.conf
-rw-r--r-- root/root ./usr/lib/tmpfiles.d/splatd.conf
-rw-r--r-- root/root ./etc/splatd/config.yaml
-rw-r--r-- root/root ./usr/share/man/man1/splatd.1.gz
-rw-r--r-- root/root ./usr/share/bash-completion/completions/splatd
-rw-r--r-- root/root ./usr/share/zsh/vendor-completions/_splatd
-rw-r--r-- root/root ./usr/share/fish/vendor_completions.d/splatd.fish
-rw-r--r-- root/root ./usr/share/doc/splatd/README.md
LIST
)
[ "$got" = "$want" ] || fail "files differ (- want, + got):
$(diff <(echo "$want") <(echo "$got") || true)"

if [ "$(id -u)" != 0 ]; then
	echo "deb: not root: the install into a scratch root is skipped (dpkg --root needs root)"
	exit 0
fi

# A scratch root with an empty dpkg database and the two accounts every
# system has, for systemd-sysusers --root to add to.
root=$(mktemp -d)
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/etc"
: > "$root/var/lib/dpkg/status"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\n' > "$root/etc/group"
dpkg_root() { dpkg --root="$root" --force-script-chrootless --log=/dev/null "$@"; }

# What the scratch install must not change on this machine.
host_user=$(getent passwd splatd || true)
host_captures=$([ -e /srv/captures ] && echo yes || echo no)

echo "deb: dpkg --root $root -i"
dpkg_root -i "$deb" >"$ctl/install.log" 2>&1 || { cat "$ctl/install.log"; fail "dpkg -i"; }
grep -q 'not enabled and not started' "$ctl/install.log" || fail "postinst printed no next steps: $(cat "$ctl/install.log")"
[ "$(dpkg-query --root="$root" -W -f='${Status} ${Version}' splatd)" = "install ok installed $want_version" ] ||
	fail "dpkg-query: $(dpkg-query --root="$root" -W -f='${Status} ${Version}' splatd)"

"$root/usr/bin/splatd" version | grep -q "^splatd $(git rev-parse --short HEAD)" || fail "splatd version: $("$root/usr/bin/splatd" version)"
grep -q '^ExecStart=/usr/bin/splatd run ' "$root/usr/lib/systemd/system/splatd.service" || fail "unit ExecStart does not name /usr/bin/splatd"
zcat "$root/usr/share/man/man1/splatd.1.gz" | grep -q '^\.TH SPLATD 1' || fail "man page"
bash -n "$root/usr/share/bash-completion/completions/splatd" || fail "bash completion"
cmp -s "$root/etc/splatd/config.yaml" config.example.yaml || fail "config.yaml is not the example"
[ ! -e "$root/etc/systemd/system/multi-user.target.wants/splatd.service" ] || fail "the package enabled the service"

# postinst: systemd-sysusers and systemd-tmpfiles ran against the root.
uid=$(awk -F: '$1 == "splatd" {print $3}' "$root/etc/passwd")
[ -n "$uid" ] || fail "no splatd user in the root's /etc/passwd"
awk -F: '$1 == "splatd" && $7 == "/usr/sbin/nologin" && $6 == "/var/lib/splatd" {ok=1} END {exit !ok}' "$root/etc/passwd" ||
	fail "splatd user: $(grep '^splatd:' "$root/etc/passwd")"
[ "$(getent passwd splatd || true)" = "$host_user" ] || fail "the install changed this machine's splatd user"
[ "$([ -e /srv/captures ] && echo yes || echo no)" = "$host_captures" ] || fail "the install made this machine's /srv/captures"
[ "$(stat -c '%a %u' "$root/srv/captures")" = "2775 $uid" ] || fail "/srv/captures: $(stat -c '%a %u' "$root/srv/captures"), want 2775 $uid"

# An upgrade (the same package again) keeps an edited config.
echo "# edited" >> "$root/etc/splatd/config.yaml"
dpkg_root --force-confold -i "$deb" >"$ctl/upgrade.log" 2>&1 || { cat "$ctl/upgrade.log"; fail "upgrade"; }
tail -1 "$root/etc/splatd/config.yaml" | grep -q '^# edited$' || fail "the upgrade replaced the edited config"
! grep -q 'not enabled and not started' "$ctl/upgrade.log" || fail "an upgrade repeats the first-install message"

# Purge: the package's files, the config and the state go; the captures stay.
mkdir -p "$root/var/lib/splatd" && echo x > "$root/var/lib/splatd/splatd.db"
dpkg_root --purge splatd >"$ctl/purge.log" 2>&1 || { cat "$ctl/purge.log"; fail "purge"; }
for f in /usr/bin/splatd /usr/lib/systemd/system/splatd.service /etc/splatd/config.yaml /etc/splatd /var/lib/splatd; do
	[ ! -e "$root$f" ] || fail "$f is left after purge"
done
[ -d "$root/srv/captures" ] || fail "purge removed /srv/captures"
echo "deb: ok ($want_version, $want_arch): control, files and modes, install, upgrade and purge in a scratch root"
