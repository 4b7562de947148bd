# syntax=docker/dockerfile:1
#
# One multi-stage build for both binaries (and the demo's sample-data publisher). Pick the one you want
# with --target:
#   docker build --target projector -t projector .
#   docker build --target query-api -t query-api .
#   docker build --target sample-data -t sample-data .
# docker-compose.yml does this for you.

# ---- builder -----------------------------------------------------------------
FROM rust:1-bookworm AS builder

# rdkafka is built with its `cmake-build` feature (bundled librdkafka), which
# needs cmake; its `ssl` feature (TLS and SASL PLAIN, SCRAM and OAUTHBEARER to
# the brokers) links OpenSSL; its `curl` feature (OAUTHBEARER's OIDC method)
# links libcurl; zstd is built in statically.
RUN apt-get update \
    && apt-get install -y --no-install-recommends cmake libssl-dev libcurl4-openssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# The commit built (the context has no .git): `--version` prints it. Give it as
# --build-arg GIT_COMMIT=$(git rev-parse --short=12 HEAD).
ARG GIT_COMMIT=unknown
ENV GIT_COMMIT=$GIT_COMMIT

# Cache mounts keep the registry and the target dir between builds (BuildKit).
# The target dir is a cache mount, so the binaries are copied out of it in the
# same step to land in the image layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin projector --bin query-api --bin sample-data \
    && mkdir -p /out \
    && cp target/release/projector target/release/query-api target/release/sample-data /out/

# ---- runtime base --------------------------------------------------------------
FROM debian:bookworm-slim AS runtime

# OCI labels: VERSION is the workspace's (Cargo.toml), REVISION the commit, SOURCE the repository's URL.
ARG VERSION=0.2.0
ARG GIT_COMMIT=unknown
ARG SOURCE=""
LABEL org.opencontainers.image.title="completed-studies" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$GIT_COMMIT" \
      org.opencontainers.image.source="$SOURCE" \
      org.opencontainers.image.licenses="MIT"

# ca-certificates: the system roots that TLS to Kafka (librdkafka), Redis
# (rediss://, rustls) and S3 trust by default; libssl3 and libcurl4: the
# OpenSSL and libcurl librdkafka links.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libssl3 libcurl4 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home app
USER app
ENV RUST_LOG=info

# ---- targets -------------------------------------------------------------------
FROM runtime AS projector
COPY --from=builder /out/projector /usr/local/bin/projector
ENTRYPOINT ["/usr/local/bin/projector"]

FROM runtime AS query-api
COPY --from=builder /out/query-api /usr/local/bin/query-api
ENV LISTEN_ADDR=0.0.0.0:8080
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/query-api"]

# One-shot: publishes the demo's sample data to the topics, uploads its videos and prints the demo keys.
FROM runtime AS sample-data
COPY --from=builder /out/sample-data /usr/local/bin/sample-data
ENTRYPOINT ["/usr/local/bin/sample-data"]
