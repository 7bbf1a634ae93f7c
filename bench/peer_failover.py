#!/usr/bin/env python3
"""Peer failover (SEMANTICS X2, X4, X5): the time from a peer cluster's endpoint failing to a
local answer changing. Two standalone resolvers on loopback: "west" answers shop/www from one
endpoint with a TCP check (interval 1 s, threshold 1); "east" answers www.example.com with a
Failover group whose primary is west's shop/www (a peer record) and whose secondary is a
static value. Each trial stops west's endpoint at a random point of east's check interval and
samples, every 20 ms:

  - west's propagation: until west's exchange listener answers "nothing healthy" for
    shop/www (a TSIG-signed query, as east's checker asks);
  - east's answer: until www.example.com on east's public port is the secondary.

Then the endpoint comes back. East is started afresh (at a random offset) for each trial, since
both clusters' checks tick on fixed grids from their process's start.

    python3 bench/peer_failover.py [--interval S] [--threshold N] [--trials N] [--binary PATH]

East's Peer check asks every --interval seconds (default 10, the derived check's) and turns
unhealthy after --threshold failures (default 3, the derived check's); with both defaults the
derived check is used as is, otherwise east's directory defines it (the directory wins, X4).
The goal (issue #25): west's propagation + one interval + 1 s, for a threshold of 1.

Prints p50 and max of each time over the trials. Uses target/release/healthroute-resolver when
it exists, else the debug build (said in the output). Loopback only; every wait is bounded.
Needs dnspython (python3 -m pip install dnspython)."""
import argparse
import base64
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import dns.message
import dns.query
import dns.rcode
import dns.tsigkeyring

from compare import Backend, free_port, query

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
RELEASE = os.path.join(ROOT, "target", "release", "healthroute-resolver")
DEBUG = os.path.join(ROOT, "target", "debug", "healthroute-resolver")
KEY_NAME = "bench-key."
SECRET = base64.b64encode(b"healthroute-bench-peer-key-32byt").decode()
WEST_VALUE, EAST_VALUE = "198.51.100.10", "192.0.2.10"
SAMPLE = 0.02


def binary(path):
    if path:
        return path, "given"
    if os.path.exists(RELEASE):
        return RELEASE, "release"
    if not os.path.exists(DEBUG):
        subprocess.run(["cargo", "build", "-q", "-p", "healthroute-resolver"], cwd=ROOT, check=True)
    return DEBUG, "debug"


def config(exchange, peer, peer_exchange):
    return f"""zones: [example.com]
exchange: {{listen: "127.0.0.1:{exchange}"}}
peers:
  - name: {peer}
    addresses: ["127.0.0.1:{peer_exchange}"]
    keys: [{{name: {KEY_NAME}, algorithm: hmac-sha256, secret: {SECRET}}}]
"""


def west_manifests(backend_port):
    return f"""apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: www, namespace: shop}}
spec:
  name: www.example.com.
  type: A
  routingPolicy: Simple
  records:
    - {{setIdentifier: west, values: ["{WEST_VALUE}"], healthCheckRef: {{name: west-web}}}}
---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {{name: west-web, namespace: shop}}
spec:
  type: TCP
  target: {{address: 127.0.0.1, port: {backend_port}}}
  requestIntervalSeconds: 1
  failureThreshold: 1
  connectTimeoutSeconds: 1
"""


def east_manifests(interval, threshold):
    group = f"""apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: www, namespace: shop}}
spec:
  name: www.example.com.
  type: A
  ttl: 1
  routingPolicy: Failover
  records:
    - {{setIdentifier: west, failover: {{role: Primary}}, peer: {{cluster: west, recordGroup: shop/www}}}}
    - {{setIdentifier: east, failover: {{role: Secondary}}, values: ["{EAST_VALUE}"]}}
"""
    if (interval, threshold) == (10, 3):
        return group  # the derived Peer check, as standalone mode makes it
    return group + f"""---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {{name: peer.west.shop.www, namespace: shop}}
spec:
  type: Peer
  peer: {{cluster: west, recordGroup: shop/www}}
  requestIntervalSeconds: {interval}
  failureThreshold: {threshold}
  responseTimeoutSeconds: 2
"""


def start(bin_path, directory, log_path):
    """Starts a resolver on `directory`; returns (process, DNS port) once it is ready."""
    dns_port, admin = free_port(), free_port()
    with open(log_path, "a") as log:
        proc = subprocess.Popen(
            [bin_path, "--manifests", directory, "--listen", f"127.0.0.1:{dns_port}",
             "--admin-listen", f"127.0.0.1:{admin}"],
            stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1) as r:
                if r.status == 200:
                    return proc, dns_port
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"resolver on {directory} did not become ready:\n" + open(log_path).read()[-2000:])


