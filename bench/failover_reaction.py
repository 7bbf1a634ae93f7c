#!/usr/bin/env python3
"""Failover reaction of the release resolver in standalone mode: the time from an endpoint's
HTTP health endpoint going down (or coming back) to the DNS answer changing, sampled every
50 ms. A failover group whose primary has an HTTP check (interval 1 s, threshold 1).

    python3 bench/failover_reaction.py [FLIPS]      (default 10)

Prints median and max over FLIPS flips each way. Loopback only; every loop is bounded."""
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

from compare import Backend, free_port, query

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
BIN = os.path.join(ROOT, "target", "release", "healthroute-resolver")
PRIMARY, SECONDARY = "192.0.2.1", "198.51.100.1"


def wait_for(port, want, limit=15.0):
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if query(port, "www.example.com") == [want]:
            return time.monotonic() - start
        time.sleep(0.05)
    return None


def main():
    flips = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    if not os.path.exists(BIN):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "healthroute-resolver"], cwd=ROOT, check=True)
    backend = Backend("127.0.0.1", free_port())
    backend.start()
    dns = free_port()
    with tempfile.TemporaryDirectory() as d:
        open(os.path.join(d, "healthroute.yaml"), "w").write("zones: [example.com]\n")
        open(os.path.join(d, "www.yaml"), "w").write(f"""
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: www, namespace: bench}}
spec:
  name: www.example.com.
  type: A
  ttl: 1
  routingPolicy: Failover
  records:
    - {{setIdentifier: main, failover: {{role: Primary}}, values: ["{PRIMARY}"], healthCheckRef: {{name: main}}}}
    - {{setIdentifier: dr, failover: {{role: Secondary}}, values: ["{SECONDARY}"]}}
---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {{name: main, namespace: bench}}
spec:
  type: HTTP
  target: {{address: 127.0.0.1, port: {backend.port}, path: /healthz}}
  requestIntervalSeconds: 1
  failureThreshold: 1
  connectTimeoutSeconds: 1
  responseTimeoutSeconds: 1
""")
        proc = subprocess.Popen([BIN, "--manifests", d, "--listen", f"127.0.0.1:{dns}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            assert wait_for(dns, PRIMARY) is not None, "resolver did not start"
            time.sleep(2)
            down, up = [], []
            for _ in range(flips):
                time.sleep(random.uniform(0, 1))  # flip at any point of the probe interval
                backend.stop()
                down.append(wait_for(dns, SECONDARY))
                time.sleep(random.uniform(0, 1))
                backend.start()
                up.append(wait_for(dns, PRIMARY))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    for label, xs in (("endpoint fails -> answer moves", down), ("endpoint recovers -> answer back", up)):
        ok = [x for x in xs if x is not None]
        print(f"{label}: median {statistics.median(ok):.2f} s, max {max(ok):.2f} s over {len(ok)} flips"
              + ("" if len(ok) == len(xs) else f" ({len(xs) - len(ok)} timed out)"))


if __name__ == "__main__":
    main()
