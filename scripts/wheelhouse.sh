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

IMAGE=${CARME_NODE_IMAGE:-localhost/carme-node:debian13}

# The nodes' Python (Debian's), not this host's: wheels are chosen for it (a package may need a newer 3.11.x).
node_py=$(podman run --rm --entrypoint python3 "$IMAGE" -c 'import platform; print(platform.python_version())')

# What the roles install: the portal's dependencies (pyproject's webui extra, pinned by the constraints file) and
# the demo inventory's app environments, each resolved on its own as the roles' pip does on the nodes.
mapfile -t portal < <("$PY" - "$top/pyproject.toml" << 'PYEOF'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
print("\n".join(project.get("dependencies", []) + project["optional-dependencies"]["webui"]))
PYEOF
)
mapfile -t envs < <("$PY" - "$top/inventories/demo/group_vars/all/runtime.yml" << 'PYEOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1], encoding="utf-8")) or {}
for env in doc.get("carme_runtime_envs") or []:
    for spec in env.get("packages") or []:
        print(spec)
PYEOF
)
key=$( (cat "$top/requirements/constraints.txt" "$0"; echo "$node_py"; printf '%s\n' "${portal[@]}" "${envs[@]}") \
  | sha256sum | cut -c1-16)
stamp=$cache/.complete-$key
mkdir -p "$cache" "$top/.cache"
if [ ! -f "$stamp" ]; then
  start=$(date +%s)
  work=$(mktemp -d "$cache/.build-$key.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  download() {
    "$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: --python-version "$node_py" \
      --dest "$work" "$@" 2>&1 | { grep -v '^WARNING: Location' || true; }
  }
  download -c "$top/requirements/constraints.txt" "${portal[@]}"
  [ ${#envs[@]} -eq 0 ] || download "${envs[@]}"
  ls "$work"/*.whl > /dev/null
  # add, never replace: a file of the same name is the same wheel (name, version, tags)
  cp -n "$work"/*.whl "$cache/"
  touch "$stamp"
  echo "wheelhouse: added $(ls "$work"/*.whl | wc -l) wheels for Python $node_py to $cache in $(($(date +%s) - start)) s"
else
  echo "wheelhouse: $cache holds these wheels for Python $node_py already ($(ls "$cache"/*.whl | wc -l) wheels)"
fi
ln -sfn "$cache" "$link"
