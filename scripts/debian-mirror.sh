#!/usr/bin/env bash
# Print the Debian mirror this host's apt uses (deb822 .sources first, then sources.list): debootstrap builds the
# node image (images/node/build.sh) and the session images' base (scripts/image-base.sh) from it, no registry needed.
set -euo pipefail
mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -e "$f" ] || continue
  mirror=$(awk '/^URIs:/{print $2; exit}' "$f"); [ -n "$mirror" ] && break
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1=="deb"{print $2; exit}' /etc/apt/sources.list)
fi
[ -n "$mirror" ] || { echo "debian-mirror.sh: no Debian mirror found in this host's apt sources" >&2; exit 1; }
echo "$mirror"
