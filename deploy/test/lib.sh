# deploy/test/lib.sh: helpers shared by the lanes in deploy/test/ (sourced,
# not run). Every wait is bounded; every apt call is retried and timed out.

export DEBIAN_FRONTEND=noninteractive

# Progress lines carry the seconds since the lane started.
say() { printf '== %s [%3ss]: %s\n' "$LANE" "$SECONDS" "$*"; }
die() {
	printf '\n!! %s: FAILED: %s\n\n' "$LANE" "$*" >&2
	exit 1
}
# A command that fails outside a check (set -e) says where, instead of
# ending the lane silently.
set -E
trap 'printf "\n!! %s: FAILED: line %s: %s (exit %s)\n\n" "$LANE" "$LINENO" "$BASH_COMMAND" "$?" >&2' ERR

ok() { printf '   ok   [%3ss] %s\n' "$SECONDS" "$*"; }

# retry CMD...: three tries, so that a mirror's passing hiccup does not fail CI.
retry() {
	local n
	for n in 1 2 3; do
		"$@" </dev/null && return 0
		echo "$LANE: '$*' failed (try $n of 3)" >&2
		sleep $((n * 5))
	done
	return 1
}

apt_updated=0
# apt_install PKG...: Debian packages, each apt call bounded by 10 minutes.
apt_install() {
	if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
		die "need the Debian package(s) $* (run as root on Debian, or install them)"
	fi
	say "installing $* (apt)"
	if [ "$apt_updated" = 0 ]; then
		retry timeout 600 apt-get update -qq || die "apt-get update"
		apt_updated=1
	fi
	retry timeout 600 apt-get install -y -qq --no-install-recommends "$@" >/dev/null ||
		die "apt-get install $*"
}

# poll SECONDS CMD...: run CMD every 0.2 s until it succeeds (0) or SECONDS
# have passed (1).
poll() {
	local deadline=$((SECONDS + $1))
	shift
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.2
	done
}

# wait_for SECONDS WHAT CMD...: poll, and fail with WHAT after SECONDS.
wait_for() {
	local limit=$1 what=$2
	shift 2
	poll "$limit" "$@" || die "$what (waited ${limit}s)"
}

# free_port: a loopback TCP port nobody listens on right now.
free_port() {
	local p n
	for n in $(seq 1 50); do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return 0
		fi
	done
	return 1
}

# http_get URL: the body, or failure; bounded to 5 s. curl when present,
# else bash's /dev/tcp (plain http on loopback only).
http_get() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsS --max-time 5 "$1"
		return
	fi
	local rest=${1#http://} hostport path
	hostport=${rest%%/*}
	path=/${rest#*/}
	timeout 5 bash -c '
		exec 3<>"/dev/tcp/${1%:*}/${1##*:}" || exit 1
		printf "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n" "$2" "$1" >&3
		resp=$(cat <&3)
		case ${resp%%$'"'"'\r'"'"'*} in *" 200 "*) ;; *) exit 1 ;; esac
		printf "%s" "${resp#*$'"'"'\r\n\r\n'"'"'}"
	' _ "$hostport" "$path"
}

# start_sim DIR: the API simulator (bin/splatd sim) on a free loopback port,
# files in DIR. Sets SIM_PID, SIM_URL, SIM_CA, SIM_TOKEN.
start_sim() {
	local dir=$1
	mkdir -p "$dir"
	"$SPLATD" sim -listen 127.0.0.1:0 -dir "$dir" -processing-delay 300ms \
		>"$dir/sim.out" 2>"$dir/sim.log" &
	SIM_PID=$!
	wait_for 20 "the simulator printed its address ($dir/sim.out)" grep -q '^config:' "$dir/sim.out"
	SIM_URL=$(sed -n 's/^base_url: *//p' "$dir/sim.out")
	SIM_CA=$(sed -n 's/^ca_file: *//p' "$dir/sim.out")
	SIM_TOKEN=$(sed -n 's/^token: *//p' "$dir/sim.out")
	[ -n "$SIM_URL" ] && [ -n "$SIM_CA" ] && [ -n "$SIM_TOKEN" ] || die "could not read the simulator's output: $(cat "$dir/sim.out")"
}

# json_field FILE KEY: the first "KEY": "value" string in a JSON file (the
# daemon's receipts and `jobs -json` are flat enough for this).
json_field() {
	sed -n "s/^ *\"$2\": *\"\\([^\"]*\\)\".*/\\1/p" "$1" | head -1
}
