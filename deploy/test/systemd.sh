#!/usr/bin/env bash
# deploy/test/systemd.sh: install splatd into a real systemd the way the
# README's "Install as a service" does, and check the unit's promises
# (make test-systemd, after make build). Needs root, and systemd-nspawn and
# debootstrap (installed from Debian when missing).
#
# systemd runs in a systemd-nspawn container booted from a debootstrapped
# Debian root. The root is built once per machine and cached in
# $SPLATD_SYSTEMD_ROOT (/var/cache/splatd-test/systemd-root, outside the
# repository; rebuilt when incomplete or stale); each run boots an overlay of
# it, so the cache is never written to. The container shares the host's
# network: the API simulator (bin/splatd sim) runs on the host's loopback.
# nspawn starts from a cgroup of its own, so that the container's systemd
# adopts nothing else of this machine.
#
# Checks (each fails when its subject is broken):
#   ready      the unit goes active only after splatd's READY=1 (Type=notify)
#   status     its STATUS= text shows in `systemctl show`
#   hardening  it runs as user splatd, with the token from LoadCredential=,
#              its state in StateDirectory=, a read-only / (ProtectSystem=strict),
#              the sysusers/tmpfiles snippets applied
#   publish    a file dropped into /srv/captures is published (job done, receipt)
#   priority   `journalctl -u splatd -p warning` shows the daemon's warning
#              for an invalid file, and none of its info lines
#   restart    kill -9 of the main process: restarted by Restart=
#   watchdog   the main process stopped (SIGSTOP): killed with result
#              'watchdog' and restarted (WatchdogSec=4s in a drop-in)
#   reload     systemctl reload: still active, same main PID, the daemon
#              logs a line containing "reload"
# SPLATD_SYSTEMD_SKIP=reload,priority skips the named checks (comma list).
set -euo pipefail
cd "$(dirname "$0")/../.."
LANE=test-systemd
. deploy/test/lib.sh

ROOT=${SPLATD_SYSTEMD_ROOT:-/var/cache/splatd-test/systemd-root}
MIRROR=${SPLATD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
ROOT_PACKAGES=systemd,systemd-sysv,dbus,procps
# Written last into the cached root; a root without it (an interrupted build)
# or with another text (other packages) is rebuilt.
ROOT_STAMP="splatd-test systemd root 1: debootstrap --variant=minbase --include=$ROOT_PACKAGES $SUITE"
SPLATD=$PWD/bin/splatd
MACHINE=splatd-test-$$
BOOT_LIMIT=60 # seconds for systemd to boot

SKIP=${SPLATD_SYSTEMD_SKIP:-}
for s in ${SKIP//,/ }; do
	case $s in
	ready | status | hardening | publish | priority | restart | watchdog | reload) ;;
	*) die "SPLATD_SYSTEMD_SKIP: unknown check '$s' (ready status hardening publish priority restart watchdog reload)" ;;
	esac
done
skipped() {
	case ",$SKIP," in *",$1,"*)
		printf '   SKIP         %s (SPLATD_SYSTEMD_SKIP)\n' "$1"
		return 0
		;;
	esac
	return 1
}

