#!/usr/bin/env bash
# deploy/check.sh: CI checks for the files in deploy/. Run from anywhere:
#   bash deploy/check.sh        (make deploy-check)
#
# 1. systemd-analyze verify on deploy/systemd/splatd.service (any warning fails),
#    and the sysusers/tmpfiles snippets applied to a scratch root.
# 2. promtool check rules + promtool test rules on deploy/prometheus/.
# 3. deploy/grafana/splatd.json parses as JSON.
# 4. go test of the checks that need the daemon's registry: every splatd_*
#    metric the alerts and the dashboard name exists (metrics package).
#
# Missing tools come from Debian packages (needs root and apt; CI=true, no stdin):
#   systemd-analyze, systemd-sysusers, systemd-tmpfiles  <- package "systemd"
#   promtool  <- package "prometheus", but only downloaded and unpacked into a
#                cache directory, never installed: installing it would start a
#                Prometheus server (its postinst enables and starts the service).
#   jq        <- package "jq", only when python3 is missing too.
# Nothing is started, and nothing outside the cache directory is written except
# by apt-get install.
set -euo pipefail

cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
CACHE_DIR=${SPLATD_CHECK_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/splatd-deploy-check}

failures=0
say() { printf '== %s\n' "$*"; }
fail() {
	printf '\n!! deploy/check.sh: FAILED: %s\n\n' "$*" >&2
	failures=$((failures + 1))
}

# retry CMD...: a mirror's passing hiccup must not fail CI; three tries.
retry() {
	local n
	for n in 1 2 3; do
		"$@" </dev/null && return 0
		echo "deploy/check.sh: '$*' failed (try $n of 3)" >&2
		sleep $((n * 5))
	done
	return 1
}

apt_updated=0
apt_update() {
	if [ "$apt_updated" = 0 ]; then
		retry apt-get update -qq
		apt_updated=1
	fi
}

# apt_install PKG...: install Debian packages, loudly refusing when it cannot.
apt_install() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		echo "deploy/check.sh: need the Debian package(s) $* (run as root on Debian, or install them)" >&2
		exit 1
	fi
	say "installing $*"
	apt_update
	retry apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# promtool: from PATH, else from the cache, else unpacked from the Debian
# "prometheus" package into the cache.
find_promtool() {
	if command -v promtool >/dev/null 2>&1; then
		command -v promtool
		return
	fi
	local bin="$CACHE_DIR/prometheus/usr/bin/promtool"
	if [ ! -x "$bin" ]; then
		if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
			echo "deploy/check.sh: promtool is missing and apt-get/dpkg-deb are not available to fetch it" >&2
			exit 1
		fi
		say "fetching promtool from the Debian package prometheus (unpacked into $CACHE_DIR, not installed)" >&2
		if ! apt-cache show prometheus >/dev/null 2>&1; then
			apt_update >&2
		fi
		local dl
		dl=$(mktemp -d)
		# apt drops privileges to _apt for downloads; let it write here.
		if id _apt >/dev/null 2>&1; then chown _apt "$dl"; fi
		(cd "$dl" && retry apt-get download -qq prometheus) >&2
		rm -rf "$CACHE_DIR/prometheus"
		mkdir -p "$CACHE_DIR/prometheus"
		dpkg-deb -x "$dl"/prometheus_*.deb "$CACHE_DIR/prometheus"
		rm -rf "$dl"
		if [ ! -x "$bin" ]; then
			echo "deploy/check.sh: the Debian package prometheus has no usr/bin/promtool" >&2
			exit 1
		fi
	fi
	echo "$bin"
}

# --- 1. systemd -------------------------------------------------------------
say "systemd: verify deploy/systemd/splatd.service"
command -v systemd-analyze >/dev/null 2>&1 || apt_install systemd
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# verify checks that ExecStart= exists and is executable; the binary is not
# installed here, so point the unit at a stub. The unit keeps its name so that
# verify reads it as splatd.service.
mkdir -p "$scratch/unit"
printf '#!/bin/sh\nexit 0\n' >"$scratch/unit/splatd"
chmod 0755 "$scratch/unit/splatd"
sed "s#^ExecStart=/usr/local/bin/splatd #ExecStart=$scratch/unit/splatd #" \
	deploy/systemd/splatd.service >"$scratch/unit/splatd.service"
