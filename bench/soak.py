#!/usr/bin/env python3
"""A bounded soak of standalone mode: mixed queries at a fixed rate over UDP and TCP (every
policy, a CNAME chain, NXDOMAIN, a truncated TXT), a manifest edit every 100 ms and health
flips, for a fixed time. Every answer is checked against what the configuration allows.

    python3 bench/soak.py [--minutes 10] [--qps 400] [--report 30]

Every 30 s it prints queries, failed (no reply in 1 s) and wrong answers, the resolver's RSS
and open file descriptors; at the end the p99 latency per minute. Targets: 0 failed or wrong,
RSS and descriptors flat. Loopback only; the run ends at --minutes."""
import argparse
import os
import random
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

EDIT_A, EDIT_B = "192.0.2.101", "192.0.2.102"


def name_wire(n):
    return b"".join(bytes([len(l)]) + l.encode() for l in n.strip(".").split(".")) + b"\0"


def query(n, qtype, edns=False):
    qid = random.randrange(65536)
    m = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 1 if edns else 0) + name_wire(n) + struct.pack(">HH", qtype, 1)
    if edns:
        m += b"\0" + struct.pack(">HHIH", 41, 1232, 0, 0)
    return qid, m


def skip_name(b, i):
    while True:
        n = b[i]
        if n == 0:
            return i + 1
        if n & 0xC0 == 0xC0:
            return i + 2
        i += n + 1


def parse(b):
    """(id, rcode, tc, [(type, rdata)]) of a reply; raises on a malformed one."""
    qid, flags, qd, an, ns, ar = struct.unpack(">HHHHHH", b[:12])
    i = 12
    for _ in range(qd):
        i = skip_name(b, i) + 4
    answers = []
    for _ in range(an + ns + ar):
        i = skip_name(b, i)
        t, _, _, ln = struct.unpack(">HHIH", b[i:i + 10])
        i += 10
        answers.append((t, b[i:i + ln]))
        i += ln
    if i != len(b):
        raise ValueError(f"{len(b) - i} bytes after the last record")
    return qid, flags & 0xF, bool(flags & 0x0200), answers[:an]


def ips(answers):
    return {socket.inet_ntoa(r) for t, r in answers if t == 1}


# name, qtype, over TCP, EDNS, check(rcode, tc, answers) -> why it is wrong, or None
CASES = [
    ("api.example.com", 1, False, False, lambda rc, tc, a: None if rc == 0 and ips(a) and ips(a) <= {compare.BLUE, compare.GREEN, "192.0.2.10", "192.0.2.20"} else f"api {rc} {ips(a)}"),
    ("www.example.com", 1, False, False, lambda rc, tc, a: None if rc == 0 and len(ips(a)) == 1 and ips(a) <= {compare.PRIMARY, compare.STANDBY} else f"www {rc} {ips(a)}"),
    ("legacy.example.com", 1, False, True, lambda rc, tc, a: None if rc == 0 and ips(a) and ips(a) <= set(compare.MULTI) else f"legacy {rc} {ips(a)}"),
    ("alias.example.com", 1, True, False, lambda rc, tc, a: None if rc == 0 and a[0][0] == 5 and ips(a) <= {compare.BLUE, compare.GREEN} and ips(a) else f"chain {rc} {a}"),
    ("edit.example.com", 1, False, False, lambda rc, tc, a: None if rc == 0 and len(ips(a)) == 1 and ips(a) <= {EDIT_A, EDIT_B} else f"edit {rc} {ips(a)}"),
    ("nope.example.com", 1, False, False, lambda rc, tc, a: None if rc == 3 and not a else f"nxdomain {rc} {a}"),
    ("api.example.com", 28, True, False, lambda rc, tc, a: None if rc == 0 and not a else f"nodata {rc} {a}"),
    ("big.example.com", 16, False, False, lambda rc, tc, a: None if rc == 0 and tc and not a else f"truncation {rc} {tc} {len(a)}"),
    ("big.example.com", 16, True, False, lambda rc, tc, a: None if rc == 0 and not tc and len(a) == 3 else f"tcp big {rc} {tc} {len(a)}"),
]


def extra(d):
    """Groups beyond compare.py's: a CNAME chain, a group edited all the time, a big TXT."""
    big = ", ".join(f'"{c * 250}"' for c in "abc")
    open(os.path.join(d, "soak.yaml"), "w").write(f"""apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: alias, namespace: bench}}
spec: {{name: alias.example.com., type: CNAME, routingPolicy: Simple, records: [{{setIdentifier: x, values: [api.example.com.]}}]}}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: big, namespace: bench}}
spec: {{name: big.example.com., type: TXT, routingPolicy: Simple, records: [{{setIdentifier: x, values: [{big}]}}]}}
""")


