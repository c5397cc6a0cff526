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
if [ -x "$dir/headscale" ] && "$dir/headscale" version 2>/dev/null | grep -q "${VERSION#v}"; then
  echo "$VERSION $dir (already built)"; exit 0
fi
source "$(dirname "$0")/go-tool.sh"
go_tool_build headscale "$dir" 1.25 "github.com/juanfont/headscale $VERSION" \
  github.com/juanfont/headscale/cmd/headscale "-X github.com/juanfont/headscale/hscontrol/types.Version=${VERSION}"
