# Both binaries in one small image. Build from the repository root:
#   docker build -t healthroute:dev .
# The chart runs /healthroute-operator and /healthroute-resolver from it.
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p healthroute-operator -p healthroute-resolver \
 && cp target/release/healthroute-operator target/release/healthroute-resolver /

# glibc-based, no shell, non-root (uid 65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /healthroute-operator /healthroute-resolver /
USER 65532:65532
ENTRYPOINT ["/healthroute-resolver"]
