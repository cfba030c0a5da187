#!/usr/bin/env bash
# Build the demo's session images (Charliecloud directory images) on this host, once per recipe, into
# /var/lib/carme/images (override: CARME_SESSION_IMAGES), which the demo nodes mount read-only at the same path.
#   scripts/session-images.sh [NAME...]      (default: base)
# Each image's catalogue reference (PATH@sha256:DIGEST) is in DEST/carme-NAME-VERSION.ref for the inventory.
# First run: about 51 s for the debootstrap base (cached in /var/cache/carme/images) + 49 s per image.
# CARME_RELEASE=trixie (Debian 13 nodes, whose runtime is Apptainer): also the SIF of base.def in DEST/apptainer, taken
# from the SIF cache when its recipe matches (carme_admin/sif_cache.py), else built and checked first in a throwaway
# Debian 13 node by the opt-in Apptainer test (about 8 min; Apptainer does not install on the Debian 12 host).
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
if [ "${CARME_RELEASE:-$(cat "$repo/images/node/default-release")}" = trixie ]; then
  base=$(bash "$repo/scripts/image-base.sh" | tail -1)
  rc=0; (cd "$repo" && "$py" -m carme_admin.sif_cache "$dest/apptainer" "$base") || rc=$?
  if [ "$rc" = 2 ]; then
    (cd "$repo" && CARME_APPTAINER_TESTS=1 "$py" -m pytest -q -p no:cacheprovider tests/runtime/test_apptainer_real.py \
       -k probe)
    (cd "$repo" && "$py" -m carme_admin.sif_cache "$dest/apptainer" "$base")
  elif [ "$rc" != 0 ]; then
    exit "$rc"
  fi
fi
