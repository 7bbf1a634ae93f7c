#!/usr/bin/env python3
"""What a signed answer costs (issue #45), healthroute against Knot's online signing
(`mod-onlinesign`, Debian's knot) on the same names, in one run:

    python3 bench/dnssec.py [--resolver BIN] [--names 1000] [--seconds 8] [--rate 3000]

1. The same zone for both servers: NAMES A records `n<i>.bench.test.` (healthroute: Simple
   RecordGroups in a standalone directory, signed with one ECDSA P-256 CSK; Knot: a zone file,
   `mod-onlinesign` with an ecdsap256sha256 single-type-signing policy).
2. Each server alone on the last CPU, dnsperf on CPU 0, loopback only; for each server, plain
   queries (no EDNS) and DO queries (`dnsperf -D`), every name in turn:
   - CPU per query: the server's CPU time (utime + stime from /proc) over a run at full speed
     (`-c 20 -q 100 -l SECONDS`), divided by the answers;
   - p99 at a fixed rate: `-Q RATE -l SECONDS -v`, every answer's latency;
   - RSS (VmRSS) after the runs.
   healthroute's DO answers come from its signature cache after the first pass over the names
   (the cache's hit rate is printed from its metrics); Knot signs every answer as it makes it.
3. A markdown table, and the ratios the issue asks for: signed / unsigned for each server, and
   healthroute signed / Knot signed.

Needs dnsperf and knot (installed from Debian's packages when missing). Every load is bounded
by dnsperf's -l.
"""

import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZONE = "bench.test."


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def need(tools):
    missing = [pkg for cmd, pkg in tools if shutil.which(cmd) is None]
    if missing:
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True,
                       env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def wait_answering(port, name):
    for _ in range(200):
        out = subprocess.run(["dig", "+short", "+time=1", "+tries=1", "-p", str(port),
                              "@127.0.0.1", name, "A"], capture_output=True, text=True)
        if out.stdout.strip():
            return
        time.sleep(0.1)
    sys.exit(f"nothing answers {name} on port {port}")


def dnsperf(port, queries, args):
    cmd = ["taskset", "-c", "0", "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", queries, *args]
    return subprocess.run(cmd, capture_output=True, text=True).stdout


def measure(pid, port, queries, do, seconds, rate):
    flags = ["-D"] if do else []
    # A first pass over every name (healthroute's cache fills; Knot has none).
    dnsperf(port, queries, [*flags, "-n", "1", "-c", "4"])
    before = cpu_seconds(pid)
    out = dnsperf(port, queries, [*flags, "-c", "20", "-q", "100", "-l", str(seconds)])
    used = cpu_seconds(pid) - before
    done = int(re.search(r"Queries completed:\s+(\d+)", out).group(1))
    lost = int(re.search(r"Queries lost:\s+(\d+)", out).group(1))
    qps = float(re.search(r"Queries per second:\s+([\d.]+)", out).group(1))
    verbose = dnsperf(port, queries, [*flags, "-c", "4", "-Q", str(rate), "-l", str(seconds), "-v"])
    latencies = sorted(float(l.split()[-1]) for l in verbose.splitlines()
                       if l.startswith("> NOERROR"))
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else float("nan")
    return {"cpu_us": used * 1e6 / max(done, 1), "qps": qps, "lost": lost, "p99_ms": p99,
            "answers": len(latencies), "rss": rss_mib(pid)}


def healthroute(binary, names, work):
    d = os.path.join(work, "hr")
    os.makedirs(d)
    key = subprocess.run([binary, "dnssec", "keygen"], capture_output=True, text=True, check=True).stdout
    open(os.path.join(d, "csk.pem"), "w").write(key)
    open(os.path.join(d, "healthroute.yaml"), "w").write(
        f"zones:\n  - name: {ZONE}\n    nameservers: [{{name: ns1.{ZONE}, addresses: [127.0.0.1]}}]\n"
        "    dnssec:\n      keys: [{file: csk.pem}]\ndefaultTtl: 300\n")
    with open(os.path.join(d, "groups.yaml"), "w") as f:
        for i in range(names):
            f.write(f"apiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: n{i}, namespace: b}}\n"
                    f"spec:\n  name: n{i}.{ZONE}\n  type: A\n  ttl: 300\n  routingPolicy: Simple\n"
                    f"  records: [{{setIdentifier: x, values: [\"192.0.2.{i % 250 + 1}\"]}}]\n---\n")
    port, admin = free_port(), free_port()
    proc = subprocess.Popen(["taskset", "-c", str(os.cpu_count() - 1), binary, "--manifests", d,
                             "--listen", f"127.0.0.1:{port}", "--admin-listen", f"127.0.0.1:{admin}",
                             "--udp-sockets", "1"],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "hr.log"), "w"))
    return proc, port, admin


