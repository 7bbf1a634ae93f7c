#!/usr/bin/env python3
"""healthroute at scale on a real API server (issue #27): N RecordGroups, two operators (leader
election) and two resolvers as processes, all on this machine. Prints a markdown table.
Without a kubeconfig, the operator's in-process API stand-in (see below).

    python3 bench/scale.py --groups N [--kubeconfig PATH] [--flips K] \\
        [--operator BIN --resolver BIN] [--label NAME] [--apiserver-restart [SECONDS]] \\
        [--keep | --reuse | --cleanup]

1. Load: N RecordGroups into a namespace of their own (`scale-<label>-data`), created in
   parallel straight through the API (the kubeconfig's client certificate or token), in this
   mix, by i % 20:
     0-11  Simple over a Service (its EndpointSlice: two ready endpoints, zone-a and zone-b)
     12-13 Failover: primary a Service, secondary a static value
     14    Weighted: a Service (90) and a static value (10)
     15    Simple over a Service, zoneAffinity PreferSameZone
     16-17 Weighted, three static values
     18-19 Failover, static values (18: the primary has a TCP HealthCheck)
   and the last two groups static Failover whatever their index (the ones edited below).
   The Services are headless and selector-less and their EndpointSlices are written by this
   script (managed-by scale-bench, so the EndpointSlice controller leaves them alone): pod
   readiness is an endpoint's `ready` condition, as a kubelet and the controller would set it,
   without 80,000 Pods at 100,000 groups. Endpoint addresses are in 10.0.0.0/8 and static
   values in the documentation ranges; nothing is ever sent to either. The HealthChecks
   (--checks) probe a TCP listener of this script on loopback.
2. Start: two resolvers (checker names resolver-a/-b, zones zone-a/-b, loopback ports) and
   then two operators (`--namespace scale-<label>-hr`, `--watch-namespace` the data
   namespace, --lease-duration). Measured: operator start -> every group answered (NOERROR
   with an A record) by both resolvers: a sample of names is polled every 5 ms, then every
   name is swept on both resolvers, and names still unanswered are polled until they answer.
3. Settle: until the status writes stop (healthroute_operator_status_writes_total of both
   operators unchanged for 10 s with one leader throughout; at most --settle-max seconds).
4. Flips: K times, one endpoint of a random Simple group's EndpointSlice changes its `ready`
   condition (JSON patch); the time from sending the patch until BOTH resolvers answer the new
   set, polled over UDP every ~2 ms (at most 30 s a flip). p50, p99, max. Two watches of
   this script split each flip: patch → the slice's watch event (what the operator waits
   for), → the next table ConfigMap event (the operator's delta, what the resolvers wait for),
   → both resolvers answer.
   With etcd's metrics (--etcd-metrics, default the loopback cluster's), the WAL fsync and
   backend commit times etcd recorded during the flips: each flip waits for two commits in a
   row (the patch, then the operator's delta), so they set this machine's floor. With --push
   the operators push each delta to the resolvers (P12) as they write it: a flip then waits
   for the patch's commit only, and the resolvers answer before the table's event (counted).
5. RSS (VmRSS) of every process: the two operators, the two resolvers, and the API server and
   etcd when their pid files are readable ($HR_CLUSTER_DIR/run, default ~/hr-cluster/run).
6. Takeover: SIGKILL the leader, then at once edit a static group (its primary's value); the
   time until both resolvers answer the new value. The killed operator is started again.
7. With --apiserver-restart [S]: SIGTERM the API server (its pid file, checked against its
   binary), wait S seconds (default 15), start it again with the cluster's up.sh (--cluster-dir,
   default ../shared/cluster), and from /readyz ok, the time until an edit is served. Other
   users of the cluster lose it for those seconds.

Without --kubeconfig (or $KUBECONFIG) the groups go into the operator's in-process API
stand-in instead (`operator/benches/control_plane.rs`, built with `cargo bench --no-run`): the
real control loop, table publisher and status writer, every write answered after 20 ms, N
groups each over its own Service. It prints the load (cold start → the first table), the
EndpointSlice change → table request p50/p99 (K changes, while the cold leader's statuses still
drain), a RecordGroup edit's, the takeover (a follower's first table after it takes the lease)
and the process's peak RSS (the one process: the operator's loop and the stand-in). No
resolvers run there and no API server's latency is in it: the real figures need the loopback
cluster (`../shared/cluster/up.sh`).

Loading 100,000 groups takes about 16 minutes and deleting them as long or longer, so
--keep leaves the namespaces and their objects, a later run with --reuse (same --label and
--groups; e.g. another build's binaries) measures on them without loading, and --cleanup
deletes them. A reused namespace holds the earlier run's statuses: the start then writes fewer,
unless --clear-statuses takes them away first (a first start's statuses, on a reused load).
--operator-args passes more arguments to both operators (e.g. '--status-qps 50').

Everything listens on loopback; every wait has a deadline. At the end the processes are killed,
the objects deleted in parallel (the namespace controller alone takes many minutes for tens of
thousands of RecordGroups) and the namespaces deleted (--keep keeps them all). Loading stops when
the machine's available memory falls under 3 GiB. Python 3 and PyYAML only."""
import argparse
import http.client
import json
import os
import random
import re
import select
import shlex
import signal
import socket
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import base64

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
RELEASE = os.path.join(ROOT, "target", "release")
ZONE = "scale.example"
GROUP_API = "/apis/healthroute.io/v1alpha1"
SLICE_API = "/apis/discovery.k8s.io/v1"
LEASE_NAME = "healthroute-operator"
MANAGED_BY = "scale-bench"
# A table shard's ConfigMap (the contract's shard_name); the manifest and the deltas are not.
SHARD_NAME = re.compile(r"healthroute-table-\d+")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --- the API ---------------------------------------------------------------------------------

class ApiError(Exception):
    pass


class Kube:
    """Just enough of a Kubernetes client: one keep-alive HTTPS connection per thread, the
    kubeconfig's current context (client certificate or token), JSON in and out."""

    def __init__(self, path, tmp):
        import yaml
        cfg = yaml.safe_load(open(path))
        ctx_name = cfg.get("current-context")
        ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
        cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
        user = next((u["user"] for u in cfg.get("users", []) if u["name"] == ctx.get("user")), {})
        url = urllib.parse.urlsplit(cluster["server"])
        self.host, self.port = url.hostname, url.port or (443 if url.scheme == "https" else 80)
        if self.host not in ("127.0.0.1", "localhost", "::1"):
            # This bench sends a lot; it is meant for a loopback API server.
            log(f"note: the API server is {self.host}, not loopback")
        self.https = url.scheme == "https"
        self.headers = {"Accept": "application/json"}
        self.ctx = None
        if self.https:
            self.ctx = ssl.create_default_context()
            if cluster.get("insecure-skip-tls-verify"):
                self.ctx.check_hostname = False
                self.ctx.verify_mode = ssl.CERT_NONE
            elif cluster.get("certificate-authority-data"):
                self.ctx.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
            elif cluster.get("certificate-authority"):
                self.ctx.load_verify_locations(cafile=cluster["certificate-authority"])
            cert, key = user.get("client-certificate"), user.get("client-key")
            if user.get("client-certificate-data"):
                cert = os.path.join(tmp, "client.crt")
                key = os.path.join(tmp, "client.key")
                with open(os.open(cert, os.O_CREAT | os.O_WRONLY, 0o600), "wb") as f:
                    f.write(base64.b64decode(user["client-certificate-data"]))
                with open(os.open(key, os.O_CREAT | os.O_WRONLY, 0o600), "wb") as f:
                    f.write(base64.b64decode(user["client-key-data"]))
            if cert:
                self.ctx.load_cert_chain(cert, key)
        if user.get("token"):
            self.headers["Authorization"] = f"Bearer {user['token']}"
        self.local = threading.local()

    def _conn(self):
        c = getattr(self.local, "conn", None)
        if c is None:
            if self.https:
                c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=30)
            else:
                c = http.client.HTTPConnection(self.host, self.port, timeout=30)
            self.local.conn = c
        return c

    def _drop(self):
        c = getattr(self.local, "conn", None)
        if c is not None:
            c.close()
        self.local.conn = None

    def call(self, method, path, body=None, ctype="application/json", ok=(200, 201), tries=6, timeout=None):
        """One request; retried on connection errors, 429 and 5xx (bounded). Returns
        (status, parsed body); a status outside `ok` raises ApiError."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = ctype
        delay = 0.2
        for attempt in range(tries):
            try:
                c = self._conn()
                if timeout is not None:
                    c.timeout = timeout
                    if c.sock is not None:
                        c.sock.settimeout(timeout)
                c.request(method, path, body=data, headers=headers)
                r = c.getresponse()
                raw = r.read()
                status = r.status
                is_json = "json" in (r.getheader("Content-Type") or "")
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                if attempt == tries - 1:
                    raise ApiError(f"{method} {path}: {e}") from e
                time.sleep(delay)
                delay = min(delay * 2, 3)
                continue
            if status in ok:
                return status, (json.loads(raw) if raw and is_json else raw)
            if (status == 429 or status >= 500) and attempt < tries - 1:
                time.sleep(delay)
                delay = min(delay * 2, 3)
                continue
            raise ApiError(f"{method} {path}: {status} {raw[:300]!r}")
        raise ApiError(f"{method} {path}: no answer")

    def get(self, path, ok=(200,), **kw):
        return self.call("GET", path, ok=ok, **kw)[1]

    def watch(self, path, metadata_only=False):
        """A watch of the collection at `path` (with its query) from now on, in a thread of its
        own: `Watch.seen` collects (monotonic arrival time, event type, object name). With
        `metadata_only`, the API server sends each object's metadata alone (a table shard is
        hundreds of KiB: this script neither parses it, holding its own polling back, nor adds a
        full watcher's bytes to the API server's load)."""
        rv = self.get(path + ("&" if "?" in path else "?") + "limit=1")["metadata"]["resourceVersion"]
        if self.https:
            c = http.client.HTTPSConnection(self.host, self.port, context=self.ctx)
        else:
            c = http.client.HTTPConnection(self.host, self.port)
        sep = "&" if "?" in path else "?"
        headers = dict(self.headers)
        if metadata_only:
            headers["Accept"] = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
        c.request("GET", f"{path}{sep}watch=1&resourceVersion={rv}&timeoutSeconds=3600",
                  headers=headers)
        r = c.getresponse()
        if r.status != 200:
            c.close()
            raise ApiError(f"watch {path}: {r.status}")
        return Watch(c, r)

    def exists(self, path):
        return self.call("GET", path, ok=(200, 404))[0] == 200

    def create(self, path, obj):
        """Creates; an object that is already there counts as created (a rerun)."""
        return self.call("POST", path, obj, ok=(200, 201, 202, 409))[0]

    def json_patch(self, path, ops):
        return self.call("PATCH", path, ops, ctype="application/json-patch+json", ok=(200,))[1]

    def apply(self, path, obj, manager=MANAGED_BY):
        sep = "&" if "?" in path else "?"
        return self.call("PATCH", f"{path}{sep}fieldManager={manager}&force=true", obj,
                         ctype="application/apply-patch+yaml", ok=(200, 201))[1]

    def ready(self):
        try:
            return self.call("GET", "/readyz", ok=(200,), tries=1, timeout=2)[1] == b"ok"

        except ApiError:
            return False


# --- the objects ----------------------------------------------------------------------------

class Watch:
    """One watch's events as they arrive, read by a daemon thread until `stop`."""

    def __init__(self, conn, response):
        self.conn, self.response, self.seen = conn, response, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        try:
            while True:
                line = self.response.readline()
                if not line:
                    return
                t, wall = time.monotonic(), time.time()
                ev = json.loads(line)
                self.seen.append((t, ev.get("type"), ev.get("object", {}).get("metadata", {}).get("name"), wall))
        except (OSError, http.client.HTTPException, ValueError):
            return

    def first(self, after, name=None):
        """The arrival time of the first event after `after` (of object `name`) that adds or
        changes an object, or None: a delete carries no change (after a takeover the new
        leader deletes the old deltas, 100 a second, beside its own)."""
        return next((t for t, kind, n, _ in list(self.seen)
                     if t > after and kind != "DELETED" and (name is None or n == name)), None)

    def stop(self):
        try:
            self.conn.sock.shutdown(socket.SHUT_RDWR)
        except (OSError, AttributeError):
            pass
        self.thread.join(2)
        self.conn.close()


