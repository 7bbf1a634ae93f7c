#!/usr/bin/env bash
# Throughput and latency of the release resolver on examples/quickstart, and of Knot DNS
# serving the same names as a static zone, on this machine in the same run.
#
#   bench/dnsperf.sh [SECONDS]        (default 10)
#
# Prints a markdown table: QPS at full load (dnsperf, 20 clients, 200 in flight), mean
# latency at full load, and p50/p99 latency at half of each server's own full-load QPS
# (dnsperf -Q, latencies of every answer from dnsperf -v). Every load is bounded by -l.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
OUT=bench/out
mkdir -p "$OUT"

need=()
command -v dnsperf >/dev/null || need+=(dnsperf)
command -v knotd >/dev/null || need+=(knot)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
cargo build --release -q -p healthroute-resolver

HR_PORT=5390; KNOT_PORT=5391; ADMIN=127.0.0.1:9390

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

target/release/healthroute-resolver --manifests examples/quickstart \
  --listen 127.0.0.1:$HR_PORT --admin-listen $ADMIN ${HR_UDP_SOCKETS:+--udp-sockets $HR_UDP_SOCKETS} >"$OUT/resolver.log" 2>&1 &
pids+=($!)

mkdir -p "$OUT/knot/db"
cat > "$OUT/knot/example.com.zone" <<'Z'
$ORIGIN example.com.
$TTL 30
@       SOA ns.example.com. hostmaster.example.com. 1 3600 600 86400 30
@       NS  ns.example.com.
api     A   192.0.2.10
www     A   198.51.100.30
legacy  A   192.0.2.41
legacy  A   192.0.2.42
Z
cat > "$OUT/knot/knot.conf" <<K
server:
    listen: 127.0.0.1@$KNOT_PORT
    rundir: $PWD/$OUT/knot
database:
    storage: $PWD/$OUT/knot/db
zone:
  - domain: example.com
    storage: $PWD/$OUT/knot
    file: example.com.zone
log:
  - target: stderr
    any: warning
K
knotd -c "$OUT/knot/knot.conf" >"$OUT/knot.log" 2>&1 &
pids+=($!)

for _ in $(seq 100); do
  curl -sf "http://$ADMIN/readyz" >/dev/null && dig +short @127.0.0.1 -p $KNOT_PORT api.example.com >/dev/null 2>&1 && break
  sleep 0.1
done
sleep 2 # let the quickstart's checker form its views

full() { # port -> "qps mean_ms"
  dnsperf -s 127.0.0.1 -p "$1" -d bench/queries.txt -l "$SECS" -c 20 -q 200 -T 1 2>/dev/null |
    awk '/Queries per second/ {q=$4} /Average Latency/ {m=$4*1000} END {printf "%.0f %.3f", q, m}'
}
half() { # port qps -> "p50_ms p99_ms"
  dnsperf -s 127.0.0.1 -p "$1" -d bench/queries.txt -l "$SECS" -c 20 -q 200 -T 1 -Q "$2" -v 2>/dev/null |
    awk '$1 == ">" && $NF ~ /^[0-9.]+$/ {print $NF * 1000}' | sort -n |
    awk '{a[NR]=$1} END {if (NR==0) {print "n/a n/a"} else {printf "%.3f %.3f", a[int(NR*0.5)+1], a[int(NR*0.99)+1]}}'
}

read -r hr_qps hr_mean <<<"$(full $HR_PORT)"
read -r kn_qps kn_mean <<<"$(full $KNOT_PORT)"
read -r hr_p50 hr_p99 <<<"$(half $HR_PORT $((hr_qps / 2)))"
read -r kn_p50 kn_p99 <<<"$(half $KNOT_PORT $((kn_qps / 2)))"

echo "dnsperf ${SECS}s per run, 20 clients, query mix: weighted, failover, multivalue (last resort), NODATA, NXDOMAIN"
echo "machine: $(nproc) cores, $(uname -m), $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "| server | QPS (full load) | mean latency at full load | p50 at half load | p99 at half load |"
echo "| --- | --- | --- | --- | --- |"
echo "| healthroute-resolver | $hr_qps | $hr_mean ms | $hr_p50 ms | $hr_p99 ms |"
echo "| Knot DNS $(knotd -V 2>/dev/null | awk '{print $NF}') (static zone) | $kn_qps | $kn_mean ms | $kn_p50 ms | $kn_p99 ms |"
echo
awk -v a="$hr_qps" -v b="$kn_qps" 'BEGIN {printf "healthroute / knot QPS ratio: %.2f\n", a / b}'
