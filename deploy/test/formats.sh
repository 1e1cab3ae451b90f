#!/usr/bin/env bash
# make test-formats: every format splatd takes, judged by the official
# converter. Installs PlayCanvas splat-transform (pinned, from npm) into
# $HOME/.cache/splatd-ci/splat-transform, then runs the Go tests named
# TestSplatTransform... with SPLATD_SPLAT_TRANSFORM set to it: generated
# scenes (5,000 and 20,000 splats, SH 0 and 3, fixed seeds) converted into
# every output splat-transform writes that splatd takes, each file accepted by
# the validators and its truncated and corrupted copies rejected; the same
# files through `splatd validate`. The SOG encoder's tests share the prefix
# and the variable, so this lane runs them too. Skips, loudly, only when the
# npm registry cannot be reached.
set -euo pipefail
cd "$(dirname "$0")/../.."

ST_VERSION=3.7.0
ST_DIR=$HOME/.cache/splatd-ci/splat-transform
ST=$ST_DIR/node_modules/.bin/splat-transform
GO=${GO:-go}
t0=$SECONDS

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "formats: installing Debian's nodejs and npm"
  export DEBIAN_FRONTEND=noninteractive
  (apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm) </dev/null >/dev/null
fi
echo "formats: node $(node --version), npm $(npm --version)"

mkdir -p "$ST_DIR"
# One install at a time into the shared cache (another lane may use it).
exec 9>"$ST_DIR.lock"
flock 9
# st_ok: the installed CLI is the pinned version (it prints it on stderr).
st_ok() { [ -x "$ST" ] && case "$("$ST" --version 2>&1)" in *"v$ST_VERSION "*) true ;; *) false ;; esac; }
if st_ok; then
  echo "formats: splat-transform $ST_VERSION already in $ST_DIR"
else
  echo "formats: installing @playcanvas/splat-transform@$ST_VERSION into $ST_DIR (npm; it asks for node 22, runs on 20)"
  if ! npm install --prefix "$ST_DIR" --engine-strict=false --no-audit --no-fund --save-exact \
      "@playcanvas/splat-transform@$ST_VERSION" >"$ST_DIR.install.log" 2>&1; then
    if ! npm view "@playcanvas/splat-transform@$ST_VERSION" version >/dev/null 2>&1; then
      echo "##########################################################################" >&2
      echo "formats: SKIPPED: the npm registry is unreachable; splat-transform cannot" >&2
      echo "formats: be installed, so NO FORMAT WAS CHECKED against the converter." >&2
      echo "##########################################################################" >&2
      exit 0
    fi
    echo "formats: FAILED to install splat-transform (the registry answers):" >&2
    tail -20 "$ST_DIR.install.log" >&2
    exit 1
  fi
fi
st_ok || { echo "formats: $ST is not version $ST_VERSION" >&2; exit 1; }
flock -u 9

export SPLATD_SPLAT_TRANSFORM=$ST
keep=$(mktemp -d)
trap 'rm -rf "$keep"' EXIT
export SPLATD_FORMATS_KEEP=$keep
log=$keep/go-test.log
echo "formats: go test -run SplatTransform ./uploader/... (splat-transform converts on the CPU: minutes)"
set +e
$GO test -count=1 -timeout 40m -v -run SplatTransform ./uploader/... >"$log" 2>&1
rc=$?
set -e
grep -E '^ *--- |^(ok|FAIL|panic)|splat-transform lane:|_test.go:[0-9]+:' "$log" | grep -v 'no tests to run' || true
[ "$rc" = 0 ] || { echo "formats: go test FAILED (exit $rc)" >&2; exit 1; }

# The same files through the command users run: every one must be "ok".
$GO build -o "$keep/splatd" ./cmd/splatd
mapfile -t files < <(find "$keep/files" -type f \( -name '*.ply' -o -name '*.sog' -o -name '*.spz' -o -name meta.json \) | sort)
[ "${#files[@]}" -gt 0 ] || { echo "formats: the tests kept no files to validate" >&2; exit 1; }
if ! "$keep/splatd" validate "${files[@]}" >"$keep/validate.out"; then
  cat "$keep/validate.out" >&2
  echo "formats: splatd validate rejected a file splat-transform wrote" >&2
  exit 1
fi
sed "s#$keep/files/##" "$keep/validate.out"
echo "formats: splatd validate accepted all ${#files[@]} files"
echo "formats: passed in $((SECONDS - t0)) s"
