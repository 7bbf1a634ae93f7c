#!/usr/bin/env python3
"""healthroute side by side with gdnsd, PowerDNS (LUA records) and Knot DNS, on this machine
in one run. Prints markdown tables for docs/benchmarks.md.

    python3 bench/compare.py [--seconds 20] [--rounds 3] [--flips 10] [--names 10000]

All servers run at once, each on its own port; every round measures each of them in turn
(the first one rotates), and the tables give medians, so a noisy minute on a shared machine
does not land on one server only.

1. Throughput and latency: dnsperf on the same query mix (weighted, failover, multivalue,
   NODATA, NXDOMAIN) at 1, 10 and 100 concurrent clients, p99 at half of each server's own
   full-load rate and at one rate for all (--same-rate), plus full load with --names extra names loaded. At 100 clients it also
   reads each server's CPU time per query (its capacity per core) and how busy dnsperf was:
   on a small machine dnsperf may saturate its core first, and then QPS ranks the client. Health endpoints are real
   HTTP servers on 127.0.0.11-17.
2. Failover reaction: the primary's health endpoint stops and starts --flips times; every
   server's answers are sampled every 50 ms at the same time; each server at its tightest
   health-check setting.
3. Memory: resident memory of each server with --names names.

Installs the peers from Debian's packages when missing. Loopback only; every load is bounded
by dnsperf -l, every wait by a deadline."""
import argparse
import http.server
import os
import random
import resource
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
# The query mix every script sends: weighted, failover, multivalue, NODATA, NXDOMAIN.
QUERIES = os.path.join(ROOT, "bench", "queries.txt")
HEALTH_PORT = 18081
# Addresses: weighted blue/green, failover primary/standby, multivalue trio.
BLUE, GREEN, PRIMARY, STANDBY = "127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"
MULTI = ["127.0.0.15", "127.0.0.16", "127.0.0.17"]
BACKENDS = [BLUE, GREEN, PRIMARY, STANDBY] + MULTI
# CPU placement (taskset prefixes): servers on some cores, dnsperf and this script on the
# others, unless --shared-cpus. Set in main().
SERVER_CPUS, CLIENT_CPUS = [], []


def on(cpus):
    return ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []


def threads():
    """UDP threads each server gets: one per server core (all four are told the same)."""
    return max(len(SERVER_CPUS), 1) if SERVER_CPUS else os.cpu_count()


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
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

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
  udp_threads => {threads()}
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
receiver-threads={threads()}
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
    udp-workers: {threads()}
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


def start(kind, d, port, names, hr_args=()):
    null = subprocess.DEVNULL
    if kind.startswith("healthroute"):
        healthroute_conf(d, names)
        return subprocess.Popen([*on(SERVER_CPUS), HR, "--manifests", d, "--listen", f"127.0.0.1:{port}", *hr_args], stdout=null, stderr=null)
    if kind == "gdnsd":
        gdnsd_conf(d, port, names)
        return subprocess.Popen([*on(SERVER_CPUS), "gdnsd", "-c", d, "start"], stdout=null, stderr=open(os.path.join(d, "log"), "w"))
    if kind == "pdns":
        pdns_conf(d, port, names)
        return subprocess.Popen([*on(SERVER_CPUS), "pdns_server", f"--config-dir={d}"], stdout=null, stderr=open(os.path.join(d, "log"), "w"))
    knot_conf(d, port, names)
    return subprocess.Popen([*on(SERVER_CPUS), "knotd", "-c", os.path.join(d, "knot.conf")], stdout=null, stderr=open(os.path.join(d, "log"), "w"))


SERVERS = ["healthroute", "gdnsd", "pdns", "knot"]
LABEL = {"healthroute": "healthroute-resolver", "gdnsd": "gdnsd 3.8 (weighted, simplefo, multifo; http_status)",
         "pdns": "PowerDNS 4.7 LUA (pickwrandom, ifurlup)", "knot": "Knot DNS 3.2 (static zone)"}
SETTINGS = {"gdnsd": "interval 2 s (its minimum), thresholds 1", "pdns": "lua-health-checks-interval 1"}


def wait_ready(port, deadline=30):
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if query(port, "www.example.com", timeout=0.3):
            return True
        time.sleep(0.1)
    return False


