#!/usr/bin/env bash
# Standalone start-up with many names: the release resolver on a directory of N RecordGroups
# (plus the 7 HTTP-checked groups of compare.py, whose endpoints are down here), timed from
# start to /readyz, then its resident memory 3 s later.
#
#   bench/load_time.sh [N]          (default 10000; HR=path/to/binary to time another build)
#
# Loopback only; every wait has a deadline.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}
HR=${HR:-target/release/healthroute-resolver}
need=()
command -v curl >/dev/null || need+=(curl)
command -v bc >/dev/null || need+=(bc)
if [ ${#need[@]} -gt 0 ]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
[ "$HR" != target/release/healthroute-resolver ] || cargo build --release -q -p healthroute-resolver
dir=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
python3 -c "import sys; sys.path.insert(0, 'bench'); import compare; compare.healthroute_conf('$dir', $N)"
admin=127.0.0.1:5398
start=$(date +%s.%N)
"$HR" --manifests "$dir" --listen 127.0.0.1:5397 --admin-listen $admin >/dev/null 2>&1 &
pid=$!
for _ in $(seq 1200); do
  curl -sf "http://$admin/readyz" >/dev/null 2>&1 && break
  sleep 0.05
done
ready=$(date +%s.%N)
curl -sf "http://$admin/readyz" >/dev/null || { echo "not ready after 60 s" >&2; exit 1; }
sleep 3
rss=$(awk '/VmRSS/ {print $2}' /proc/$pid/status)
printf '%d RecordGroups: ready after %.2f s, RSS %.1f MiB\n' "$((N + 3))" "$(echo "$ready - $start" | bc)" "$(echo "$rss / 1024" | bc -l)"
