# syntax=docker/dockerfile:1
# Headway's container image: `docker build -t headway:0.1.0 .` (or `docker compose build`;
# with podman, `podman build --format docker ...`: the OCI format has no HEALTHCHECK).
#
# The base is Node.js 24 on Debian bookworm slim: Headway needs Node 24 (zstd from
# node:zlib, better-sqlite3 13; see scripts/node-runtime.sh). NODE_IMAGE names another
# Node 24 image on Debian (a mirror, or a locally assembled one when no registry can be
# reached).
ARG NODE_IMAGE=node:24-bookworm-slim

# --- build: compile TypeScript and better-sqlite3 (with SQLite) from source -------------
FROM ${NODE_IMAGE} AS build
# node-gyp needs python3, make and a C++ compiler; only this stage has them.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 make g++ \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY package.json package-lock.json .npmrc tsconfig.base.json tsconfig.json ./
# build-sqlite.sh compiles the native modules; packed-registry is imported by a test that tsc -b compiles.
COPY scripts/build-sqlite.sh scripts/packed-registry.mjs scripts/packed-registry.d.mts scripts/
COPY packages packages
COPY examples examples
# Install scripts stay off (as in CI): the native modules are compiled below, from source.
RUN npm ci --ignore-scripts --no-audit --no-fund --no-update-notifier \
 && bash scripts/build-sqlite.sh \
 && rm -rf node_modules/better-sqlite3/build/Release/obj.target node_modules/better-sqlite3/build/Release/.deps \
    packages/memtrim/build/Release/obj.target packages/memtrim/build/Release/.deps
RUN npx tsc -b \
 && npm prune --omit=dev --ignore-scripts --no-audit --no-fund --no-update-notifier \
 && rm -rf packages/*/dist/test packages/*/test packages/*/*.tsbuildinfo examples/*/test \
 && node packages/cli/bin/run.js --version
# The last command wrote the oclif manifests (the runtime tree is read-only to the server).

# --- runtime ------------------------------------------------------------------------------
FROM ${NODE_IMAGE}
# The server runs as its own unprivileged user; the data volume is the only place it writes.
RUN groupadd --system --gid 10001 headway \
 && useradd --system --uid 10001 --gid headway --home-dir /var/lib/headway --no-create-home --shell /usr/sbin/nologin headway \
 && mkdir -p /etc/headway /var/lib/headway \
 && chown headway:headway /var/lib/headway \
 && chmod 0700 /var/lib/headway
COPY --from=build /src /opt/headway
RUN ln -s /opt/headway/packages/cli/bin/run.js /usr/local/bin/headway
COPY packages/cli/contrib/container/config.yaml /etc/headway/config.yaml
# XDG_DATA_HOME=/var/lib makes the default data_dir /var/lib/headway even for a config
# that does not set data_dir (a mounted headscale-style config, or environment only).
ENV NODE_ENV=production \
    XDG_DATA_HOME=/var/lib
USER headway
WORKDIR /var/lib/headway
VOLUME ["/var/lib/headway"]
# 8080 control protocol, API and register page; 9090 Prometheus metrics; 50443
# headscale's gRPC API (grpc_listen_addr); 8443 the embedded DERP relay's TLS port
# (derp.server.tls_listen_addr); 3478/udp STUN.
EXPOSE 8080 9090 50443 8443 3478/udp
# `headway health` asks the server over its socket in the data volume whether the
# database answers: exit 0 when it does.
HEALTHCHECK --interval=30s --timeout=10s --start-period=30s --retries=3 CMD ["headway", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["headway", "serve"]
