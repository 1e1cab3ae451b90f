#!/usr/bin/env bash
# deploy/container/build.sh: build splatd's image with buildah, without a
# registry (make image). Installs buildah, podman and runc from Debian when
# they are missing (root and apt needed then).
#
#   bash deploy/container/build.sh        # after make build
#
# The binary bin/splatd (static, CGO_ENABLED=0: make build) and this machine's
# CA bundle are laid out by deploy/container/rootfs.sh in bin/image-context,
# and deploy/container/Dockerfile is built with ROOTFS=context, which skips
# its golang stage. Tag: $SPLATD_IMAGE (localhost/splatd:latest); the image it
# replaces is removed. podman sees the image in the same storage.
# Environment: VERSION (git describe), SPLATD_IMAGE, CONTAINERS_CONF,
# CONTAINERS_STORAGE_CONF (default: the files beside this script).
set -euo pipefail
cd "$(dirname "$0")/../.."
LANE=image
. deploy/test/lib.sh

export CONTAINERS_CONF=${CONTAINERS_CONF:-$PWD/deploy/container/containers.conf}
export CONTAINERS_STORAGE_CONF=${CONTAINERS_STORAGE_CONF:-$PWD/deploy/container/storage.conf}
IMAGE=${SPLATD_IMAGE:-localhost/splatd:latest}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

missing=()
for tool in buildah podman runc; do
	command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ -s "$CA_BUNDLE" ] || missing+=(ca-certificates)
[ ${#missing[@]} = 0 ] || apt_install "${missing[@]}"

[ -x bin/splatd ] || die "bin/splatd is missing: run make build (make image does)"
# A dynamically linked binary would find no loader on scratch.
if LC_ALL=C grep -qa 'ld-linux' bin/splatd; then
	die "bin/splatd is dynamically linked; build it with CGO_ENABLED=0 (make build does)"
fi

say "laying out bin/image-context (deploy/container/rootfs.sh)"
rm -rf bin/image-context
mkdir -p bin/image-context
sh deploy/container/rootfs.sh bin/image-context/rootfs bin/splatd "$CA_BUNDLE"

say "buildah bud -> $IMAGE ($(buildah --version))"
# buildah 1.28 commits the alias stage (FROM rootfs-${ROOTFS}) as an untagged
# image and leaves a working container on it; remove what this build leaves,
# not anybody else's.
containers_before=$(buildah containers -q | sort)
dangling_before=$(podman images -q --filter dangling=true | sort)
timeout 300 buildah bud --isolation chroot --pull=never --layers=false --quiet \
	-f deploy/container/Dockerfile --build-arg ROOTFS=context --build-arg VERSION="$VERSION" \
	-t "$IMAGE" bin/image-context >/dev/null ||
	die "buildah bud"
for id in $(comm -13 <(echo "$containers_before") <(buildah containers -q | sort)); do
	buildah rm "$id" >/dev/null 2>&1 || true
done
for id in $(comm -13 <(echo "$dangling_before") <(podman images -q --filter dangling=true | sort)); do
	podman rmi "$id" >/dev/null 2>&1 || true
done
say "built $IMAGE ($(podman image inspect -f '{{.Size}}' "$IMAGE") bytes)"
