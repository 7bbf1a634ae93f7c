#!/usr/bin/env python3
"""healthroute side by side with gdnsd, PowerDNS (LUA records) and Knot DNS, on this machine
in one run. Prints markdown tables for docs/benchmarks.md.

    python3 bench/compare.py [--seconds 20] [--flips 10] [--names 10000]

1. Throughput and latency: dnsperf on the same query mix (weighted, failover, multivalue,
   NODATA, NXDOMAIN) at 1, 10 and 100 concurrent clients, plus full load with --names extra
   names loaded. Health endpoints are real HTTP servers on 127.0.0.11-15.
2. Failover reaction: the primary's health endpoint stops and starts --flips times; answers
   sampled every 50 ms; each server at its tightest health-check setting.
3. Memory: resident memory of each server with --names names.

Installs the peers from Debian's packages when missing. Loopback only; every load is bounded
by dnsperf -l, every wait by a deadline."""
import argparse
import http.server
import os
import random
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
HR = os.path.join(ROOT, "target", "release", "healthroute-resolver")
HEALTH_PORT = 18081
# Addresses: weighted blue/green, failover primary/standby, multivalue trio.
BLUE, GREEN, PRIMARY, STANDBY = "127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"
MULTI = ["127.0.0.15", "127.0.0.16", "127.0.0.17"]
BACKENDS = [BLUE, GREEN, PRIMARY, STANDBY] + MULTI


