#!/usr/bin/env python3
"""What one RecordGroup status write costs the API server and etcd (issue #44): CPU time of
the two processes per write, read from /proc before and after N writes, and the writes'
latency, by how the status is sent.

    python3 bench/status_cost.py --kubeconfig ~/hr-cluster/kubeconfig --namespace scale-L-data \\
        [--writes 1000] [--methods apply,merge,json] [--rounds 2] [--cluster-dir ~/hr-cluster]

The namespace is one that `bench/scale.py --keep` left (its groups have statuses); no operator
may run on it meanwhile. Each write changes the Ready condition's message, so that it is a
real write (an unchanged status costs the API server no etcd write). Methods:
  apply  server-side apply of the status under the operator's field manager, forced: what
         the operator sends
  merge  a JSON merge patch of the status subresource
  json   a JSON patch replacing /status
Eight writes are in flight at once, as the operator's writer allows. The API server's and
etcd's pids come from the loopback cluster's pid files ($HR_CLUSTER_DIR/run). Loopback only;
every write has a timeout. Python 3 and PyYAML only."""
import argparse
import copy
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale  # noqa: E402  (its small API client)

GROUP_API = "/apis/healthroute.io/v1alpha1"
MANAGER = "healthroute-operator"


def status_with(obj, message):
    status = copy.deepcopy(obj.get("status") or {})
    conditions = status.setdefault("conditions", [])
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None:
        ready = {"type": "Ready", "status": "True", "reason": "Served",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}
        conditions.append(ready)
    ready["message"] = message
    return status


def write(kube, ns, method, obj, message):
    path = f"{GROUP_API}/namespaces/{ns}/recordgroups/{obj['metadata']['name']}/status"
    status = status_with(obj, message)
    if method == "apply":
        kube.apply(path, {"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "status": status},
                   manager=MANAGER)
    elif method == "merge":
        kube.call("PATCH", path, {"status": status}, ctype="application/merge-patch+json")
    elif method == "json":
        kube.json_patch(path, [{"op": "add", "path": "/status", "value": status}])
    else:
        raise SystemExit(f"unknown method {method!r}: apply, merge or json")


def run(kube, ns, method, groups, round_no, cluster_dir, in_flight=8):
    todo = list(groups)
    latencies = []
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                obj = todo.pop()
            started = time.monotonic()
            write(kube, ns, method, obj, f"status_cost {method} round {round_no}")
            with lock:
                latencies.append(time.monotonic() - started)

    cost = scale.ClusterCost(cluster_dir)
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(in_flight)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    wall, api, etcd = cost.spent()
    latencies.sort()
    n = len(latencies)
    return (f"| {method} | {n} in {wall:.1f} s ({n / wall:.0f}/s) | {1000 * api / n:.2f} ms | {1000 * etcd / n:.2f} ms "
            f"| {1000 * latencies[n // 2]:.1f} / {1000 * latencies[min(n - 1, int(n * 0.99))]:.1f} ms |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), required=not os.environ.get("KUBECONFIG"))
    p.add_argument("--namespace", required=True, help="a namespace of RecordGroups that bench/scale.py --keep left")
    p.add_argument("--writes", type=int, default=1000)
    p.add_argument("--methods", default="apply,merge,json")
    p.add_argument("--rounds", type=int, default=2, help="each method this many times, alternating")
    p.add_argument("--cluster-dir", default=os.environ.get("HR_CLUSTER_DIR", os.path.expanduser("~/hr-cluster")))
    args = p.parse_args()
    kube = scale.Kube(args.kubeconfig, tempfile.mkdtemp(prefix="hr-status-cost-"))
    items = kube.get(f"{GROUP_API}/namespaces/{args.namespace}/recordgroups?limit={args.writes}")["items"]
    if not items:
        sys.exit(f"no RecordGroups in {args.namespace}")
    print(f"\n`{' '.join(sys.argv)}`: {len(items)} groups, 8 writes in flight\n")
    print("| method | writes | API server CPU / write | etcd CPU / write | latency p50 / p99 |")
    print("| --- | --- | --- | --- | --- |")
    for r in range(args.rounds):
        for method in args.methods.split(","):
            print(run(kube, args.namespace, method, items, r, args.cluster_dir), flush=True)


if __name__ == "__main__":
    main()
