#!/usr/bin/env bash
# Builds the healthroute image without a daemon and without pulling anything: both release
# binaries, exactly the shared libraries they load, a non-root user (65532), no shell.
#
#   bash images/build.sh                    # tags ghcr.io/healthroute/healthroute:<version>
#   IMAGE=registry.example/hr:dev bash images/build.sh
#   OCI_ARCHIVE=/tmp/healthroute.tar bash images/build.sh   # also write an OCI archive
#
# Needs buildah (Debian's package) and runs as root (buildah's vfs storage, no fuse); prints
# the image name and size last. The contents come from images/rootfs.sh, which the Dockerfile
# runs too, for those who have a Docker engine and a registry to pull the build image from.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
image=${IMAGE:-ghcr.io/healthroute/healthroute:$version}
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}

command -v buildah >/dev/null || { echo "images/build.sh: buildah is not installed (apt-get install buildah)" >&2; exit 1; }

echo "--- release build"
cargo build --release --locked -p healthroute-operator -p healthroute-resolver

rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
echo "--- root filesystem in $rootfs"
bash images/rootfs.sh "${CARGO_TARGET_DIR:-target}/release" "$rootfs"

echo "--- image $image"
start=$(date +%s)
ctr=$(buildah from scratch)
cleanup() { buildah rm "$ctr" >/dev/null 2>&1 || true; rm -rf "$rootfs"; }
trap cleanup EXIT
buildah copy --quiet "$ctr" "$rootfs" / >/dev/null
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
buildah config \
  --user 65532:65532 \
  --workingdir / \
  --entrypoint '["/healthroute-resolver"]' \
  --label org.opencontainers.image.title=healthroute \
  --label "org.opencontainers.image.description=Health-checked DNS routing for Kubernetes: operator and resolver" \
  --label org.opencontainers.image.source=https://github.com/healthroute/healthroute \
  --label "org.opencontainers.image.version=$version" \
  --label "org.opencontainers.image.revision=$revision" \
  --label org.opencontainers.image.licenses=Apache-2.0 \
  "$ctr"
buildah commit --quiet --rm "$ctr" "$image" >/dev/null
ctr=
if [ -n "${OCI_ARCHIVE:-}" ]; then
  rm -f "$OCI_ARCHIVE"
  buildah push --quiet "$image" "oci-archive:$OCI_ARCHIVE:$image"
  echo "OCI archive: $OCI_ARCHIVE"
fi
size=$(buildah images --format '{{.Size}}' "$image" | head -1)
echo "built $image: $size, $(( $(date +%s) - start )) s after the release build"
