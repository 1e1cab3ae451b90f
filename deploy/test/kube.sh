#!/usr/bin/env bash
# deploy/test/kube.sh: run deploy/kubernetes/sidecar.yaml and fleet.yaml for
# real with `podman kube play`, against the API simulator on loopback
# (make test-kube, after make image).
#
# Checks, each one a failure when its subject is broken:
#   sidecar: the pod starts, a file put into its inbox is published (the
#     manifest writes no receipt and deletes what it published: the job is
#     checked in the daemon's database, and the file gone), and the pod
#     stops on SIGTERM, splatd exiting 0 ("stopped cleanly"), before
#     `podman kube down` removes it (see down below).
#   fleet: three daemons (replicas: 3) start on one shared folder that
#     already holds FILES files; every file gets one "done" receipt, the
#     account holds exactly FILES splats (each file published once), each
#     daemon's job of each file is done, and all three stop cleanly as the
#     sidecar does.
#
# The manifests are the user's, rewritten only where this machine differs
# from a cluster (each rewrite is named below): the image is the local one;
# the config's base_url, ca_file (the simulator's CA, added to the
# ConfigMap), settle, poll and metrics address point at the simulator on
# loopback; hostNetwork: true, because podman's pod network is a private
# range and the test only talks to 127.0.0.1 (and so no ports:, which
# podman refuses with the host's network); the Secret (a kind podman
# 4.3 does not play) becomes a podman secret of the same name, and its
# volume says optional: false (podman 4.3 dereferences the field unset); the
# sidecar's capture container, whose busybox image cannot be pulled here,
# runs the splatd image's `sim` as an idle stand-in. Podman 4.3 plays Pod,
# Deployment, PersistentVolumeClaim and ConfigMap (no Secret, DaemonSet or
# Job), and makes an emptyDir a named volume shared by every replica, so the
# fleet's per-pod state emptyDir is dropped and each container gets the
# image's own anonymous /state volume instead.
set -euo pipefail
cd "$(dirname "$0")/../.."
LANE=test-kube
. deploy/test/lib.sh

export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/container/containers.conf}
export CONTAINERS_STORAGE_CONF=${CONTAINERS_STORAGE_CONF:-$PWD/deploy/container/storage.conf}
IMAGE=${SPLATD_IMAGE:-localhost/splatd:latest}
SPLATD=$PWD/bin/splatd
FILES=${SPLATD_KUBE_FILES:-12}
STOP_LIMIT=30 # seconds for kube down; the manifests give a 90 s grace

command -v podman >/dev/null 2>&1 || die "podman is missing: run make image first (it installs podman)"
podman image exists "$IMAGE" || die "no image $IMAGE: run make image first"
[ -x "$SPLATD" ] || die "bin/splatd is missing: run make build"
# A pod's infra container is built locally from catatonit (no registry).
command -v catatonit >/dev/null 2>&1 || [ -x /usr/libexec/podman/catatonit ] || apt_install catatonit

work=$(mktemp -d /tmp/splatd-test-kube.XXXXXX)
SIM_PID=
played=()
cleanup() {
	local rc=$?
	if [ "$rc" != 0 ]; then
		for c in $(podman ps -a --format '{{.Names}}' | grep -E '^(scanner|splatd-fleet)-pod-[0-9]+-splatd$' || true); do
			echo "--- $c log (last 20 lines)" >&2
			podman logs --tail 20 "$c" >&2 2>&1 || true
		done
	fi
	for m in "${played[@]}"; do
		(cd "$work" && timeout 60 podman kube down "$m" >/dev/null 2>&1) || true
	done
	timeout 30 podman secret rm splatd-token >/dev/null 2>&1 || true
	for v in inbox splatd-state splatd-inbox splatd-config splatd-fleet-config splatd-token $(cat "$work/anon-volumes" 2>/dev/null); do
		timeout 30 podman volume rm -f "$v" >/dev/null 2>&1 || true
	done
	[ -z "$SIM_PID" ] || kill "$SIM_PID" 2>/dev/null || true
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for v in inbox splatd-state splatd-inbox splatd-config splatd-fleet-config splatd-token; do
	! podman volume exists "$v" || die "a podman volume named $v exists already (another run of this lane?); remove it first"
done
podman secret inspect splatd-token >/dev/null 2>&1 && die "a podman secret splatd-token exists already; remove it first"

start_sim "$work/sim"
say "simulator at $SIM_URL ($(podman --version))"
user=$(podman image inspect -f '{{.Config.User}}' "$IMAGE")
uid=${user%%:*}

# The Secret the manifests mount, as podman keeps one: the Kubernetes
# Secret's YAML, which kube play turns into files per key. Podman 4.3 writes
# a data value as it stands; 4.4 and later decode it, as Kubernetes does.
make_secret() {
	local token_data
	token_data=$(printf '%s' "$SIM_TOKEN" | base64 -w0)
	case $(podman version --format '{{.Client.Version}}') in
	[0-3].* | 4.[0-3].*) token_data=$SIM_TOKEN ;;
	esac
	printf 'apiVersion: v1\nkind: Secret\nmetadata: {name: splatd-token}\ndata: {token: "%s"}\n' "$token_data" >"$work/secret.yaml"
	podman secret create splatd-token "$work/secret.yaml" >/dev/null
}
make_secret

