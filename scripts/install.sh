#!/usr/bin/env bash
# install.sh installs the `headway` command from this checkout: `npm install -g @headway/cli`, with the
# @headway packages packed from the workspaces and served from a throwaway registry on 127.0.0.1
# (scripts/packed-registry.mjs), since the @headway scope is not on the npm registry.
#   scripts/install.sh [--prefix DIR]     DIR: npm's global prefix by default (/usr/local with Debian's npm)
# Works from Debian's Node 20 and npm: Node 24 comes from the npm registry (scripts/node-runtime.sh). headway,
# and the systemd unit, run the `node` in DIR/bin, so unless that one is already 24 or newer, Node 24 is
# installed there (DIR/bin/node, headers in DIR/include/node), and npm 11 beside it unless DIR/bin/npm exists:
# the layout of a nodejs.org tarball. Building and packing run as you; writing into DIR uses sudo when DIR is
# not writable. CI runs this script (packages/integration/test/packed-install.test.ts).
set -euo pipefail
die() { echo "install: $*" >&2; exit 1; }

prefix=
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (usage: scripts/install.sh [--prefix DIR])" ;;
  esac
done
command -v npm >/dev/null || die "npm is needed (Debian: apt install npm)"
# Asked before Node 24 is first on PATH: npm's default prefix follows the node it runs under.
prefix=${prefix:-$(npm prefix -g)}
case "$prefix" in /*) ;; *) prefix=$PWD/$prefix ;; esac
cd "$(dirname "$0")/.."

# sudo only for writing into the prefix, and only when it is not writable.
sudo=
if [ "$(id -u)" != 0 ]; then
  mkdir -p "$prefix" 2>/dev/null || sudo=1
  for d in "$prefix" "$prefix/bin" "$prefix/include" "$prefix/lib" "$prefix/lib/node_modules"; do
    [ ! -e "$d" ] || [ -w "$d" ] || sudo=1
  done
fi
# sudo resets the environment: npm as root needs this PATH (Node 24) and the proxy and CA settings.
keep=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY NODE_EXTRA_CA_CERTS; do
  [ -z "${!v:-}" ] || keep+=("$v=${!v}")
done
as_root() { if [ -n "$sudo" ]; then sudo env "PATH=$PATH" "${keep[@]}" "$@"; else "$@"; fi; }

major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }
runtime=$(bash scripts/node-runtime.sh) || die "no Node 24 (scripts/node-runtime.sh failed, above)"
eval "$runtime"
[ "$(major node)" -ge 24 ] || die "no Node 24: the node on PATH is $(node -v)"
node24=$(dirname "$(dirname "$(command -v node)")")
if [ -e "$prefix/bin/node" ]; then
  [ "$(major "$prefix/bin/node")" -ge 24 ] \
    || die "$prefix/bin/node is $("$prefix/bin/node" -v 2>/dev/null || echo 'not runnable'): a headway installed next to it would run on it (the systemd unit does); install into another prefix (--prefix /usr/local) or replace it with Node 24"
else
  echo "install: Node 24 ($(node -v)) as $prefix/bin/node, headers in $prefix/include/node" >&2
  as_root mkdir -p "$prefix/bin" "$prefix/include"
  if [ -f "$node24/include/node/node.h" ]; then
    as_root rm -rf "$prefix/include/node"
    as_root cp -R "$node24/include/node" "$prefix/include/node"
  fi
  as_root install -m 0755 "$node24/bin/node" "$prefix/bin/node"
fi
# npm beside that node, as a nodejs.org tarball has it: its own node-gyp builds the addons (a distribution's,
# Debian's, links them against the distribution's libnode, another Node, which crashes Node 24).
# Unpacked, not `npm install -g npm`, which would carry a distribution's builtin config over.
if [ ! -e "$prefix/bin/npm" ]; then
  echo "install: npm 11 as $prefix/bin/npm" >&2
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent npm@11 >/dev/null)
  as_root rm -rf "$prefix/lib/node_modules/npm"
  as_root mkdir -p "$prefix/lib/node_modules/npm"
  as_root tar xzf "$tmp"/npm-*.tgz -C "$prefix/lib/node_modules/npm" --strip-components=1 --no-same-owner
  as_root ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$prefix/bin/npm"
  as_root ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$prefix/bin/npx"
  rm -rf "$tmp"
fi
# npm and the addons' builds (against $prefix/include/node) run on the node headway will run on.
export PATH="$prefix/bin:$PATH"

if [ ! -x node_modules/.bin/tsc ]; then
  echo "install: npm ci (the build's dependencies)" >&2
  npm ci --no-audit --no-fund --no-update-notifier --ignore-scripts --loglevel=warn
fi
runner=(); [ -z "$sudo" ] || runner=(sudo env "PATH=$PATH" "${keep[@]}")
# npm 12 runs a dependency's install script only when allowed: the addons' builds are.
node scripts/packed-registry.mjs "${runner[@]}" npm install -g --prefix "$prefix" \
  --prefer-offline --no-audit --no-fund --no-update-notifier --loglevel=warn --allow-scripts=@headway/memtrim,@headway/aead

cli=$prefix/lib/node_modules/@headway/cli
echo "headway: $prefix/bin/headway -> $(readlink -f "$prefix/bin/headway")"
"$prefix/bin/headway" version
# The optional native addons, as the server will report them at start.
for addon in memtrim:loadMemoryTrim aead:loadAead; do
  name=${addon%%:*}
  pkg=$(find "$cli/node_modules" -path "*/@headway/$name/package.json" -print -quit 2>/dev/null || true)
  if [ -z "$pkg" ]; then echo "@headway/$name: not installed"; continue; fi
  node --input-type=module -e 'const [file, fn, name] = process.argv.slice(1); const r = (await import(file))[fn]();
console.log(`${name}: ${"unavailable" in r ? `not in use: ${r.unavailable}` : "compiled, in use"}`);' \
    "$(dirname "$pkg")/dist/src/index.js" "${addon#*:}" "@headway/$name" || echo "@headway/$name: its loader failed (above)"
done
[ "$(command -v headway || true)" = "$prefix/bin/headway" ] || echo "install: $prefix/bin is not first on your PATH for \`headway\`" >&2
