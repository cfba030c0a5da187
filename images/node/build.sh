#!/usr/bin/env bash
# Build the systemd node image used by the Molecule scenarios and the demo cluster: localhost/carme-node.
# debootstrap from this host's configured apt sources (copied into the image, never a mirror name in the repo),
# plus this host's extra CA certificates. Rebuilt only when this recipe changes (label carme.recipe).
# CARME_RELEASE chooses the Debian release: trixie (Debian 13, :debian13; the default, from default-release) or
# bookworm (Debian 12, :debian12).
# packages.txt is every release's list; packages-<release>.txt adds that release's own (NAME/sid: from Debian unstable).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
SUITE=${CARME_RELEASE:-$(cat "$here/default-release")}
case $SUITE in
  bookworm) tag=debian12 ;;
  trixie) tag=debian13 ;;
  *) echo "build.sh: CARME_RELEASE must be bookworm or trixie, not '$SUITE'" >&2; exit 2 ;;
esac
IMAGE=${CARME_NODE_IMAGE:-localhost/carme-node:$tag}
case $IMAGE in
  *:debian12 | *:debian13) [ "${IMAGE##*:}" = "$tag" ] \
    || { echo "build.sh: $IMAGE is not a $SUITE image (CARME_RELEASE=$SUITE)" >&2; exit 2; } ;;
esac
# one build per image at a time: two lines of `make test` may ask for Debian 12's at once (the second then finds it
# up to date)
exec 9> "/var/lock/carme-image-$tag.lock"
flock 9
lists=("$here/packages.txt")
[ -f "$here/packages-$SUITE.txt" ] && lists+=("$here/packages-$SUITE.txt")

recipe=$(cat "$here/build.sh" "${lists[@]}" | sha256sum | cut -c1-16)
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

# apt sources of this host (only the Debian ones: deb822 files and sources.list), for another release with the
# host's suite names (bookworm, bookworm-updates, bookworm-security) renamed to the image's, same mirrors
host_suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
sources() { if [ "$host_suite" = "$SUITE" ]; then cat "$1"; else sed -E "/^(Suites:|deb )/s/\b$host_suite\b/$SUITE/g" "$1"; fi; }
rm -f "$rootfs/etc/apt/sources.list"
for f in /etc/apt/sources.list.d/*.sources; do [ -e "$f" ] && sources "$f" > "$rootfs/etc/apt/sources.list.d/${f##*/}"; done
[ -f /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list && sources /etc/apt/sources.list > "$rootfs/etc/apt/sources.list"
# extra CA certificates of this host (TLS interception or site CAs)
if compgen -G "/usr/local/share/ca-certificates/*.crt" > /dev/null; then
  cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
fi

printf '#!/bin/sh\nexit 101\n' > "$rootfs/usr/sbin/policy-rc.d"; chmod 755 "$rootfs/usr/sbin/policy-rc.d"
mount -t proc proc "$rootfs/proc"
all=$(cat "${lists[@]}" | grep -vE '^\s*(#|$)')
pkgs=$(grep -v '/sid$' <<< "$all" | tr '\n' ' ')
sid=$(grep '/sid$' <<< "$all" | tr '\n' ' ' || true)
echo "installing: $pkgs"
# shellcheck disable=SC2086
chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $pkgs" \
  > "$work/apt.log" 2>&1 || { tail -30 "$work/apt.log"; exit 1; }
if [ -n "$sid" ]; then
  # Debian unstable for these packages only (test bed: Apptainer is in no stable release). Its Release file is past
  # Valid-Until on a snapshot-like mirror, so that check is off for this one source; pinned at 100 so nothing else
  # (libc6 above all) comes from it. The source and the pin are removed again: the image keeps only the packages.
  printf 'Types: deb\nURIs: %s\nSuites: sid\nComponents: main\nSigned-By: %s\nCheck-Valid-Until: no\n' \
    "$mirror" /usr/share/keyrings/debian-archive-keyring.gpg > "$rootfs/etc/apt/sources.list.d/carme-sid.sources"
  printf 'Package: *\nPin: release n=sid\nPin-Priority: 100\n' > "$rootfs/etc/apt/preferences.d/carme-sid"
  libc=$(chroot "$rootfs" dpkg-query -W -f '${Version}' libc6)
  echo "installing from sid: $sid"
  # shellcheck disable=SC2086
  chroot "$rootfs" env DEBIAN_FRONTEND=noninteractive sh -c "apt-get update -q && apt-get install -y -q --no-install-recommends $sid" \
    >> "$work/apt.log" 2>&1 || { tail -30 "$work/apt.log"; exit 1; }
  [ "$(chroot "$rootfs" dpkg-query -W -f '${Version}' libc6)" = "$libc" ] || { echo "build.sh: libc6 changed (sid)" >&2; exit 1; }
  rm -f "$rootfs/etc/apt/sources.list.d/carme-sid.sources" "$rootfs/etc/apt/preferences.d/carme-sid"
fi
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
