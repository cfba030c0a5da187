#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-3.0-or-later
# axe-core, the accessibility engine the browser tests inject into the portal's pages (tests/fixtures/axe.py), from
# the npm registry with the machine's npm, once per version, into .cache/axe (git-ignored, never committed).
# Output: .cache/axe/node_modules/axe-core/axe.min.js (CARME_AXE_JS, where the fixture looks).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
VERSION=4.10.3
prefix=$top/.cache/axe
js=$prefix/node_modules/axe-core/axe.min.js
installed=$prefix/node_modules/axe-core/package.json

if [ -f "$js" ] && grep -q "\"version\": \"$VERSION\"" "$installed" 2>/dev/null; then
  echo "axe-core $VERSION: $js is there already"
  exit 0
fi
command -v npm > /dev/null || { echo "axe-core: npm is missing (apt-get install -y npm)" >&2; exit 1; }
mkdir -p "$prefix"
npm install --no-save --no-audit --no-fund --no-package-lock --ignore-scripts --prefix "$prefix" \
  "axe-core@$VERSION" > "$prefix/npm.log" 2>&1 || { tail -20 "$prefix/npm.log" >&2; exit 1; }
test -f "$js"
echo "axe-core $VERSION: installed $js"
