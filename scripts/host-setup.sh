#!/usr/bin/env bash
# Prepare this machine (Debian 12, root) for the Carme test bed, the demo and the tests: every Debian package in
# scripts/host-packages.txt (the one list), and podman configured so that containers run (runc, capped rlimits)
# and resolve each other by name (netavark + aardvark-dns). See docs/testbed.md.
# Idempotent and quick when everything is in place. Called by `make demo`, `make test` and .ci/run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
manifest="$here/host-packages.txt"
conf=/etc/containers/containers.conf

mapfile -t packages < <(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$manifest" | grep -v '^$')

# The backend podman used before this run (empty: podman not installed yet). Podman 4.3 picks CNI when
# netavark is missing, and CNI here has no DNS plugin: container names do not resolve.
before=""
command -v podman > /dev/null && before=$(podman info --format '{{.Host.NetworkBackend}}' 2> /dev/null || true)

need=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2> /dev/null | grep -q "ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "host-setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # slapd must not create a directory of its own (the tests and the roles configure slapd themselves)
  echo "slapd slapd/no_configuration boolean true" | debconf-set-selections
  # no daemon from these packages starts here: the tests start their own instances
  policy=/usr/sbin/policy-rc.d
  made_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# temporary: scripts/host-setup.sh\nexit 101\n' > "$policy"
    chmod 755 "$policy"
    made_policy=1
  fi
  trap '[ "$made_policy" = 1 ] && rm -f "$policy"' EXIT
  apt-get update -q > /dev/null
  apt-get install -y -q -o DPkg::Lock::Timeout=900 --no-install-recommends "${need[@]}" > /dev/null
fi

# Root on these VMs lacks CAP_SYS_RESOURCE: podman's default rlimits cannot be applied, and crun refuses the
# v1-hybrid cgroup layout. runc + capped ulimits work. netavark is the network backend with aardvark-dns.
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=65536
want=$(
  cat << CONF
# Managed by carme scripts/host-setup.sh
[containers]
default_ulimits = ["nofile=${nofile}:${nofile}", "nproc=30000:30000"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"

[network]
network_backend = "netavark"
CONF
)
mkdir -p /etc/containers
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$want" ]; then
  printf '%s\n' "$want" > "$conf"
  echo "host-setup: wrote $conf"
fi

now=$(podman info --format '{{.Host.NetworkBackend}}')
if [ "$now" != netavark ]; then
  echo "host-setup: podman still uses the '$now' network backend, not netavark (see $conf)" >&2
  exit 1
fi
if [ -n "$before" ] && [ "$before" != netavark ]; then
  # Containers and networks made under the old backend stay as they are: nothing is deleted here. Their
  # networks are not netavark's, so they have no name resolution until they are recreated.
  old=$(podman ps -a --format '{{.Names}}' | tr '\n' ' ')
  echo "host-setup: podman's network backend changed from '$before' to netavark."
  if [ -n "$old" ]; then
    echo "host-setup: containers made before the change are left untouched: $old"
    echo "host-setup: they keep no name resolution until recreated: for Carme's demo run \`carme demo down\`" \
      "then \`make demo\` (the name check after creating the nodes says so too); Molecule recreates its instances."
  fi
fi

# The demo's sessions each have a host name under *.apps.localhost (webui/sessions/app_origin.py). Browsers resolve *.localhost
# to the loopback address themselves; nss-myhostname does it for every other program on this host (the tests' HTTP
# clients), once it is named in nsswitch.conf's hosts line.
if ! grep -qE '^hosts:.*[[:space:]]myhostname([[:space:]]|$)' /etc/nsswitch.conf; then
  sed -i -E 's/^(hosts:[[:space:]]+files)/\1 myhostname/' /etc/nsswitch.conf
fi
