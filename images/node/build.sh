#!/usr/bin/env bash
# Build the systemd node image used by the Molecule scenarios and the demo cluster: localhost/carme-node.
# debootstrap from this host's configured apt sources (copied into the image, never a mirror name in the repo),
# plus this host's extra CA certificates. Rebuilt only when this recipe changes (label carme.recipe).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
IMAGE=${CARME_NODE_IMAGE:-localhost/carme-node:debian12}
SUITE=bookworm

recipe=$(cat "$here/build.sh" "$here/packages.txt" | sha256sum | cut -c1-16)
if [ "${1:-}" != "--force" ] && have=$(podman image inspect --format '{{ index .Labels "carme.recipe" }}' "$IMAGE" 2>/dev/null) \
   && [ "$have" = "$recipe" ]; then
  echo "image $IMAGE is up to date (recipe $recipe)"
  exit 0
fi

start=$(date +%s.%N)
work=$(mktemp -d /var/tmp/carme-image.XXXXXX)
rootfs=$work/rootfs
cleanup() { umount -R "$rootfs/proc" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

mirror=$(bash "$here/../../scripts/debian-mirror.sh")

echo "debootstrap $SUITE (minbase)"
debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus,python3,ca-certificates \
  "$SUITE" "$rootfs" "$mirror" > "$work/debootstrap.log" 2>&1 || { tail -30 "$work/debootstrap.log"; exit 1; }

# apt sources of this host (only the Debian ones: deb822 files and sources.list)
rm -f "$rootfs/etc/apt/sources.list"
for f in /etc/apt/sources.list.d/*.sources; do [ -e "$f" ] && cp "$f" "$rootfs/etc/apt/sources.list.d/"; done
[ -f /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list && cp /etc/apt/sources.list "$rootfs/etc/apt/"
# extra CA certificates of this host (TLS interception or site CAs)
if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
fi

printf '#!/bin/sh\nexit 101\n' > "$rootfs/usr/sbin/policy-rc.d"; chmod 755 "$rootfs/usr/sbin/policy-rc.d"
mount -t proc proc "$rootfs/proc"
pkgs=$(grep -vE '^\s*(#|$)' "$here/packages.txt" | tr '\n' ' ')
echo "installing: $pkgs"
# shellcheck disable=SC2086
chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $pkgs" \
  > "$work/apt.log" 2>&1 || { tail -30 "$work/apt.log"; exit 1; }
chroot "$rootfs" update-ca-certificates > /dev/null
umount "$rootfs/proc"
rm -f "$rootfs/usr/sbin/policy-rc.d"

# Roles do the real work: no keys, no enabled cluster services, unique machine ids.
: > "$rootfs/etc/machine-id"; rm -f "$rootfs/var/lib/dbus/machine-id"
rm -f "$rootfs/etc/munge/munge.key"
for svc in munge slurmctld slurmd slurmdbd slurmrestd mariadb mysql; do
  rm -f "$rootfs/etc/systemd/system/multi-user.target.wants/$svc.service"
done
rm -f "$rootfs/etc/systemd/system/mysql.service" "$rootfs/etc/systemd/system/mysqld.service"
# services that cannot work in an unprivileged container
for unit in systemd-remount-fs.service getty@tty1.service console-getty.service systemd-logind.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
chroot "$rootfs" apt-get clean
rm -rf "$rootfs/var/lib/apt/lists/"*; mkdir -p "$rootfs/var/lib/apt/lists/partial"
# an emptied list dir with a fresh mtime makes apt's cache_valid_time skip the update: age it
touch -d @0 "$rootfs/var/lib/apt/lists"

tar --numeric-owner -C "$rootfs" -cf "$work/rootfs.tar" .
podman import --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' \
  --change "LABEL carme.recipe=$recipe" "$work/rootfs.tar" "$IMAGE" > /dev/null
end=$(date +%s.%N)
printf 'built %s (recipe %s) in %.1f s\n' "$IMAGE" "$recipe" "$(echo "$end - $start" | bc 2>/dev/null || python3 -c "print($end-$start)")"