def west_says_healthy(exchange_port, keyring):
    """True when west's exchange lists a value for shop/www, False when it says nothing healthy."""
    q = dns.message.make_query("www.shop.exchange.healthroute.invalid.", "TXT")
    q.use_tsig(keyring, keyname=KEY_NAME, algorithm="hmac-sha256")
    r = dns.query.udp(q, "127.0.0.1", port=exchange_port, timeout=1)
    return r.rcode() == dns.rcode.NOERROR and len(r.answer) > 0


def until(f, limit):
    """Seconds until f() holds, sampling every SAMPLE s; None after `limit` seconds."""
    start = time.monotonic()
    while time.monotonic() - start < limit:
        if f():
            return time.monotonic() - start
        time.sleep(SAMPLE)
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--interval", type=int, default=10)
    ap.add_argument("--threshold", type=int, default=3)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--binary")
    args = ap.parse_args()
    bin_path, build = binary(args.binary)
    keyring = dns.tsigkeyring.from_text({KEY_NAME: SECRET})
    # Bounds: a failure is seen within threshold + 1 intervals and a few seconds of slack;
    # a recovery needs `threshold` successes in a row.
    limit = (args.threshold + 1) * args.interval + 10

    backend = Backend("127.0.0.1", free_port())
    backend.start()
    east_x, west_x = free_port(), free_port()
    west_times, east_times = [], []
    running = []
    with tempfile.TemporaryDirectory() as d:
        log = os.path.join(d, "log")
        west_dir, east_dir = os.path.join(d, "west"), os.path.join(d, "east")
        for path, conf, manifests in (
                (west_dir, config(west_x, "east", east_x), west_manifests(backend.port)),
                (east_dir, config(east_x, "west", west_x), east_manifests(args.interval, args.threshold))):
            os.mkdir(path)
            open(os.path.join(path, "healthroute.yaml"), "w").write(conf)
            open(os.path.join(path, "shop.yaml"), "w").write(manifests)
        try:
            west, _ = start(bin_path, west_dir, log)
            running.append(west)
            for trial in range(args.trials):
                # Both checks tick on fixed grids (each from its process's start), so east starts
                # afresh at a random offset for every trial: otherwise the lag between west's
                # probe and east's next exchange would be the same in every trial.
                for p in running[1:]:
                    p.terminate()
                    p.wait(timeout=10)
                del running[1:]
                time.sleep(random.uniform(0, 1))
                east, east_dns = start(bin_path, east_dir, log)
                running.append(east)
                if until(lambda: query(east_dns, "www.example.com") == [WEST_VALUE], limit) is None:
                    sys.exit("east never answered west's value")
                time.sleep(random.uniform(0, args.interval))  # any point of east's interval
                backend.stop()
                stopped = time.monotonic()
                seen_west = seen_east = None
                while time.monotonic() - stopped < limit and (seen_west is None or seen_east is None):
                    now = time.monotonic() - stopped
                    if seen_west is None and not west_says_healthy(west_x, keyring):
                        seen_west = now
                    if seen_east is None and query(east_dns, "www.example.com") == [EAST_VALUE]:
                        seen_east = now
                    time.sleep(SAMPLE)
                west_times.append(seen_west)
                east_times.append(seen_east)
                print(f"trial {trial + 1}: west's exchange says nothing healthy after "
                      f"{seen_west if seen_west is None else round(seen_west, 2)} s, east answers "
                      f"its secondary after {seen_east if seen_east is None else round(seen_east, 2)} s",
                      flush=True)
                backend.start()
                if until(lambda: west_says_healthy(west_x, keyring), limit) is None:
                    sys.exit("west did not recover")
        finally:
            for p in reversed(running):
                p.terminate()
                p.wait(timeout=10)
            backend.stop()

    print(f"\n{build} build ({bin_path}); east's Peer check every {args.interval} s, "
          f"threshold {args.threshold}; {args.trials} trials")
    for label, xs in (("west's propagation (endpoint down -> exchange says nothing healthy)", west_times),
                      ("endpoint down -> east's answer moves", east_times)):
        ok = [x for x in xs if x is not None]
        if ok:
            print(f"  {label}: p50 {statistics.median(ok):.2f} s, max {max(ok):.2f} s"
                  + ("" if len(ok) == len(xs) else f" ({len(xs) - len(ok)} timed out)"))
    pairs = [(w, e) for w, e in zip(west_times, east_times) if w is not None and e is not None]
    if pairs:
        extra = [e - w for w, e in pairs]
        goal = sum(e <= w + args.interval + 1 for w, e in pairs)
        bound = sum(e <= w + args.threshold * args.interval + 1 for w, e in pairs)
        print(f"  east after west: p50 {statistics.median(extra):.2f} s, max {max(extra):.2f} s")
        print(f"  within the goal (west's propagation + {args.interval} s + 1 s): {goal} of {len(pairs)} trials; "
              f"within west's propagation + threshold x interval + 1 s: {bound} of {len(pairs)}")

if __name__ == "__main__":
    main()