def write_edit(d, value):
    path = os.path.join(d, "edit.yaml")
    tmp = path + ".tmp"
    open(tmp, "w").write(f"""apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: edit, namespace: bench}}
spec: {{name: edit.example.com., type: A, routingPolicy: Simple, records: [{{setIdentifier: x, values: ["{value}"]}}]}}
""")
    os.replace(tmp, path)


def ask(port, case):
    name, qtype, tcp, edns, check = case
    qid, msg = query(name, qtype, edns)
    start = time.monotonic()
    if tcp:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(struct.pack(">H", len(msg)) + msg)
            ln = struct.unpack(">H", s.recv(2, socket.MSG_WAITALL))[0]
            reply = s.recv(ln, socket.MSG_WAITALL)
    else:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(1.0)
            s.sendto(msg, ("127.0.0.1", port))
            reply, _ = s.recvfrom(4096)
    took = time.monotonic() - start
    rid, rcode, tc, answers = parse(reply)
    if rid != qid:
        return took, f"{name}: id {rid} for {qid}"
    return took, check(rcode, tc, answers)


def fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--qps", type=int, default=400)
    p.add_argument("--report", type=float, default=30)
    args = p.parse_args()
    if not os.path.exists(compare.HR):
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "healthroute-resolver"], cwd=compare.ROOT, check=True)
    backends = {a: compare.Backend(a) for a in compare.BACKENDS}
    for b in backends.values():
        b.start()
    up = {a: True for a in backends}
    d = tempfile.mkdtemp(prefix="hr-soak-")
    compare.healthroute_conf(d, 0)
    extra(d)
    write_edit(d, EDIT_A)
    port = compare.free_port()
    proc = subprocess.Popen([compare.HR, "--manifests", d, "--listen", f"127.0.0.1:{port}", "--admin-listen", "127.0.0.1:0"],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "resolver.log"), "w"))
    if not compare.wait_ready(port):
        print("resolver did not start", file=sys.stderr)
        proc.kill()
        sys.exit(1)
    end = time.monotonic() + args.minutes * 60
    stop = threading.Event()

    def edits():
        n = 0
        while not stop.wait(0.1):
            n += 1
            write_edit(d, EDIT_B if n % 2 else EDIT_A)

    def flips():
        # One health endpoint changes every 5 s; the failover primary and a weighted record
        # among them, never all of one group at once.
        flippable = [compare.PRIMARY, compare.GREEN, compare.MULTI[0]]
        k = 0
        while not stop.wait(5):
            a = flippable[k % len(flippable)]
            k += 1
            if up[a]:
                backends[a].stop()
            else:
                backends[a].start()
            up[a] = not up[a]

    for f in (edits, flips):
        threading.Thread(target=f, daemon=True).start()

    stats = {"queries": 0, "failed": 0, "wrong": 0}
    wrongs = []
    latencies = {}  # minute -> [seconds]
    started = time.monotonic()
    next_report = started + args.report
    interval = 1.0 / args.qps
    t = started
    print(f"soak: {args.minutes:g} min at {args.qps} queries/s (UDP and TCP), an edit every 100 ms, a health flip every 5 s")
    print("| at | queries | failed | wrong | RSS | open fds |")
    print("| --- | --- | --- | --- | --- | --- |")
    i = 0
    while time.monotonic() < end:
        case = CASES[i % len(CASES)]
        i += 1
        try:
            took, wrong = ask(port, case)
            latencies.setdefault(int((time.monotonic() - started) // 60), []).append(took)
            if wrong:
                stats["wrong"] += 1
                if len(wrongs) < 10:
                    wrongs.append(wrong)
        except (OSError, ValueError, struct.error, IndexError) as e:
            stats["failed"] += 1
            if len(wrongs) < 10:
                wrongs.append(f"{case[0]}: {e}")
        stats["queries"] += 1
        now = time.monotonic()
        if now >= next_report:
            print(f"| {now - started:5.0f} s | {stats['queries']:,} | {stats['failed']} | {stats['wrong']} "
                  f"| {compare.rss_kib(proc.pid) / 1024:.1f} MiB | {fds(proc.pid)} |", flush=True)
            next_report += args.report
        t += interval
        if t > now:
            time.sleep(t - now)
        else:
            t = now  # behind: go on at the rate, do not burst
    stop.set()
    proc.terminate()
    proc.wait(timeout=10)
    print("\np99 latency per minute (ms): " + ", ".join(
        f"{m + 1}: {sorted(v)[int(len(v) * 0.99) - 1] * 1e3:.2f}" for m, v in sorted(latencies.items()) if v))
    print(f"total: {stats['queries']:,} queries, {stats['failed']} failed, {stats['wrong']} wrong")
    for w in wrongs:
        print("  e.g.", w)
    sys.exit(1 if stats["failed"] or stats["wrong"] else 0)


if __name__ == "__main__":
    main()
