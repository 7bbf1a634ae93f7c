#!/usr/bin/env python3
"""CPU cost of answering peers (SEMANTICS X6): one standalone resolver with an exchange
listener; N TSIG-signed exchange queries for shop/www over UDP, then N plain public queries
for www.example.com A, in alternating rounds. For each kind: queries per second (from one
client keeping --window queries in flight) and the resolver's CPU seconds per 1,000 queries
(utime + stime from /proc/PID/stat before and after), and the ratio of the two.

    python3 bench/exchange_cpu.py [--queries N] [--rounds R] [--window W] [--binary PATH]

The resolver has no health check and no peer record, so nothing else runs while it is
measured. Signed queries are made before a round starts (the exchange keeps no replay cache,
and each is well inside the 300 s fudge), so the client's signing is not on the clock; every
reply is checked (NOERROR and one TXT answer for the exchange, one A for the public port), and
a sample of the exchange's answers is verified by dnspython over TSIG first. Uses
target/release/healthroute-resolver when it exists, else the debug build (said in the
output). Loopback only; every round is bounded by N and by a deadline.
Needs dnspython (python3 -m pip install dnspython)."""
import argparse
import base64
import os
import random
import select
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

import dns.message
import dns.query
import dns.rcode
import dns.tsigkeyring

from compare import free_port
from peer_failover import binary

KEY_NAME = "bench-key."
SECRET = base64.b64encode(b"healthroute-bench-peer-key-32byt").decode()
CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of stat(5); fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def plain_query(qid):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    q += b"\x03www\x07example\x03com\x00" + struct.pack(">HH", 1, 1)
    return q


def signed_query(keyring, qid):
    q = dns.message.make_query("www.shop.exchange.healthroute.invalid.", "TXT")
    q.id = qid
    q.use_tsig(keyring, keyname=KEY_NAME, algorithm="hmac-sha256")
    return q.to_wire()


def blast(port, queries, window, deadline_s):
    """Sends every query with at most `window` in flight; returns (seconds, answered, bad)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", port))
    s.setblocking(False)
    sent = answered = bad = 0
    in_flight = 0
    start = time.monotonic()
    deadline = start + deadline_s
    while (sent < len(queries) or in_flight) and time.monotonic() < deadline:
        while sent < len(queries) and in_flight < window:
            s.send(queries[sent])
            sent += 1
            in_flight += 1
        ready, _, _ = select.select([s], [], [], 0.5)
        if not ready:
            in_flight = 0  # lost datagrams: move on (counted below as unanswered)
            continue
        while True:
            try:
                data = s.recv(4096)
            except BlockingIOError:
                break
            in_flight -= 1
            rcode = data[3] & 0x0F
            ancount = struct.unpack(">H", data[6:8])[0]
            if rcode == 0 and ancount == 1:
                answered += 1
            else:
                bad += 1
    took = time.monotonic() - start
    s.close()
    return took, answered, bad


def start(bin_path, directory):
    dns_port, admin, exchange = free_port(), free_port(), free_port()
    open(os.path.join(directory, "healthroute.yaml"), "w").write(f"""zones: [example.com]
exchange: {{listen: "127.0.0.1:{exchange}"}}
peers:
  - name: east
    addresses: ["127.0.0.1:{free_port()}"]
    keys: [{{name: {KEY_NAME}, algorithm: hmac-sha256, secret: {SECRET}}}]
""")
    open(os.path.join(directory, "shop.yaml"), "w").write("""apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: www, namespace: shop}
spec:
  name: www.example.com.
  type: A
  routingPolicy: Simple
  records: [{setIdentifier: west, values: ["198.51.100.10"]}]
""")
    proc = subprocess.Popen(
        [bin_path, "--manifests", directory, "--listen", f"127.0.0.1:{dns_port}",
         "--admin-listen", f"127.0.0.1:{admin}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/readyz", timeout=1) as r:
                if r.status == 200:
                    return proc, dns_port, exchange, admin
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    sys.exit("the resolver did not become ready")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=50000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--binary")
    args = ap.parse_args()
    bin_path, build = binary(args.binary)
    keyring = dns.tsigkeyring.from_text({KEY_NAME: SECRET})
    results = {"exchange": [], "public": []}
    with tempfile.TemporaryDirectory() as d:
        proc, dns_port, exchange, admin = start(bin_path, d)
        try:
            # The answers are what a peer expects, signed with our key (dnspython verifies).
            for _ in range(3):
                q = dns.message.make_query("www.shop.exchange.healthroute.invalid.", "TXT")
                q.use_tsig(keyring, keyname=KEY_NAME, algorithm="hmac-sha256")
                r = dns.query.udp(q, "127.0.0.1", port=exchange, timeout=2)
                assert r.rcode() == dns.rcode.NOERROR and r.had_tsig, r
                assert [rd.strings for rd in r.answer[0]] == [(b"A", b"198.51.100.10")], r
            for rnd in range(args.rounds):
                for kind in ("exchange", "public"):
                    ids = [random.randrange(65536) for _ in range(args.queries)]
                    if kind == "exchange":
                        queries = [signed_query(keyring, i) for i in ids]
                        port = exchange
                    else:
                        queries = [plain_query(i) for i in ids]
                        port = dns_port
                    before = cpu_seconds(proc.pid)
                    took, answered, bad = blast(port, queries, args.window, 120)
                    cpu = cpu_seconds(proc.pid) - before
                    results[kind].append((took, answered, bad, cpu))
                    print(f"round {rnd + 1} {kind}: {answered} answered, {bad} bad, "
                          f"{args.queries - answered - bad} lost in {took:.2f} s "
                          f"({answered / took:.0f} q/s), resolver CPU {cpu:.2f} s "
                          f"({1000 * cpu / max(answered, 1):.4f} s per 1,000)", flush=True)
            with urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=2) as r:
                counted = [line for line in r.read().decode().splitlines()
                           if line.startswith("healthroute_exchange_queries_total")]
        finally:
            proc.terminate()
            proc.wait(timeout=10)

    print(f"\n{build} build ({bin_path}); {args.rounds} rounds of {args.queries} queries each, "
          f"window {args.window}")
    print("  " + "; ".join(counted))
    med = {}
    for kind, rs in results.items():
        qps = statistics.median(a / t for t, a, _, _ in rs)
        # CPU over all rounds: /proc counts in clock ticks (10 ms), too coarse for one round.
        per_k = 1000 * sum(c for *_, c in rs) / max(sum(a for _, a, _, _ in rs), 1)
        med[kind] = (qps, per_k)
        print(f"  {kind}: median {qps:.0f} q/s, {per_k:.4f} CPU s per 1,000 queries "
              f"(all rounds: {sum(c for *_, c in rs):.2f} s for {sum(a for _, a, _, _ in rs)})")
    print(f"  exchange / public: {med['exchange'][1] / med['public'][1]:.2f}x CPU per query, "
          f"{med['exchange'][0] / med['public'][0]:.2f}x q/s")


if __name__ == "__main__":
    main()
