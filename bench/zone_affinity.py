#!/usr/bin/env python3
"""The fast path with zone affinity on and off, in one run: the release resolver on
examples/zone-affinity as a resolver in zone-a (its zone's view is served), on the same
manifests with no zone (every candidate), and on a copy without `zoneAffinity` at all. Each
is loaded with dnsperf on its own CPU, in interleaved rounds; prints QPS and server CPU time
per query for each, as a markdown table for docs/benchmarks.md.

    python3 bench/zone_affinity.py [--seconds 5] [--rounds 3]
    HR=path/to/healthroute-resolver python3 bench/zone_affinity.py

Loopback only; every load is bounded by dnsperf -l."""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

EXAMPLE = os.path.join(compare.ROOT, "examples", "zone-affinity")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    hr = os.environ.get("HR", compare.HR)
    if not shutil.which("dnsperf"):
        subprocess.run(["apt-get", "install", "-y", "-qq", "dnsperf"], check=False, stdout=subprocess.DEVNULL)
    if not os.path.exists(hr):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "healthroute-resolver"], cwd=compare.ROOT, check=True)
    cpus = os.cpu_count() or 1
    compare.SERVER_CPUS, compare.CLIENT_CPUS = ([cpus - 1], [0]) if cpus > 1 else ([], [])

    tmp = tempfile.mkdtemp(prefix="hr-affinity-")
    plain = os.path.join(tmp, "no-affinity")
    shutil.copytree(EXAMPLE, plain)
    text = open(os.path.join(plain, "routing.yaml")).read()
    text = "\n".join(l for l in text.splitlines() if "zoneAffinity:" not in l and "minimumZoneCapacityPercent:" not in l)
    open(os.path.join(plain, "routing.yaml"), "w").write(text + "\n")
    # web (weighted 80/20, one record per answer either way) and api (Simple over pods).
    qfile = os.path.join(tmp, "queries.txt")
    open(qfile, "w").write("web.example.com A\napi.example.com A\n")

    setups = {
        "affinity on, resolver in zone-a": (EXAMPLE, ["--zone-name", "zone-a"]),
        "affinity on, resolver without a zone": (EXAMPLE, []),
        "no zoneAffinity in the manifests": (plain, ["--zone-name", "zone-a"]),
    }
    results = {k: [] for k in setups}
    try:
        for _ in range(args.rounds):
            for label, (d, extra) in setups.items():
                port = compare.free_port()
                proc = subprocess.Popen([*compare.on(compare.SERVER_CPUS), hr, "--manifests", d, "--listen", f"127.0.0.1:{port}",
                                         "--admin-listen", "127.0.0.1:0", "--udp-sockets", "1", *extra],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    if not any(compare.query(port, "web.example.com", timeout=0.3) or time.sleep(0.1)
                               for _ in range(300)):
                        raise SystemExit(f"{label}: the resolver did not answer")
                    qps, _, per_query, _ = compare.dnsperf(port, args.seconds, 20, qfile, pid=proc.pid)
                    results[label].append((qps, per_query))
                finally:
                    proc.terminate()
                    proc.wait(timeout=10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    base = statistics.median(c for _, c in results["no zoneAffinity in the manifests"])
    print(f"Fast path with and without zone affinity ({args.rounds} interleaved rounds of {args.seconds} s, "
          f"dnsperf 20 clients; web and api), {hr}:\n")
    print("| resolver | QPS (median) | CPU per query (median) | per round | vs no affinity |")
    print("| --- | --- | --- | --- | --- |")
    for label, runs in results.items():
        qps = statistics.median(q for q, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        rounds = ", ".join(f"{c:.2f}" for _, c in runs)
        print(f"| {label} | {qps:,.0f} | {cpu:.2f} µs | {rounds} µs | {cpu / base:.3f}x |")


if __name__ == "__main__":
    main()
