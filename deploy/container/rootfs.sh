#!/bin/sh
# deploy/container/rootfs.sh: lay out the files of splatd's image in a folder,
# for the Dockerfile's last stage to copy. Both ways of building the image use
# it, so they cannot drift apart:
#   - the Dockerfile's `build` stage (docker build anywhere), inside golang:*;
#   - deploy/container/build.sh (make image), on the host, with no registry.
#
#   sh deploy/container/rootfs.sh OUT BINARY CA_BUNDLE
#
# OUT/system/  root-owned: the binary, the CA bundle, passwd/group, the config
# OUT/user/    owned by the image's user when copied: the /state and /watch
#              mount points (a named volume copies its mount point's owner)
# POSIX sh only: the golang image has no bash guarantees, and neither need any.
set -eu
[ $# = 3 ] || { echo "usage: $0 OUT BINARY CA_BUNDLE" >&2; exit 2; }
out=$1 bin=$2 ca=$3
here=$(dirname "$0")
# The image's user: no name in a real passwd database of anyone, 65532 as in
# distroless's "nonroot", so Kubernetes' runAsUser/fsGroup examples stay valid.
uid=65532

[ -s "$ca" ] || { echo "$0: no CA bundle at $ca (install ca-certificates)" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out/system/usr/local/bin" "$out/system/etc/ssl/certs" "$out/system/etc/splatd" \
	"$out/user/state" "$out/user/watch"
cp "$bin" "$out/system/usr/local/bin/splatd"
chmod 0755 "$out/system/usr/local/bin/splatd"
cp "$ca" "$out/system/etc/ssl/certs/ca-certificates.crt"
cp "$here/config.yaml" "$out/system/etc/splatd/config.yaml"
printf 'root:x:0:0:root:/:/sbin/nologin\nsplatd:x:%s:%s:splatd:/state:/sbin/nologin\n' "$uid" "$uid" >"$out/system/etc/passwd"
printf 'root:x:0:\nsplatd:x:%s:\n' "$uid" >"$out/system/etc/group"
chmod 0644 "$out/system/etc/passwd" "$out/system/etc/group" "$out/system/etc/ssl/certs/ca-certificates.crt" \
	"$out/system/etc/splatd/config.yaml"
chmod 0755 "$out/user/state" "$out/user/watch"
