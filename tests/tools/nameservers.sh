# Sourced by zonemaster.sh and dnsviz.sh: a test zone served by two resolvers on loopback,
# each one of its two nameservers (D12), the way an outside checker sees a delegated zone.
#
#   nameservers_setup             # $work (removed on exit), $work/zone/healthroute.yaml
#   (write $work/zone/*.yaml, and `zone_signed` for a signed zone)
#   nameservers_start             # both resolvers on port 53 of $NS1 and $NS2, ready
#
# Needs RESOLVER, ZONE, NS1, NS2. Port 53: root or CAP_NET_BIND_SERVICE.

nameservers_setup() {
  work=$(mktemp -d)
  pids=()
  trap nameservers_cleanup EXIT
  mkdir "$work/zone"
  cat >"$work/zone/healthroute.yaml" <<EOF
zones:
  - name: $ZONE
    nameservers:
      - {name: ns1.$ZONE., addresses: [$NS1]}
      - {name: ns2.$ZONE., addresses: [$NS2]}
EOF
}

nameservers_cleanup() {
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# One CSK (K1) that both nameservers sign with; `zone_ds` prints its DS fields.
zone_signed() {
  "$RESOLVER" dnssec keygen >"$work/zone/csk.pem"
  printf '    dnssec:\n      keys: [{file: csk.pem}]\n' >>"$work/zone/healthroute.yaml"
}

# `ZONE. 3600 IN DS TAG ALG TYPE DIGEST` -> `TAG ALG TYPE DIGEST`
zone_ds() {
  "$RESOLVER" dnssec ds --manifests "$work/zone" | awk '$4 == "DS" {print $5 " " $6 " " $7 " " $8}'
}

# Both resolvers serve the same directory (so the same table generation, the SOA serial);
# returns once both are ready (exits 2 with the log of one that is not).
nameservers_start() {
  local ip reply
  for ip in "$NS1" "$NS2"; do
    "$RESOLVER" --manifests "$work/zone" --listen "$ip:53" --admin-listen "$ip:9153" \
      --udp-sockets 1 >"$work/resolver-$ip.log" 2>&1 &
    pids+=($!)
  done
  for ip in "$NS1" "$NS2"; do
    for _ in $(seq 100); do
      reply=$( (exec 3<>"/dev/tcp/$ip/9153" && printf 'GET /readyz HTTP/1.0\r\n\r\n' >&3 && head -1 <&3) 2>/dev/null) || reply=
      [[ $reply == *" 200 "* ]] && continue 2
      sleep 0.1
    done
    echo "the resolver on $ip did not become ready:" >&2
    cat "$work/resolver-$ip.log" >&2
    exit 2
  done
}
