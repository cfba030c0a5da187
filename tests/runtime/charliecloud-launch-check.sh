#!/usr/bin/env bash
# Real check of carme-launch with runtime=charliecloud (not part of `make test`: it needs a built image, about
# 1 min 40 s the first time): in a throwaway container of the node image, alice's carme-launch starts JupyterLab
# from the catalogue reference PATH@sha256 through ch-run; it must become ready on its Unix socket behind the
# front, and no process's argv may hold the session secret. Uses no Slurm (publishing the comment fails: expected).
#   tests/runtime/charliecloud-launch-check.sh [IMAGE_DIR]   (default: builds base into /var/tmp/carme-images)
# Run as root from the repository root. Measured 2026-11-24: ready in about 10 s once the image exists.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
images=${1:-/var/tmp/carme-images}
py=${PYTHON:-python3}
if [ ! -d "$images/carme-base-1.0" ]; then
  (cd "$repo" && "$py" -m carme_admin image build base --runtime charliecloud --dest "$images" >/dev/null)
fi
digest=$(cd "$repo" && "$py" -c "from carme_runtime.images import image_digest; print(image_digest('$images/carme-base-1.0'))")
name=carme-launchcheck-$$
secret=$(head -c 30 /dev/urandom | base64 | tr -dc A-Za-z0-9 | head -c 40)
out=$(mktemp)
trap 'podman rm -f -t 0 "$name" >/dev/null 2>&1 || true; rm -f "$out"' EXIT
podman run -d --name "$name" -v "$images:/var/lib/carme/images:ro" -v "$repo:/src:ro" \
  "${CARME_NODE_IMAGE:-localhost/carme-node:debian12}" sleep infinity >/dev/null
podman exec "$name" bash -c 'apt-get update -q >/dev/null 2>&1
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends charliecloud-runtime >/dev/null 2>&1
  useradd -m -u 2345 alice
  echo "{\"runtime\": \"charliecloud\", \"bind_address\": \"127.0.0.1\", \"ready_timeout_s\": 120}" > /tmp/rt.json'
podman exec --user alice -e SLURM_JOB_ID=41 -e CARME_APP=jupyterlab -e CARME_RUNTIME=charliecloud \
  -e "CARME_IMAGE=/var/lib/carme/images/carme-base-1.0@$digest" -e "CARME_SESSION_SECRET=$secret" \
  -e HOME=/home/alice -e USER=alice -e CARME_CONFIG=/tmp/rt.json -e PYTHONPATH=/src -e PATH=/usr/bin:/bin \
  "$name" timeout 100 python3 -c 'import sys; from carme_runtime.entry_points import launch_main; sys.exit(launch_main([]))' \
  >"$out" 2>&1 &
for _ in $(seq 1 60); do sleep 2; grep -q "ready on" "$out" && break; done
grep "carme-launch:" "$out" | grep -v "scontrol" || true
grep -q "jupyterlab ready on /tmp/carme-41-" "$out" || { echo "FAIL: JupyterLab not ready"; tail -20 "$out"; exit 1; }
# the secret is in no process's argv (the pattern file keeps it off grep's own argv)
podman exec "$name" bash -c "umask 077; cat > /tmp/pattern" <<<"$secret"
hits=$(podman exec "$name" bash -c 'grep -l -a -F -f /tmp/pattern /proc/[0-9]*/cmdline 2>/dev/null | wc -l')
[ "$hits" = 0 ] || { echo "FAIL: the secret is in $hits process argv(s)"; exit 1; }
podman exec "$name" sh -c 'ps -eo user,args | grep "[j]upyter-lab\|[j]upyter lab" | cut -c1-160'
echo "OK: JupyterLab ran in the Charliecloud image as alice, ready behind the front; the secret is in no argv"