def cpu_seconds(pid):
    """User + system CPU time of process `pid` (all its threads) so far."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return float("nan")


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def dnsperf(port, seconds, clients, qfile, pid=None):
    """QPS and mean latency (ms) of one dnsperf run; with `pid`, also the server's CPU time
    per query (µs) and the share of a core dnsperf itself used (1.0: the client was the
    bottleneck, not the server)."""
    server0, client0 = cpu_seconds(pid) if pid else 0.0, children_cpu()
    out = subprocess.run([*on(CLIENT_CPUS), "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", qfile, "-l", str(seconds),
                          "-c", str(clients), "-q", str(max(clients * 2, 2)), "-T", "1"],
                         capture_output=True, text=True).stdout
    server_cpu = cpu_seconds(pid) - server0 if pid else float("nan")
    client_share = (children_cpu() - client0) / seconds
    qps = mean = None
    for line in out.splitlines():
        if "Queries per second" in line:
            qps = float(line.split()[3])
        if "Average Latency" in line:
            mean = float(line.split()[3]) * 1000
    per_query = server_cpu * 1e6 / (qps * seconds) if qps else float("nan")
    return qps or 0.0, mean or 0.0, per_query, client_share


def p99(port, seconds, qps, qfile):
    out = subprocess.run([*on(CLIENT_CPUS), "dnsperf", "-s", "127.0.0.1", "-p", str(port), "-d", qfile, "-l", str(seconds),
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


def common_rate(rates):
    """One offered rate that every server within 4x of the fastest sustains: half of the slowest
    of them. (PowerDNS, 100 times slower, is left out rather than dragging the rate down.)"""
    best = max(rates.values(), default=0)
    able = [q for q in rates.values() if q * 4 >= best and q > 0]
    return int(min(able) / 2 / 1000) * 1000 if able else 0


def rss_kib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


class Running:
    """The servers under test, all up at once on their own ports, so that every measurement
    round visits each of them in turn (a slow minute on this shared machine hits everyone)."""

    def __init__(self, kinds, names, tmp, hr_args):
        self.procs, self.ports, self.dirs = {}, {}, {}
        for kind in kinds:
            d = os.path.join(tmp, f"{kind}-{names}")
            os.makedirs(d)
            port = free_port()
            self.procs[kind] = start(kind, d, port, names, hr_args.get(kind, ()))
            self.ports[kind], self.dirs[kind] = port, d
        for kind in list(self.ports):
            if not wait_ready(self.ports[kind]):
                print(f"{kind}: did not start; see {self.dirs[kind]}/log", file=sys.stderr)
                self.stop_one(kind)
            elif SERVER_CPUS:
                # Knot pins its UDP workers to CPUs of its own choosing (worker i to CPU i),
                # which put it on dnsperf's CPU; hold every thread of every server to theirs.
                subprocess.run(["taskset", "-a", "-p", "-c", ",".join(map(str, SERVER_CPUS)), str(self.procs[kind].pid)],
                               stdout=subprocess.DEVNULL, check=False)
        time.sleep(3)  # let health checks settle

    def stop_one(self, kind):
        proc = self.procs.pop(kind)
        del self.ports[kind]
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()

    def stop(self):
        for kind in list(self.procs):
            self.stop_one(kind)


def reaction(ports, backends, flips):
    """Flips the failover primary's health endpoint and samples every server's answer every
    50 ms, all at once. Per server and flip: the time from the endpoint stopping (starting) to
    the last answer that still contains (lacks) the primary, i.e. to the change; None when it
    did not change within 20 s."""
    primary = backends[PRIMARY]
    timeline = {kind: [] for kind in ports}  # (t, has_primary)
    done = threading.Event()

    def sample(kind):
        while not done.is_set():
            ips = query(ports[kind], "www.example.com", timeout=0.5)
            timeline[kind].append((time.monotonic(), ips is not None and PRIMARY in ips))
            time.sleep(0.05)

    threads = [threading.Thread(target=sample, args=(k,), daemon=True) for k in ports]
    for t in threads:
        t.start()

    def settled(since, want, kind):
        return any(t >= since and has == want for t, has in timeline[kind])

    def change(since, want, kind):
        # The last sample on the old side before the first sample on the new side.
        last_old = since
        for t, has in timeline[kind]:
            if t < since:
                continue
            if has == want:
                return last_old - since
            last_old = t
        return None

    def wait_all(since, want, limit=20.0):
        end = time.monotonic() + limit
        while time.monotonic() < end and not all(settled(since, want, k) for k in ports):
            time.sleep(0.05)

    down = {k: [] for k in ports}
    up = {k: [] for k in ports}
    try:
        wait_all(time.monotonic(), True)
        for _ in range(flips):
            time.sleep(random.uniform(0.5, 1.5))
            primary.stop()  # returns once the port is closed (it can take up to 0.5 s)
            t0 = time.monotonic()
            wait_all(t0, False)
            for k in ports:
                down[k].append(change(t0, False, k))
            time.sleep(random.uniform(0.5, 1.5))
            primary.start()  # listening when it returns
            t1 = time.monotonic()
            wait_all(t1, True)
            for k in ports:
                up[k].append(change(t1, True, k))
    finally:
        done.set()
        for t in threads:
            t.join(timeout=2)
    return down, up


def fmt(xs):
    ok = [x for x in xs if x is not None]
    if not ok:
        return "no change within 20 s", ""
    extra = "" if len(ok) == len(xs) else f" ({len(xs) - len(ok)} never)"
    return f"{statistics.median(ok):.2f} s{extra}", f"{max(ok):.2f} s"


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=20, help="dnsperf run length")
    ap.add_argument("--rounds", type=int, default=3, help="measurement rounds (medians are reported)")
    ap.add_argument("--flips", type=int, default=10)
    ap.add_argument("--names", type=int, default=10000)
    ap.add_argument("--shared-cpus", action="store_true",
                    help="let servers and dnsperf share every core (default: servers on the upper half, dnsperf on the lower)")
    ap.add_argument("--same-rate", type=int, default=None, metavar="QPS",
                    help="offered rate of the p99 comparison at one load for all (default: half of the slowest 100-client "
                         "rate among the servers within 4x of the fastest, from round 1)")
    ap.add_argument("--only", nargs="*", default=SERVERS, choices=SERVERS)
    ap.add_argument("--hr-variant", action="append", default=[], metavar="LABEL=ARGS",
                    help="also run healthroute with these extra arguments, e.g. 'unpinned=--udp-cpu-affinity off'")
    args = ap.parse_args()
    need = [p for p, b in (("dnsperf", "dnsperf"), ("gdnsd", "gdnsd"), ("pdns-server", "pdns_server"), ("knot", "knotd")) if not shutil.which(b)]
    if need and not shutil.which("pdns_server"):
        need.append("pdns-backend-bind")
    if need:
        subprocess.run(["apt-get", "update", "-qq"], check=True)
        subprocess.run(["apt-get", "install", "-y", "-qq"] + need, check=True, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "healthroute-resolver"], cwd=ROOT, check=True)

    cpus = sorted(os.sched_getaffinity(0))
    if not args.shared_cpus and len(cpus) >= 2:
        half = len(cpus) // 2
        CLIENT_CPUS[:], SERVER_CPUS[:] = cpus[:half], cpus[half:]
        os.sched_setaffinity(0, CLIENT_CPUS)  # this script's sampling threads and HTTP backends too
    placement = (f"servers on CPU {','.join(map(str, SERVER_CPUS))}, dnsperf and the health endpoints on CPU "
                 f"{','.join(map(str, CLIENT_CPUS))}, {threads()} UDP thread(s) per server" if SERVER_CPUS
                 else "servers and dnsperf sharing every core")
    kinds = list(args.only)
    hr_args = {}
    for v in args.hr_variant:
        label, _, rest = v.partition("=")
        kind = f"healthroute ({label})"
        kinds.insert(1, kind)
        hr_args[kind] = rest.split()
        LABEL[kind] = f"healthroute-resolver {rest}"

    backends = {a: Backend(a) for a in BACKENDS}
    for b in backends.values():
        b.start()
    tmp = tempfile.mkdtemp(prefix="hr-compare-")
    qfile = QUERIES
    qps = {k: {c: [] for c in (1, 10, 100)} for k in kinds}
    mean100 = {k: [] for k in kinds}
    cpu100 = {k: [] for k in kinds}  # server CPU µs per query at 100 clients
    client100 = {k: [] for k in kinds}  # share of a core dnsperf used at 100 clients
    tail = {k: [] for k in kinds}
    same_tail = {k: [] for k in kinds}  # p99 at one offered rate for every server that can take it
    same_rate, same_kinds = args.same_rate, None
    named, memory = {k: [] for k in kinds}, {}
    try:
        servers = Running(kinds, 0, tmp, hr_args)
        try:
            for r in range(args.rounds):
                order = list(servers.ports)
                order = order[r % len(order):] + order[:r % len(order)]  # who goes first rotates
                for clients in (1, 10, 100):
                    for kind in order:
                        q, m, cpu, client = dnsperf(servers.ports[kind], args.seconds, clients, qfile, servers.procs[kind].pid)
                        qps[kind][clients].append(q)
                        if clients == 100:
                            mean100[kind].append(m)
                            cpu100[kind].append(cpu)
                            client100[kind].append(client)
                if same_kinds is None:  # fixed in round 1: the rate, and who can take it
                    rates = {k: median(qps[k][100]) for k in order}
                    same_rate = same_rate or common_rate(rates)
                    same_kinds = {k for k, q in rates.items() if q >= same_rate * 1.5}
                for kind in order:
                    tail[kind].append(p99(servers.ports[kind], args.seconds, median(qps[kind][100]) / 2, qfile))
                    if kind in same_kinds:
                        same_tail[kind].append(p99(servers.ports[kind], args.seconds, same_rate, qfile))
                print(f"round {r + 1} of {args.rounds} done", file=sys.stderr)
            reactions = reaction({k: p for k, p in servers.ports.items() if k != "knot"}, backends, args.flips)
        finally:
            servers.stop()
        servers = Running(kinds, args.names, tmp, hr_args)
        try:
            for kind in servers.ports:
                memory[kind] = rss_kib(servers.procs[kind].pid)
            for r in range(args.rounds):
                for kind in servers.ports:
                    named[kind].append(dnsperf(servers.ports[kind], args.seconds, 100, qfile)[0])
        finally:
            servers.stop()
    finally:
        for b in backends.values():
            try:
                b.stop()
            except Exception:
                pass

    hr = median(qps.get("healthroute", {}).get(100, [])) or 1
    print(f"dnsperf {args.seconds} s per run, median of {args.rounds} rounds (servers interleaved), "
          f"{os.cpu_count()} cores ({placement}), {time.strftime('%Y-%m-%d %H:%MZ', time.gmtime())}; "
          "query mix: weighted, failover, multivalue, NODATA, NXDOMAIN\n")
    print("| server | QPS, 1 client | QPS, 10 | QPS, 100 | QPS, 100 / healthroute | mean latency at 100 | p99 at half load | "
          f"p99 at {same_rate or 0:,} QPS | QPS with {args.names:,} names | RSS with {args.names:,} names |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind in kinds:
        if not qps[kind][100]:
            print(f"| {LABEL[kind]} | did not start | | | | | | | | |")
            continue
        q100 = median(qps[kind][100])
        same = f"{median(same_tail[kind]):.3f} ms" if same_tail[kind] else "(cannot take it)"
        print(f"| {LABEL[kind]} | {median(qps[kind][1]):,.0f} | {median(qps[kind][10]):,.0f} | {q100:,.0f} | {q100 / hr:.2f} | "
              f"{median(mean100[kind]):.3f} ms | {median(tail[kind]):.3f} ms | {same} | {median(named[kind]):,.0f} | "
              f"{memory.get(kind, 0) / 1024:.1f} MiB |")
    hr_cpu = median(cpu100.get("healthroute", [])) or float("nan")
    print("\nServer CPU at 100 clients: the server's own CPU time (all threads, /proc) per query answered, the rate "
          "one core would answer at that cost, and how much of a core dnsperf used (near 1.00: the load generator, "
          "not the server, set the QPS above):\n")
    print("| server | CPU per query | QPS per server core | QPS per core / healthroute | dnsperf's share of its core |")
    print("| --- | --- | --- | --- | --- |")
    for kind in kinds:
        if not cpu100[kind]:
            continue
        c = median(cpu100[kind])
        print(f"| {LABEL[kind]} | {c:.2f} µs | {1e6 / c:,.0f} | {hr_cpu / c:.2f} | {median(client100[kind]):.2f} |")
    print("\nEvery run (QPS at 1 / 10 / 100 clients; p99 at half load / at the same rate, in ms; CPU per query at 100 "
          "clients in µs), round by round:\n")
    for kind in kinds:
        same = same_tail[kind] or [float("nan")] * len(tail[kind])
        runs = " · ".join(f"{qps[kind][1][i]:,.0f} / {qps[kind][10][i]:,.0f} / {qps[kind][100][i]:,.0f}; {tail[kind][i]:.3f} / "
                          f"{same[i]:.3f}; {cpu100[kind][i]:.2f}"
                          for i in range(len(tail[kind])))
        print(f"- {LABEL[kind]}: {runs}")
    down, up = reactions
    print(f"\nFailover reaction over {args.flips} flips, all servers sampled at once every 50 ms: time from the primary's "
          "health endpoint stopping (starting) to the last answer that still contained (lacked) it:\n")
    print("| server | setting | fail: median | fail: max | recover: median | recover: max |")
    print("| --- | --- | --- | --- | --- | --- |")
    for kind in down:
        setting = SETTINGS.get(kind, "interval 1 s, threshold 1")
        print(f"| {LABEL[kind]} | {setting} | {' | '.join(fmt(down[kind]))} | {' | '.join(fmt(up[kind]))} |")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
