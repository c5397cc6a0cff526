#!/usr/bin/env bash
# Installs dependencies (native modules built from source against this Node's
# headers), builds, and starts `headway serve` on the embedded SQLite default.
set -euo pipefail
cd "$(dirname "$0")/.."
export npm_config_nodedir="${npm_config_nodedir:-$(dirname "$(dirname "$(command -v node)")")}"
export npm_config_build_from_source=true
if [ ! -d node_modules/better-sqlite3/build ]; then
  npm ci --no-audit --no-fund
fi
npm run build --silent
exec node packages/cli/bin/run.js serve "$@"
