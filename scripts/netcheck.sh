#!/usr/bin/env bash
# Prove that podman, as scripts/host-setup.sh configured it, gives containers name resolution: two throwaway
# containers from the node image on a throwaway network must resolve and reach each other by name. Takes seconds;
# run by `make image`, so before `make demo` and before every Molecule scenario.
# A failure names the cause and the fix. Everything it creates is removed, whatever happens.
set -euo pipefail
IMAGE=${CARME_NODE_IMAGE:-localhost/carme-node:debian13}
tag="carme-netcheck-$$"
net=$tag; a=$tag-a; b=$tag-b
cleanup() {
  podman rm -f -t 0 "$a" "$b" > /dev/null 2>&1 || true
  podman network rm -f "$net" > /dev/null 2>&1 || true
}
trap cleanup EXIT

fail() {
  cat >&2 << MSG
netcheck: $1
netcheck: without containers that resolve each other by name on a podman network, the demo's and Molecule's
netcheck: nodes cannot find each other (slurmctld: 'Unable to resolve "node1"').
netcheck: podman's network backend here: $(podman info --format '{{.Host.NetworkBackend}}' 2> /dev/null || echo unknown)
netcheck: fix: run \`bash scripts/host-setup.sh\`: it installs netavark, aardvark-dns (the DNS plugin) and iptables
netcheck: from scripts/host-packages.txt and sets network_backend = "netavark" in /etc/containers/containers.conf;
netcheck: containers made before that keep no name resolution until they are recreated.
MSG
  exit 1
}

start=$(date +%s.%N)
podman network create "$net" > /dev/null || fail "podman network create failed"
for c in "$a" "$b"; do
  podman run -d --name "$c" --network "$net" --entrypoint sleep "$IMAGE" 120 > /dev/null 2> "/tmp/$tag.err" \
    || fail "podman run failed: $(tail -3 "/tmp/$tag.err")"
done
rm -f "/tmp/$tag.err"
addr=$(podman exec "$a" getent hosts "$b" | awk '{print $1; exit}') || true
[ -n "$addr" ] || fail "container $a cannot resolve $b (getent hosts $b: no address)"
podman exec "$a" ping -c1 -W2 "$b" > /dev/null || fail "container $a resolves $b to $addr but cannot reach it (ping)"
podman exec "$b" getent hosts "$a" > /dev/null || fail "container $b cannot resolve $a"
printf 'netcheck: containers resolve and reach each other by name (%s -> %s) in %.1f s\n' "$b" "$addr" \
  "$(python3 -c "import time; print(time.time() - $start)")"
