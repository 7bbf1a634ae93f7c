#!/usr/bin/env bash
# Runs the real operator and two resolvers (one without a checker) against a live cluster, as the chart's ServiceAccounts
# with the chart's RBAC, with pushed deltas (P12), applies the CRDs and an example, and checks
# the answers with dig. Skipped (exit 0, with the reason) when
# HEALTHROUTE_TEST_KUBECONFIG is unset.
#
#   HEALTHROUTE_TEST_KUBECONFIG=~/.kube/config tests/live-cluster.sh
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${HEALTHROUTE_TEST_KUBECONFIG:-}" ]; then
  echo "skipped: HEALTHROUTE_TEST_KUBECONFIG is not set (this script needs a live API server)"
  exit 0
fi
export KUBECONFIG="$HEALTHROUTE_TEST_KUBECONFIG"
for tool in dig kubectl curl; do
  command -v "$tool" >/dev/null || { echo "tests/live-cluster.sh: $tool not found (dig: apt-get install bind9-dnsutils)" >&2; exit 1; }
done
NS=healthroute-live-sh
cargo build -q -p healthroute-operator -p healthroute-resolver
kubectl apply --server-side -f crds/
# The namespace first: the chart's dry run below goes into it.
kubectl create namespace "$NS" --dry-run=client -o yaml | kubectl apply -f -
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  # Gone before their RBAC is (the resolver drains for 5 s, its checker still writing).
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -f "${key:-}" "${tmp_kube:-}"/*.kubeconfig
  kubectl delete clusterrole,clusterrolebinding -l app.kubernetes.io/instance=hrlive --wait=false >/dev/null 2>&1 || true
  kubectl delete namespace "$NS" --wait=false >/dev/null 2>&1 || true
}
trap cleanup EXIT
# The chart, rendered with defaults, as the API server would accept it (its own RBAC).
python3 -c "import helm_python" 2>/dev/null || python3 -m pip install -q helm-python-sdk
python3 - "$NS" <<'PY' > /tmp/healthroute-chart.yaml
import sys
import helm_python
chart = helm_python.Chart.load("charts/healthroute")
out = chart.render(chart.merge_values(None), name="hrlive", namespace=sys.argv[1], is_install=True)
print("\n---\n".join(v for k, v in sorted(out.items()) if not k.endswith("NOTES.txt")))
PY
kubectl apply --dry-run=server -n "$NS" -f /tmp/healthroute-chart.yaml
# The binaries run as the chart's ServiceAccounts, with exactly its RBAC: its accounts,
# roles and bindings are applied for real (nothing else of it: no kubelet runs here), and each
# process gets a kubeconfig holding its account's token.
python3 - /tmp/healthroute-chart.yaml > /tmp/healthroute-rbac.yaml <<'PY'
import sys, yaml
keep = {"ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d["kind"] in keep]
print(yaml.safe_dump_all(docs))
PY
kubectl apply -n "$NS" -f /tmp/healthroute-rbac.yaml >/dev/null
tmp_kube=$(mktemp -d)
server=$(kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.server}')
kubectl config view --raw --minify -o jsonpath='{.clusters[0].cluster.certificate-authority-data}' | base64 -d > "$tmp_kube/ca.crt"
as_account() {
  local file="$tmp_kube/$1.kubeconfig"
  KUBECONFIG="$file" kubectl config set-cluster live --server="$server" --certificate-authority="$tmp_kube/ca.crt" --embed-certs >/dev/null
  KUBECONFIG="$file" kubectl config set-credentials "$1" --token="$(kubectl -n "$NS" create token "$1" --duration=1h)" >/dev/null
  KUBECONFIG="$file" kubectl config set-context live --cluster=live --user="$1" --namespace="$NS" >/dev/null
  KUBECONFIG="$file" kubectl config use-context live >/dev/null
  echo "$file"
}
operator_kube=$(as_account hrlive-operator)
resolver_kube=$(as_account hrlive-resolver)

# The health check probes a TCP server this script runs on loopback (tests send traffic to
# loopback only); the resolver runs outside the cluster here, so loopback is allowed on purpose.
health_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 "$health_port" >/dev/null 2>&1 &
health=$!
pids+=($health)
kubectl -n "$NS" apply -f - <<YAML
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: api}
spec:
  name: api.live.example.
  type: A
  routingPolicy: Failover
  records:
    - {setIdentifier: main, failover: {role: Primary}, values: ["192.0.2.1"], healthCheckRef: {name: main}}
    - {setIdentifier: dr, failover: {role: Secondary}, values: ["198.51.100.1"]}
---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {name: main}
spec: {type: TCP, target: {address: 127.0.0.1, port: $health_port}, requestIntervalSeconds: 2, failureThreshold: 1, connectTimeoutSeconds: 1}
YAML

# Pushed deltas (P12): one key for both; the resolver's Lease tells the leader its listener.
key=$(mktemp)
head -c 32 /dev/urandom | base64 > "$key"
KUBECONFIG="$operator_kube" target/debug/healthroute-operator --zone live.example --namespace "$NS" --watch-namespace "$NS" --identity live-op \
  --admin-listen 127.0.0.1:9391 --push-key-file "$key" &
pids+=($!)
KUBECONFIG="$resolver_kube" target/debug/healthroute-resolver --zone live.example --table-namespace "$NS" --checker-name live-checker \
  --checker-allow 127.0.0.0/8 --listen 127.0.0.1:5392 --admin-listen 127.0.0.1:9392 \
  --push-listen 127.0.0.1:9393 --push-key-file "$key" &
pids+=($!)
# SEM-P12: a resolver without a checker takes pushes too: its registration Lease (not a
# checker's) tells the leader its listener.
KUBECONFIG="$resolver_kube" target/debug/healthroute-resolver --zone live.example --table-namespace "$NS" --checker-name live-no-checker \
  --no-checker --listen 127.0.0.1:5394 --admin-listen 127.0.0.1:9394 \
  --push-listen 127.0.0.1:9395 --push-key-file "$key" &
pids+=($!)

# The answer of the resolver on port $1 (default the first one's).
answer() { dig +short +time=1 +tries=1 @127.0.0.1 -p "${1:-5392}" api.live.example A; }
wait_answer() {
  for _ in $(seq 60); do [ "$(answer "${2:-}")" = "$1" ] && return 0; sleep 0.5; done
  echo "FAIL: expected $1, got '$(answer "${2:-}")'"; kubectl -n "$NS" get rg,hc -o yaml; exit 1
}
# The TCP server accepts: the primary answers.
wait_answer 192.0.2.1
echo "while the check passes: $(answer)"
# A real probe failure: the server stops, the next probe is refused, the standby answers.
kill "$health"
wait_answer 198.51.100.1
echo "after the probe failed: $(answer)"
# The server back: the primary again.
python3 -m http.server --bind 127.0.0.1 "$health_port" >/dev/null 2>&1 &
pids+=($!)
wait_answer 192.0.2.1
echo "after the server came back: $(answer)"
wait_answer 192.0.2.1 5394
echo "the resolver without a checker: $(answer 5394)"
# The changes reached the resolver pushed (served before their ConfigMaps' watch events; a
# push that loses the race to the watch, as the first one may while a connection opens on a
# busy machine, is left to it).
served=$(curl -s http://127.0.0.1:9392/metrics | awk '/^healthroute_resolver_pushed_deltas_total\{result="served"\}/ {print $2}')
sent=$(curl -s http://127.0.0.1:9391/metrics | awk '/^healthroute_operator_pushed_deltas_total\{result="sent"\}/ {print $2}')
echo "pushed deltas: the operator sent ${sent:-0}, the resolver served ${served:-0}"
[ "${served:-0}" -ge 1 ] || {
  echo "FAIL: no pushed delta was served"
  curl -s http://127.0.0.1:9391/metrics http://127.0.0.1:9392/metrics | grep pushed_deltas
  exit 1
}
kubectl -n "$NS" get lease -l healthroute.io/resolver
served=$(curl -s http://127.0.0.1:9394/metrics | awk '/^healthroute_resolver_pushed_deltas_total\{result="served"\}/ {print $2}')
echo "pushed deltas: the resolver without a checker served ${served:-0}"
[ "${served:-0}" -ge 1 ] || {
  echo "FAIL: the resolver without a checker served no pushed delta"
  curl -s http://127.0.0.1:9394/metrics | grep pushed_deltas
  exit 1
}
kubectl -n "$NS" get rg,hc
echo "live cluster check passed"
