#!/usr/bin/env bash
# build-sqlite.sh compiles better-sqlite3 (with SQLite itself) from source against
# the running Node's headers. better-sqlite3 13 ships prebuilt binaries inside its
# npm tarball; force_build=1 compiles ours instead, and its loader prefers
# build/Release over the bundled prebuilds. node-gyp is called directly with its own
# flags: passed as npm_config_* variables, nodedir made every npm command warn.
set -euo pipefail
cd "$(dirname "$0")/.."
node_gyp="$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js"
[ -f "$node_gyp" ] || node_gyp="$(dirname "$(command -v npm)")/../lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js"
[ -f "$node_gyp" ] || node_gyp="$(command -v node-gyp)"
nodedir="${npm_config_nodedir:-$(dirname "$(dirname "$(command -v node)")")}"
cd node_modules/better-sqlite3
log=$(mktemp)
if ! node "$node_gyp" rebuild --release --nodedir="$nodedir" --force_build=1 >"$log" 2>&1; then
  tail -n 40 "$log" >&2; rm -f "$log"; echo "build-sqlite: node-gyp failed (see above)" >&2; exit 1
fi
rm -f "$log"
node -e 'new (require("./lib"))(":memory:").close()'