def kind_of(i, n):
    """The group's shape, by i % 20 (the mix in the module docs); the last two groups are
    static Failover groups whatever their index, the ones the takeover and the restart edit."""
    r = i % 20
    if i >= n - 2 or r == 19:
        return "failover-static"
    if r < 12:
        return "simple-svc"
    if r < 14:
        return "failover-svc"
    if r == 14:
        return "weighted-svc"
    if r == 15:
        return "affinity-svc"
    if r < 18:
        return "weighted-static"
    return "failover-static-check"


def has_service(i, n):
    return kind_of(i, n).endswith("-svc")


def pod_ip(i, k):
    n = 4 * i + k + 1
    return f"10.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}"


def static_ip(i, k):
    base = ("192.0.2", "198.51.100", "203.0.113")[k % 3]
    return f"{base}.{1 + (i * 7 + k) % 250}"


def group_name(i):
    return f"g{i}"


def dns_name(i):
    return f"g{i}.{ZONE}"


def service(ns, i):
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"s{i}", "namespace": ns},
            "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}}


def endpoint(i, k, ready):
    return {"addresses": [pod_ip(i, k)], "zone": ("zone-a", "zone-b")[k],
            "conditions": {"ready": ready, "serving": ready, "terminating": False}}


def endpoint_slice(ns, i):
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"s{i}-1", "namespace": ns,
                         "labels": {"kubernetes.io/service-name": f"s{i}",
                                    "endpointslice.kubernetes.io/managed-by": MANAGED_BY}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
            "endpoints": [endpoint(i, 0, True), endpoint(i, 1, True)]}


def record_group(ns, i, n, checks):
    kind = kind_of(i, n)
    svc = {"name": f"s{i}"}
    spec = {"name": dns_name(i) + ".", "type": "A", "ttl": 30}
    if kind in ("simple-svc", "affinity-svc"):
        spec.update(routingPolicy="Simple", records=[{"setIdentifier": "pods", "service": svc}])
        if kind == "affinity-svc":
            spec["zoneAffinity"] = "PreferSameZone"
    elif kind == "failover-svc":
        spec.update(routingPolicy="Failover", records=[
            {"setIdentifier": "pods", "failover": {"role": "Primary"}, "service": svc},
            {"setIdentifier": "sorry", "failover": {"role": "Secondary"}, "values": [static_ip(i, 0)]}])
    elif kind == "weighted-svc":
        spec.update(routingPolicy="Weighted", records=[
            {"setIdentifier": "blue", "weight": 90, "service": svc},
            {"setIdentifier": "green", "weight": 10, "values": [static_ip(i, 0)]}])
    elif kind == "weighted-static":
        spec.update(routingPolicy="Weighted", records=[
            {"setIdentifier": f"v{k}", "weight": w, "values": [static_ip(i, k)], "zone": ("zone-a", "zone-b", "zone-a")[k]}
            for k, w in enumerate((10, 20, 20))])
    else:
        primary = {"setIdentifier": "main", "failover": {"role": "Primary"}, "values": [static_ip(i, 0)]}
        if kind == "failover-static-check" and checks:
            primary["healthCheckRef"] = {"name": f"hc{i % checks}"}
        spec.update(routingPolicy="Failover", records=[
            primary, {"setIdentifier": "dr", "failover": {"role": "Secondary"}, "values": [static_ip(i, 1)]}])
    return {"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
            "metadata": {"name": group_name(i), "namespace": ns}, "spec": spec}


def health_check(ns, k, port):
    return {"apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
            "metadata": {"name": f"hc{k}", "namespace": ns},
            "spec": {"type": "TCP", "target": {"address": "127.0.0.1", "port": port},
                     "requestIntervalSeconds": 30}}


def objects(ns, n, checks, check_port):
    """(collection path, object) in creation order: checks, Services, slices, groups."""
    for k in range(checks):
        yield f"{GROUP_API}/namespaces/{ns}/healthchecks", health_check(ns, k, check_port)
    for i in range(n):
        if has_service(i, n):
            yield f"/api/v1/namespaces/{ns}/services", service(ns, i)
    for i in range(n):
        if has_service(i, n):
            yield f"{SLICE_API}/namespaces/{ns}/endpointslices", endpoint_slice(ns, i)
    for i in range(n):
        yield f"{GROUP_API}/namespaces/{ns}/recordgroups", record_group(ns, i, n, checks)


def mem_available_mib():
    for line in open("/proc/meminfo"):
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return float("inf")


def in_parallel(items, fn, workers, what, min_free_mib=3072):
    """Calls fn(item) for every item with `workers` threads (each its own connection).
    Stops at the first error, and when the machine's available memory falls under
    `min_free_mib` (the API server grows with every object, and the machine is shared).
    Returns (seconds, items done)."""
    it = iter(items)
    lock = threading.Lock()
    done = [0]
    errors = []
    stop = threading.Event()

    def work():
        while not stop.is_set():
            with lock:
                item = next(it, None)
            if item is None:
                return
            try:
                fn(item)
            except ApiError as e:
                errors.append(str(e))
                stop.set()
                return
            with lock:
                done[0] += 1

    t0 = time.monotonic()
    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for t in threads:
        t.start()
    last = t0
    while any(t.is_alive() for t in threads):
        time.sleep(0.2)
        if mem_available_mib() < min_free_mib and not stop.is_set():
            errors.append(f"under {min_free_mib} MiB of memory available; stopped")
            stop.set()
        if time.monotonic() - last >= 15:
            last = time.monotonic()
            log(f"{what}: {done[0]} objects in {last - t0:.0f} s ({mem_available_mib():.0f} MiB available)")
    if errors:
        raise ApiError(f"{what}: {errors[0]}")
    return time.monotonic() - t0, done[0]


def load(kube, ns, n, checks, check_port, workers):
    """Creates every object; returns (seconds, objects)."""
    return in_parallel(objects(ns, n, checks, check_port), lambda item: kube.create(*item), workers, "loaded")


def unload(kube, ns, n, checks, workers):
    """Deletes every object one by one, in parallel. The namespace controller's collection
    deletes are serial on the API server (--delete-collection-workers 1) and time out at
    tens of thousands of RecordGroups, so a namespace left to it takes many minutes."""
    def paths():
        for i in range(n):
            yield f"{GROUP_API}/namespaces/{ns}/recordgroups/{group_name(i)}"
        for i in range(n):
            if has_service(i, n):
                yield f"{SLICE_API}/namespaces/{ns}/endpointslices/s{i}-1"
                yield f"/api/v1/namespaces/{ns}/services/s{i}"
        for k in range(checks):
            yield f"{GROUP_API}/namespaces/{ns}/healthchecks/hc{k}"
    return in_parallel(paths(), lambda path: kube.call("DELETE", path, ok=(200, 202, 404)), workers, "deleted",
                       min_free_mib=0)


