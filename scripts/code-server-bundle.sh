#!/usr/bin/env bash
# Build, once per version, the code-server the demo's nodes install (carme_runtime_archives in inventories/demo).
#
# Sites install code-server's release tarball (it brings its own Node.js); it is published on GitHub, which this
# test bed cannot reach. So code-server is built here from its npm package, in a throwaway container of the node
# image (same glibc, and Debian's Node.js: 18 on Debian 12, the version code-server 4.89 requires; 20 on Debian 13,
# CARME_RELEASE=trixie, let past postinstall.sh's version check with FORCE_NODE_VERSION), with two changes to what npm
# would do on a machine with GitHub:
#   * @vscode/ripgrep downloads rg from GitHub at install time: Debian's ripgrep is put where it looks for a
#     cached download first (its own cache directory), so no download is tried;
#   * CXXFLAGS=-fpermissive: the native modules' node-addon-api predates Node 18.20's headers (kerberos does not
#     compile otherwise);
#   * npm install --ignore-scripts, then code-server's postinstall.sh (which installs VS Code's own modules) and a
#     rebuild of argon2 run by hand, with the two settings above.
# The result has the release tarball's layout (a top directory with bin/code-server), so the role installs both the
# same way; its bin/code-server runs Debian's /usr/bin/node (the role installs the nodejs package for it).
# Output: <wheelhouse cache>/code-server-<version>-<release's build>.tar.gz (the file the inventory's src names on
# nodes of that release), kept across checkouts like the wheels.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-$top/.venv/bin/python}
# The version the demo inventory installs (carme_runtime_archives, entry code-server); the file name adds the
# release's build (code-server-<version>-<build>.tar.gz, as the inventory's src names it): Debian 12 runs it on its
# Node.js 18, Debian 13 on its Node.js 20 (code-server 4.89's postinstall asks for 18: FORCE_NODE_VERSION lets 20 by).
VERSION=$("$PY" - "$top/inventories/demo/group_vars/all/runtime.yml" << 'PYEOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1], encoding="utf-8")) or {}
print(next(a for a in doc.get("carme_runtime_archives") or [] if a["name"] == "code-server")["version"])
PYEOF
)
case ${CARME_RELEASE:-$(cat "$top/images/node/default-release")} in
  bookworm) build=debian12-node18 NODE_MAJOR=18 tag=debian12 ;;
  trixie) build=debian13-node20 NODE_MAJOR=20 tag=debian13 ;;
  *) echo "code-server: unknown CARME_RELEASE ${CARME_RELEASE} (bookworm or trixie)" >&2; exit 2 ;;
esac
name=code-server-$VERSION-$build
RIPGREP_PKG=1.15.9       # @vscode/ripgrep of that code-server (lib/vscode/npm-shrinkwrap.json)
RIPGREP_TAG=v13.0.0-10   # the rg release it downloads (its lib/postinstall.js)
IMAGE=${CARME_NODE_IMAGE:-localhost/carme-node:$tag}
cache=${CARME_WHEELHOUSE_CACHE:-/var/cache/carme/wheelhouse}
out=$cache/$name.tar.gz

if [ -f "$out" ]; then
  echo "code-server: $out is there already"
  exit 0
fi
mkdir -p "$cache"
start=$(date +%s)
work=$(mktemp -d "$cache/.build-code-server.XXXXXX")
trap 'rm -rf "$work"' EXIT
podman run --rm -v "$work:/out" -e VERSION="$VERSION" -e NAME="$name" \
  -e NODE_MAJOR="$NODE_MAJOR" -e RIPGREP_PKG="$RIPGREP_PKG" -e RIPGREP_TAG="$RIPGREP_TAG" --entrypoint bash "$IMAGE" -c '
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends nodejs npm build-essential python3 pkg-config libkrb5-dev \
  libx11-dev libxkbfile-dev libsecret-1-dev ripgrep ca-certificates > /tmp/apt.log 2>&1 || { tail -20 /tmp/apt.log; exit 1; }
mkdir -p /build
npm install --ignore-scripts --omit=dev --no-audit --no-fund --prefix /build "code-server@$VERSION" > /tmp/npm.log 2>&1 \
  || { tail -30 /tmp/npm.log; exit 1; }
mkdir -p "/tmp/vscode-ripgrep-cache-$RIPGREP_PKG"
tar czf "/tmp/vscode-ripgrep-cache-$RIPGREP_PKG/ripgrep-$RIPGREP_TAG-x86_64-unknown-linux-musl.tar.gz" -C /usr/bin rg
cd /build/node_modules/code-server
export npm_config_user_agent="npm/$(npm --version) node/$(node --version) linux x64" npm_config_unsafe_perm=true
export CXXFLAGS=-fpermissive FORCE_NODE_VERSION=$NODE_MAJOR
sh ./postinstall.sh > /tmp/postinstall.log 2>&1 || { grep -n "ERR" /tmp/postinstall.log | head -40; exit 1; }
# the one native module among code-server'"'"'s own dependencies (--ignore-scripts above skipped its build); its
# prebuilt binary is on GitHub too, so node-pre-gyp falls back to compiling it
cd /build && npm rebuild argon2 > /tmp/argon2.log 2>&1 || { tail -30 /tmp/argon2.log; exit 1; }
mkdir -p "/out/$NAME/bin" "/out/$NAME/lib"
mv /build/node_modules "/out/$NAME/lib/node_modules"
cat > "/out/$NAME/bin/code-server" << "EOS"
#!/bin/sh
# code-server built from npm (scripts/code-server-bundle.sh): Debian'"'"'s Node.js runs it.
here=$(dirname "$(readlink -f "$0")")
exec /usr/bin/node "$here/../lib/node_modules/code-server/out/node/entry.js" "$@"
EOS
chmod 755 "/out/$NAME/bin/code-server"
/out/$NAME/bin/code-server --version
tar czf "/out/$NAME.tar.gz" -C /out "$NAME"
'
mv "$work/$name.tar.gz" "$out.partial"
mv "$out.partial" "$out"
echo "code-server: built $out ($(du -h "$out" | cut -f1)) in $(($(date +%s) - start)) s"
