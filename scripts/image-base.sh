#!/usr/bin/env bash
# Base root filesystem for Carme's container images on the test bed (no registry is reachable here): a Debian
# bookworm minbase from this host's configured apt sources, with the mount points ch-run needs for the
# session's binds (its images are read-only, so a bind destination must exist in the image). Built once per
# recipe into /var/cache/carme/images/base-bookworm (override: CARME_IMAGE_BASE); prints the directory.
# Real sites build from their registry's images with `apptainer build` instead (images/README.md).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
BASE=${CARME_IMAGE_BASE:-/var/cache/carme/images/base-bookworm}
SUITE=bookworm
recipe=$(sha256sum "$here/image-base.sh" | cut -c1-16)
# one build at a time: under `make test` the demo's session images and the host tests may both want the base
mkdir -p "$(dirname "$BASE")"
exec 9> "$(dirname "$BASE")/.base.lock"
flock 9
if [ -f "$BASE/.carme-recipe" ] && [ "$(cat "$BASE/.carme-recipe")" = "$recipe" ]; then
  echo "$BASE"
  exit 0
fi
mirror=$(bash "$here/debian-mirror.sh")
work=$(mktemp -d "$(dirname "$BASE")/.base.XXXXXX" 2>/dev/null || { mkdir -p "$(dirname "$BASE")"; mktemp -d "$(dirname "$BASE")/.base.XXXXXX"; })
trap 'rm -rf "$work"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
  "$SUITE" "$work/rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log" >&2; exit 1; }
rootfs=$work/rootfs
chroot "$rootfs" apt-get clean
rm -rf "$rootfs/var/lib/apt/lists/"*
# mount points for the session's binds (scratch, datasets) and the app environment's prefix
mkdir -p "$rootfs/scratch" "$rootfs/data" "$rootfs/opt/carme" "$rootfs/mnt"
for i in 0 1 2 3 4 5 6 7 8 9; do mkdir -p "$rootfs/mnt/$i"; done
echo "$recipe" > "$rootfs/.carme-recipe"
rm -rf "$BASE"
mv "$rootfs" "$BASE"
echo "$BASE"
