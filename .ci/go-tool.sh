# go-tool.sh is sourced by the install-*.sh scripts that build a Go command the tests drive.
# go_tool_build NAME DIR GO_VERSION REQUIRES CMD LDFLAGS builds the main package CMD inside a
# scratch module whose go.mod requires REQUIRES (one `path version` per line) and whose tools
# file imports CMD, so a version the module proxy refuses for `go install` still builds; the
# binary lands in DIR/NAME (written to DIR.partial first, so a failed build leaves nothing).
go_tool_build() {
  local name=$1 dir=$2 go_version=$3 requires=$4 cmd=$5 ldflags=$6
  export GOTOOLCHAIN=local CGO_ENABLED=0
  command -v go >/dev/null 2>&1 || { echo "install-$name: 'go' not found on PATH" >&2; return 1; }
  local work started=$SECONDS
  work="$(mktemp -d)"
  printf 'module headway.local/%s-build\n\ngo %s\n\nrequire (\n%s\n)\n' "$name" "$go_version" "$(sed 's/^/\t/' <<<"$requires")" > "$work/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$cmd" > "$work/tools.go"
  mkdir -p "$dir.partial"
  if ! ( cd "$work" && GOFLAGS=-mod=mod go build -trimpath -ldflags "$ldflags" -o "$dir.partial/$name" "$cmd" ); then
    rm -rf "$work" "$dir.partial"; return 1
  fi
  rm -rf "$work" "$dir"; mv "$dir.partial" "$dir"
  echo "$name $dir (built in $((SECONDS - started))s)"
}
