#!/usr/bin/env bash
# Build the demo's session images (Charliecloud directory images) on this host, once per recipe, into
# /var/lib/carme/images (override: CARME_SESSION_IMAGES), which the demo nodes mount read-only at the same path.
#   scripts/session-images.sh [NAME...]      (default: base)
# Each image's catalogue reference (PATH@sha256:DIGEST) is in DEST/carme-NAME-VERSION.ref for the inventory.
# First run: about 51 s for the debootstrap base (cached in /var/cache/carme/images) + 49 s per image.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dest=${CARME_SESSION_IMAGES:-/var/lib/carme/images}
py=${PYTHON:-$repo/.venv/bin/python}
mkdir -p "$dest"
for name in "${@:-base}"; do
  # the recipe: the definition, its parents (carme/<name>:<version>), the base script and the builder
  recipe=$(cat "$repo/images/session/"*.def "$repo/scripts/image-base.sh" "$repo/carme_admin/images.py" | sha256sum | cut -c1-16)
  stamp="$dest/.$name.recipe"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$recipe" ] && ls "$dest"/carme-"$name"-*.ref >/dev/null 2>&1; then
    echo "session image $name is up to date (recipe $recipe)"
    continue
  fi
  start=$(date +%s)
  (cd "$repo" && "$py" -m carme_admin image build "$name" --runtime charliecloud --dest "$dest" \
     --wheelhouse "${CARME_WHEELHOUSE:-/var/cache/carme/wheelhouse}" > "$dest/.$name.build.log" 2>&1) \
    || { tail -20 "$dest/.$name.build.log"; exit 1; }
  echo "$recipe" > "$stamp"
  echo "session image $name built in $(( $(date +%s) - start )) s"
done
