#!/usr/bin/env bash
# Installs dependencies (the one native module, better-sqlite3, built from source
# against this Node's headers), builds, and starts `headway serve` on the embedded
# SQLite default.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -d node_modules/better-sqlite3/build ]; then
  # Scripts off: better-sqlite3's install script would try a prebuilt download first.
  npm ci --no-audit --no-fund --ignore-scripts
  # node-gyp is called directly with its own flags: passed as npm_config_* variables,
  # nodedir and build_from_source made every npm command warn "Unknown env config".
  node_gyp="$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js"
  [ -f "$node_gyp" ] || node_gyp="$(command -v node-gyp)"
  nodedir="$(dirname "$(dirname "$(command -v node)")")"
  (cd node_modules/better-sqlite3 && node "$node_gyp" rebuild --release --nodedir="$nodedir")
fi
npm run build --silent
exec node packages/cli/bin/run.js serve "$@"
