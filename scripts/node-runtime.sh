#!/usr/bin/env bash
# node-runtime.sh prints the directory of a Node.js 24 LTS runtime, installing it
# first when the `node` on PATH is older. Node 24 comes from the npm registry
# package node-linux-<arch>@24 (its tarball holds bin/node and include/node, the
# headers node-gyp needs), so a machine with only Debian's Node 20 and npm gets it
# without apt or a download site. Cached in ${HEADWAY_NODE_HOME:-~/.cache/headway/node-24}.
# Usage: eval "$(bash scripts/node-runtime.sh)"  (puts that Node first on PATH; build-sqlite.sh
# finds its headers next to it, so no npm_config_nodedir is exported: npm warns about it)
set -euo pipefail
MAJOR=24
current=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$current" -ge "$MAJOR" ]; then
  home="$(dirname "$(dirname "$(command -v node)")")"
else
  home="${HEADWAY_NODE_HOME:-$HOME/.cache/headway/node-$MAJOR}"
  if ! "$home/bin/node" -v 2>/dev/null | grep -q "^v$MAJOR\."; then
    case "$(uname -m)" in
      x86_64) arch=x64 ;; aarch64|arm64) arch=arm64 ;;
      *) echo "node-runtime: no Node $MAJOR package for $(uname -m)" >&2; exit 1 ;;
    esac
    echo "node-runtime: installing Node $MAJOR from the npm registry (node-linux-$arch@$MAJOR) into $home" >&2
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack --silent "node-linux-$arch@$MAJOR" >/dev/null)
    rm -rf "$home"; mkdir -p "$home"
    tar xzf "$tmp"/node-linux-"$arch"-*.tgz -C "$home" --strip-components=1
    rm -rf "$tmp"
  fi
fi
echo "export PATH=\"$home/bin:\$PATH\""