# render MANIFEST OUT PORT: the manifest with this machine's rewrites.
render() {
	local in=$1 out=$2 port=$3
	awk -v url="$SIM_URL" -v image="$IMAGE" -v port="$port" -v ca="$SIM_CA" '
		function cablock(   line) {
			print "  ca.pem: |"
			while ((getline line < ca) > 0) print "    " line
			close(ca)
		}
		/^data:$/ { print; data = 1; next }
		data && /^---/ { data = 0 }
		/^      base_url: / { print "      base_url: " url; print "      ca_file: /etc/splatd/ca.pem"; next }
		/^    settle: / { print "    settle: 1s"; next }
		/^        poll_interval: / { print "        poll_interval: 1s"; next }
		/^      listen: "0.0.0.0:9464"/ { print "      listen: \"127.0.0.1:" port "\""; next }
		/^          image: splatd:latest/ { print "          image: " image; next }
		/^          image: busybox/ { print "          image: " image; next }
		/^          command: \["sh", "-c"/ { print "          command: [\"/usr/local/bin/splatd\", \"sim\", \"-listen\", \"127.0.0.1:0\"]"; next }
		/^      terminationGracePeriodSeconds:/ { print; print "      hostNetwork: true"; next }
		/^            secretName: / { print; print "            optional: false"; next }
		/^          ports:$/ { getline; next }
		/^            - \{name: state, mountPath: \/state\}/ && dropstate { next }
		/^        - name: state$/ && dropstate { skip = 1; next }
		skip && /^        - name: / { skip = 0 }
		skip { next }
		/^    log: / && data { print; cablock(); next }
		{ print }
	' dropstate="$4" "$in" >"$out"
	for want in "base_url: $SIM_URL" "ca_file: /etc/splatd/ca.pem" "image: $IMAGE" "hostNetwork: true" "settle: 1s" "ca.pem: |" "listen: \"127.0.0.1:$port\""; do
		grep -qF "$want" "$out" || die "$in no longer has the lines this test rewrites ($want): update deploy/test/kube.sh"
	done
}

# volume_dir NAME: a named volume's folder on this host.
volume_dir() { podman volume inspect -f '{{.Mountpoint}}' "$1"; }

# play MANIFEST: podman kube play, remembered for kube down.
play() {
	(cd "$work" && timeout 120 podman kube play --build=false "$1" >"$work/play.out" 2>&1) ||
		die "podman kube play $(basename "$1"): $(cat "$work/play.out")"
	played+=("$1")
}

# down MANIFEST PREFIX: the pods of PREFIX stopped with the manifests'
# grace (podman pod stop -t 90: podman 4.3's kube down stops with a timeout
# of 0, a SIGKILL at once, where Kubernetes gives
# terminationGracePeriodSeconds), within STOP_LIMIT; each splatd container
# exited 0 having logged "stopped cleanly" (SIGTERM honoured); then
# `podman kube down` removes what kube play made.
down() {
	local m=$1 prefix=$2 start took c cs pods n=0 pids=()
	cs=$(podman ps --format '{{.Names}}' | grep -E "^$prefix-pod-[0-9]+-splatd\$" || true)
	pods=$(podman pod ps --format '{{.Name}}' | grep -E "^$prefix-pod-[0-9]+\$" || true)
	[ -n "$cs" ] && [ -n "$pods" ] || die "no running splatd container of $prefix before stopping it"
	for c in $cs; do
		podman logs -f "$c" >"$work/$c.log" 2>&1 &
		pids+=($!)
	done
	start=$SECONDS
	# shellcheck disable=SC2086 # one word per pod
	timeout 120 podman pod stop -t 90 $pods >"$work/stop.out" 2>&1 || die "podman pod stop: $(cat "$work/stop.out")"
	took=$((SECONDS - start))
	wait "${pids[@]}" || true
	[ "$took" -le "$STOP_LIMIT" ] || die "stopping the $prefix pods took ${took}s (limit ${STOP_LIMIT}s)"
	for c in $cs; do
		code=$(podman inspect -f '{{.State.ExitCode}}' "$c")
		[ "$code" = 0 ] || die "$c exited with code $code on SIGTERM (137: killed after the grace)"
		# The follower (podman logs -f) has been seen to capture nothing
		# at all under podman 4.3; the stopped container's whole log is
		# still there until kube down, so read it again before judging.
		grep -q 'stopped cleanly' "$work/$c.log" || podman logs "$c" >"$work/$c.log" 2>&1 || true
		grep -q 'stopped cleanly' "$work/$c.log" || die "$c did not log \"stopped cleanly\" on SIGTERM"
		n=$((n + 1))
	done
	(cd "$work" && timeout 120 podman kube down "$m" >"$work/down.out" 2>&1) || die "podman kube down $(basename "$m"): $(cat "$work/down.out")"
	played=("${played[@]/$m/}")
	! podman pod ps --format '{{.Name}}' | grep -qE "^$prefix-pod-" || die "pods of $prefix left after podman kube down"
	ok "$n splatd container(s) of $prefix exited 0 (\"stopped cleanly\") within ${took}s of SIGTERM; podman kube down removed the pods"
}

# --- the sidecar ------------------------------------------------------------
port=$(free_port) || die "no free loopback port"
render deploy/kubernetes/sidecar.yaml "$work/sidecar.yaml" "$port" ""
say "podman kube play sidecar.yaml"
play "$work/sidecar.yaml"
ready() { [ "$(http_get "http://127.0.0.1:$port/readyz")" = ready ]; }
wait_for 60 "the sidecar's /readyz on 127.0.0.1:$port did not answer \"ready\"" ready
ok "sidecar pod started: splatd answers ready, beside the capture container"
inbox=$(volume_dir inbox)
# The emptyDir is one volume mounted in both containers; the image's user
# must be able to delete what it published there.
chown "$uid" "$inbox"
cp uploader/splatfile/testdata/valid.ply "$inbox/.scan.ply.tmp"
chown "$uid" "$inbox/.scan.ply.tmp"
mv "$inbox/.scan.ply.tmp" "$inbox/scan.ply"
printf 'api: {base_url: "%s", ca_file: "%s"}\nwatch: [{path: "%s"}]\nstate_dir: "%s"\n' \
	"$SIM_URL" "$SIM_CA" "$inbox" "$(volume_dir splatd-state)" >"$work/sidecar-jobs.yaml"
sidecar_done() {
	SPLATD_TOKEN=$SIM_TOKEN timeout 10 "$SPLATD" jobs -config "$work/sidecar-jobs.yaml" -json >"$work/sidecar-jobs.json" 2>/dev/null &&
		grep -q '"stage": "done"' "$work/sidecar-jobs.json"
}
wait_for 60 "the sidecar's job for scan.ply is not done" sidecar_done
[ ! -e "$inbox/scan.ply" ] || die "scan.ply is still in the inbox: the manifest's on_success: delete did not apply"
ok "sidecar published scan.ply (job done, file deleted as the manifest says)"
down "$work/sidecar.yaml" scanner
for v in inbox splatd-state; do podman volume rm -f "$v" >/dev/null; done

# --- the fleet --------------------------------------------------------------
# A simulator of its own: the account's splats are then the fleet's alone.
kill "$SIM_PID" && wait "$SIM_PID" 2>/dev/null || true
SIM_PID=
start_sim "$work/sim-fleet"
say "simulator for the fleet at $SIM_URL"
podman secret rm splatd-token >/dev/null
make_secret
port=$(free_port) || die "no free loopback port"
render deploy/kubernetes/fleet.yaml "$work/fleet.yaml.1" 0 1
# The shared folder exists, filled, before the daemons start, as a NAS
# share would: the claim's named volume is made here, so the manifest's
# PersistentVolumeClaim (which podman would create, refusing an existing
# one) is left out.
awk 'BEGIN { RS = "\n---\n"; ORS = "\n---\n" } !/\nkind: PersistentVolumeClaim\n/' "$work/fleet.yaml.1" >"$work/fleet.yaml"
! grep -q 'kind: PersistentVolumeClaim' "$work/fleet.yaml" && grep -q 'claimName: splatd-inbox' "$work/fleet.yaml" ||
	die "fleet.yaml: could not leave out its PersistentVolumeClaim splatd-inbox"
# Three daemons on one host: each must listen on its own metrics port, and
# 127.0.0.1:0 picks one (the rendered file names port 0).
grep -q 'listen: "127.0.0.1:0"' "$work/fleet.yaml" || die "fleet.yaml: metrics listen not rewritten"
grep -q 'replicas: 3' "$work/fleet.yaml" || die "fleet.yaml no longer runs 3 replicas: update deploy/test/kube.sh"
podman volume create splatd-inbox >/dev/null
shared=$(volume_dir splatd-inbox)
chown "$uid" "$shared"
for i in $(seq 1 "$FILES"); do
	# Distinct content: the sample PLY with a distinct comment line.
	sed "0,/^comment .*/s//comment kube-$i/" uploader/splatfile/testdata/valid.ply >"$shared/scan-$i.ply"
done
chown -R "$uid" "$shared"
say "podman kube play fleet.yaml ($FILES files in the shared folder)"
play "$work/fleet.yaml"
pods=$(podman ps --format '{{.Names}}' | grep -cE '^splatd-fleet-pod-[0-9]+-splatd$' || true)
[ "$pods" = 3 ] || die "$pods splatd-fleet containers running, want 3"
ok "fleet: 3 pods started on one shared folder"
receipts_done() {
	local n=0 f
	for f in "$shared"/scan-*.ply; do
		[ "$(json_field "$f.splat.json" status 2>/dev/null)" = done ] && n=$((n + 1))
	done
	[ "$n" = "$FILES" ]
}
wait_for 180 "not every file of the shared folder has a done receipt" receipts_done
ok "fleet: every one of the $FILES files has a \"done\" receipt"

printf 'api: {base_url: "%s", ca_file: "%s", protocol: v1}\n' "$SIM_URL" "$SIM_CA" >"$work/api.yaml"
SPLATD_TOKEN=$SIM_TOKEN timeout 30 "$SPLATD" splats -config "$work/api.yaml" -all -json >"$work/splats.json" ||
	die "splatd splats against the simulator"
splats=$(grep -o '"ID": *"' "$work/splats.json" | wc -l || true)
[ "$splats" = "$FILES" ] || die "the account holds $splats splats for $FILES files (each must be published once)"
ids=$(for f in "$shared"/scan-*.ply; do json_field "$f.splat.json" id; done | sort -u | wc -l)
[ "$ids" = "$FILES" ] || die "the receipts name $ids distinct splats for $FILES files"
ok "fleet: the account holds exactly $FILES splats, one per file"

# Each daemon's own job of each file is done (its state: the container's
# anonymous /state volume).
n=0
for c in $(podman ps --format '{{.Names}}' | grep -E '^splatd-fleet-pod-[0-9]+-splatd$'); do
	vol=$(podman inspect -f '{{range .Mounts}}{{if eq .Destination "/state"}}{{.Name}}{{end}}{{end}}' "$c")
	[ -n "$vol" ] || die "$c has no /state volume"
	echo "$vol" >>"$work/anon-volumes"
	# A short name for the volume's folder: the admin socket's path in it
	# would pass the 108 bytes a unix socket's address holds.
	ln -s "$(volume_dir "$vol")" "$work/state-$n"
	printf 'api: {base_url: "%s", ca_file: "%s"}\nwatch: [{path: "%s"}]\nstate_dir: "%s"\n' \
		"$SIM_URL" "$SIM_CA" "$shared" "$work/state-$n" >"$work/$c.yaml"
	all_done() {
		SPLATD_TOKEN=$SIM_TOKEN timeout 10 "$SPLATD" jobs -config "$work/$c.yaml" -json -state done >"$work/$c.json" 2>/dev/null &&
			[ "$(grep -c '"stage": "done"' "$work/$c.json")" = "$FILES" ]
	}
	wait_for 120 "$c: not every job of the shared folder is done ($(grep -c '"stage": "done"' "$work/$c.json" 2>/dev/null || echo 0) of $FILES)" all_done
	n=$((n + 1))
done
ok "fleet: each of the $n daemons has its job of every file done"
down "$work/fleet.yaml" splatd-fleet
say "passed"
