#!/usr/bin/env bash
# Where the resolver's time goes under load: the release resolver on examples/quickstart,
# dnsperf (100 clients) on another CPU, then
#   1. perf stat on the resolver: CPU time, context switches, CPU migrations and system calls
#      per query;
#   2. perf record: the top symbols, kernel and user space, and the share of each.
#
#   bench/profile.sh [SECONDS]          (default 5; the load runs SECONDS + 2)
#   HR=path/to/healthroute-resolver bench/profile.sh     (another build, e.g. before a change)
#
# Needs perf (linux-perf) and dnsperf; installs them from Debian's packages when missing.
# Loopback only; the load is bounded by dnsperf -l.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-5}
OUT=bench/out/profile
mkdir -p "$OUT"

need=()
command -v dnsperf >/dev/null || need+=(dnsperf)
command -v perf >/dev/null || need+=(linux-perf)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
HR=${HR:-target/release/healthroute-resolver}
[ "$HR" != target/release/healthroute-resolver ] || cargo build --release -q -p healthroute-resolver

cpus=$(nproc)
server_cpu=$((cpus - 1))
client_cpu=0
PORT=5392

taskset -c "$server_cpu" "$HR" --manifests examples/quickstart \
  --listen 127.0.0.1:$PORT --admin-listen 127.0.0.1:0 >"$OUT/resolver.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  dig +short +time=1 +tries=1 @127.0.0.1 -p $PORT www.example.com >/dev/null 2>&1 && break
  sleep 0.1
done
# The load starts once start-up is over: the resolver hands back its start-up code 5 s after
# its first table (docs/design.md, "Code after start-up"), and what is measured is after it.
sleep 6

load() {
  taskset -c "$client_cpu" dnsperf -s 127.0.0.1 -p $PORT -d bench/queries.txt -l $((SECS + 2)) \
    -c 100 -q 200 -T 1 >"$OUT/dnsperf-$1.txt" 2>&1 &
  loader=$!
  sleep 1
}

load stat
perf stat -x, -e task-clock,context-switches,cpu-migrations,raw_syscalls:sys_enter -p $pid \
  -- sleep "$SECS" 2>"$OUT/stat.csv"
wait "$loader" || true
qps=$(awk '/Queries per second/ {print $4}' "$OUT/dnsperf-stat.txt")
echo "resolver on CPU $server_cpu, dnsperf (100 clients) on CPU $client_cpu, ${SECS} s: ${qps} QPS"
awk -F, -v q="$qps" -v s="$SECS" '
  $3 == "task-clock" {printf "CPU per query: %.2f us\n", $1 * 1000 / (q * s)}
  $3 == "context-switches" {printf "context switches per query: %.3f\n", $1 / (q * s)}
  $3 == "cpu-migrations" {printf "CPU migrations per query: %.3f\n", $1 / (q * s)}
  $3 == "raw_syscalls:sys_enter" {printf "system calls per query: %.3f\n", $1 / (q * s)}' "$OUT/stat.csv"

load record
perf record -q -g -p $pid -o "$OUT/perf.data" -- sleep "$SECS" 2>/dev/null
wait "$loader" || true
echo
echo "share of samples by where they ran:"
perf report -i "$OUT/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null |
  awk '$1 ~ /%$/ {print "  " $0}' | head -6
echo
echo "top symbols:"
perf report -i "$OUT/perf.data" --no-children --sort sym --stdio -g none 2>/dev/null |
  awk '$1 ~ /%$/ {print "  " $0}' | head -25
