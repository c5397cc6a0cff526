#!/usr/bin/env bash
# install-h2spec.sh builds h2spec, the HTTP/2 conformance suite that packages/control/test/h2spec.test.ts
# runs against the control server's own HTTP/2 (h2.ts, hpack.ts):
# ${H2SPEC_HOME:-$HOME/.cache/headway/h2spec}/<version>/h2spec.
# v2.2.1 is the newest version the module proxy serves (`go list -m -versions` lists v1.5.0 and
# v2.2.1+incompatible; later v2 tags are not served). That release predates modules, so it is built
# inside a scratch module that requires it, pins its dependencies (the release names them only in a
# dep Gopkg.lock) and imports its command from a tools file.
# A binary that already reports the version is kept, so a re-run is instant.
set -euo pipefail
VERSION="${H2SPEC_VERSION:-v2.2.1}"
ROOT="${H2SPEC_HOME:-$HOME/.cache/headway/h2spec}"
dir="$ROOT/$VERSION"
if [ -x "$dir/h2spec" ] && "$dir/h2spec" --version 2>/dev/null | grep -q "Version: ${VERSION#v} "; then
  echo "$VERSION $dir (already built)"; exit 0
fi
source "$(dirname "$0")/go-tool.sh"
go_tool_build h2spec "$dir" 1.24 "github.com/summerwind/h2spec $VERSION+incompatible
github.com/fatih/color v1.18.0
github.com/spf13/cobra v1.10.2
golang.org/x/net v0.47.0" github.com/summerwind/h2spec/cmd/h2spec "-X main.VERSION=${VERSION#v} -X main.COMMIT=module-proxy"
