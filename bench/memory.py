#!/usr/bin/env python3
"""Resident memory with N names, in one run: healthroute in standalone mode, the healthroute
resolver in cluster mode (its table from ConfigMaps, served by a local API stand-in), Knot DNS
and gdnsd, all serving the same names. Prints a markdown table for docs/benchmarks.md.

    python3 bench/memory.py [--names 10000 100000] [--settle 8]
    HR=path/to/healthroute-resolver python3 bench/memory.py     # another build
    python3 bench/memory.py --only-healthroute --names 10000 --hr OLD --hr NEW  # builds side by side

Each healthroute row also says how much of its RSS is anonymous memory (heap, stacks) and how
much is file-backed (the binary's pages the process has mapped, which the kernel can drop and
read back).

Each server is started alone, asked one query until it answers (at most 120 s), left to
settle, and its VmRSS read. The default settle (8 s) is longer than the 5 s after its first
table at which a resolver hands back its start-up code (docs/design.md, "Code after
start-up"), so that what is read is the resident size it keeps. The idle quickstart resolver
is also scraped once (its /metrics) at the end of the settle, as Prometheus would, and read a
second later. The cluster-mode resolver gets the very table the standalone resolver compiled
(its --table-file), split into shards in the published format, through a stand-in that answers
the ConfigMap list and holds the watch open. Loopback only."""
import argparse
import http.client
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

SHARD_BYTES = 256 * 1024


