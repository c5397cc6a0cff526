#!/usr/bin/env bash
# build-sqlite.sh compiles better-sqlite3 (with SQLite itself) from source against
# the running Node's headers. better-sqlite3 13 ships prebuilt binaries inside its
# npm tarball; force_build=1 compiles ours instead, and its loader prefers
# build/Release over the bundled prebuilds. node-gyp is called directly with its own
# flags: passed as npm_config_* variables, nodedir would make every npm command warn.
# It then compiles @headway/memtrim's small addon (glibc malloc_trim; the server runs
# without it, keeping freed C memory resident, where it is missing) and @headway/aead's
# (ChaCha20-Poly1305 for Noise records on the OpenSSL inside Node; without it records are
# sealed in WASM, the same bytes several times slower). Last it writes that Node's ABI
# (process.versions.modules) to node_modules/.headway-node-abi, which serve.sh compares.
set -euo pipefail
cd "$(dirname "$0")/.."
node_gyp="$(npm root -g)/npm/node_modules/node-gyp/bin/node-gyp.js"
[ -f "$node_gyp" ] || node_gyp="$(dirname "$(command -v npm)")/../lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js"
[ -f "$node_gyp" ] || node_gyp="$(command -v node-gyp)"
nodedir="${npm_config_nodedir:-$(dirname "$(dirname "$(command -v node)")")}"
root=$PWD
gyp() {
  local log; log=$(mktemp)
  if ! node "$node_gyp" rebuild --release --nodedir="$nodedir" "$@" >"$log" 2>&1; then
    tail -n 40 "$log" >&2; rm -f "$log"; echo "build-sqlite: node-gyp failed in $PWD (see above)" >&2; exit 1
  fi
  rm -f "$log"
}
cd "$root/node_modules/better-sqlite3"
gyp --force_build=1
node -e 'new (require("./lib"))(":memory:").close()'
cd "$root/packages/memtrim"
gyp
node -e 'if (typeof require("./build/Release/memtrim.node").trim !== "function") process.exit(1)'
cd "$root/packages/aead"
gyp
node -e 'if (typeof require("./build/Release/aead.node").seal !== "function") process.exit(1)'
# The native modules now match this Node's ABI: serve.sh runs `npm ci` again only when it changes.
cd "$root"
node -p process.versions.modules > node_modules/.headway-node-abi
