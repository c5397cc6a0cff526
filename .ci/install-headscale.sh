#!/usr/bin/env bash
# install-headscale.sh builds the real headscale binary that the gRPC compatibility and
# migration tests drive: ${HEADSCALE_HOME:-$HOME/.cache/headway/headscale}/<version>/headscale.
# `go install github.com/juanfont/headscale/cmd/headscale@v0.29.2` is refused by the module
# proxy (the version is not in its list for a direct install), so the binary is built
# inside a scratch module that requires it and imports its command from a tools file.
# A binary that already reports the version is kept, so a re-run is instant.
set -euo pipefail
VERSION="${HEADSCALE_VERSION:-v0.29.2}"
ROOT="${HEADSCALE_HOME:-$HOME/.cache/headway/headscale}"
dir="$ROOT/$VERSION"
export GOTOOLCHAIN=local CGO_ENABLED=0

command -v go >/dev/null 2>&1 || { echo "install-headscale: 'go' not found on PATH" >&2; exit 1; }
if [ -x "$dir/headscale" ] && "$dir/headscale" version 2>/dev/null | grep -q "${VERSION#v}"; then
  echo "$VERSION $dir (already built)"; exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cat > "$work/go.mod" <<MOD
module headway.local/headscale-build

go 1.25

require github.com/juanfont/headscale $VERSION
MOD
cat > "$work/tools.go" <<'GO'
//go:build tools

package tools

import _ "github.com/juanfont/headscale/cmd/headscale"
GO
started=$SECONDS
mkdir -p "$dir.partial"
( cd "$work" && GOFLAGS=-mod=mod go build -trimpath \
    -ldflags "-X github.com/juanfont/headscale/hscontrol/types.Version=${VERSION}" \
    -o "$dir.partial/headscale" github.com/juanfont/headscale/cmd/headscale )
rm -rf "$dir"; mv "$dir.partial" "$dir"
echo "$VERSION $dir (built in $((SECONDS - started))s)"