def fnv64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def configmaps(table):
    """The published form (healthroute_table::published): shards, then the manifest."""
    groups = sorted(table["groups"].items())
    total = len(json.dumps(table["groups"]))
    n = max(1, -(-total // SHARD_BYTES))
    shards = [{"index": i, "groups": {}} for i in range(n)]
    for i, (key, g) in enumerate(groups):
        shards[i % n]["groups"][key] = g
    items, hashes = [], []
    for s in shards:
        data = json.dumps(s, separators=(",", ":"))
        hashes.append(fnv64(data.encode()))
        items.append({"metadata": {"name": f"healthroute-table-{s['index']}", "namespace": "hr",
                                   "resourceVersion": "1", "labels": {"healthroute.io/table": "shard"}},
                      "data": {"table.json": data}})
    manifest = json.dumps({"generation": 1, "shards": n, "hashes": hashes})
    items.append({"metadata": {"name": "healthroute-table", "namespace": "hr", "resourceVersion": "1",
                               "labels": {"healthroute.io/table": "manifest"}},
                  "data": {"table.json": manifest}})
    return items


class StandIn(http.server.BaseHTTPRequestHandler):
    """Lists the table ConfigMaps; a watch stays open (no events) until the run ends."""
    protocol_version = "HTTP/1.1"
    items = []
    stop = threading.Event()

    def do_GET(self):
        if "/configmaps" not in self.path:
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        if "watch=true" in self.path:
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
            self.stop.wait(600)
            return
        body = json.dumps({"apiVersion": "v1", "kind": "ConfigMapList",
                           "metadata": {"resourceVersion": "1"}, "items": self.items}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def split_kib(pid):
    """(RssAnon, RssFile) of `pid`, KiB."""
    out = {}
    try:
        for line in open(f"/proc/{pid}/status"):
            key = line.split(":")[0]
            if key in ("RssAnon", "RssFile"):
                out[key] = int(line.split()[1])
    except OSError:
        pass
    return out.get("RssAnon", 0), out.get("RssFile", 0)


SPLITS = {}


def measure(proc, port, settle, label=None, scrape=None):
    """VmRSS of `proc` once it answers and has settled; with `scrape` (an admin port), after
    one GET /metrics at the end of the settle and a second more."""
    if not compare.wait_ready(port, deadline=120):
        proc.kill()
        return None
    time.sleep(settle)
    if scrape:
        conn = http.client.HTTPConnection("127.0.0.1", scrape, timeout=10)
        try:
            conn.request("GET", "/metrics")
            conn.getresponse().read()
        except OSError as e:
            print(f"warning: /metrics on port {scrape}: {e}", file=sys.stderr)
        finally:
            conn.close()
        time.sleep(1)
    rss = compare.rss_kib(proc.pid)
    if label:
        SPLITS[label] = split_kib(proc.pid)
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    return rss


def cluster_mode(hr, tmp, table_file, settle, label):
    """The resolver in cluster mode on `table_file`'s table, as ConfigMaps from the stand-in."""
    StandIn.items = configmaps(json.load(open(table_file)))
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    api.daemon_threads = True
    threading.Thread(target=api.serve_forever, daemon=True).start()
    kubeconfig = os.path.join(tmp, "kubeconfig")
    open(kubeconfig, "w").write(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{api.server_address[1]}"}}}}]
users: [{{name: u, user: {{token: bench}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u, namespace: hr}}}}]
current-context: x
""")
    port = compare.free_port()
    proc = subprocess.Popen([hr, "--zone", "example.com", "--listen", f"127.0.0.1:{port}", "--no-checker",
                             "--table-namespace", "hr", "--admin-listen", "127.0.0.1:0"],
                            env={**os.environ, "KUBECONFIG": kubeconfig}, stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(tmp, "cluster.log"), "w"))
    rss = measure(proc, port, settle, label)
    StandIn.stop.set()
    api.shutdown()
    StandIn.stop.clear()
    return rss


def quickstart(hr, settle, label):
    """An idle standalone resolver on examples/quickstart (its own port and admin port),
    scraped once."""
    port, admin = compare.free_port(), compare.free_port()
    proc = subprocess.Popen([hr, "--manifests", os.path.join(compare.ROOT, "examples", "quickstart"),
                             "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return measure(proc, port, settle, label, scrape=admin)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--names", type=int, nargs="+", default=[10000, 100000])
    p.add_argument("--settle", type=float, default=8.0)
    p.add_argument("--hr", action="append", help="a resolver binary (repeatable: each is measured in turn)")
    p.add_argument("--only-healthroute", action="store_true", help="leave Knot and gdnsd out")
    p.add_argument("--quickstart", action="store_true", help="also an idle standalone resolver on examples/quickstart")
    args = p.parse_args()
    builds = args.hr or [os.environ.get("HR", compare.HR)]
    compare.HR = builds[0]
    missing = [c for c, pkg in (("knotd", "knot"), ("gdnsd", "gdnsd")) if not shutil.which(c)]
    if missing and not args.only_healthroute:
        subprocess.run(["apt-get", "install", "-y", "-qq", *[{"knotd": "knot", "gdnsd": "gdnsd"}[m] for m in missing]],
                       check=False, stdout=subprocess.DEVNULL)
    if not os.path.exists(builds[0]):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "healthroute-resolver"], cwd=compare.ROOT, check=True)
    rows = []
    for n in args.names:
        for hr in builds:
            compare.HR = hr
            tmp = tempfile.mkdtemp(prefix="hr-memory-")
            row = {"names": n, "hr": hr}
            try:
                d = os.path.join(tmp, "standalone")
                os.makedirs(d)
                table_file = os.path.join(tmp, "table.json")
                port = compare.free_port()
                proc = compare.start("healthroute", d, port, n, ["--table-file", table_file, "--admin-listen", "127.0.0.1:0"])
                row["standalone"] = measure(proc, port, args.settle, (hr, n, "standalone"))
                row["cluster"] = cluster_mode(hr, tmp, table_file, args.settle, (hr, n, "cluster"))
                for kind in () if args.only_healthroute else ("knot", "gdnsd"):
                    d = os.path.join(tmp, kind)
                    os.makedirs(d)
                    port = compare.free_port()
                    row[kind] = measure(compare.start(kind, d, port, n), port, args.settle)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            rows.append(row)

    print(f"Resident memory (VmRSS {args.settle:g} s after the first answer):\n")
    print("| build | names | healthroute standalone | healthroute cluster mode | Knot | gdnsd | cluster / Knot |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    mib = lambda k: "did not start" if k is None else f"{k / 1024:.1f} MiB"
    for r in rows:
        per = lambda k: "" if k not in r else "-" if r[k] is None else f"{mib(r[k])} ({r[k] * 1024 / r['names']:.0f} B/name)"
        ratio = f"{r['cluster'] / r['knot']:.2f}x" if r["cluster"] and r.get("knot") else "-"
        print(f"| {r['hr']} | {r['names']:,} | {per('standalone')} | {per('cluster')} "
              f"| {per('knot') or '-'} | {per('gdnsd') or '-'} | {ratio} |")
    if args.quickstart:
        print("\nIdle standalone resolver on examples/quickstart:\n")
        print("| build | RSS |")
        print("| --- | --- |")
        for hr in builds:
            print(f"| {hr} | {mib(quickstart(hr, args.settle, (hr, 0, 'quickstart')))} |")
    print("\nHow much of each healthroute RSS is anonymous (heap, stacks) and file-backed (the binary):\n")
    print("| build | names | mode | anonymous | file-backed |")
    print("| --- | --- | --- | --- | --- |")
    for (hr, n, mode), (anon, file) in SPLITS.items():
        print(f"| {hr} | {n:,} | {mode} | {anon / 1024:.1f} MiB | {file / 1024:.1f} MiB |")


if __name__ == "__main__":
    main()
