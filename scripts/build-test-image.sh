#!/usr/bin/env bash
# Build rondo-test-base:latest without any registry pull: debootstrap a minimal
# Debian bookworm root filesystem with Python and import it into the local engine.
# Idempotent: exits at once when the image already exists (FORCE=1 rebuilds).
set -euo pipefail

IMAGE="${RONDO_TEST_IMAGE:-rondo-test-base:latest}"
SUITE="${SUITE:-bookworm}"
MIRROR="${MIRROR:-http://deb.debian.org/debian}"
# Tool installs run offline (`pip --no-index --find-links /usr/share/python-wheels`):
# python3-venv brings the pip and setuptools wheels there, python3-wheel-whl adds `wheel`,
# which setuptools < 70 needs to build (editable) wheels.
# procps gives `ps`/`kill` for debugging; git lets the LLM-IDE agent submit its diff.
PACKAGES="python3,python3-venv,python3-pip,python3-setuptools,python3-wheel-whl,procps,coreutils,git"
# The image carries its package list as a label: an image built from another list (an older
# checkout's) is built again.
LABEL="rondo.packages=$PACKAGES"

if [[ "${FORCE:-0}" != 1 ]] &&
  [[ "$(docker image inspect --format '{{ index .Config.Labels "rondo.packages" }}' "$IMAGE" 2>/dev/null)" == "$PACKAGES" ]]; then
  echo "$IMAGE already exists"
  exit 0
fi

command -v debootstrap >/dev/null 2>&1 || bash "$(dirname "$0")/apt-install.sh" debootstrap

start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/rondo-rootfs.XXXXXX")
trap 'rm -rf "$work"' EXIT
rootfs="$work/rootfs"

echo "debootstrap $SUITE from $MIRROR into $rootfs"
# A download that fails is tried once more, into a fresh folder.
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR"; then
  echo "debootstrap failed after $(( $(date +%s) - start ))s; trying once more"
  rootfs="$work/rootfs-again"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR"
fi

# Keep the image small: package caches and docs are not needed at run time.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
  "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/locale/*
mkdir -p "$rootfs/tools" "$rootfs/opt/envs" "$rootfs/work"

echo "importing $(du -sm "$rootfs" | cut -f1) MB into docker as $IMAGE ($(( $(date +%s) - start ))s so far)"
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'WORKDIR /work' \
  --change 'CMD ["/bin/bash"]' \
  --change "LABEL $LABEL" \
  - "$IMAGE"

echo "built $IMAGE in $(( $(date +%s) - start ))s"
