#!/usr/bin/env bash
# install-tailscale.sh builds the real tailscale/tailscaled binaries that the
# interop tests drive, one directory per pinned version:
#   ${TAILSCALE_HOME:-<repo>/.ci-work/tailscale}/<version>/{tailscale,tailscaled}
# A version whose binaries already report the right version is skipped, so a
# re-run is instant. Prints one line per version: "<version> <dir>".
#
# Pinned versions (override with TAILSCALE_VERSIONS="vA vB"):
#   v1.102.5  newest stable (even minor) release that builds with Go 1.26;
#             go.mod says "go 1.26.6". v1.104.x exists on the proxy but its
#             go.mod needs go 1.27.x, which would force a toolchain download.
#   v1.80.3   newest v1.80.x (capver 113, headscale's oldest supported client);
#             go.mod says "go 1.23.1", builds fine with Go 1.26.
#
# GOTOOLCHAIN=local: never let `go` fetch a different toolchain behind our
# back; a version needing a newer Go fails with a clear message instead.
# The version is stamped with -ldflags the way tailscale's build_dist.sh does;
# a plain `go install pkg@version` carries no VCS info and would report
# "1.102.5-ERR-BuildInfo". The long form says where the source came from,
# since the module zip has no commit hash.
set -euo pipefail

DEFAULT_VERSIONS="v1.102.5 v1.80.3"
VERSIONS="${TAILSCALE_VERSIONS:-$DEFAULT_VERSIONS}"

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
INSTALL_ROOT="${TAILSCALE_HOME:-$REPO/.ci-work/tailscale}"

export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:--buildvcs=false}"

command -v go >/dev/null 2>&1 || { echo "install-tailscale: 'go' not found on PATH" >&2; exit 1; }
LOCAL_GO="$(go env GOVERSION)" # e.g. go1.26.8
LOCAL_GO="${LOCAL_GO#go}"

# version_ge A B: true when dotted version A >= B.
version_ge() {
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n1)" = "$2" ]
}

# required_go V: the "go" line of tailscale.com@V's go.mod, from the module proxy.
required_go() {
  local modfile
  modfile="$(go mod download -json "tailscale.com@$1" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [ -n "$modfile" ] && [ -f "$modfile" ] || { echo "install-tailscale: cannot download go.mod of tailscale.com@$1" >&2; return 1; }
  awk '$1 == "go" { print $2; exit }' "$modfile"
}

# is_built DIR V: both binaries exist and tailscale reports version V.
is_built() {
  local dir="$1" want="${2#v}"
  [ -x "$dir/tailscale" ] && [ -x "$dir/tailscaled" ] || return 1
  [ "$("$dir/tailscale" version 2>/dev/null | head -n1)" = "$want" ]
}

mkdir -p "$INSTALL_ROOT"
for version in $VERSIONS; do
  case "$version" in
    v[0-9]*.[0-9]*.[0-9]*) ;;
    *) echo "install-tailscale: bad version '$version' (want vMAJOR.MINOR.PATCH)" >&2; exit 1 ;;
  esac
  dir="$INSTALL_ROOT/$version"
  if is_built "$dir" "$version"; then
    echo "$version $dir (already built)"
    continue
  fi
  need_go="$(required_go "$version")"
  if ! version_ge "$LOCAL_GO" "$need_go"; then
    echo "install-tailscale: tailscale $version needs go $need_go, local go is $LOCAL_GO (GOTOOLCHAIN=local)" >&2
    exit 1
  fi
  # Build into a scratch directory and rename, so an interrupted build never
  # leaves a half-populated version directory that looks installed.
  partial="$dir.partial.$$"
  rm -rf "$partial"
  mkdir -p "$partial"
  trap 'rm -rf "$partial"' EXIT
  started=$SECONDS
  short="${version#v}"
  GOBIN="$partial" go install -trimpath \
    -ldflags "-X tailscale.com/version.shortStamp=$short -X tailscale.com/version.longStamp=$short-modproxy" \
    "tailscale.com/cmd/tailscale@$version" \
    "tailscale.com/cmd/tailscaled@$version"
  rm -rf "$dir"
  mv "$partial" "$dir"
  trap - EXIT
  is_built "$dir" "$version" || { echo "install-tailscale: $dir/tailscale does not report $version" >&2; exit 1; }
  echo "$version $dir (built in $((SECONDS - started))s with go $LOCAL_GO, go.mod wants $need_go)"
done
