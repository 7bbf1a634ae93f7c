#!/usr/bin/env bash
# DNSViz (Debian's dnsviz) against a signed zone (K1-K4) served by two resolvers on loopback,
# each one of its nameservers, with the zone's DS given as the parent's: every query DNSViz
# makes (apex, names, types, names that do not exist) must come back secure, with no error
# and no warning.
#
#   tests/tools/dnsviz.sh            # after `cargo build -p healthroute-resolver`
#   RESOLVER=path/to/healthroute-resolver tests/tools/dnsviz.sh
#
# Exits 1 on an error or warning, 2 when it cannot run (no dnsviz, no named: `dnsviz probe -N`
# serves the delegation from a local named; port 53 of 127.0.0.21 or .22 taken). Nothing
# leaves the machine: `-a` stops the probe at the zone, `-N` and `-D` give the delegation.
set -euo pipefail
cd "$(dirname "$0")/../.."

RESOLVER=${RESOLVER:-${CARGO_TARGET_DIR:-target}/debug/healthroute-resolver}
ZONE=test.example
NS1=127.0.0.21
NS2=127.0.0.22
for tool in dnsviz named named-checkconf; do
  if ! command -v "$tool" >/dev/null; then
    echo "$tool is not installed (apt-get install dnsviz bind9 bind9-utils)" >&2
    exit 2
  fi
done
[ -x "$RESOLVER" ] || { echo "$RESOLVER is not built" >&2; exit 2; }

source tests/tools/nameservers.sh
nameservers_setup
zone_signed
cat >"$work/zone/records.yaml" <<EOF
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: www, namespace: dnsviz}
spec:
  name: www.$ZONE.
  type: A
  routingPolicy: Weighted
  records:
    - {setIdentifier: a, weight: 1, values: ["192.0.2.80"]}
    - {setIdentifier: b, weight: 1, values: ["192.0.2.81"]}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: alias, namespace: dnsviz}
spec:
  name: alias.$ZONE.
  type: CNAME
  routingPolicy: Simple
  records: [{setIdentifier: only, values: [www.$ZONE.]}]
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: txt, namespace: dnsviz}
spec:
  name: txt.$ZONE.
  type: TXT
  routingPolicy: Simple
  records: [{setIdentifier: only, values: ['"v=spf1 -all"']}]
EOF
nameservers_start
ds=$(zone_ds)
servers="ns1.$ZONE=$NS1,ns2.$ZONE=$NS2"
dnsviz probe -A -a "$ZONE" -x "$ZONE:$servers" -N "$ZONE:$servers" -D "$ZONE:$ds" \
  -o "$work/probe.json" "$ZONE" "www.$ZONE" "alias.$ZONE" "txt.$ZONE" "nope.$ZONE" >"$work/probe.log" 2>&1 || {
  cat "$work/probe.log" >&2
  echo "dnsviz probe failed" >&2
  exit 2
}
dnsviz grok -r "$work/probe.json" -l info -o "$work/grok.json"
python3 - "$work/grok.json" <<'PY'
import json, sys
grok = json.load(open(sys.argv[1]))
problems, statuses = [], {}
def walk(node, path):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("errors", "warnings"):
                problems.extend(f"{path}: {key[:-1]} {e.get('code')}: {e.get('description', '')}" for e in value)
            elif key == "status" and isinstance(value, str):
                statuses[path] = value
            else:
                walk(value, f"{path}/{key}")
    elif isinstance(node, list):
        for value in node:
            walk(value, path)
walk(grok, "")
delegation = [s for p, s in statuses.items() if p.endswith("/delegation")]
print(f"dnsviz: delegation {delegation}, {sum(1 for s in statuses.values() if s == 'VALID')} RRSIGs, "
      f"proofs and DS checked VALID, {len(problems)} errors or warnings")
for p in problems:
    print("  " + p)
if problems or delegation != ["SECURE"] or any(s not in ("VALID", "SECURE", "NOERROR") for s in statuses.values()):
    print("FAILED", {p: s for p, s in statuses.items() if s not in ("VALID", "SECURE", "NOERROR")})
    sys.exit(1)
print("ok: the signed zone is secure from its DS down, with no error and no warning")
PY
