#!/usr/bin/env bash
# deploy/test/image.sh: run splatd's image under podman against the API
# simulator on loopback, as a user would (make test-image, after make image).
#
# Checks, each one a failure when its subject is broken:
#   1. the container starts with --read-only and /readyz answers "ready";
#   2. its main process runs as a non-root uid, and its root is read-only;
#   3. a file dropped into the bind-mounted /watch is published: the job is
#      done in the daemon's own database (on the /state volume) and a "done"
#      receipt is written beside the file;
#   4. podman stop (SIGTERM) ends it cleanly (exit 0, "stopped cleanly") within
#      STOP_LIMIT seconds, well inside podman's grace, so no SIGKILL is needed.
# The config is the image's own deploy/container/config.yaml with the API, its
# CA file, the metrics address and settle replaced; the token comes through
# SPLATD_TOKEN, as deploy/README.md says. --network host: the test only ever
# talks to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/../.."
LANE=test-image
. deploy/test/lib.sh

export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/container/containers.conf}
export CONTAINERS_STORAGE_CONF=${CONTAINERS_STORAGE_CONF:-$PWD/deploy/container/storage.conf}
IMAGE=${SPLATD_IMAGE:-localhost/splatd:latest}
SPLATD=$PWD/bin/splatd
STOP_LIMIT=10 # seconds from podman stop to exit; podman gets -t 30
NAME=splatd-test-$$
VOLUME=splatd-test-state-$$

command -v podman >/dev/null 2>&1 || die "podman is missing: run make image first (it installs podman)"
podman image exists "$IMAGE" || die "no image $IMAGE: run make image first"
[ -x "$SPLATD" ] || die "bin/splatd is missing: run make build"

work=$(mktemp -d /tmp/splatd-test-image.XXXXXX)
SIM_PID=
cleanup() {
	local rc=$?
	if [ "$rc" != 0 ] && podman container exists "$NAME" 2>/dev/null; then
		echo "--- container log (last 40 lines)" >&2
		podman logs --tail 40 "$NAME" >&2 2>&1 || true
	fi
	timeout 30 podman rm -f -t 0 "$NAME" >/dev/null 2>&1 || true
	timeout 30 podman volume rm -f "$VOLUME" >/dev/null 2>&1 || true
	[ -z "$SIM_PID" ] || kill "$SIM_PID" 2>/dev/null || true
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

start_sim "$work/sim"
say "simulator at $SIM_URL"

# The image's config with the test's API, CA, port and a short settle.
port=$(free_port) || die "no free loopback port"
sed -e "s#^  base_url: .*#  base_url: $SIM_URL\n  ca_file: /etc/splatd/ca.pem#" \
	-e "s#^  listen: .*#  listen: \"127.0.0.1:$port\"#" \
	-e "s#^settle: .*#settle: 1s#" \
	deploy/container/config.yaml >"$work/config.yaml"
for want in "base_url: $SIM_URL" "ca_file: /etc/splatd/ca.pem" "listen: \"127.0.0.1:$port\"" "settle: 1s" \
	"path: /watch" "state_dir: /state"; do
	grep -q "$want" "$work/config.yaml" ||
		die "deploy/container/config.yaml no longer has the lines this test rewrites or expects ($want): update deploy/test/image.sh"
done
chmod 0644 "$work/config.yaml" "$SIM_CA"

# The watched folder belongs to the image's user, as deploy/README.md asks
# (receipts are written beside the files).
user=$(podman image inspect -f '{{.Config.User}}' "$IMAGE")
mkdir -p "$work/watch"
chown "${user:-0}" "$work/watch"
podman volume create "$VOLUME" >/dev/null

say "podman run --read-only --network host $IMAGE ($(podman --version))"
timeout 60 podman run -d --name "$NAME" --network host --read-only \
	-e SPLATD_TOKEN="$SIM_TOKEN" \
	-v "$work/watch:/watch" -v "$VOLUME:/state" \
	-v "$work/config.yaml:/etc/splatd/config.yaml:ro" -v "$SIM_CA:/etc/splatd/ca.pem:ro" \
	"$IMAGE" >/dev/null || die "podman run"

# 1. ready
ready() { [ "$(http_get "http://127.0.0.1:$port/readyz")" = ready ]; }
wait_for 30 "/readyz on 127.0.0.1:$port did not answer \"ready\"" ready
ok "/readyz answers \"ready\" (read-only root filesystem accepted)"

# 2. user and read-only root, seen from the host
pid=$(podman inspect -f '{{.State.Pid}}' "$NAME")
[ -n "$pid" ] && [ "$pid" != 0 ] || die "no main process for $NAME"
uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status")
[ "$uid" != 0 ] || die "the container's main process runs as root (uid 0); the image must set a non-root USER"
ok "main process runs as uid $uid"
[ "$(podman inspect -f '{{.HostConfig.ReadonlyRootfs}}' "$NAME")" = true ] || die "the container's root is not read-only"
if touch "/proc/$pid/root/usr/local/bin/.probe" 2>/dev/null; then
	die "wrote into the container's root filesystem: it is not read-only"
fi
ok "root filesystem is read-only"

# 3. a file is published
cp uploader/splatfile/testdata/valid.ply "$work/watch/.scan.ply.tmp"
mv "$work/watch/.scan.ply.tmp" "$work/watch/scan.ply"
receipt=$work/watch/scan.ply.splat.json
receipt_done() { [ -s "$receipt" ] && [ "$(json_field "$receipt" status)" = done ]; }
wait_for 60 "no \"done\" receipt for scan.ply ($(cat "$receipt" 2>/dev/null || echo none))" receipt_done
ok "receipt scan.ply.splat.json says done (splat $(json_field "$receipt" url))"
state=$(podman volume inspect -f '{{.Mountpoint}}' "$VOLUME")
printf 'api: {base_url: "%s", ca_file: "%s"}\nwatch: [{path: "%s"}]\nstate_dir: "%s"\n' \
	"$SIM_URL" "$SIM_CA" "$work/watch" "$state" >"$work/jobs.yaml"
SPLATD_TOKEN=$SIM_TOKEN timeout 10 "$SPLATD" jobs -config "$work/jobs.yaml" -json >"$work/jobs.json" ||
	die "splatd jobs through the admin socket on the /state volume"
grep -q '"stage": "done"' "$work/jobs.json" && grep -q '"file": "/watch/scan.ply"' "$work/jobs.json" ||
	die "the daemon's job for /watch/scan.ply is not done: $(cat "$work/jobs.json")"
ok "job for /watch/scan.ply is done in the job database on the /state volume"

# 4. SIGTERM
start=$(date +%s.%N)
timeout 60 podman stop -t 30 "$NAME" >/dev/null || die "podman stop"
took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
code=$(podman inspect -f '{{.State.ExitCode}}' "$NAME")
[ "$code" = 0 ] || die "exit code $code after podman stop (137 = killed after the grace: SIGTERM ignored)"
awk -v t="$took" -v l="$STOP_LIMIT" 'BEGIN {exit !(t < l)}' || die "podman stop took ${took}s (limit ${STOP_LIMIT}s)"
podman logs "$NAME" 2>&1 | grep -q '"stopped cleanly' || die "no \"stopped cleanly\" in the log after SIGTERM"
ok "podman stop: exit 0 in ${took}s, \"stopped cleanly\""
say "passed"
