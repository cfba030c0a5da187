#!/usr/bin/env bash
# Build, once per content, the wheels that the roles install on the test-bed nodes: the portal's dependencies
# (pinned by requirements/constraints.txt) and the demo inventory's app environments (carme_runtime_envs).
# One flat directory per machine, /var/cache/carme/wheelhouse, shared by every checkout and only ever added to (a
# stamp per input hash says what it already holds), linked as .cache/wheelhouse. The demo and Molecule nodes mount
# it read-only at /opt/carme/wheelhouse, and pip installs from it with --no-index (carme_runtime_wheelhouse,
# carme_webui_wheelhouse): nothing is downloaded per node. Its path never changes, so new wheels never force the
# demo's containers to be recreated.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$top/.venv/bin/python}
cache=${CARME_WHEELHOUSE_CACHE:-/var/cache/carme/wheelhouse}
link=$top/.cache/wheelhouse

mapfile -t envs < <("$PY" - "$top/inventories/demo/group_vars/all/runtime.yml" << 'PYEOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1], encoding="utf-8")) or {}
for env in doc.get("carme_runtime_envs") or []:
    for spec in env.get("packages") or []:
        print(spec)
PYEOF
)
key=$( (cat "$top/requirements/constraints.txt" "$top/pyproject.toml" "$0"; printf '%s\n' "${envs[@]}") \
  | sha256sum | cut -c1-16)
stamp=$cache/.complete-$key
mkdir -p "$cache" "$top/.cache"
if [ ! -f "$stamp" ]; then
  start=$(date +%s)
  work=$(mktemp -d "$cache/.build-$key.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  # the portal's dependencies, exactly as the role resolves them (its own wheel is copied by the role)
  "$PY" -m pip wheel -q --disable-pip-version-check -c "$top/requirements/constraints.txt" \
    --wheel-dir "$work" "$top[webui]" 2>&1 | grep -v '^WARNING: Location' || true
  rm -f "$work"/carme-*.whl
  # the app environments, resolved on their own (as the role's pip does on the nodes)
  if [ ${#envs[@]} -gt 0 ]; then
    "$PY" -m pip wheel -q --disable-pip-version-check --wheel-dir "$work" "${envs[@]}" 2>&1 \
      | grep -v '^WARNING: Location' || true
  fi
  ls "$work"/*.whl > /dev/null
  # add, never replace: a file of the same name is the same wheel (name, version, tags)
  cp -n "$work"/*.whl "$cache/"
  touch "$stamp"
  echo "wheelhouse: added $(ls "$work"/*.whl | wc -l) wheels to $cache in $(($(date +%s) - start)) s"
else
  echo "wheelhouse: $cache holds these wheels already ($(ls "$cache"/*.whl | wc -l) wheels)"
fi
ln -sfn "$cache" "$link"