# --- DNS over loopback ------------------------------------------------------------------------

def dns_query(qid, name):
    q = struct.pack(">HHHHHH", qid, 0, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return q + struct.pack(">HH", 1, 1)


def dns_parse(data):
    """(id, rcode, sorted A values) of a reply, or None when it does not parse."""
    try:
        qid, flags, qd, an = struct.unpack(">HHHH", data[:8])
        i = 12
        for _ in range(qd):
            while data[i] != 0:
                if data[i] & 0xC0 == 0xC0:
                    i += 1
                    break
                i += data[i] + 1
            i += 5
        ips = []
        for _ in range(an):
            while True:
                if data[i] & 0xC0 == 0xC0:
                    i += 2
                    break
                if data[i] == 0:
                    i += 1
                    break
                i += data[i] + 1
            rtype, _, _, rdlen = struct.unpack(">HHIH", data[i:i + 10])
            i += 10
            if rtype == 1 and rdlen == 4:
                ips.append(socket.inet_ntoa(data[i:i + 4]))
            i += rdlen
        return qid, flags & 0xF, sorted(ips)
    except (IndexError, struct.error):
        return None


class Dns:
    """One UDP socket to one resolver: single questions (polling) and pipelined sweeps."""

    def __init__(self, port):
        self.port = port
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        self.next_id = random.randrange(65536)

    def _id(self):
        self.next_id = (self.next_id + 1) & 0xFFFF
        return self.next_id

    def ask(self, name, timeout=0.2):
        """(rcode, values) or None after `timeout`."""
        qid = self._id()
        try:
            self.sock.send(dns_query(qid, name))
        except OSError:
            time.sleep(timeout)
            return None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.sock], [], [], left)
            if not r:
                return None
            try:
                p = dns_parse(self.sock.recv(4096))
            except OSError:
                # ECONNREFUSED: nothing listens (yet).
                time.sleep(min(left, 0.05))
                return None
            if p and p[0] == qid:
                return p[1], p[2]

    def sweep(self, names, window=200, timeout=1.0, tries=3):
        """Asks every name once (pipelined); returns {index: (rcode, values)} of the replies
        (names without a reply after `tries` are missing)."""
        out = {}
        todo = list(range(len(names)))
        for _ in range(tries):
            inflight = {}
            pos = 0
            last_progress = time.monotonic()
            while pos < len(todo) or inflight:
                while pos < len(todo) and len(inflight) < window:
                    qid = self._id()
                    while qid in inflight:
                        qid = self._id()
                    idx = todo[pos]
                    pos += 1
                    inflight[qid] = idx
                    try:
                        self.sock.send(dns_query(qid, names[idx]))
                    except OSError:
                        pass
                r, _, _ = select.select([self.sock], [], [], 0.05)
                if r:
                    while True:
                        try:
                            data = self.sock.recv(4096, socket.MSG_DONTWAIT)
                        except (BlockingIOError, InterruptedError):
                            break
                        except OSError:
                            break
                        p = dns_parse(data)
                        if p and p[0] in inflight:
                            out[inflight.pop(p[0])] = (p[1], p[2])
                            last_progress = time.monotonic()
                elif time.monotonic() - last_progress > timeout:
                    inflight.clear()  # lost: asked again in the next try
                    last_progress = time.monotonic()
            todo = [i for i in range(len(names)) if i not in out]
            if not todo:
                break
        return out


def answered(reply):
    return reply is not None and reply[0] == 0 and len(reply[1]) > 0


# --- processes --------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """A process's user + system CPU seconds so far, or None when it is gone."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class CpuShare:
    """CPU seconds a second of named processes over a span: where a window's CPU went."""

    def __init__(self, pids):
        self.pids = {name: pid for name, pid in pids.items() if pid}
        self.t0 = time.monotonic()
        self.before = {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def row(self):
        took = time.monotonic() - self.t0
        parts = []
        for name, pid in self.pids.items():
            after, before = cpu_seconds(pid), self.before[name]
            if after is not None and before is not None:
                parts.append(f"{name} {(after - before) / took:.2f}")
        return ", ".join(parts)


def rss_mib(pid, field="VmRSS"):
    """A process's resident size (or another kB line of its status: RssAnon, RssFile), MiB."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


class Proc:
    def __init__(self, name, argv, env, logdir, admin_port, dns_port=None):
        self.name, self.argv, self.env = name, argv, env
        self.admin_port, self.dns_port = admin_port, dns_port
        self.log = os.path.join(logdir, f"{name}.log")
        self.popen = None

    def start(self):
        self.popen = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.DEVNULL,
                                      stdout=open(self.log, "ab"), stderr=subprocess.STDOUT)
        return time.monotonic()

    def alive(self):
        return self.popen is not None and self.popen.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.alive():
            self.popen.send_signal(sig)

    def stop(self):
        if not self.alive():
            return
        self.popen.terminate()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout=10)

    def ready(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=2)
            c.request("GET", "/readyz")
            ok = c.getresponse().status == 200
            c.close()
            return ok
        except (OSError, http.client.HTTPException):
            return False

    def wait_ready(self, timeout):
        """Seconds until /readyz answers 200 (for the operator: its watches have listed
        everything), or None after `timeout`."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.ready():
                return time.monotonic() - t0
            time.sleep(0.1)
        return None

    def metrics(self):
        """The admin endpoint's /metrics as {name{labels}: value}, or {} when unreachable."""
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.admin_port, timeout=2)
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
            c.close()
        except (OSError, http.client.HTTPException):
            return {}
        return parse_exposition(text)


def scrape(url):
    """A Prometheus text exposition at `url` as {name{labels}: value}; {} when unreachable."""
    try:
        u = urllib.parse.urlsplit(url)
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=2)
        c.request("GET", u.path or "/metrics")
        text = c.getresponse().read().decode()
        c.close()
    except (OSError, http.client.HTTPException, ValueError):
        return {}
    return parse_exposition(text)


