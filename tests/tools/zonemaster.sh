#!/usr/bin/env bash
# Zonemaster (zonemaster-cli) against two resolvers on loopback, each the one nameserver of a
# test zone with both listed (D12), the way an outside checker sees a delegated zone.
#
#   tests/tools/zonemaster.sh            # after `cargo build -p healthroute-resolver`
#   RESOLVER=path/to/healthroute-resolver tests/tools/zonemaster.sh
#   DNSSEC=1 tests/tools/zonemaster.sh   # the zone signed (K1-K4), its DS handed to Zonemaster
#
# Prints every message of level NOTICE and up; exits 1 on a CRITICAL, ERROR or WARNING whose
# tag is not in ALLOWED below, 2 when it cannot run (no zonemaster-cli, no binary, port 53 of
# 127.0.0.11 or 127.0.0.12 taken: it binds them, so it runs as root or with
# CAP_NET_BIND_SERVICE). zonemaster-cli always queries port 53. docs/reliability.md,
# "Zonemaster", lists the messages and why they remain.
#
# Nothing leaves the machine: the root hints name 127.0.0.13, where nothing listens, so the
# lookups Zonemaster makes in the outside world (the parent of the zone, reverse names, AS
# numbers) fail at once; a profile cuts Zonemaster's 5-second query timeout to 1 second so that
# each such failure costs about a second, not ten.
set -euo pipefail
cd "$(dirname "$0")/../.."

# Tags that loopback addresses and a machine without network explain, each with its reason.
# (No DNSSEC only yields NOTICE messages, below the levels this script fails on.)
ALLOWED=(
  # Loopback addresses are not routable: every nameserver address here is in 127.0.0.0/8.
  "NAMESERVER_IP_PRIVATE_NETWORK"
  # The PTR of 127.0.0.11/12 is looked up from the (unreachable) root: no answer.
  "NO_RESPONSE_PTR_QUERY"
)

RESOLVER=${RESOLVER:-${CARGO_TARGET_DIR:-target}/debug/healthroute-resolver}
ZONE=test.example
NS1=127.0.0.11
NS2=127.0.0.12
if ! command -v zonemaster-cli >/dev/null; then
  echo "zonemaster-cli is not installed (apt-get install zonemaster-cli)" >&2
  exit 2
fi
if [ ! -x "$RESOLVER" ]; then
  echo "$RESOLVER is not built (cargo build -p healthroute-resolver)" >&2
  exit 2
fi

source tests/tools/nameservers.sh
nameservers_setup
ds_args=()
if [ "${DNSSEC:-0}" = 1 ]; then
  zone_signed
  ds_args=(--ds "$(zone_ds | tr ' ' ',')")
fi
cat >"$work/zone/records.yaml" <<EOF
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: www, namespace: zonemaster}
spec:
  name: www.$ZONE.
  type: A
  routingPolicy: Simple
  records: [{setIdentifier: only, values: ["192.0.2.80"]}]
EOF
cat >"$work/hints" <<EOF
.            3600000  NS  root.invalid.
root.invalid. 3600000  A   127.0.0.13
EOF
echo '{"resolver": {"defaults": {"timeout": 1, "retry": 1, "retrans": 1}}}' >"$work/profile.json"

nameservers_start

start=$(date +%s%N)
zonemaster-cli --profile "$work/profile.json" --hints "$work/hints" --no-ipv6 \
  --ns "ns1.$ZONE./$NS1" --ns "ns2.$ZONE./$NS2" "${ds_args[@]}" \
  --level DEBUG --raw --show-testcase "$ZONE" >"$work/zonemaster.txt" 2>&1 || {
  cat "$work/zonemaster.txt" >&2
  echo "zonemaster-cli failed" >&2
  exit 2
}
took_ms=$((($(date +%s%N) - start) / 1000000))

# A run that tested nothing passes nothing: the EDNS and header test cases must have run.
cases=(NAMESERVER02 NAMESERVER10 NAMESERVER11 NAMESERVER12 NAMESERVER13 DELEGATION01 CONSISTENCY05)
[ "${DNSSEC:-0}" = 1 ] && cases+=(DNSSEC01 DNSSEC02 DNSSEC03 DNSSEC05 DNSSEC08 DNSSEC09 DNSSEC10)
for case in "${cases[@]}"; do
  if ! grep -qE " DEBUG +$case +TEST_CASE_START" "$work/zonemaster.txt"; then
    cat "$work/zonemaster.txt" >&2
    echo "zonemaster-cli did not run $case" >&2
    exit 2
  fi
done

failed=0
echo "zonemaster-cli on $ZONE (ns1.$ZONE./$NS1, ns2.$ZONE./$NS2), messages of level NOTICE and up:"
# Lines read: seconds, level, test case, tag, arguments.
while read -r _ level testcase tag args; do
  case "$level" in
    CRITICAL | ERROR | WARNING)
      verdict="allowed"
      if ! printf '%s\n' "${ALLOWED[@]}" | grep -qx "$tag"; then
        verdict="NOT ALLOWED"
        failed=1
      fi
      ;;
    NOTICE) verdict="" ;;
    *) continue ;;
  esac
  printf '  %-8s %-14s %-40s %s%s\n' "$level" "$testcase" "$tag" "${verdict:+[$verdict] }" "$args"
done <"$work/zonemaster.txt"
echo "zonemaster-cli took ${took_ms} ms"
if [ "$failed" -ne 0 ]; then
  echo "FAILED: messages above are not in this script's allow-list" >&2
  exit 1
fi
echo "ok: every CRITICAL, ERROR and WARNING is explained (loopback, no network)"
