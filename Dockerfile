# Both binaries in one image, the same files images/build.sh puts in it (images/rootfs.sh
# makes them), for those with a Docker engine. From the repository root:
#   docker build -t ghcr.io/healthroute/healthroute:0.1.0 .
# Without a daemon (and without pulling anything): bash images/build.sh
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p healthroute-operator -p healthroute-resolver \
 && bash images/rootfs.sh target/release /rootfs

# No shell, non-root (uid 65532), only what the binaries load.
FROM scratch
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title=healthroute \
      org.opencontainers.image.description="Health-checked DNS routing for Kubernetes: operator and resolver" \
      org.opencontainers.image.source=https://github.com/healthroute/healthroute \
      org.opencontainers.image.version=$VERSION \
      org.opencontainers.image.licenses=Apache-2.0
COPY --from=build /rootfs /
USER 65532:65532
ENTRYPOINT ["/healthroute-resolver"]