grep -q "^ExecStart=$scratch/unit/splatd " "$scratch/unit/splatd.service" ||
	fail "splatd.service: ExecStart= is no longer /usr/local/bin/splatd; update deploy/check.sh"
# verify returns 0 on unknown keys and bad values (it only warns), so any
# output about the unit counts as a failure.
if ! out=$(SYSTEMD_LOG_COLOR=0 systemd-analyze verify "$scratch/unit/splatd.service" 2>&1); then
	printf '%s\n' "$out" >&2
	fail "systemd-analyze verify deploy/systemd/splatd.service"
elif printf '%s\n' "$out" | grep -q 'splatd'; then
	printf '%s\n' "$out" | sed "s#$scratch/unit/#deploy/systemd/#g" >&2
	fail "systemd-analyze verify warned about deploy/systemd/splatd.service"
else
	[ -z "$out" ] || printf '(not about splatd.service)\n%s\n' "$out"
	echo "ok"
fi

# The resource bounds a hostile watch folder must not get past.
for key in MemoryMax TasksMax; do
	grep -q "^$key=" deploy/systemd/splatd.service || fail "splatd.service has no $key="
done

say "systemd: sysusers and tmpfiles snippets on a scratch root"
# Relative paths would be read inside --root, hence $PWD.
mkdir -p "$scratch/root/etc"
if ! systemd-sysusers --root="$scratch/root" "$PWD/deploy/systemd/splatd.sysusers.conf" ||
	! grep -q '^splatd:' "$scratch/root/etc/passwd"; then
	fail "systemd-sysusers deploy/systemd/splatd.sysusers.conf"
elif ! systemd-tmpfiles --root="$scratch/root" --create "$PWD/deploy/systemd/splatd.tmpfiles.conf" ||
	[ ! -d "$scratch/root/srv/captures" ]; then
	fail "systemd-tmpfiles deploy/systemd/splatd.tmpfiles.conf"
else
	echo "ok"
fi

# --- 2. Prometheus rules ----------------------------------------------------
promtool=$(find_promtool)
say "promtool check rules deploy/prometheus/alerts.yaml ($("$promtool" --version 2>&1 | head -1))"
"$promtool" check rules deploy/prometheus/alerts.yaml || fail "promtool check rules deploy/prometheus/alerts.yaml"
say "promtool test rules deploy/prometheus/alerts_test.yaml"
"$promtool" test rules deploy/prometheus/alerts_test.yaml || fail "promtool test rules deploy/prometheus/alerts_test.yaml"

# --- 3. Grafana dashboard ---------------------------------------------------
say "deploy/grafana/splatd.json parses"
if command -v python3 >/dev/null 2>&1; then
	python3 -m json.tool deploy/grafana/splatd.json >/dev/null && echo ok || fail "deploy/grafana/splatd.json is not valid JSON"
else
	command -v jq >/dev/null 2>&1 || apt_install jq
	jq empty deploy/grafana/splatd.json && echo ok || fail "deploy/grafana/splatd.json is not valid JSON"
fi

# --- 4. metric names against the daemon's registry --------------------------
if [ "${SKIP_GO_TESTS:-}" = 1 ]; then
	say "go test skipped (SKIP_GO_TESTS=1)"
elif command -v go >/dev/null 2>&1; then
	say "go test: the metrics named by alerts and dashboard exist"
	go test -count=1 -run 'TestDeploy' ./metrics/ || fail "go test -run TestDeploy ./metrics/"
else
	fail "go is not on PATH: cannot check metric names (SKIP_GO_TESTS=1 skips this)"
fi

if [ "$failures" != 0 ]; then
	printf '\n!! deploy/check.sh: %d check(s) FAILED\n' "$failures" >&2
	exit 1
fi
say "deploy checks passed"