class Ok(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def do_GET(self):
        self.send_response(200)
        self.send_header("content-length", "2")
        self.end_headers()
        try:
            self.wfile.write(b"ok")
        except OSError:
            pass  # some checkers hang up after the status line

    def log_message(self, *a):
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass


class Backend:
    """A health endpoint answering 200 that can be stopped (port closed) and started again."""

    def __init__(self, addr, port=HEALTH_PORT):
        self.addr, self.port, self.server = addr, port, None

    def start(self):
        self.server = QuietServer((self.addr, self.port), Ok)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def query(port, name, qtype=1, timeout=1.0):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0000, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack(">HH", qtype, 1)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.sendto(q, ("127.0.0.1", port))
        try:
            data, _ = s.recvfrom(4096)
        except socket.timeout:
            return None
    # Collect every A record in the answer section.
    an = struct.unpack(">H", data[6:8])[0]
    i = 12
    while data[i] != 0:
        i += data[i] + 1
    i += 5
    ips = []
    for _ in range(an):
        if data[i] & 0xC0 == 0xC0:
            i += 2
        else:
            while data[i] != 0:
                i += data[i] + 1
            i += 1
        rtype, _, _, rdlen = struct.unpack(">HHIH", data[i:i + 10])
        i += 10
        if rtype == 1 and rdlen == 4:
            ips.append(socket.inet_ntoa(data[i:i + 4]))
        i += rdlen
    return sorted(ips)


# --- configurations --------------------------------------------------------------------------

def extra_names(n):
    return [f"n{i}" for i in range(n)]


def healthroute_conf(d, names):
    open(os.path.join(d, "healthroute.yaml"), "w").write("zones: [example.com]\n")
    check = lambda name, addr: f"""---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {{name: {name}, namespace: bench}}
spec: {{type: HTTP, target: {{address: {addr}, port: {HEALTH_PORT}, path: /healthz}}, requestIntervalSeconds: 1, failureThreshold: 1, connectTimeoutSeconds: 1, responseTimeoutSeconds: 1}}
"""
    text = f"""apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: api, namespace: bench}}
spec:
  name: api.example.com.
  type: A
  routingPolicy: Weighted
  ttl: 30
  records:
    - {{setIdentifier: blue, weight: 70, values: ["{BLUE}"], healthCheckRef: {{name: blue}}}}
    - {{setIdentifier: green, weight: 30, values: ["{GREEN}"], healthCheckRef: {{name: green}}}}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: www, namespace: bench}}
spec:
  name: www.example.com.
  type: A
  routingPolicy: Failover
  ttl: 30
  records:
    - {{setIdentifier: primary, failover: {{role: Primary}}, values: ["{PRIMARY}"], healthCheckRef: {{name: primary}}}}
    - {{setIdentifier: standby, failover: {{role: Secondary}}, values: ["{STANDBY}"], healthCheckRef: {{name: standby}}}}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: legacy, namespace: bench}}
spec:
  name: legacy.example.com.
  type: A
  routingPolicy: MultiValue
  ttl: 30
  records:
""" + "".join(f'    - {{setIdentifier: m{i}, values: ["{a}"], healthCheckRef: {{name: m{i}}}}}\n' for i, a in enumerate(MULTI))
    text += check("blue", BLUE) + check("green", GREEN) + check("primary", PRIMARY) + check("standby", STANDBY)
    text += "".join(check(f"m{i}", a) for i, a in enumerate(MULTI))
    open(os.path.join(d, "bench.yaml"), "w").write(text)
    if names:
        with open(os.path.join(d, "extra.yaml"), "w") as f:
            for n in extra_names(names):
                f.write(f"---\napiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: {n}, namespace: bench}}\n"
                        f"spec: {{name: {n}.example.com., type: A, routingPolicy: Simple, records: [{{setIdentifier: x, values: [\"192.0.2.1\"]}}]}}\n")
    return None


def gdnsd_conf(d, port, names):
    os.makedirs(os.path.join(d, "zones"), exist_ok=True)
    open(os.path.join(d, "config"), "w").write(f"""
options => {{
  listen => [ 127.0.0.1:{port} ]
  udp_threads => 2
  tcp_threads => 1
}}
service_types => {{
  web => {{ plugin => http_status, port => {HEALTH_PORT}, url_path => /healthz, interval => 2, timeout => 1, up_thresh => 1, ok_thresh => 1, down_thresh => 1 }}
}}
plugins => {{
  weighted => {{ api => {{ service_types => web, blue => [ {BLUE}, 70 ], green => [ {GREEN}, 30 ] }} }}
  simplefo => {{ www => {{ service_types => web, primary => {PRIMARY}, secondary => {STANDBY} }} }}
  multifo => {{ legacy => {{ service_types => web, {', '.join(f'm{i} => {a}' for i, a in enumerate(MULTI))} }} }}
}}
""")
    zone = "@ 30 SOA ns1 hostmaster 1 7200 1800 259200 30\n@ 30 NS ns1\nns1 30 A 192.0.2.53\n"
    zone += "api 30 DYNA weighted!api\nwww 30 DYNA simplefo!www\nlegacy 30 DYNA multifo!legacy\n"
    zone += "".join(f"{n} 30 A 192.0.2.1\n" for n in extra_names(names))
    open(os.path.join(d, "zones", "example.com"), "w").write(zone)


def pdns_conf(d, port, names):
    open(os.path.join(d, "pdns.conf"), "w").write(f"""launch=bind
bind-config={d}/named.conf
local-address=127.0.0.1
local-port={port}
enable-lua-records=yes
lua-health-checks-interval=1
socket-dir={d}
guardian=no
daemon=no
disable-syslog=yes
write-pid=no
setuid=
setgid=
receiver-threads=2
cache-ttl=0
query-cache-ttl=0
negquery-cache-ttl=0
""")
    open(os.path.join(d, "named.conf"), "w").write(f'zone "example.com" {{ type native; file "{d}/example.com.zone"; }};\n')
    url = f"http://www.example.com:{HEALTH_PORT}/healthz"
    zone = "$ORIGIN example.com.\n@ 30 SOA ns1 hostmaster 1 7200 1800 259200 30\n@ 30 NS ns1\nns1 30 A 192.0.2.53\n"
    zone += f"api 30 LUA A \"ifurlup('{url}', {{{{'{BLUE}', '{GREEN}'}}}}, {{selector='pickwrandom', backupSelector='pickwrandom'}})\"\n"
    zone += f"www 30 LUA A \"ifurlup('{url}', {{{{'{PRIMARY}'}}, {{'{STANDBY}'}}}})\"\n"
    zone += f"legacy 30 LUA A \"ifurlup('{url}', {{{{{', '.join(repr(a) for a in MULTI)}}}}}, {{selector='all'}})\"\n"
    zone += "".join(f"{n} 30 A 192.0.2.1\n" for n in extra_names(names))
    open(os.path.join(d, "example.com.zone"), "w").write(zone)


def knot_conf(d, port, names):
    os.makedirs(os.path.join(d, "db"), exist_ok=True)
    zone = "$ORIGIN example.com.\n$TTL 30\n@ SOA ns1 hostmaster 1 7200 1800 259200 30\n@ NS ns1\nns1 A 192.0.2.53\n"
    zone += f"api A {BLUE}\nwww A {PRIMARY}\n" + "".join(f"legacy A {a}\n" for a in MULTI)
    zone += "".join(f"{n} A 192.0.2.1\n" for n in extra_names(names))
    open(os.path.join(d, "example.com.zone"), "w").write(zone)
    open(os.path.join(d, "knot.conf"), "w").write(f"""server:
    listen: 127.0.0.1@{port}
    rundir: {d}
database:
    storage: {d}/db
zone:
  - domain: example.com
    storage: {d}
    file: example.com.zone
log:
  - target: stderr
    any: error
""")


def start(kind, d, port, names):
    null = subprocess.DEVNULL
    if kind == "healthroute":
        healthroute_conf(d, names)
        return subprocess.Popen([HR, "--manifests", d, "--listen", f"127.0.0.1:{port}"], stdout=null, stderr=null)
    if kind == "gdnsd":
        gdnsd_conf(d, port, names)
        return subprocess.Popen(["gdnsd", "-c", d, "start"], stdout=null, stderr=open(os.path.join(d, "log"), "w"))
    if kind == "pdns":
        pdns_conf(d, port, names)
        return subprocess.Popen(["pdns_server", f"--config-dir={d}"], stdout=null, stderr=open(os.path.join(d, "log"), "w"))
    knot_conf(d, port, names)
    return subprocess.Popen(["knotd", "-c", os.path.join(d, "knot.conf")], stdout=null, stderr=open(os.path.join(d, "log"), "w"))


SERVERS = ["healthroute", "gdnsd", "pdns", "knot"]
LABEL = {"healthroute": "healthroute-resolver", "gdnsd": "gdnsd 3.8 (weighted, simplefo, multifo; http_status)",
         "pdns": "PowerDNS 4.7 LUA (pickwrandom, ifurlup)", "knot": "Knot DNS 3.2 (static zone)"}


def wait_ready(port, deadline=30):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if query(port, "www.example.com", timeout=0.3):
            return True
        time.sleep(0.1)
    return False


def dnsperf(port, seconds, clients, qfile):
    out = subprocess.run(["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", qfile, "-l", str(seconds),
                          "-c", str(clients), "-q", str(max(clients * 2, 2)), "-T", "1"],
                         capture_output=True, text=True).stdout
    qps = mean = None
    for line in out.splitlines():
        if "Queries per second" in line:
            qps = float(line.split()[3])
        if "Average Latency" in line:
            mean = float(line.split()[3]) * 1000
    return qps or 0.0, mean or 0.0


def p99(port, seconds, qps, qfile):
    out = subprocess.run(["dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", qfile, "-l", str(seconds),
                          "-c", "20", "-q", "200", "-T", "1", "-Q", str(max(int(qps), 1)), "-v"],
                         capture_output=True, text=True).stdout
    lat = []
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] == ">":
            try:
                lat.append(float(parts[-1]) * 1000)
            except ValueError:
                pass  # a timed-out query ("> T ...") has no latency
    lat.sort()
    return lat[int(len(lat) * 0.99)] if lat else float("nan")