def knot(names, work):
    d = os.path.join(work, "knot")
    for sub in ("run", "storage", "zones"):
        os.makedirs(os.path.join(d, sub))
    port = free_port()
    with open(os.path.join(d, "zones", "bench.test.zone"), "w") as f:
        f.write(f"$ORIGIN {ZONE}\n$TTL 300\n@ SOA ns1 hostmaster 1 14400 3600 604800 300\n@ NS ns1\n"
                "ns1 A 127.0.0.1\n")
        for i in range(names):
            f.write(f"n{i} A 192.0.2.{i % 250 + 1}\n")
    conf = os.path.join(d, "knot.conf")
    open(conf, "w").write(f"""server:
    rundir: "{d}/run"
    listen: 127.0.0.1@{port}
    background-workers: 1
    udp-workers: 1
    tcp-workers: 1
database:
    storage: "{d}/storage"
log:
  - target: stderr
    any: warning
policy:
  - id: ecdsa
    algorithm: ecdsap256sha256
    single-type-signing: on
mod-onlinesign:
  - id: ol
    policy: ecdsa
zone:
  - domain: {ZONE}
    storage: "{d}/zones"
    file: "bench.test.zone"
    module: mod-onlinesign/ol
""")
    proc = subprocess.Popen(["taskset", "-c", str(os.cpu_count() - 1), "knotd", "-c", conf],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "knot.log"), "w"))
    return proc, port


def metric(admin, name):
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    m = re.search(rf"^{re.escape(name)}\{{[^}}]*\}} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--resolver", default=os.path.join(ROOT, "target/release/healthroute-resolver"))
    ap.add_argument("--names", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--rate", type=int, default=3000)
    args = ap.parse_args()
    need([("dnsperf", "dnsperf"), ("knotd", "knot"), ("dig", "bind9-dnsutils")])
    work = tempfile.mkdtemp(prefix="hr-dnssec-bench-")
    queries = os.path.join(work, "queries.txt")
    with open(queries, "w") as f:
        for i in range(args.names):
            f.write(f"n{i}.{ZONE} A\n")
    results = {}
    hr, hr_port, admin = healthroute(args.resolver, args.names, work)
    kn, kn_port = knot(args.names, work)
    try:
        for server, proc, port in (("healthroute", hr, hr_port), ("knot", kn, kn_port)):
            wait_answering(port, f"n0.{ZONE}")
            time.sleep(1)
            for do in (False, True):
                results[(server, do)] = measure(proc.pid, port, queries, do, args.seconds, args.rate)
        hits = metric(admin, "healthroute_dnssec_cache_hits_total")
        misses = metric(admin, "healthroute_dnssec_cache_misses_total")
        made = metric(admin, "healthroute_dnssec_signatures_total")
        entries = metric(admin, "healthroute_dnssec_cache_entries")
    finally:
        for p in (hr, kn):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    print(f"{args.names} names, server on CPU {os.cpu_count() - 1}, dnsperf on CPU 0; "
          f"full speed: -c 20 -q 100 -l {args.seconds}; fixed rate: {args.rate}/s for {args.seconds} s\n")
    print("| server | queries | CPU per query | QPS (full speed) | p99 at the fixed rate | RSS |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (server, do), r in results.items():
        print(f"| {server} | {'DO (signed)' if do else 'plain'} | {r['cpu_us']:.1f} us | {r['qps']:.0f} "
              f"| {r['p99_ms']:.2f} ms | {r['rss']:.1f} MiB |")
    hs, hp = results[("healthroute", True)], results[("healthroute", False)]
    ks, kp = results[("knot", True)], results[("knot", False)]
    print()
    print(f"healthroute signed / unsigned, CPU per query: {hs['cpu_us'] / hp['cpu_us']:.2f}")
    print(f"knot signed / unsigned, CPU per query: {ks['cpu_us'] / kp['cpu_us']:.2f}")
    print(f"healthroute signed / knot signed, CPU per query: {hs['cpu_us'] / ks['cpu_us']:.2f}")
    print(f"healthroute signed / knot signed, p99: {hs['p99_ms'] / ks['p99_ms']:.2f}")
    print(f"healthroute's signature cache: {hits:.0f} hits, {misses:.0f} misses, {made:.0f} signatures made, "
          f"{entries:.0f} entries")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
