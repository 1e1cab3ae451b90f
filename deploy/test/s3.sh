#!/usr/bin/env bash
# make test-s3: the S3 lane. Installs the pinned versitygw (a real S3 server)
# into .tools/ (skipped when present), starts it on a free loopback port with
# a temporary directory, creates a bucket, and runs the tests that need it
# (SPLATD_TEST_S3 set): the simulator's S3 storage (uploader/apisim) and
# splatd end to end on it (cmd/splatd, both protocols). Loopback only.
set -euo pipefail
cd "$(dirname "$0")/../.."

VERSITYGW_VERSION=v1.8.0
TOOLS=$PWD/.tools
GW=$TOOLS/versitygw
GO=${GO:-go}

# The binary says "Version: git"; its build info names the module version.
if [ -x "$GW" ] && $GO version -m "$GW" 2>/dev/null | grep -Eq "^\s+mod\s+github.com/versity/versitygw\s+$VERSITYGW_VERSION\s"; then
  echo "s3: versitygw $VERSITYGW_VERSION already in .tools/"
else
  echo "s3: installing versitygw $VERSITYGW_VERSION into .tools/ (Go module proxy; about 100 s of compiling on a cold machine)"
  t0=$(date +%s)
  mkdir -p "$TOOLS"
  GOBIN=$TOOLS $GO install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
  echo "s3: installed in $(( $(date +%s) - t0 )) s"
fi
command -v curl >/dev/null || {
  echo "s3: installing curl (Debian package) to create the bucket"
  (apt-get update -qq && apt-get install -y -qq --no-install-recommends curl) >/dev/null
}

# free_port: a random port in 20000..59999 that nothing listens on now.
free_port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
}

work=$(mktemp -d)
gw_pid=
cleanup() {
  if [ -n "$gw_pid" ]; then kill "$gw_pid" 2>/dev/null || true; wait "$gw_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

access=splatd-lane secret=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n') bucket=splats
mkdir -p "$work/data"
for try in 1 2 3; do
  port=$(free_port)
  ROOT_ACCESS_KEY_ID=$access ROOT_SECRET_ACCESS_KEY=$secret \
    "$GW" --port "127.0.0.1:$port" --health /health -q posix "$work/data" >"$work/versitygw.log" 2>&1 &
  gw_pid=$!
  # The banner comes before the port is bound: poll /health.
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    kill -0 "$gw_pid" 2>/dev/null || break
    sleep 0.05
  done
  if curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
  echo "s3: versitygw did not come up on port $port (try $try):"; cat "$work/versitygw.log"
  kill "$gw_pid" 2>/dev/null || true; wait "$gw_pid" 2>/dev/null || true; gw_pid=
  [ "$try" = 3 ] && exit 1
done
echo "s3: versitygw $VERSITYGW_VERSION on 127.0.0.1:$port (pid $gw_pid), data in $work/data"

# CreateBucket, signed with SigV4 by curl; versitygw wants the payload hash.
empty_sha=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
code=$(curl -s -o "$work/mb.xml" -w '%{http_code}' -X PUT -H "x-amz-content-sha256: $empty_sha" \
  --aws-sigv4 "aws:amz:us-east-1:s3" --user "$access:$secret" "http://127.0.0.1:$port/$bucket")
[ "$code" = 200 ] || { echo "s3: CreateBucket answered $code:"; cat "$work/mb.xml"; exit 1; }

export SPLATD_TEST_S3="s3://$access:$secret@127.0.0.1:$port/$bucket"
# -v for the SKIP lines: the v1 end-to-end cases skip (and say so) while
# the daemon has no api.protocol: v1.
set +e
$GO test -race -count=1 -run 'S3' -v ./uploader/apisim/... ./cmd/splatd/ >"$work/test.log" 2>&1
rc=$?
set -e
grep -E '^(--- |ok |FAIL|PASS|panic)|^\s+--- |s3.*_test.go:[0-9]+:' "$work/test.log" || true
if [ $rc -ne 0 ]; then
  echo "s3: FAILED; the full test log:"; cat "$work/test.log"
  echo "s3: versitygw log:"; tail -50 "$work/versitygw.log"
  exit $rc
fi
skipped=$(grep -c -- '--- SKIP' "$work/test.log" || true)
echo "s3: passed ($skipped skipped)"