def rss_kib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def reaction(port, backends, flips):
    primary = backends[PRIMARY]
    down, up = [], []

    def until(want, limit=20.0):
        t0 = time.monotonic()
        while time.monotonic() - t0 < limit:
            if query(port, "www.example.com") == [want]:
                return time.monotonic() - t0
            time.sleep(0.05)
        return None

    if until(PRIMARY) is None:
        return None, None
    for _ in range(flips):
        time.sleep(random.uniform(0.5, 1.5))
        primary.stop()
        down.append(until(STANDBY))
        time.sleep(random.uniform(0.5, 1.5))
        primary.start()
        up.append(until(PRIMARY))
    return down, up


def fmt(xs):
    ok = [x for x in xs if x is not None]
    if not ok:
        return "no change within 20 s", ""
    extra = "" if len(ok) == len(xs) else f" ({len(xs) - len(ok)} never)"
    return f"{statistics.median(ok):.2f} s{extra}", f"{max(ok):.2f} s"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--flips", type=int, default=10)
    ap.add_argument("--names", type=int, default=10000)
    args = ap.parse_args()
    need = [p for p, b in (("dnsperf", "dnsperf"), ("gdnsd", "gdnsd"), ("pdns-server", "pdns_server"), ("knot", "knotd")) if not shutil.which(b)]
    if need and not shutil.which("pdns_server"):
        need.append("pdns-backend-bind")
    if need:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq"] + need, check=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "healthroute-resolver"], cwd=ROOT, check=True)

    backends = {a: Backend(a) for a in BACKENDS}
    for b in backends.values():
        b.start()
    tmp = tempfile.mkdtemp(prefix="hr-compare-")
    qfile = os.path.join(tmp, "queries.txt")
    open(qfile, "w").write("api.example.com A\nwww.example.com A\nlegacy.example.com A\napi.example.com AAAA\nnope.example.com A\n")
    results, reactions, memory = {}, {}, {}
    try:
        for kind in SERVERS:
            for names in (0, args.names):
                d = os.path.join(tmp, f"{kind}-{names}")
                os.makedirs(d)
                port = free_port()
                proc = start(kind, d, port, names)
                try:
                    if not wait_ready(port):
                        print(f"{kind}: did not start; see {d}/log", file=sys.stderr)
                        continue
                    time.sleep(3)  # let health checks settle
                    if names == 0:
                        r = {c: dnsperf(port, args.seconds, c, qfile) for c in (1, 10, 100)}
                        r["p99"] = p99(port, args.seconds, r[100][0] / 2, qfile)
                        results[kind] = r
                        if kind != "knot":
                            reactions[kind] = reaction(port, backends, args.flips)
                    else:
                        results[kind]["names"] = dnsperf(port, args.seconds, 100, qfile)
                        memory[kind] = rss_kib(proc.pid)
                finally:
                    proc.terminate()
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
    finally:
        for b in backends.values():
            try:
                b.stop()
            except Exception:
                pass

    base = results.get("healthroute", {}).get(100, (1, 0))[0] or 1
    print(f"dnsperf {args.seconds} s per run on {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%MZ', time.gmtime())}; "
          "query mix: weighted, failover, multivalue, NODATA, NXDOMAIN\n")
    print("| server | QPS, 1 client | QPS, 10 | QPS, 100 | mean latency at 100 | p99 at half load | QPS with "
          f"{args.names:,} names | QPS / healthroute | RSS with {args.names:,} names |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind in SERVERS:
        r = results.get(kind)
        if not r:
            print(f"| {LABEL[kind]} | did not start | | | | | | | |")
            continue
        print(f"| {LABEL[kind]} | {r[1][0]:,.0f} | {r[10][0]:,.0f} | {r[100][0]:,.0f} | {r[100][1]:.3f} ms | {r['p99']:.3f} ms | "
              f"{r.get('names', (0, 0))[0]:,.0f} | {r[100][0] / base:.2f} | {memory.get(kind, 0) / 1024:.1f} MiB |")
    print("\nFailover reaction (primary's health endpoint stops, then starts; answers sampled every 50 ms):\n")
    print("| server | setting | fail: median | fail: max | recover: median | recover: max |")
    print("| --- | --- | --- | --- | --- | --- |")
    settings = {"healthroute": "interval 1 s, threshold 1", "gdnsd": "interval 2 s (its minimum), thresholds 1",
                "pdns": "lua-health-checks-interval 1"}
    for kind, (down, up) in reactions.items():
        if down is None:
            print(f"| {LABEL[kind]} | {settings[kind]} | never answered the primary | | | |")
            continue
        print(f"| {LABEL[kind]} | {settings[kind]} | {' | '.join(fmt(down))} | {' | '.join(fmt(up))} |")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