def parse_exposition(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def histogram_between(before, after, name):
    """The observations of histogram `name` made between two scrapes: (count, [(le, count)])."""
    def buckets(m):
        out = {}
        for k, v in m.items():
            hit = re.fullmatch(re.escape(name) + r'_bucket\{(?:.*,)?le="([^"]+)"\}', k)
            if hit:
                out[float(hit.group(1))] = v
        return out
    b, a = buckets(before), buckets(after)
    cum = sorted((le, a[le] - b.get(le, 0.0)) for le in a)
    return (cum[-1][1] if cum else 0.0), cum


def histogram_quantile(cum, q):
    """The upper bound of the bucket holding quantile q (cumulative buckets), or None."""
    if not cum or cum[-1][1] <= 0:
        return None
    return next(le for le, c in cum if c >= q * cum[-1][1])


def fmt_bound(seconds):
    if seconds is None:
        return "n/a"
    return "over 8 s" if seconds == float("inf") else f"≤ {seconds * 1000:g} ms"


def apiserver_metrics(kube):
    """The API server's own /metrics, parsed; {} when it will not say."""
    try:
        return parse_exposition(kube.call("GET", "/metrics", tries=2, timeout=10)[1].decode())
    except (ApiError, UnicodeDecodeError, AttributeError):
        return {}


def labels_of(series):
    return dict(re.findall(r'(\w+)="([^"]*)"', series.partition("{")[2]))


def apiserver_load(before, after, top=6):
    """What the API server served between two scrapes of its /metrics, as two row values: the
    requests by verb and resource (and which system client, where it says) with the seconds
    they took, busiest first; and the watch events it sent by resource, with their bytes."""
    def by(family, key):
        out = {}
        for k, v in after.items():
            if k.startswith(family + "{"):
                d = v - before.get(k, 0.0)
                if d > 0:
                    name = key(labels_of(k))
                    out[name] = out.get(name, 0.0) + d
        return out

    def request(lb):
        what = lb.get("resource") or lb.get("subresource", "")
        if lb.get("resource") and lb.get("subresource"):
            what += "/" + lb["subresource"]
        who = lb.get("system_client")
        return f"{lb.get('verb', '?')} {what}" + (f" ({who})" if who else "")
    # A watch's duration is its whole life: what it costs shows in the events it sent.
    count = {r: c for r, c in by("apiserver_request_total", request).items()
             if not r.startswith(("WATCH", "CONNECT"))}
    took = by("apiserver_request_duration_seconds_sum", request)
    busiest = sorted(count, key=lambda r: (-took.get(r, 0.0), -count[r]))[:top]
    requests = "; ".join(f"{r} {count[r]:.0f} ({took.get(r, 0.0):.1f} s)" for r in busiest) or "n/a"
    events = by("apiserver_watch_events_total", lambda lb: lb.get("resource") or lb.get("kind", "?"))
    sizes = by("apiserver_watch_events_sizes_sum", lambda lb: lb.get("resource") or lb.get("kind", "?"))
    loudest = sorted(events, key=lambda r: -sizes.get(r, 0.0))[:top]
    watched = "; ".join(f"{r} {events[r]:.0f} ({sizes.get(r, 0.0) / 2**20:.1f} MiB)" for r in loudest) or "n/a"
    return requests, watched


def msum(metrics, name):
    """The sum of every series of one metric family."""
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


def child_env(kubeconfig):
    env = {k: v for k, v in os.environ.items() if k not in ("POD_NAME", "POD_NAMESPACE", "CHECKER_ZONE")}
    env["KUBECONFIG"] = kubeconfig
    env.setdefault("RUST_LOG", "info")
    return env


# --- measurements -----------------------------------------------------------------------------

def pct(xs, p):
    """Nearest-rank percentile."""
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, -(-len(s) * p // 100) - 1))]


def wait_both(resolvers, name, want, deadline, interval=0.002):
    """Polls `name` on every resolver every `interval` until each answers `want` (a sorted
    list), or `deadline` (monotonic). Returns {resolver index: first time it answered want}."""
    seen = {}
    while len(seen) < len(resolvers) and time.monotonic() < deadline:
        tick = time.monotonic()
        for k, r in enumerate(resolvers):
            if k in seen:
                continue
            reply = r.ask(name, timeout=0.2)
            if reply is not None and reply[0] == 0 and reply[1] == want:
                seen[k] = time.monotonic()
        time.sleep(max(0.0, interval - (time.monotonic() - tick)))
    return seen


def sample_of(n):
    return sorted(set([0, n - 1] + [i * n // 64 for i in range(64)]))


def startup(resolvers, n, t0, deadline):
    """Operator start (t0) -> every group answered by every resolver. Returns
    (seconds to the sample, seconds to every name, names swept, late names)."""
    names = [dns_name(i) for i in range(n)]
    sample = sample_of(n)
    pending = {(k, i) for k in range(len(resolvers)) for i in sample}
    while pending and time.monotonic() < deadline:
        tick = time.monotonic()
        for k, i in list(pending):
            if answered(resolvers[k].ask(names[i], timeout=0.1)):
                pending.discard((k, i))
        time.sleep(max(0.0, 0.005 - (time.monotonic() - tick)))
    if pending:
        return None, None, 0, len(pending)
    t_sample = time.monotonic() - t0
    # Every name on every resolver; what is missing is polled until it answers.
    t_all = t_sample
    late = 0
    for k, r in enumerate(resolvers):
        got = r.sweep(names)
        missing = [i for i in range(n) if not answered(got.get(i))]
        late += len(missing)
        while missing and time.monotonic() < deadline:
            got = r.sweep([names[i] for i in missing])
            now = time.monotonic()
            still = [missing[j] for j in range(len(missing)) if not answered(got.get(j))]
            if len(still) < len(missing):
                t_all = max(t_all, now - t0)
            missing = still
            if missing:
                time.sleep(0.05)
        if missing:
            return t_sample, None, n, len(missing)
    return t_sample, t_all, n, late


def settle(operators, max_s, quiet=10):
    """Waits until status writes stop: both operators' writes together unchanged for `quiet`
    seconds, with the same one leading throughout (a leader change starts a new round of
    writes, after the new leader has read the published table back: 3 s was too short a
    quiet time at 100,000 groups). Returns (seconds, writes, the leader or None)."""
    t0 = time.monotonic()
    last, same_since = None, time.monotonic()
    key = "healthroute_operator_status_writes_total"
    while time.monotonic() - t0 < max_s:
        ms = [o.metrics() for o in operators]
        leaders = [o for o, m in zip(operators, ms) if m.get("healthroute_operator_leader") == 1]
        v = (sum(msum(m, key) for m in ms), leaders[0].name if len(leaders) == 1 else None)
        if v != last or v[1] is None:
            last, same_since = v, time.monotonic()
        elif time.monotonic() - same_since >= quiet:
            return same_since - t0, v[0], leaders[0]
        time.sleep(0.5)
    return None, (last or (None,))[0], None


def early_flips(rows, what, kube, ns, hr_ns, dns, n, rng, leader, t0, seconds, pids=None, etcd_url=None):
    """Flips from now until `seconds` after `t0` (a start, a takeover), while the new leader's
    statuses are still being written; a row of their times and one of the leader's status writes
    over the same span (issue #44)."""
    key = "healthroute_operator_status_writes_total"
    m_before = leader.metrics()
    writes_before = msum(m_before, key)
    started = time.monotonic() - t0
    cpu = CpuShare(pids or {})
    api_before = apiserver_metrics(kube)
    etcd_before = scrape(etcd_url) if etcd_url else {}
    sent, each = [], []
    both, _, timeouts, stages = flips(kube, ns, hr_ns, dns, n, 0, rng, until=t0 + seconds, sent=sent, each=each)
    m = leader.metrics()
    api = api_rows(api_before, apiserver_metrics(kube))
    rows.append((f"EndpointSlice flip → both answer, {started:.1f}-{seconds:.0f} s after {what} "
                 f"({len(both)} flips, {timeouts} over 30 s)", fmt_ms(both)))
    # When in the window the slow ones were: the start's own lists and first table, or later.
    for lo in range(0, int(seconds), 20):
        part = [b for b, s in zip(both, sent) if lo <= s - t0 < lo + 20]
        if part:
            rows.append((f"  … sent {lo}-{lo + 20} s after it ({len(part)} flips)", fmt_ms(part)))
    for stage in ("patch → slice event", "slice event → table event", "table event → both answer"):
        if stages.get(stage):
            rows.append((f"  {stage} ({len(stages[stage])} flips)", fmt_ms(stages[stage])))
    rows.extend(fold_rows(each))
    if cpu.pids:
        rows.append((f"  CPU seconds a second meanwhile ({os.cpu_count()} CPUs in all)", cpu.row()))
    rows.extend(api)
    if etcd_url:
        rows.append(compactions(etcd_before, scrape(etcd_url), time.time() - (time.monotonic() - t0)))
    rows.append(("  the slowest flips: sent at (after it), both answered in (patch → slice event, "
                 "→ table event, → both answer)", slowest(each, t0)))
    def moved(family):
        return msum(m, "healthroute_operator_" + family) - msum(m_before, "healthroute_operator_" + family)
    rows.append(("  the leader's table writes meanwhile: deltas, folds, shards (MiB)",
                 f"{moved('table_deltas_written_total'):.0f}, {moved('table_folds_total'):.0f}, "
                 f"{moved('shards_written_total'):.0f} ({moved('table_bytes_written_total') / 2**20:.1f})"))
    rows.append((f"  the leader's status writes meanwhile / in its process so far; its backlog at {seconds:.0f} s",
                 f"{msum(m, key) - writes_before:.0f} / {msum(m, key):.0f}; "
                 f"{msum(m, 'healthroute_operator_status_backlog'):.0f}"))
    keep_samples(what, both)
    log(f"flips after {what}: {fmt_ms(both)}")


def compactions(before, after, origin_wall):
    """A row: whether etcd compacted its history between two scrapes of its metrics (the API
    server asks for it every 5 minutes; over a big database it takes seconds, and requests
    meanwhile wait), and when the last one ended, after `origin_wall` (a time.time())."""
    family = "etcd_debugging_mvcc_db_compaction_total_duration_milliseconds"
    count = after.get(family + "_count", 0.0) - before.get(family + "_count", 0.0)
    took = after.get(family + "_sum", 0.0) - before.get(family + "_sum", 0.0)
    last = after.get("etcd_debugging_mvcc_db_compaction_last")
    what = "  etcd compactions of its history meanwhile: how many, their time, when the last ended"
    if not after:
        return what, "n/a (no etcd metrics)"
    if count <= 0:
        return what, "none"
    return what, f"{count:.0f}, {took / 1000:.1f} s, at {last - origin_wall:.1f} s" if last else f"{count:.0f}, {took / 1000:.1f} s"


def slowest(each, origin, top=5):
    """The `top` slowest of `flips(each=...)`, each as when it was sent after `origin` and how
    long it took, split where this script's watches saw it."""
    def ms(a, b):
        return f"{(b - a) * 1000:.0f}" if a is not None and b is not None else "?"
    out = []
    for t0, done, t1, t2, folding in sorted(each, key=lambda f: f[0] - f[1])[:top]:
        # A table event after the answer (pushed deltas) is no stage of this flip.
        t2 = t2 if t2 is not None and t2 <= done else None
        fold = ", during a fold" if folding else ""
        out.append(f"{t0 - origin:.1f} s: {(done - t0) * 1000:.0f} ms ({ms(t0, t1)}, {ms(t1, t2)}, {ms(t2, done)}{fold})")
    return "; ".join(out) or "n/a"


def fold_rows(each):
    """The flips during which a fold's shard was written, beside the others."""
    folding = [(done - t0) for t0, done, *_, f in each if f]
    rest = [(done - t0) for t0, done, *_, f in each if not f]
    return [(f"  … a fold's shard written while they waited ({len(folding)} flips)", fmt_ms(folding)),
            (f"  … no fold meanwhile ({len(rest)} flips)", fmt_ms(rest))] if folding and rest else []


def api_rows(before, after):
    """A window's API server load as report rows (none when its metrics were not readable)."""
    if not before or not after:
        return []
    requests, watched = apiserver_load(before, after)
    return [("  the API server's busiest requests meanwhile (watches aside): count (seconds serving them)", requests),
            ("  the watch events it sent meanwhile, by resource: count (bytes)", watched)]


def lease_holder(kube, ns):
    try:
        lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{LEASE_NAME}", ok=(200,))
        return lease["spec"].get("holderIdentity")
    except ApiError:
        return None


def served_at(log_path):
    """{generation: wall-clock time} of a resolver's "serving a new table" log lines."""
    out = {}
    try:
        for line in open(log_path, errors="replace"):
            if '"serving a new table"' not in line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            stamp = rec.get("timestamp", "")
            hit = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z", stamp)
            if hit:
                secs = time.mktime(time.strptime(hit.group(1), "%Y-%m-%dT%H:%M:%S")) - time.timezone
                out.setdefault(rec["fields"]["generation"], secs + float(hit.group(2) or 0))
    except OSError:
        pass
    return out


def delta_lag(watch, resolvers):
    """For every delta `watch` saw added, the time from its watch event here to each resolver
    serving its generation (that resolver's log): one list for all resolvers, in seconds."""
    served = [served_at(r.log) for r in resolvers]
    lags = []
    for _, kind, name, wall in list(watch.seen):
        hit = re.fullmatch(r"healthroute-table-delta-(\d+)", name or "")
        if kind != "ADDED" or not hit:
            continue
        g = int(hit.group(1))
        for by in served:
            if g in by:
                lags.append(by[g] - wall)
    return lags


def flips(kube, ns, hr_ns, resolvers, n, k, rng, servers=(), until=None, sent=None, each=None):
    """K EndpointSlice flips (or, with `until`, as many as fit before that monotonic time):
    (both-answered times, patch round trips, timeouts, stages), in seconds. `stages` splits each flip where this script's own watches saw it: the patched
    slice's event (as the operator sees it), then the next table ConfigMap event in `hr_ns` (the
    operator's delta, as the resolvers see it), then both resolvers answering. With `sent` (a
    list), the monotonic time each answered flip was sent is appended to it, in the order of
    the both-answered times; with `each` (a list), every answered flip as (sent, both answered,
    slice event, table event), monotonic times, the events None where not seen."""
    pool = [i for i in range(n) if kind_of(i, n) == "simple-svc"]
    both, patch_rtt, timeouts = [], [], 0
    stages = {"patch → slice event": [], "slice event → both answer": [], "slice event → table event": [],
              "table event → both answer": [], "both answer → table event (answered first)": []}
    try:
        slices = kube.watch(f"{SLICE_API}/namespaces/{ns}/endpointslices")
        tables = kube.watch(f"/api/v1/namespaces/{hr_ns}/configmaps?labelSelector=healthroute.io%2Ftable",
                            metadata_only=True)
    except ApiError as e:
        log(f"no watches for the flips' stages: {e}")
        slices = tables = None
    f = 0
    while (f < k) if until is None else (time.monotonic() < until):
        f += 1
        i = rng.choice(pool)
        name = f"s{i}-1"
        path = f"{SLICE_API}/namespaces/{ns}/endpointslices/{name}"
        # As the slice is now (a reused namespace keeps an earlier run's flips).
        now = kube.get(path)["endpoints"][0].get("conditions", {}).get("ready", True)
        now_ready = not now
        want = sorted([pod_ip(i, 1)] + ([pod_ip(i, 0)] if now_ready else []))
        t0 = time.monotonic()
        kube.json_patch(path, [{"op": "replace", "path": "/endpoints/0/conditions",
                                "value": {"ready": now_ready, "serving": now_ready, "terminating": False}}])
        patch_rtt.append(time.monotonic() - t0)
        seen = wait_both(resolvers, dns_name(i), sorted(want), t0 + 30)
        if len(seen) == len(resolvers):
            done = max(seen.values())
            both.append(done - t0)
            if sent is not None:
                sent.append(t0)
            t1 = slices.first(t0, name) if slices else None
            t2 = tables.first(t1) if t1 else None
            # Answered before the table's event came (pushed deltas): wait for it, briefly.
            wait_until = time.monotonic() + 1.0
            while t1 is not None and t2 is None and time.monotonic() < wait_until:
                time.sleep(0.002)
                t2 = tables.first(t1)
            if each is not None:
                each.append((t0, done, t1, t2))
            if t1 is not None:
                stages["patch → slice event"].append(t1 - t0)
                stages["slice event → both answer"].append(done - t1)
            if t2 is not None:
                stages["slice event → table event"].append(t2 - t1)
                if t2 <= done:
                    stages["table event → both answer"].append(done - t2)
                else:
                    # With pushed deltas (--push, P12) the resolvers answer before the table
                    # ConfigMap's event reaches a watcher.
                    stages["both answer → table event (answered first)"].append(t2 - done)
        else:
            timeouts += 1
        time.sleep(rng.uniform(0.05, 0.25))
    for w in (slices, tables):
        if w:
            w.stop()
    if each is not None:
        # Whether a fold's shard was written while the flip waited (the API server's and the
        # resolvers' busiest moments at 10,000 groups, #44).
        shards = [t for t, kind, n, _ in list(tables.seen) if kind != "DELETED" and SHARD_NAME.fullmatch(n or "")] \
            if tables else []
        each[:] = [(*e[:4], any(e[0] <= t <= e[1] for t in shards)) for e in each]
    if tables:
        stages["delta event here → a resolver serves it (its log)"] = delta_lag(tables, servers)
    return both, patch_rtt, timeouts, stages


def fresh_value():
    """A value no earlier run left in the group (RFC 2544's benchmark range; never sent to)."""
    r = random.SystemRandom()
    return f"198.18.{r.randrange(256)}.{r.randrange(1, 255)}"


def edit_static(kube, ns, i, value):
    """Changes a static Failover group's primary value (JSON patch on the spec)."""
    kube.json_patch(f"{GROUP_API}/namespaces/{ns}/recordgroups/{group_name(i)}",
                    [{"op": "replace", "path": "/spec/records/0/values", "value": [value]}])


def leadership(proc):
    """Wall-clock times at which `proc` logged that it took the lead."""
    import datetime
    out = []
    try:
        lines = open(proc.log, errors="replace").read().splitlines()
    except OSError:
        return out
    for line in lines:
        try:
            d = json.loads(line)
        except ValueError:
            continue
        f = d.get("fields", {})
        if f.get("message") == "leadership changed" and f.get("leader") is True:
            out.append(datetime.datetime.fromisoformat(d["timestamp"].replace("Z", "+00:00")).timestamp())
    return out


def led_at(proc, since):
    """The wall-clock time at which `proc` logged that it leads, after `since`, or None."""
    return next((t for t in leadership(proc) if t > since), None)


def watch_ready(procs, deadline):
    """In a thread: the monotonic time at which each of `procs` first answers /readyz 200 (an
    operator: its watches have listed everything), polled every 50 ms; {name: time}."""
    seen = {}

    def poll():
        while time.monotonic() < deadline and len(seen) < len(procs):
            for p in procs:
                if p.name not in seen and p.ready():
                    seen[p.name] = time.monotonic()
            time.sleep(0.05)
    threading.Thread(target=poll, daemon=True).start()
    return seen


def cluster_pid(cluster_dir, name):
    """The pid up.sh recorded for `name`, when it still runs the binary recorded with it."""
    try:
        pid, exe = open(os.path.join(cluster_dir, "run", f"{name}.pid")).read().split()[:2]
        if os.readlink(f"/proc/{pid}/exe") == exe:
            return int(pid)
    except (OSError, ValueError):
        pass
    return None


def cluster_cpu_seconds(cluster_dir, name):
    """User + system CPU seconds of one of the loopback cluster's processes (its pid file);
    exits when it does not run (the cost benches read the API server's and etcd's)."""
    pid = cluster_pid(cluster_dir, name)
    seconds = cpu_seconds(pid) if pid else None
    if seconds is None:
        sys.exit(f"no running {name} in {cluster_dir}/run")
    return seconds


class ClusterCost:
    """The wall time, and the API server's and etcd's CPU seconds, from now until `spent()`:
    what the cost benches (status_cost.py, table_cost.py) divide by their writes."""

    def __init__(self, cluster_dir):
        self.cluster_dir = cluster_dir
        self.api0 = cluster_cpu_seconds(cluster_dir, "kube-apiserver")
        self.etcd0 = cluster_cpu_seconds(cluster_dir, "etcd")
        self.t0 = time.monotonic()

    def spent(self):
        """(wall seconds, API server CPU seconds, etcd CPU seconds) since the start."""
        wall = time.monotonic() - self.t0
        return (wall, cluster_cpu_seconds(self.cluster_dir, "kube-apiserver") - self.api0,
                cluster_cpu_seconds(self.cluster_dir, "etcd") - self.etcd0)


# --- the run ----------------------------------------------------------------------------------

def stand_in(n, k):
    """The run without a real API server: the operator's control-plane bench against its
    in-process stand-in, with N groups and K changes; its figures, then its peak RSS."""
    log("no --kubeconfig: the operator's in-process API stand-in (operator/benches/control_plane.rs); "
        "for a real API server: bash ../shared/cluster/up.sh, then --kubeconfig $HOME/hr-cluster/kubeconfig")
    build = subprocess.run(["cargo", "bench", "-p", "healthroute-operator", "--bench", "control_plane",
                            "--no-run", "--message-format=json"], cwd=ROOT, capture_output=True, text=True)
    exe = None
    for line in build.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("executable") and msg.get("target", {}).get("name") == "control_plane":
            exe = msg["executable"]
    if build.returncode != 0 or not exe:
        sys.exit(f"building the control-plane bench failed:\n{build.stderr[-2000:]}")
    t0 = time.monotonic()
    proc = subprocess.Popen([exe, str(n), str(k)], stdout=subprocess.PIPE, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"the control-plane bench failed (exit {proc.returncode}):\n{out}")
    print(f"\n### {n} groups, the in-process API stand-in, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    print(f"`{exe} {n} {k}` (every write answered after 20 ms; {time.monotonic() - t0:.0f} s in all)\n")
    for line in out.splitlines():
        if line.strip():
            print(f"- {line.strip()}")
    print(f"- peak RSS of the process (the control loop and the stand-in's objects): {usage.ru_maxrss / 1024:.0f} MiB")


def binaries(args):
    op = args.operator or os.path.join(RELEASE, "healthroute-operator")
    res = args.resolver or os.path.join(RELEASE, "healthroute-resolver")
    if not (args.operator or args.resolver) and not (os.path.exists(op) and os.path.exists(res)):
        log("building the release binaries")
        subprocess.run(["cargo", "build", "--release", "-q", "-p", "healthroute-operator",
                        "-p", "healthroute-resolver"], cwd=ROOT, check=True)
    for b in (op, res):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b}: not an executable")
    return op, res


def ensure_crds(kube):
    # Discovery only: a list of recordgroups would be every group of the cluster.
    if kube.exists(GROUP_API):
        return
    import yaml
    crd_dir = os.path.join(ROOT, "crds")
    for f in sorted(os.listdir(crd_dir)):
        for doc in yaml.safe_load_all(open(os.path.join(crd_dir, f))):
            if doc:
                kube.apply(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{doc['metadata']['name']}", doc)
    deadline = time.monotonic() + 30
    while not kube.exists("/apis/healthroute.io/v1alpha1") and time.monotonic() < deadline:
        time.sleep(0.5)


def delete_namespaces(kube, names, wait_s):
    for ns in names:
        kube.call("DELETE", f"/api/v1/namespaces/{ns}", ok=(200, 202, 404, 409))
    deadline = time.monotonic() + wait_s
    left = list(names)
    while left and time.monotonic() < deadline:
        left = [ns for ns in left if kube.exists(f"/api/v1/namespaces/{ns}")]
        if left:
            time.sleep(1)
    return left


def unload_listed(kube, ns, workers):
    """Deletes what an earlier run left in `ns`, kind by kind, listed in pages."""
    paths = []
    for coll in (f"{GROUP_API}/namespaces/{ns}/recordgroups", f"{SLICE_API}/namespaces/{ns}/endpointslices",
                 f"/api/v1/namespaces/{ns}/services", f"{GROUP_API}/namespaces/{ns}/healthchecks"):
        cont = ""
        for _ in range(10000):
            page = kube.get(f"{coll}?limit=1000{cont}", ok=(200, 404))
            if not isinstance(page, dict):
                break
            paths += [f"{coll}/{o['metadata']['name']}" for o in page.get("items", [])]
            token = page.get("metadata", {}).get("continue")
            if not token:
                break
            cont = "&continue=" + urllib.parse.quote(token)
    if paths:
        took, count = in_parallel(paths, lambda path: kube.call("DELETE", path, ok=(200, 202, 404)), workers,
                                  "deleted", min_free_mib=0)
        log(f"deleted {count} objects left in {ns} in {took:.0f} s")


def clear_statuses(kube, ns, n, workers):
    """Takes every group's status away (a merge patch of `status: null` to the status
    subresource), so that a reused load starts as a first start does: every status owed."""
    paths = (f"{GROUP_API}/namespaces/{ns}/recordgroups/{group_name(i)}/status" for i in range(n))
    return in_parallel(paths, lambda path: kube.call("PATCH", path, {"status": None},
                                                     ctype="application/merge-patch+json", ok=(200, 404)),
                       workers, "statuses cleared", min_free_mib=0)


def count_groups(kube, ns):
    """RecordGroups in `ns` (None when the namespace is not there)."""
    if not kube.exists(f"/api/v1/namespaces/{ns}"):
        return None
    page = kube.get(f"{GROUP_API}/namespaces/{ns}/recordgroups?limit=1")
    return len(page.get("items", [])) + int(page.get("metadata", {}).get("remainingItemCount") or 0)


def fresh_namespaces(kube, names, workers):
    """Namespaces of this label left from an earlier run are emptied and deleted first."""
    old = [ns for ns in names if kube.exists(f"/api/v1/namespaces/{ns}")]
    if old:
        log(f"deleting {', '.join(old)} left from an earlier run")
        for ns in old:
            unload_listed(kube, ns, workers)
        left = delete_namespaces(kube, old, 600)
        if left:
            sys.exit(f"{', '.join(left)} still there after 600 s; try again later")
    for ns in names:
        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": ns, "labels": {"app.kubernetes.io/part-of": MANAGED_BY}}})


class TcpTarget:
    """The HealthChecks' target: accepts and closes, on loopback."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.run, daemon=True).start()

    def run(self):
        while True:
            try:
                c, _ = self.sock.accept()
                c.close()
            except OSError:
                return


# --samples: where each window's flip times go, with what ran (one JSON line a window).
SAMPLES = {}


def keep_samples(window, xs):
    """Appends one window's flip times (ms) to --samples, if given, for --pool."""
    if not SAMPLES.get("path"):
        return
    line = dict(SAMPLES["run"], window=re.sub(r" \(.*", "", window), ms=[round(x * 1000, 2) for x in xs])
    with open(SAMPLES["path"], "a") as f:
        f.write(json.dumps(line) + "\n")


def pool(path):
    """Prints every window's flips of the runs in `path` (--samples), pooled per build (the
    operator's and the resolver's) and arguments: a p99 over three runs' 1,000 flips says more
    than any one run's 330."""
    runs = {}
    for line in open(path):
        r = json.loads(line)
        # Older runs did not say which resolver.
        op = r["operator"] + (f", resolver {r['resolver']}" if r.get("resolver") else "")
        key = (op, r.get("operator_args") or "", r["window"])
        runs.setdefault(key, []).append(r["ms"])
    print("| operator (, resolver), arguments | window | runs | flips | pooled p50 / p99 / max (ms) | each run's p99 (ms) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (op, extra, window), lists in sorted(runs.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
        runs_s = [[x / 1000 for x in ms] for ms in lists if ms]
        xs = [x for run in runs_s for x in run]
        each = " / ".join(f"{pct(run, 99) * 1000:.0f}" for run in runs_s)
        print(f"| {op} {extra} | {window} | {len(lists)} | {len(xs)} | {fmt_ms(xs)} | {each} |")


def fmt_ms(xs):
    if not xs:
        return "n/a"
    return f"p50 {pct(xs, 50) * 1000:.0f} ms, p99 {pct(xs, 99) * 1000:.0f} ms, max {max(xs) * 1000:.0f} ms"


def fmt_s(x):
    return "n/a" if x is None else f"{x:.2f} s"


def mib(x):
    return "n/a" if x is None else f"{x:.0f}"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--groups", type=int, help="RecordGroups to load and serve (required but with --pool)")
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"))
    p.add_argument("--flips", type=int, default=50)
    p.add_argument("--operator", help="operator binary (default target/release/healthroute-operator)")
    p.add_argument("--resolver", help="resolver binary (default target/release/healthroute-resolver)")
    p.add_argument("--label", default="run", help="names the run in the table and the namespaces")
    p.add_argument("--checks", type=int, help="TCP HealthChecks (default min(20, groups/20))")
    p.add_argument("--lease-duration", type=int, default=5)
    p.add_argument("--workers", type=int, default=24, help="parallel creates while loading")
    p.add_argument("--settle-max", type=float, default=900, help="seconds to wait for status writes to stop")
    p.add_argument("--start-timeout", type=float, default=600, help="seconds for every group to be answered")
    p.add_argument("--apiserver-restart", type=float, nargs="?", const=15.0, metavar="SECONDS")
    p.add_argument("--etcd-metrics", default=f"http://127.0.0.1:{os.environ.get('HR_ETCD_PORT', '12379')}/metrics",
                   help="etcd's metrics URL: its WAL fsync and commit times during the flips (skipped when unreachable)")
    p.add_argument("--cluster-dir", default=os.environ.get("HR_CLUSTER_DIR", os.path.expanduser("~/hr-cluster")))
    p.add_argument("--cluster-scripts", default=os.path.normpath(os.path.join(ROOT, "..", "shared", "cluster")))
    p.add_argument("--keep", action="store_true", help="keep the namespaces and their objects at the end")
    p.add_argument("--reuse", action="store_true",
                   help="use the groups an earlier --keep run of this label left (the same --groups); what is missing is created")
    p.add_argument("--cleanup", action="store_true", help="only delete this label's namespaces and their objects")
    p.add_argument("--samples", metavar="FILE", help="append each window's flip times (JSON lines) to FILE, for --pool")
    p.add_argument("--pool", metavar="FILE", help="only print the windows of the runs in FILE (--samples), pooled per "
                   "operator and arguments")
    p.add_argument("--load-only", action="store_true",
                   help="only load (or top up, with --reuse) this label's groups and keep them; a later --reuse run measures")
    p.add_argument("--clear-statuses", action="store_true",
                   help="with --reuse: take every group's status away before the start, so that it is a first start's")
    p.add_argument("--operator-args", default="", metavar="ARGS",
                   help="more arguments for both operators (one string, split as a shell would), e.g. '--status-qps 50'")
    p.add_argument("--seed", type=int, default=27)
    p.add_argument("--push", action="store_true",
                   help="pushed deltas (P12): a push key for the operators and a push listener on each resolver")
    p.add_argument("--early", type=float, default=0, metavar="SECONDS",
                   help="also flip during the first SECONDS after the operators start (from every group "
                        "answered on) and after the takeover (issue #44: a leader's first minute)")
    p.add_argument("--early-from-answered", action="store_true",
                   help="count the start's --early window from every group answered, not from the operators' start "
                        "(at 100,000 groups the start itself takes most of a minute)")
    p.add_argument("--hold", type=float, default=0, metavar="SECONDS",
                   help="after the RSS is measured, keep every process running this long (pids printed) to inspect them")
    args = p.parse_args()
    if args.pool:
        pool(args.pool)
        return
    if not args.groups:
        p.error("--groups is required")
    if not args.kubeconfig:
        stand_in(args.groups, args.flips)
        return
    n = args.groups
    checks = args.checks if args.checks is not None else min(20, n // 20)
    slug = re.sub(r"[^a-z0-9-]", "-", args.label.lower()).strip("-")[:40] or "run"
    data_ns, hr_ns = f"scale-{slug}-data", f"scale-{slug}-hr"
    rng = random.Random(args.seed)

    tmp = tempfile.mkdtemp(prefix="hr-scale-")
    kube = Kube(args.kubeconfig, tmp)
    if not kube.ready():
        sys.exit(f"the API server of {args.kubeconfig} is not ready (/readyz)")
    if args.cleanup:
        for ns in (data_ns, hr_ns):
            if kube.exists(f"/api/v1/namespaces/{ns}"):
                unload_listed(kube, ns, args.workers)
        left = delete_namespaces(kube, [data_ns, hr_ns], 300)
        sys.exit(f"still deleting: {', '.join(left)}" if left else 0)
    op_bin, res_bin = binaries(args)
    SAMPLES.update(path=args.samples, run={"label": args.label, "groups": args.groups, "operator": op_bin,
                                           "resolver": res_bin, "operator_args": args.operator_args or ""})
    env = child_env(args.kubeconfig)
    procs = []
    rows = []
    extra = []
    loads = [os.getloadavg()[0]]
    loaded = False
    stopped = False

    def report():
        # Printed before the cleanup, which takes minutes at 100,000 groups.
        print(f"\n### {args.label}: {n} groups, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
        print(f"`{' '.join(sys.argv)}`; operator {op_bin}, resolver {res_bin}; "
              f"1-minute load average at the start, before and after the flips: {' / '.join(f'{x:.1f}' for x in loads)} "
              f"({os.cpu_count()} CPUs)\n")
        print("| what | figure |\n| --- | --- |")
        for what, fig in rows:
            print(f"| {what} | {fig} |")
        for e in extra:
            print(f"\n{e}")
        sys.stdout.flush()

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    def watchdog():
        # The machine is shared: our four processes go before the API server would.
        while True:
            time.sleep(1)
            if mem_available_mib() < 1536:
                log("under 1.5 GiB of memory available: stopping the operators and resolvers")
                for proc in procs:
                    proc.kill()
                os.kill(os.getpid(), signal.SIGTERM)
                return
    threading.Thread(target=watchdog, daemon=True).start()

    try:
        ensure_crds(kube)
        target = TcpTarget()
        have = count_groups(kube, data_ns) if args.reuse else None
        if have is None:
            fresh_namespaces(kube, [data_ns, hr_ns], args.workers)
            log(f"loading {n} groups ({sum(has_service(i, n) for i in range(n))} over Services, {checks} checks) into {data_ns}")
            loaded = True
            load_s, count = load(kube, data_ns, n, checks, target.port, args.workers)
            rows.append(("load (objects, parallel creates)", f"{load_s:.1f} s ({count} objects, {count / load_s:.0f}/s, {args.workers} workers)"))
            log(f"loaded in {load_s:.1f} s")
        else:
            fresh_namespaces(kube, [hr_ns], args.workers)
            if have != n:
                # What an interrupted run's deletion took away is created again (the rest
                # answers 409, counted as created).
                log(f"{data_ns} holds {have} of {n} groups: creating what is missing")
                took, _ = load(kube, data_ns, n, checks, target.port, args.workers)
                rows.append(("top-up of a reused namespace", f"{took:.1f} s ({n - have} groups were missing)"))
            for k in range(checks):  # they named the earlier run's listener
                kube.json_patch(f"{GROUP_API}/namespaces/{data_ns}/healthchecks/hc{k}",
                                [{"op": "replace", "path": "/spec/target/port", "value": target.port}])
            loaded = True
            if args.clear_statuses:
                took, count = clear_statuses(kube, data_ns, n, args.workers)
                rows.append(("load", f"reused {data_ns}, every status taken away ({count} in {took:.0f} s): a first start"))
            else:
                rows.append(("load", f"reused {data_ns} (an earlier run's statuses and flips are in it)"))
            log(f"reusing the {n} groups in {data_ns}")
        if args.load_only:
            args.keep = True
            return

        push_args = []
        if args.push:
            key_file = os.path.join(tmp, "push.key")
            with open(os.open(key_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(os.urandom(32).hex() + "\n")
            push_args = ["--push-key-file", key_file]
        resolvers = []
        for name, zone in (("resolver-a", "zone-a"), ("resolver-b", "zone-b")):
            dport, aport = free_port(), free_port()
            pushing = ["--push-listen", f"127.0.0.1:{free_port()}"] + push_args if push_args else []
            resolvers.append(Proc(name, [res_bin, "--zone", ZONE, "--listen", f"127.0.0.1:{dport}",
                                         "--admin-listen", f"127.0.0.1:{aport}", "--table-namespace", hr_ns,
                                         "--checker-name", name, "--zone-name", zone, "--checker-allow", "127.0.0.0/8",
                                         "--table-file", os.path.join(tmp, f"{name}.table.json"),
                                         "--shutdown-drain", "0", "--log-format", "json"] + pushing,
                                  env, tmp, aport, dport))
        operators = []
        for name in ("operator-0", "operator-1"):
            aport = free_port()
            operators.append(Proc(name, [op_bin, "--zone", ZONE, "--namespace", hr_ns, "--watch-namespace", data_ns,
                                         "--identity", name, "--lease-duration", str(args.lease_duration),
                                         "--admin-listen", f"127.0.0.1:{aport}", "--log-format", "json"] + push_args
                                  + shlex.split(args.operator_args),
                                  env, tmp, aport))
        procs.extend(resolvers + operators)
        for r in resolvers:
            r.start()
        dns = [Dns(r.dns_port) for r in resolvers]
        # The resolvers first, until they answer at all (REFUSED for a name outside the zone).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and all(r.alive() for r in resolvers) \
                and not all(d.ask("probe.invalid", timeout=0.1) for d in dns):
            time.sleep(0.05)
        # A resolver that exited (its port taken between the pick and the bind) would leave
        # the start waiting for answers until its timeout.
        dead = [r.name for r in resolvers if not r.alive()]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited at start; see the logs in {tmp}")

        t0, wall0 = time.monotonic(), time.time()
        for o in operators:
            o.start()
        listed = watch_ready(operators, t0 + args.start_timeout)
        t_sample, t_all, swept, late = startup(dns, n, t0, t0 + args.start_timeout)
        rows.append(("operator start → every group answered by both resolvers",
                     f"{fmt_s(t_all)} (a sample of {len(sample_of(n))} names at {fmt_s(t_sample)}; "
                     f"{late} names unanswered in the sweep that followed)"))
        log(f"started: sample {fmt_s(t_sample)}, all {fmt_s(t_all)}")
        if t_all is None:
            raise RuntimeError("not every group was answered; see the logs in " + tmp)
        # An operator that exited at start (its admin port taken between the pick and the
        # bind) would leave a run without a standby: no takeover, a start not like the others.
        dead = [o.name for o in operators if not o.alive()]
        if dead:
            raise RuntimeError(f"{', '.join(dead)} exited at start; see the logs in {tmp}")

        holder = lease_holder(kube, hr_ns)
        leader = next((o for o in operators if o.name == holder), operators[0])
        standby = next(o for o in operators if o is not leader)
        m = leader.metrics()

        def pids_now():
            # Where a window's CPU goes: the cluster's two busiest processes and ours.
            out = {c: cluster_pid(args.cluster_dir, c) for c in ("kube-apiserver", "etcd")}
            for role, proc in (("leader", leader), ("standby", standby)):
                if proc.alive():
                    out[role] = proc.popen.pid
            for r in resolvers:
                out[r.name] = r.popen.pid
            out["this script"] = os.getpid()
            return out
        if args.early:
            what, origin = (("every group answered", t0 + t_all) if args.early_from_answered
                             else ("the operators' start", t0))
            early_flips(rows, what, kube, data_ns, hr_ns, dns, n, rng, leader, origin, args.early, pids_now(),
                        args.etcd_metrics)
        extra.append(f"leader up to every group answered: {msum(m, 'healthroute_operator_compile_seconds_total'):.2f} s compiling, "
                     f"{msum(m, 'healthroute_operator_publish_seconds_total'):.2f} s publishing "
                     f"({msum(m, 'healthroute_operator_compiles_total'):.0f} compiles, "
                     f"{msum(m, 'healthroute_operator_table_shards'):.0f} shards); the rest of the start is lists and the election")
        led = led_at(leader, wall0 - 1)
        steps = [f"{o.name} listed everything (ready) at {fmt_s(listed[o.name] - t0) if o.name in listed else 'n/a'}"
                 for o in (leader, standby)]
        if led is not None:
            steps.append(f"the leader logged its lead at {fmt_s(led - wall0)}")
        extra.append("the start, from the operators' start: " + "; ".join(steps)
                     + f"; every group answered by both resolvers at {fmt_s(t_all)}")
        # Counted from every group answered, the start's flips (--early) included.
        since_answered = time.monotonic() - (t0 + t_all)
        settled, writes, now_leading = settle(operators, args.settle_max)
        if settled is not None:
            settled += since_answered
        rows.append(("status writes stop (after all groups answered)",
                     f"{fmt_s(settled)} ({writes:.0f} writes)" if writes is not None else "n/a"))
        log(f"status settled after {fmt_s(settled)} ({writes} writes)")
        if now_leading is not None and now_leading is not leader:
            leader, standby = now_leading, leader

        loads.append(os.getloadavg()[0])
        before, etcd_before = leader.metrics(), scrape(args.etcd_metrics)
        steady_cpu = CpuShare(pids_now())
        api_before = apiserver_metrics(kube)
        wall_steady = time.time()
        each = []
        both, rtt, timeouts, stages = flips(kube, data_ns, hr_ns, dns, n, args.flips, rng, resolvers, each=each)
        steady_cpu_row = steady_cpu.row()
        steady_api = api_rows(api_before, apiserver_metrics(kube))
        after, etcd_after = leader.metrics(), scrape(args.etcd_metrics)
        loads.append(os.getloadavg()[0])
        keep_samples("steady", both)
        rows.append((f"EndpointSlice flip → both resolvers answer ({len(both)} flips, {timeouts} over 30 s)", fmt_ms(both)))
        rows.append(("  of which the PATCH round trip", fmt_ms(rtt)))
        for what, xs in stages.items():
            if xs:
                rows.append((f"  {what} ({len(xs)} flips)", fmt_ms(xs)))
        rows.extend(fold_rows(each))
        rows.append((f"  CPU seconds a second meanwhile ({os.cpu_count()} CPUs in all)", steady_cpu_row))
        rows.extend(steady_api)
        rows.append(compactions(etcd_before, etcd_after, wall_steady))
        # Each flip is two etcd commits in a row (the PATCH, then the operator's delta), and
        # a commit waits for etcd's WAL fsync: the floor this machine's disk sets.
        for what, family in (("WAL fsync", "etcd_disk_wal_fsync_duration_seconds"),
                             ("backend commit", "etcd_disk_backend_commit_duration_seconds")):
            count, cum = histogram_between(etcd_before, etcd_after, family)
            if count:
                rows.append((f"  etcd {what} during the flips, p50 / p99 (bucket bounds)",
                             f"{fmt_bound(histogram_quantile(cum, 0.5))} / "
                             f"{fmt_bound(histogram_quantile(cum, 0.99))} ({count:.0f})"))

        def delta(name):
            return msum(after, name) - msum(before, name)
        if args.push:
            def pushes(m):
                family = "healthroute_resolver_pushed_deltas_total"
                served = m.get(family + '{result="served"}', 0)
                waited = m.get(family + '{result="waited"}', 0)
                return f"{served:.0f} / {waited:.0f} / {msum(m, family) - served - waited:.0f}"
            rows.append(("pushed deltas at resolver-a / resolver-b: served / left to the watch / refused",
                         " ; ".join(pushes(r.metrics()) for r in resolvers)))
        if args.flips:
            extra.append(f"leader during the flips, per flip: {delta('healthroute_operator_compiles_total') / args.flips:.2f} compiles, "
                         f"{delta('healthroute_operator_compile_seconds_total') / args.flips * 1000:.1f} ms compiling, "
                         f"{delta('healthroute_operator_publish_seconds_total') / args.flips * 1000:.1f} ms publishing, "
                         f"{delta('healthroute_operator_shards_written_total') / args.flips:.2f} shards written; "
                         f"table shards {msum(after, 'healthroute_operator_table_shards'):.0f}; "
                         f"{delta('healthroute_operator_groups_recompiled_total') / args.flips:.2f} groups recompiled, "
                         f"{delta('healthroute_operator_events_total') / args.flips:.2f} events handled")

        rss = {o.name: rss_mib(o.popen.pid) for o in operators}
        rss.update({r.name: rss_mib(r.popen.pid) for r in resolvers})
        rows.append(("RSS operator leader / standby / resolver-a / resolver-b (MiB)",
                     " / ".join(mib(rss[x]) for x in (leader.name, standby.name, "resolver-a", "resolver-b"))))
        rows.append(("peak RSS (VmHWM) operator leader / standby: the start included (MiB)",
                     " / ".join(mib(rss_mib(o.popen.pid, "VmHWM")) for o in (leader, standby))))
        rows.append(("resolver-a / resolver-b: RSS, of it anonymous + file-backed (MiB, to 0.1)",
                     " / ".join(f"{rss_mib(r.popen.pid) or 0:.1f} = {rss_mib(r.popen.pid, 'RssAnon') or 0:.1f} + "
                                f"{rss_mib(r.popen.pid, 'RssFile') or 0:.1f}" for r in resolvers)))
        cp = {c: cluster_pid(args.cluster_dir, c) for c in ("kube-apiserver", "etcd")}
        if all(cp.values()):
            rows.append(("RSS kube-apiserver / etcd (MiB)", " / ".join(mib(rss_mib(cp[c])) for c in cp)))
        if args.hold:
            log(f"holding {args.hold:.0f} s as measured: leader {leader.name} pid {leader.popen.pid}, standby "
                f"{standby.name} pid {standby.popen.pid}, " + ", ".join(f"{r.name} pid {r.popen.pid}" for r in resolvers))
            time.sleep(args.hold)

        wins = sum(len(leadership(o)) for o in operators)
        rows.append(("leadership taken before the takeover (1 = no unplanned change)", str(wins)))

        # Takeover: the leader dies; an edit made at once is served by the new leader.
        edits = [n - 1, n - 2] if n >= 2 else []
        if edits:
            i = edits[0]
            # The leader as the Lease names it now (it may have changed since the flips).
            holder = lease_holder(kube, hr_ns)
            if holder in (leader.name, standby.name) and holder != leader.name:
                leader, standby = standby, leader
            wall = time.time()
            t0 = time.monotonic()
            leader.kill()
            leader.popen.wait(timeout=10)
            value = fresh_value()
            edit_static(kube, data_ns, i, value)
            seen = wait_both(dns, dns_name(i), [value], t0 + 3 * args.lease_duration + 60, interval=0.01)
            took = max(seen.values()) - t0 if len(seen) == len(dns) else None
            led = led_at(standby, wall)
            lead = f"; the standby led after {led - wall:.2f} s (its log)" if led else ""
            rows.append((f"leader SIGKILL → an edit served (lease {args.lease_duration} s)", f"{fmt_s(took)}{lead}"))
            log(f"takeover {fmt_s(took)}")
            if args.early:
                early_flips(rows, "the takeover (the SIGKILL)", kube, data_ns, hr_ns, dns, n, rng, standby, t0,
                            args.early, {("new leader" if k == "standby" else k): v
                                         for k, v in pids_now().items() if k != "leader"}, args.etcd_metrics)
            # Back as the standby; what follows starts once it has listed everything.
            leader.start()
            ready = leader.wait_ready(args.start_timeout)
            extra.append(f"the killed operator, started again, was ready (listed everything) after {fmt_s(ready)}")
            leader, standby = standby, leader

        if args.apiserver_restart is not None and len(edits) > 1:
            rows.append(apiserver_restart(kube, args, dns, data_ns, edits[1]))
    except KeyboardInterrupt:
        log("interrupted")
        stopped = True
    except (ApiError, RuntimeError) as e:
        log(f"stopped: {e}")
        stopped = True
    finally:
        for proc in procs:
            proc.stop()
        report()
        log(f"logs in {tmp}")
        if args.keep:
            log(f"kept {data_ns} and {hr_ns}: --reuse measures on them again, --cleanup deletes them")
        else:
            try:
                if loaded:
                    took, count = unload(kube, data_ns, n, checks, args.workers)
                    log(f"deleted {count} objects in {took:.0f} s")
                left = delete_namespaces(kube, [data_ns, hr_ns], 120)
                if left:
                    log(f"still deleting: {', '.join(left)} (the namespace controller goes on)")
            except ApiError as e:
                log(f"could not delete the namespaces: {e}")
    # A run stopped short reports what it measured, and fails.
    return 1 if stopped else 0


def apiserver_restart(kube, args, dns, ns, i):
    """SIGTERM the API server, wait, start it with up.sh; from /readyz ok, an edit served."""
    pid = cluster_pid(args.cluster_dir, "kube-apiserver")
    up = os.path.join(args.cluster_scripts, "up.sh")
    what = f"API server back after {args.apiserver_restart:.0f} s → an edit served"
    if pid is None or not os.path.exists(up):
        return what, f"n/a (no kube-apiserver pid file under {args.cluster_dir}, or no {up})"
    log(f"stopping the API server (pid {pid}) for {args.apiserver_restart:.0f} s")
    t_stop = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(max(0.0, t_stop + args.apiserver_restart - time.monotonic()))
    upsh = subprocess.Popen(["bash", up], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not kube.ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    t0 = time.monotonic()
    down = t0 - t_stop
    value = fresh_value()
    edit_static(kube, ns, i, value)
    seen = wait_both(dns, dns_name(i), [value], t0 + 120, interval=0.01)
    try:
        upsh.wait(timeout=120)  # it goes on to check the controllers' health
    except subprocess.TimeoutExpired:
        upsh.kill()
    took = max(seen.values()) - t0 if len(seen) == len(dns) else None
    log(f"API server restart: edit served {fmt_s(took)} after /readyz (down {down:.1f} s)")
    return what, f"{fmt_s(took)} (down {down:.1f} s in all)"


if __name__ == "__main__":
    sys.exit(main())
