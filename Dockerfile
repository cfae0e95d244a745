# The gdn image (deploy/README.md, "The gdn image"): `gdn` on Debian 12
# slim, tini as PID 1, uid 10001, the System Root on the volume
# /var/lib/goondan, the bundle's folder /bundle as the working directory.
#
#   docker build -t localhost/goondan/gdn:0.1.0 .
#   docker build --target scripts -t localhost/goondan/gdn:0.1.0-scripts .
#
# The default target has no script runtime; `scripts` adds Node.js 22 and
# Python 3 for bundles whose Tools, Extensions or Connectors are .js, .ts
# or .py files. deploy/image/build.sh builds the default target's
# equivalent without Docker and without pulling any image; the user,
# paths, environment and entrypoint here are the same as there (the CLI
# test deploy_image compares them).
#
# The base images are arguments, their defaults from Docker Hub. A builder
# that pulls nothing (CI) names stand-ins instead: deploy/image/build.sh
# --dockerfile-bases makes them from scratch, and the CLI test
# deploy_image builds the default target on them with
# `buildah build --pull=never` (deploy/README.md, "Recipe 2").

ARG RUST_IMAGE=rust:1.95-bookworm
ARG DEBIAN_IMAGE=debian:bookworm-slim
ARG NODE_IMAGE=node:22-bookworm-slim

# rustls's crypto (aws-lc-sys, ring) compiles C: the rust image has gcc.
FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p gdn

FROM ${DEBIAN_IMAGE} AS runtime
RUN apt-get update \
    && apt-get install --yes --no-install-recommends ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --gid 10001 goondan \
    && useradd --uid 10001 --gid 10001 --home-dir /home/goondan --create-home --shell /bin/sh goondan \
    && install -d -o 10001 -g 10001 /var/lib/goondan \
    && install -d /bundle
COPY --from=build /src/target/release/gdn /usr/local/bin/gdn
ENV GOONDAN_STATE_ROOT=/var/lib/goondan
ENV HOME=/home/goondan
VOLUME ["/var/lib/goondan"]
WORKDIR /bundle
USER 10001:10001
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/gdn"]
CMD ["--help"]

FROM ${NODE_IMAGE} AS node

# Plugin hosts need `node` 20.6 or later (Debian 12 has 18) and `python3`
# (docs/plugin-protocol.md). The node binary needs only libraries the
# slim image has.
FROM runtime AS scripts
USER root
COPY --from=node /usr/local/bin/node /usr/local/bin/node
RUN apt-get update \
    && apt-get install --yes --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/*
USER 10001:10001

# The default target: the last stage.
FROM runtime
