#!/usr/bin/env bash
# install-tsapi.sh builds tsapi (packages/integration/go/tsapi), the small program that drives
# /api/v2 through Tailscale's official Go client (tailscale.com/client/tailscale/v2, from the
# module proxy), into ${TSAPI_HOME:-$HOME/.cache/headway/tsapi}/<source hash>/tsapi.
# The hash covers the module's go.mod, go.sum and .go files (tsapi.ts computes the same one),
# so a changed source builds anew and an unchanged one is reused.
set -euo pipefail
SRC="$(cd "$(dirname "$0")/../packages/integration/go/tsapi" && pwd)"
ROOT="${TSAPI_HOME:-$HOME/.cache/headway/tsapi}"
hash=$(cd "$SRC" && LC_ALL=C ls -1 go.mod go.sum *.go | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
dir="$ROOT/$hash"
if [ -x "$dir/tsapi" ]; then echo "tsapi $dir (already built)"; exit 0; fi
export GOTOOLCHAIN=local CGO_ENABLED=0
command -v go >/dev/null 2>&1 || { echo "install-tsapi: 'go' not found on PATH" >&2; exit 1; }
started=$SECONDS
rm -rf "$dir.partial"; mkdir -p "$dir.partial"
if ! ( cd "$SRC" && GOFLAGS=-mod=readonly go build -trimpath -o "$dir.partial/tsapi" . ); then
  rm -rf "$dir.partial"; exit 1
fi
rm -rf "$dir"; mv "$dir.partial" "$dir"
echo "tsapi $dir (built in $((SECONDS - started))s)"