[ "$(id -u)" = 0 ] || die "needs root (systemd-nspawn, mounts, cgroups)"
[ -x "$SPLATD" ] || die "bin/splatd is missing: run make build"
missing=()
command -v systemd-nspawn >/dev/null 2>&1 || missing+=(systemd-container)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
command -v make >/dev/null 2>&1 || missing+=(make)
[ ${#missing[@]} = 0 ] || apt_install "${missing[@]}"

# --- the cached root ----------------------------------------------------------
root_complete() {
	[ "$(cat "$ROOT/.splatd-test-stamp" 2>/dev/null)" = "$ROOT_STAMP" ] &&
		[ -x "$ROOT/usr/lib/systemd/systemd" ] && [ -x "$ROOT/usr/bin/systemctl" ] &&
		[ -x "$ROOT/usr/bin/dbus-daemon" ] && [ -x "$ROOT/usr/bin/kill" ]
}
debootstrap_root() {
	rm -rf "$ROOT.partial"
	timeout 900 debootstrap --variant=minbase --include="$ROOT_PACKAGES" "$SUITE" "$ROOT.partial" "$MIRROR" \
		>"$ROOT.log" 2>&1
}
# Another run may be building or using the root: build under an exclusive
# lock, then hold it shared for the rest of the run, so that a rebuild waits
# for the runs booting the old root.
mkdir -p "$(dirname "$ROOT")"
exec 9>"$ROOT.lock"
flock -w 1200 9 || die "$ROOT.lock is held by another run for 20 minutes"
if ! root_complete; then
	say "building the cached root $ROOT (debootstrap $SUITE, once per machine)"
	rm -rf "$ROOT"
	retry debootstrap_root || {
		tail -20 "$ROOT.log" >&2
		die "debootstrap $SUITE (log: $ROOT.log)"
	}
	rm -f "$ROOT.partial"/var/cache/apt/archives/*.deb
	echo "$ROOT_STAMP" >"$ROOT.partial/.splatd-test-stamp"
	mv "$ROOT.partial" "$ROOT"
	root_complete || die "the new root $ROOT is incomplete (log: $ROOT.log)"
fi
flock -s 9

# --- a throwaway overlay of it, booted ----------------------------------------
work=$(mktemp -d /tmp/splatd-test-systemd.XXXXXX)
tree=$work/root
mkdir -p "$tree" "$work/upper" "$work/ovl"
SIM_PID= NSPAWN_PID= LEADER= CGROUPS=() MOUNTED=
cleanup() {
	local rc=$? d p n
	if [ "$rc" != 0 ] && [ -n "$LEADER" ]; then
		echo "--- journalctl -u splatd (last 30 lines)" >&2
		inside journalctl -u splatd --no-pager -n 30 >&2 2>&1 || true
	fi
	if [ -n "$NSPAWN_PID" ] && kill -0 "$NSPAWN_PID" 2>/dev/null; then
		[ -z "$LEADER" ] || inside systemctl poweroff --no-block >/dev/null 2>&1 || true
		for n in $(seq 1 150); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.2; done
		kill -TERM "$NSPAWN_PID" 2>/dev/null || true # nspawn: shut the container down
		for n in $(seq 1 50); do kill -0 "$NSPAWN_PID" 2>/dev/null || break; sleep 0.2; done
		kill -KILL "$NSPAWN_PID" 2>/dev/null || true
	fi
	# Whatever is left in the cgroups made for the container is the
	# container's (nothing else was ever in them): kill it, then remove them.
	for d in "${CGROUPS[@]}"; do
		for p in $(cat $(find "$d" -name cgroup.procs 2>/dev/null) 2>/dev/null); do
			kill -KILL "$p" 2>/dev/null || true
		done
	done
	for d in "${CGROUPS[@]}"; do
		for n in 1 2 3 4 5; do
			find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
			[ -d "$d" ] || break
			sleep 0.2
		done
		[ ! -d "$d" ] || echo "$LANE: could not remove cgroup $d" >&2
	done
	if [ -n "$MOUNTED" ]; then
		umount "$tree" 2>/dev/null || umount -l "$tree" 2>/dev/null || echo "$LANE: could not unmount $tree" >&2
	fi
	[ -z "$SIM_PID" ] || kill "$SIM_PID" 2>/dev/null || true
	if ! findmnt -rn -o TARGET | grep -q "^$work"; then
		rm -rf "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if mount -t overlay splatd-test -o "lowerdir=$ROOT,upperdir=$work/upper,workdir=$work/ovl" "$tree" 2>/dev/null; then
	MOUNTED=1
else
	say "no overlayfs here: copying the root instead"
	cp -a --reflink=auto "$ROOT/." "$tree/"
fi

# cgroup_paths: for each cgroup hierarchy, a new cgroup below the one this
# script is in (systemd-nspawn --keep-unit runs the container right there).
cgroup_paths() {
	local ctrls path mnt
	while IFS=: read -r _ ctrls path; do
		if [ -z "$ctrls" ]; then
			mnt=$(findmnt -rn -t cgroup2 -o TARGET | head -1)
		else
			mnt=$(findmnt -rn -t cgroup -o TARGET,OPTIONS |
				awk -v c="${ctrls%%,*}" '{ n = split($2, o, ","); for (i = 1; i <= n; i++) if (o[i] == c) { print $1; exit } }')
		fi
		[ -z "$mnt" ] || echo "${mnt%/}${path%/}/$MACHINE"
	done </proc/self/cgroup
}
while read -r d; do
	mkdir "$d" || die "cannot create cgroup $d"
	CGROUPS+=("$d")
	# cgroup v1 cpuset: a new cgroup has no CPUs or memory nodes until given some.
	for f in cpuset.cpus cpuset.mems; do
		[ ! -e "$d/$f" ] || cat "$(dirname "$d")/$f" >"$d/$f"
	done
done < <(cgroup_paths)
[ ${#CGROUPS[@]} -gt 0 ] || die "no cgroup hierarchy found under /sys/fs/cgroup"

say "booting systemd in $tree ($(systemd-nspawn --version | head -1))"
(
	for d in "${CGROUPS[@]}"; do
		echo "$BASHPID" >"$d/cgroup.procs" || { echo "$LANE: cannot enter cgroup $d" >&2; exit 1; }
	done
	exec systemd-nspawn -q -b -D "$tree" -M "$MACHINE" --register=no --keep-unit --console=passive
) >"$work/console.log" 2>&1 </dev/null 9>&- &
NSPAWN_PID=$!

# The container's PID 1, as seen from here: the process in our new cgroup
# whose PID in its own namespace is 1.
find_leader() {
	local p
	for p in $(cat $(find "${CGROUPS[0]}" -name cgroup.procs) 2>/dev/null); do
		if awk '/^NSpid:/ { exit !($NF == 1 && NF > 2) }' "/proc/$p/status" 2>/dev/null; then
			LEADER=$p
			return 0
		fi
	done
	return 1
}
inside() {
	timeout 60 nsenter -t "$LEADER" -a -- env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
		SYSTEMD_PAGER= SYSTEMD_COLORS=0 LANG=C.UTF-8 "$@"
}
booted() {
	kill -0 "$NSPAWN_PID" 2>/dev/null || die "systemd-nspawn exited: $(tail -20 "$work/console.log")"
	[ -n "$LEADER" ] || find_leader || return 1
	case $(inside systemctl is-system-running 2>/dev/null) in running | degraded) return 0 ;; esac
	return 1
}
wait_for "$BOOT_LIMIT" "systemd did not finish booting: $(tail -5 "$work/console.log" 2>/dev/null)" booted
say "systemd $(inside systemctl --version | awk 'NR == 1 {print $2}') is $(inside systemctl is-system-running || true) in $MACHINE"

# --- install, as the README's "Install as a service" says --------------------
start_sim "$work/sim"
say "simulator at $SIM_URL; make install DESTDIR=$tree"
make -s install DESTDIR="$tree" >/dev/null || die "make install DESTDIR=$tree"
inside systemd-sysusers splatd.conf >"$work/sysusers.log" 2>&1 || die "systemd-sysusers splatd.conf: $(cat "$work/sysusers.log")"
inside systemd-tmpfiles --create splatd.conf || die "systemd-tmpfiles --create splatd.conf"
(umask 077 && echo "$SIM_TOKEN" >"$tree/etc/splatd/token")
install -m 0644 "$SIM_CA" "$tree/etc/splatd/api-ca.pem"
port=$(free_port) || die "no free loopback port"
cfg=$tree/etc/splatd/config.yaml
sed -i -e "s#^  base_url: .*#  base_url: $SIM_URL#" -e "s#^  ca_file: .*#  ca_file: /etc/splatd/api-ca.pem#" \
	-e "s#^  listen: .*#  listen: \"127.0.0.1:$port\"#" -e "s#^settle: .*#settle: 1s#" \
	-e "s#^  interval: 5s#  interval: 1s#" "$cfg"
for want in "base_url: $SIM_URL" "ca_file: /etc/splatd/api-ca.pem" "listen: \"127.0.0.1:$port\"" "settle: 1s" \
	'token_file: ""' "- path: /srv/captures" "state_dir: /var/lib/splatd"; do
	grep -qF -- "$want" "$cfg" ||
		die "config.example.yaml no longer has the lines this test rewrites or expects ($want): update deploy/test/systemd.sh"
done
inside sh -c 'SPLATD_TOKEN=$(cat /etc/splatd/token) splatd config check -probe' >"$work/probe.log" 2>&1 ||
	die "splatd config check -probe: $(cat "$work/probe.log")"

# This machine cannot raise hard rlimits, so neither can the container's
# systemd: cap the unit's LimitNOFILE= at what there is (a host systemd allows
# 65536; the drop-in is written only where it could not).
hard=$(inside sh -c 'ulimit -Hn')
unit_nofile=$(sed -n 's/^LimitNOFILE=//p' "$tree/etc/systemd/system/splatd.service")
if [ "$hard" != unlimited ] && [ -n "$unit_nofile" ] && [ "$hard" -lt "$unit_nofile" ]; then
	mkdir -p "$tree/etc/systemd/system/splatd.service.d"
	printf '[Service]\nLimitNOFILE=%s\n' "$hard" >"$tree/etc/systemd/system/splatd.service.d/10-test-rlimit.conf"
	say "LimitNOFILE=$unit_nofile is over this machine's hard limit: drop-in LimitNOFILE=$hard"
fi

# systemd logs, in order, each notification it gets (debug level) and the
# unit going active: with Type=notify "Started" comes after READY=1.
inside systemd-analyze log-level debug
inside systemctl daemon-reload || die "systemctl daemon-reload"
cursor=$(inside journalctl -n 0 --show-cursor -q | sed -n 's/^-- cursor: //p')
start=$(date +%s.%N)
inside systemctl enable --now splatd >/dev/null 2>&1 || die "systemctl enable --now splatd: $(inside systemctl status splatd --no-pager -n 20 2>&1)"
took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}')
inside systemd-analyze log-level info
[ "$(inside systemctl is-active splatd)" = active ] || die "splatd is not active after systemctl enable --now"
pid=$(inside systemctl show -p MainPID --value splatd)
say "splatd active, main PID $pid (systemctl start took ${took}s)"

show() { inside systemctl show -p "$1" --value splatd; }
main_pid() { inside systemctl show -p MainPID --value splatd; }
journal_after() { inside journalctl --no-pager -o cat --after-cursor="$1" "${@:2}"; }

# --- checks -------------------------------------------------------------------
if ! skipped ready; then
	[ "$(show Type)" = notify ] || die "the unit's Type= is $(show Type), not notify"
	# journald may still be writing PID 1's lines when systemctl returns.
	pid1_started() { journal_after "$cursor" _PID=1 >"$work/pid1.log" && grep -q "Started splatd" "$work/pid1.log"; }
	poll 10 pid1_started || true
	ready_line=$(grep -n "splatd.service: Got notification message from PID $pid (.*READY=1" "$work/pid1.log" | head -1 | cut -d: -f1 || true)
	started_line=$(grep -n "Started splatd" "$work/pid1.log" | head -1 | cut -d: -f1 || true)
	[ -n "$started_line" ] || die "systemd never logged \"Started splatd\""
	if [ -z "$ready_line" ] || [ "$ready_line" -gt "$started_line" ]; then
		die "the unit went active before splatd sent READY=1; systemd's log:$(printf '\n    %s' "$(grep -E 'splatd.service: (Changed|Got notification)|Started splatd' "$work/pid1.log" | head -8)")"
	fi
	ok "ready: active only after READY=1 (Type=notify; $(sed -n "${ready_line}s/.*(\(.*\))\$/\1/p" "$work/pid1.log" | cut -c1-60))"
fi

if ! skipped status; then
	status_ok() { [ -n "$(show StatusText)" ]; }
	wait_for 10 "no STATUS= text in systemctl show -p StatusText" status_ok
	ok "status: StatusText=$(show StatusText)"
fi

if ! skipped hardening; then
	# (LoadCredential= shows as "[unprintable]" in systemd 252; the token_from
	# check below is its proof.)
	for want in User=splatd ProtectSystem=strict StateDirectory=splatd NoNewPrivileges=yes; do
		inside systemctl show splatd -p "${want%%=*}" | grep -qxF "$want" ||
			die "the unit in effect has $(inside systemctl show splatd -p "${want%%=*}"), not $want"
	done
	uid=$(inside id -u splatd) || die "no user splatd (systemd-sysusers splatd.conf)"
	[ "$(inside stat -c %U:%G:%a /srv/captures)" = splatd:splatd:2775 ] ||
		die "/srv/captures is $(inside stat -c %U:%G:%a /srv/captures), not splatd:splatd:2775 (systemd-tmpfiles splatd.conf)"
	[ "$(inside awk '/^Uid:/ {print $2}' "/proc/$pid/status")" = "$uid" ] ||
		die "the main process runs as uid $(inside awk '/^Uid:/ {print $2}' "/proc/$pid/status"), not splatd ($uid)"
	[ "$(inside awk '$5 == "/" {print $6}' "/proc/$pid/mountinfo" | cut -d, -f1)" = ro ] ||
		die "/ is writable for the service (ProtectSystem=strict not in effect)"
	[ "$(inside stat -c %U "/var/lib/splatd/splatd.db" 2>/dev/null)" = splatd ] ||
		die "no /var/lib/splatd/splatd.db owned by splatd (StateDirectory=)"
	journal_after "$cursor" -u splatd | grep -F '"splatd started"' | grep -q '"token_from":"/run/credentials/splatd.service/splatd-token"' ||
		die "the token did not come from the credential: $(journal_after "$cursor" -u splatd | grep -F 'splatd started')"
	ok "hardening: uid $uid (splatd), / read-only, state in /var/lib/splatd, token from \$CREDENTIALS_DIRECTORY"
fi

if ! skipped publish; then
	cp uploader/splatfile/testdata/valid.ply "$tree/srv/captures/.scan.ply.tmp"
	mv "$tree/srv/captures/.scan.ply.tmp" "$tree/srv/captures/scan.ply"
	receipt=$tree/srv/captures/scan.ply.splat.json
	receipt_done() { [ -s "$receipt" ] && [ "$(json_field "$receipt" status)" = done ]; }
	wait_for 60 "no \"done\" receipt for /srv/captures/scan.ply ($(cat "$receipt" 2>/dev/null || echo none))" receipt_done
	inside splatd jobs -json >"$work/jobs.json" 2>&1 || die "splatd jobs: $(cat "$work/jobs.json")"
	grep -q '"file": "/srv/captures/scan.ply"' "$work/jobs.json" && grep -q '"stage": "done"' "$work/jobs.json" ||
		die "the job for /srv/captures/scan.ply is not done: $(cat "$work/jobs.json")"
	ok "publish: /srv/captures/scan.ply done, receipt written (splat $(json_field "$receipt" url))"
fi

if ! skipped priority; then
	cp uploader/splatfile/testdata/garbage.ply "$tree/srv/captures/.bad.ply.tmp"
	mv "$tree/srv/captures/.bad.ply.tmp" "$tree/srv/captures/bad.ply"
	receipt=$tree/srv/captures/bad.ply.splat.json
	receipt_failed() { [ -s "$receipt" ] && [ "$(json_field "$receipt" status)" = failed ]; }
	wait_for 60 "no \"failed\" receipt for /srv/captures/bad.ply" receipt_failed
	warned() { inside journalctl -u splatd -p warning --no-pager -o cat >"$work/warned.log" && grep 'bad\.ply' "$work/warned.log" | grep -q 'job failed'; }
	# The journal may trail the receipt by a moment.
	poll 10 warned || die "journalctl -u splatd -p warning has no warning for the invalid bad.ply; it has:$(printf '\n    %s' "$(inside journalctl -u splatd -p warning --no-pager -o cat | tail -5)")"
	if inside journalctl -u splatd -p warning --no-pager -o cat | grep -E 'file found|job done|splatd started' >"$work/info.log"; then
		die "journalctl -u splatd -p warning shows info lines:$(printf '\n    %s' "$(head -3 "$work/info.log")")"
	fi
	ok "priority: -p warning shows the invalid file's \"job failed\" and no info line"
fi

if ! skipped restart; then
	before=$(show NRestarts)
	inside kill -9 "$pid"
	restarted() { [ "$(inside systemctl is-active splatd)" = active ] && p=$(main_pid) && [ "$p" != 0 ] && [ "$p" != "$pid" ]; }
	wait_for 30 "splatd was not restarted after kill -9 (state $(inside systemctl is-active splatd || true))" restarted
	[ "$(show NRestarts)" -gt "$before" ] || die "NRestarts did not grow after kill -9"
	pid=$(main_pid)
	ok "restart: kill -9 -> restarted by Restart= (main PID $pid, NRestarts $(show NRestarts))"
fi

if ! skipped watchdog; then
	# The shipped WatchdogSec=60s would make this check wait a minute; the
	# same path with 4s: splatd pings every 2s, systemd kills after 4s without.
	mkdir -p "$tree/etc/systemd/system/splatd.service.d"
	printf '[Service]\nWatchdogSec=4s\n' >"$tree/etc/systemd/system/splatd.service.d/20-test-watchdog.conf"
	inside systemctl daemon-reload
	inside systemctl restart splatd || die "systemctl restart splatd (WatchdogSec=4s drop-in)"
	pid=$(main_pid)
	sleep 5 # longer than WatchdogSec: the pings alone keep it alive
	[ "$(main_pid)" = "$pid" ] || die "splatd was restarted while running normally with WatchdogSec=4s (pings too rare?)"
	cursor=$(inside journalctl -n 0 --show-cursor -q | sed -n 's/^-- cursor: //p')
	inside kill -STOP "$pid"
	# Through a file, not a pipe: grep -q exits at its match, and journalctl,
	# still writing the stopped process's goroutine dump, dies of SIGPIPE,
	# which pipefail takes for a failed check (a CI run missed the line so).
	watchdog_fired() { journal_after "$cursor" -u splatd >"$work/watchdog.log" && grep -q "Failed with result 'watchdog'" "$work/watchdog.log"; }
	poll 30 watchdog_fired ||
		die "no watchdog kill 30s after SIGSTOP of PID $pid:$(printf '\n    %s' "$(journal_after "$cursor" -u splatd | grep -v '^ ' | tail -5)")"
	restarted() { [ "$(inside systemctl is-active splatd)" = active ] && p=$(main_pid) && [ "$p" != 0 ] && [ "$p" != "$pid" ]; }
	wait_for 30 "splatd was not restarted after the watchdog kill" restarted
	pid=$(main_pid)
	ok "watchdog: stopped process killed, result 'watchdog', restarted (main PID $pid)"
fi

if ! skipped reload; then
	[ -n "$(show ExecReload)" ] || die "the unit has no ExecReload="
	cursor=$(inside journalctl -n 0 --show-cursor -q | sed -n 's/^-- cursor: //p')
	inside systemctl reload splatd || die "systemctl reload splatd failed"
	# splatd's own JSON line (PID 1's "Reloading…" lines are not JSON).
	reload_logged() { journal_after "$cursor" -u splatd >"$work/reload.log" && grep -q '"message":"config reloaded"' "$work/reload.log"; }
	poll 10 reload_logged ||
		die "splatd logged no line containing \"reload\" after systemctl reload (now $(inside systemctl is-active splatd || true), main PID $(main_pid || true), was $pid)"
	sleep 1
	[ "$(inside systemctl is-active splatd)" = active ] || die "splatd is not active after systemctl reload"
	[ "$(main_pid)" = "$pid" ] || die "the main PID changed on reload ($pid -> $(main_pid)): splatd was restarted, not reloaded"
	ok "reload: still active, same main PID $pid, logged: $(journal_after "$cursor" -u splatd | grep '"message":"config reloaded"' | head -1 | cut -c1-100)"
fi

say "passed"
