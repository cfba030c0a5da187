#!/usr/bin/env bash
# Prepare this machine (Debian 12, root) to run the Carme test bed and demo: podman with runc, debootstrap, and
# Debian's chromium for the browser end-to-end tests (Playwright drives it; no browser download).
# Idempotent and quick when everything is in place. Called by `make demo`, `make test` and .ci/run.
set -euo pipefail

need=()
for pkg in podman runc debootstrap uidmap make chromium; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "host-setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q -o DPkg::Lock::Timeout=900 --no-install-recommends "${need[@]}" >/dev/null
fi

# Root on these VMs lacks CAP_SYS_RESOURCE: podman's default rlimits cannot be applied, and crun refuses the
# v1-hybrid cgroup layout. runc + capped ulimits work (see docs/testbed.md).
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=65536
conf=/etc/containers/containers.conf
want=$(cat <<CONF
# Managed by carme scripts/host-setup.sh
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=30000:30000"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
)
mkdir -p /etc/containers
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$want" ]; then
  printf '%s\n' "$want" > "$conf"
  echo "host-setup: wrote $conf"
fi
