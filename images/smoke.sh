#!/usr/bin/env bash
# Smoke test of the image images/build.sh made: from the image's own root filesystem, as the
# image's user, the resolver serves the quickstart and answers dig, the operator prints its
# help, and an HTTP check whose target is a name (localhost) resolves it and follows a real
# server going down. Loopback only; every wait is bounded.
#
#   bash images/smoke.sh [IMAGE]        # default: the tag images/build.sh gives
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
image=${1:-${IMAGE:-ghcr.io/healthroute/healthroute:$version}}
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}

pids=()
ctr=
cleanup() {
  # The servers and their children (a background job may be a subshell around chroot).
  for p in "${pids[@]}"; do
    pkill -P "$p" 2>/dev/null || true
    kill "$p" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ -n "$ctr" ]; then
    buildah umount "$ctr" >/dev/null 2>&1 || true
    buildah rm "$ctr" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT
fail() { echo "smoke: FAIL: $*" >&2; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

ctr=$(buildah from --quiet "$image")
root=$(buildah mount "$ctr")
user=$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$image")
[ "$user" = "65532:65532" ] || fail "the image runs as '$user', not 65532:65532"
for sh in bin/sh bin/bash usr/bin/sh; do
  [ ! -e "$root/$sh" ] || fail "the image has a shell: /$sh"
done
echo "smoke: image $image, user $user, no shell, $(find "$root" -type f | wc -l) files"

# Runs a binary of the image, chrooted into its root filesystem as its user (in the
# foreground; the servers below are started with chroot itself, so that $! is their pid).
in_image() { chroot --userspec=65532:65532 "$root" "$@"; }

in_image /healthroute-operator --help | grep -q "Usage" || fail "healthroute-operator --help"
echo "smoke: healthroute-operator --help: ok"

# What the resolvers read, copied into the container's root filesystem (not the image).
mkdir -p "$root/smoke"
cp -r examples/quickstart "$root/smoke/quickstart"
health_port=$(free_port)
mkdir -p "$root/smoke/by-name"
echo "zones: [example.com]" >"$root/smoke/by-name/healthroute.yaml"
cat >"$root/smoke/by-name/routing.yaml" <<EOF
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: www, namespace: smoke}
spec:
  name: www.example.com.
  type: A
  routingPolicy: Failover
  records:
    - {setIdentifier: primary, failover: {role: Primary}, values: ["192.0.2.50"], healthCheckRef: {name: by-name}}
    - {setIdentifier: standby, failover: {role: Secondary}, values: ["198.51.100.50"]}
---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {name: by-name, namespace: smoke}
spec:
  type: HTTP
  target: {address: localhost, port: $health_port, path: /}
  requestIntervalSeconds: 1
  failureThreshold: 1
  connectTimeoutSeconds: 1
  responseTimeoutSeconds: 1
EOF
chmod -R a+rX "$root/smoke"

# The addresses answered for NAME on PORT, sorted, on one line; nothing until it answers.
ask() {
  local out
  out=$(dig @127.0.0.1 -p "$1" "$2" A +short +time=1 +tries=1 2>/dev/null) || return 0
  sort <<<"$out" | tr '\n' ' ' | sed 's/ $//'
}
# Waits (at most 15 s) until the answer for NAME on PORT is WANT.
expect() {
  local port=$1 name=$2 want=$3 got=
  for _ in $(seq 150); do
    got=$(ask "$port" "$name")
    [ "$got" = "$want" ] && { echo "smoke: $name -> $got"; return 0; }
    sleep 0.1
  done
  fail "$name on port $port: wanted '$want', got '$got'"
}

port=$(free_port)
chroot --userspec=65532:65532 "$root" /healthroute-resolver --manifests /smoke/quickstart \
  --listen "127.0.0.1:$port" --admin-listen 127.0.0.1:0 >/dev/null 2>&1 &
pids+=($!)
expect "$port" www.example.com 198.51.100.30
expect "$port" legacy.example.com "192.0.2.41 192.0.2.42"
api=$(ask "$port" api.example.com)
[[ "$api" = 192.0.2.10 || "$api" = 192.0.2.20 ]] || fail "api.example.com: $api"
echo "smoke: api.example.com -> $api"

access_log=$(mktemp)
python3 -m http.server --bind 127.0.0.1 --directory "$root/smoke" "$health_port" >/dev/null 2>"$access_log" &
health=$!
pids+=($health)
port=$(free_port)
chroot --userspec=65532:65532 "$root" /healthroute-resolver --manifests /smoke/by-name \
  --listen "127.0.0.1:$port" --admin-listen 127.0.0.1:0 >/dev/null 2>&1 &
pids+=($!)
# The probes reached the server by its name (a check starts healthy, so the answer alone would
# not show it): two requests logged, and the primary still answers.
for _ in $(seq 100); do
  [ "$(grep -c '"GET / HTTP' "$access_log")" -ge 2 ] && break
  sleep 0.1
done
[ "$(grep -c '"GET / HTTP' "$access_log")" -ge 2 ] || fail "no probe reached localhost:$health_port"
rm -f "$access_log"
echo "smoke: the check resolved localhost and probed it"
expect "$port" www.example.com 192.0.2.50
kill "$health"
expect "$port" www.example.com 198.51.100.50   # the server is gone: the standby answers
echo "smoke: passed"
