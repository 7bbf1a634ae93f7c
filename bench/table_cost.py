#!/usr/bin/env python3
"""What one table shard write costs the API server and etcd (issue #44): CPU time of the two
processes per write, read from /proc before and after N writes, and the writes' latency, by
how the shard is sent.

    python3 bench/table_cost.py --kubeconfig ~/hr-cluster/kubeconfig \\
        [--writes 40] [--kib 360] [--watchers 2] [--methods apply,put] [--rounds 2]

A fold rewrites the table's shards one at a time (P11); at 10,000 groups each is about
360 KiB of JSON in one ConfigMap key. This writes such a ConfigMap again and again, one write
at a time, each with other content (a real write), in a namespace of its own that it deletes
at the end, with `--watchers` full watches of the namespace's ConfigMaps open (the resolvers;
their events are read and dropped). Methods:
  apply  server-side apply, forced, under the operator's field manager
  put    an unconditional replace (PUT without a resourceVersion)
The API server's and etcd's pids come from the loopback cluster's pid files
($HR_CLUSTER_DIR/run). Loopback only; every request has a timeout. Python 3 and PyYAML only."""
import argparse
import http.client
import json
import os
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scale  # noqa: E402  (its small API client)

MANAGER = "healthroute-operator"


def shard_json(kib, salt):
    """A shard-like JSON document of about `kib` KiB (groups of records, as the table holds),
    whose content `salt` changes."""
    groups, i = {}, 0
    while True:
        key = f"bench/g{i}"
        groups[key] = {"key": key, "name": f"g{i}.scale.example.", "type": "A", "ttl": 30,
                       "records": [{"setId": f"s{j}", "weight": 10, "healthy": True,
                                    "values": [f"198.18.{(i + j) % 256}.{(i * 7 + j + salt) % 254 + 1}"]}
                                   for j in range(3)]}
        i += 1
        if i % 64 == 0 and len(json.dumps(groups)) >= kib * 1024:
            return json.dumps({"index": 0, "groups": groups}, separators=(",", ":"))


def config_map(ns, name, data):
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": {"healthroute.io/table": "shard"}},
            "data": {"table.json": data}}


def write(kube, ns, method, name, data):
    path = f"/api/v1/namespaces/{ns}/configmaps/{name}"
    if method == "apply":
        kube.apply(path, config_map(ns, name, data), manager=MANAGER)
    elif method == "put":
        status, _ = kube.call("PUT", f"{path}?fieldManager={MANAGER}", config_map(ns, name, data), ok=(200, 201, 404))
        if status == 404:
            kube.call("POST", f"/api/v1/namespaces/{ns}/configmaps?fieldManager={MANAGER}", config_map(ns, name, data))
    else:
        raise SystemExit(f"unknown method {method!r}: apply or put")


class Drain:
    """A full watch of `path`, its bytes read and dropped (a resolver's share of the fan-out)."""

    def __init__(self, kube, path):
        rv = kube.get(path + "?limit=1")["metadata"]["resourceVersion"]
        if kube.https:
            self.conn = http.client.HTTPSConnection(kube.host, kube.port, context=kube.ctx)
        else:
            self.conn = http.client.HTTPConnection(kube.host, kube.port)
        self.conn.request("GET", f"{path}?watch=1&resourceVersion={rv}&timeoutSeconds=600", headers=kube.headers)
        self.response = self.conn.getresponse()
        self.bytes = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        try:
            while chunk := self.response.read1(1 << 16):
                self.bytes += len(chunk)
        except (OSError, http.client.HTTPException, ValueError, AttributeError):
            # AttributeError: http.client reading on after close() took the socket away.
            return

    def close(self):
        try:
            self.conn.sock.shutdown(2)
        except (OSError, AttributeError):
            pass
        self.conn.close()


def run(kube, ns, method, writes, kib, cluster_dir, round_no):
    name = f"shard-{method}"
    # The object exists before the timed writes (a fold overwrites a shard in place).
    write(kube, ns, method, name, shard_json(kib, 0))
    bodies = [shard_json(kib, round_no * writes + k + 1) for k in range(writes)]
    latencies = []
    cost = scale.ClusterCost(cluster_dir)
    for body in bodies:
        started = time.monotonic()
        write(kube, ns, method, name, body)
        latencies.append(time.monotonic() - started)
    wall, api, etcd = cost.spent()
    latencies.sort()
    n = len(latencies)
    return (f"| {method} | {n} in {wall:.1f} s | {1000 * api / n:.1f} ms | {1000 * etcd / n:.1f} ms "
            f"| {1000 * latencies[n // 2]:.1f} / {1000 * latencies[-1]:.1f} ms |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"), required=not os.environ.get("KUBECONFIG"))
    p.add_argument("--writes", type=int, default=40)
    p.add_argument("--kib", type=int, default=360, help="the shard's size")
    p.add_argument("--watchers", type=int, default=2, help="full watches of the ConfigMaps meanwhile")
    p.add_argument("--methods", default="apply,put")
    p.add_argument("--rounds", type=int, default=2, help="each method this many times, alternating")
    p.add_argument("--cluster-dir", default=os.environ.get("HR_CLUSTER_DIR", os.path.expanduser("~/hr-cluster")))
    args = p.parse_args()
    kube = scale.Kube(args.kubeconfig, tempfile.mkdtemp(prefix="hr-table-cost-"))
    ns = f"table-cost-{os.getpid()}"
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    drains = []
    try:
        drains = [Drain(kube, f"/api/v1/namespaces/{ns}/configmaps") for _ in range(args.watchers)]
        print(f"\n`{' '.join(sys.argv)}`: one {args.kib} KiB shard written {args.writes} times a round, "
              f"one write at a time, {args.watchers} full watches open\n")
        print("| method | writes | API server CPU / write | etcd CPU / write | latency p50 / max |")
        print("| --- | --- | --- | --- | --- |")
        for r in range(args.rounds):
            for method in args.methods.split(","):
                print(run(kube, ns, method, args.writes, args.kib, args.cluster_dir, r), flush=True)
        print(f"\nwatch bytes read per watcher: {', '.join(f'{d.bytes / 2**20:.1f} MiB' for d in drains)}")
    finally:
        for d in drains:
            d.close()
        kube.call("DELETE", f"/api/v1/namespaces/{ns}", ok=(200, 202, 404))


if __name__ == "__main__":
    main()
