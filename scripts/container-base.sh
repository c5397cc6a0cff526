#!/usr/bin/env bash
# container-base.sh assembles a stand-in for node:24-bookworm-slim where no container
# registry can be reached (CI and the development machines reach only Debian's packages
# and the npm registry): a Debian bookworm root file system from debootstrap, Node.js 24
# from scripts/node-runtime.sh (npm registry package node-linux-<arch>@24) in /usr/local
# as the official image has it, and npm 11 from the npm registry. Rootful podman + buildah.
# Prints the image name to pass as `--build-arg NODE_IMAGE=...`. Cached: a second run
# with the image present does nothing.
# Usage: bash scripts/container-base.sh
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${HEADWAY_BASE_IMAGE:-localhost/headway-node:24-bookworm-slim}"
CACHE="${HEADWAY_CONTAINER_CACHE:-$HOME/.cache/headway/container}"
if podman image exists "$IMAGE"; then echo "$IMAGE"; exit 0; fi

mkdir -p "$CACHE"
rootfs="$CACHE/rootfs-bookworm"
if [ ! -x "$rootfs/usr/bin/apt-get" ]; then
  command -v debootstrap >/dev/null || { echo "container-base: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 1; }
  rm -rf "$rootfs.tmp"; mkdir -p "$rootfs.tmp"
  echo "container-base: debootstrap bookworm (minbase) into $rootfs" >&2
  debootstrap --variant=minbase bookworm "$rootfs.tmp" http://deb.debian.org/debian >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -n 20 "$CACHE/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs.tmp/var/cache/apt/archives/"*.deb "$rootfs.tmp/var/lib/apt/lists/"*
  mv "$rootfs.tmp" "$rootfs"
fi

eval "$(bash scripts/node-runtime.sh)"
node_home="$(dirname "$(dirname "$(command -v node)")")"
npm_tgz=$(ls "$CACHE"/npm-11*.tgz 2>/dev/null | head -n 1 || true)
if [ -z "$npm_tgz" ]; then
  (cd "$CACHE" && npm pack --silent npm@11 >/dev/null)
  npm_tgz=$(ls "$CACHE"/npm-11*.tgz | head -n 1)
fi

c=$(buildah from scratch)
trap 'buildah rm "$c" >/dev/null 2>&1 || true' EXIT
mnt=$(buildah mount "$c")
cp -a "$rootfs/." "$mnt/"
mkdir -p "$mnt/usr/local/bin" "$mnt/usr/local/include" "$mnt/usr/local/lib/node_modules/npm"
cp "$node_home/bin/node" "$mnt/usr/local/bin/node"
cp -a "$node_home/include/." "$mnt/usr/local/include/"
tar xzf "$npm_tgz" -C "$mnt/usr/local/lib/node_modules/npm" --strip-components=1
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$mnt/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$mnt/usr/local/bin/npx"
# The host's trust store: where the registries are reached through a TLS-inspecting proxy,
# its CA is there, and npm inside the build needs it (Node reads NODE_EXTRA_CA_CERTS).
ca_env=()
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$mnt/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$mnt/etc/ssl/certs/ca-certificates.crt"
  ca_env=(--env NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt)
fi
buildah umount "$c" >/dev/null
buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${ca_env[@]}" --cmd node "$c"
buildah commit --quiet "$c" "$IMAGE" >/dev/null
echo "$IMAGE"
