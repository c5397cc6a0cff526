#!/usr/bin/env bash
# install-pebble.sh builds pebble (Let's Encrypt's ACME test CA) and pebble-challtestsrv (its
# mock DNS and challenge server) for the certificate tests:
# ${PEBBLE_HOME:-$HOME/.cache/headway/pebble}/<version>/{pebble,pebble-challtestsrv}.
# Both come from the module proxy, built inside a scratch module as headscale is (go-tool.sh).
# The module's own test certificates (pebble's HTTPS listener key and its minica root) are copied
# next to the binaries, since the tests start pebble with them.
set -euo pipefail
VERSION="${PEBBLE_VERSION:-v2.10.3}"
ROOT="${PEBBLE_HOME:-$HOME/.cache/headway/pebble}"
dir="$ROOT/$VERSION"
if [ -x "$dir/pebble" ] && [ -x "$dir/pebble-challtestsrv" ] && [ -f "$dir/certs/localhost/cert.pem" ]; then
  echo "$VERSION $dir (already built)"; exit 0
fi
source "$(dirname "$0")/go-tool.sh"
go_tool_build pebble "$dir.pebble" 1.24 "github.com/letsencrypt/pebble/v2 $VERSION" github.com/letsencrypt/pebble/v2/cmd/pebble ""
go_tool_build pebble-challtestsrv "$dir.challtestsrv" 1.24 "github.com/letsencrypt/pebble/v2 $VERSION" github.com/letsencrypt/pebble/v2/cmd/pebble-challtestsrv ""
mod="$(cd "$(mktemp -d)" && GOFLAGS=-mod=mod go mod download -json "github.com/letsencrypt/pebble/v2@$VERSION" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')"
rm -rf "$dir"; mkdir -p "$dir"
mv "$dir.pebble/pebble" "$dir.challtestsrv/pebble-challtestsrv" "$dir/"
rm -rf "$dir.pebble" "$dir.challtestsrv"
cp -r "$mod/test/certs" "$dir/certs"; chmod -R u+w "$dir/certs"
echo "pebble $VERSION $dir"
