#!/usr/bin/env bash
# Installs Node 24 when needed and the dependencies (the native modules,
# better-sqlite3, @headway/memtrim and @headway/aead, built from source against Node's headers), builds, and starts
# `headway serve` on the embedded SQLite default.
set -euo pipefail
cd "$(dirname "$0")/.."
# Node 24 LTS is the supported runtime; an older `node` gets one installed next to it.
eval "$(bash scripts/node-runtime.sh)"
if [ ! -f node_modules/better-sqlite3/build/Release/better_sqlite3.node ] \
  || [ ! -f packages/memtrim/build/Release/memtrim.node ] \
  || [ ! -f packages/aead/build/Release/aead.node ] \
  || [ "$(cat node_modules/.headway-node-abi 2>/dev/null)" != "$(node -p process.versions.modules)" ]; then
  npm ci --no-audit --no-fund --ignore-scripts
  bash scripts/build-sqlite.sh   # ends by writing node_modules/.headway-node-abi
fi
npm run build --silent
exec node packages/cli/bin/run.js serve "$@"
