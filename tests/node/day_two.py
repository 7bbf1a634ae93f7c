#!/usr/bin/env python3
"""Day two on a real node: the chart's pods through rollouts, leader handovers, key rotations
and uninstall, measured as a user would see them, each figure printed beside its goal (#42).

Needs the loopback control plane and its node (../shared/cluster/up.sh, node/node-up.sh) and
is run by hand: CI has no node.

    python3 tests/node/day_two.py                      # builds the image, then everything
    python3 tests/node/day_two.py --image-archive /tmp/healthroute.tar   # a built image
    python3 tests/node/day_two.py --only flip,rollouts # some of the phases

What it does: imports the image into the node's containerd, applies the CRDs, installs the
chart with the real Helm library (helm-python-sdk) into namespace `hr-day2` with user values
only (a zone, a fixed ClusterIP, IfNotPresent), runs backends in `day2-app` (busybox pods whose
exec readiness probe reads a file), then the phases below, then uninstalls and lists what is
left. Queries go from this host to the resolver Service's ClusterIP, through kube-proxy, as a
pod's would. Every wait and every load loop is bounded in count and time.

Phases (each prints `figure ... goal ... ok|MISSED`):
  flip       a backend turns unready / ready again -> its IP leaves / returns to the answer
  rollouts   5 resolver rollouts, 2 operator rollouts and a helm upgrade with changed values,
             under >= 100 q/s from a new-socket client and a one-socket client
  leader     the leader pod deleted, then the operator scaled 2 -> 1: an edit is served
  keys       the push key Secret changed; a peer's TSIG key rotated (X1's three steps)
  dnssec     the zone signed with a Secret's key, validated by delv through the Service; the
             Secret's key replaced: every pod signs with the new one without a restart
  resources  the pods' memory and CPU as the kubelet reports them, beside their requests
  uninstall  helm uninstall, then every kind healthroute makes at runtime, listed
"""

import argparse
import base64
import json
import os
import secrets
import socket
import subprocess
import sys
import threading
import time

import dns.flags
import dns.message
import dns.rcode
import dns.rdatatype

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
CHART = os.path.join(REPO, "charts", "healthroute")
NS = "hr-day2"
APP = "day2-app"
RELEASE = "hr"
ZONE = "day2.example"
CLUSTER_IP = "10.96.53.53"
# The exchange Service's ClusterIP, known once it is installed (`values` names it in `peers`).
EXCHANGE = {"ip": "127.0.0.1"}
NODE_DIR = os.environ.get("HR_NODE_DIR", os.path.expanduser("~/hr-node"))
KUBECONFIG = os.environ.get("KUBECONFIG", os.path.expanduser("~/hr-cluster/kubeconfig"))
os.environ["KUBECONFIG"] = KUBECONFIG

RESULTS = []


def figure(name, value, goal, ok):
    """Prints one measured figure beside its goal, and keeps it for the summary."""
    line = f"figure  {name}: {value}  (goal: {goal})  {'ok' if ok else 'MISSED'}"
    print(line, flush=True)
    RESULTS.append((name, value, goal, ok))


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def kubectl(*args, check=True, input=None, timeout=120):
    out = subprocess.run(
        ["kubectl", *args],
        capture_output=True,
        text=True,
        input=input,
        timeout=timeout,
    )
    if check and out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr.strip()}")
    return out.stdout


def kjson(*args):
    return json.loads(kubectl(*args, "-o", "json"))


def apply(manifest):
    kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=manifest)


def wait_until(what, predicate, timeout, interval=0.05):
    """Polls `predicate` until it returns a true value; returns (value, seconds) or raises."""
    start = time.monotonic()
    while True:
        value = predicate()
        if value:
            return value, time.monotonic() - start
        if time.monotonic() - start > timeout:
            raise TimeoutError(f"{what}: not within {timeout} s")
        time.sleep(interval)


# --- DNS ---------------------------------------------------------------------------------


def ask(name, server=CLUSTER_IP, timeout=1.0, sock=None):
    """One A query over UDP; returns (rcode, set of addresses), or None when no answer came."""
    q = dns.message.make_query(name, "A")
    own = sock is None
    s = sock or socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.settimeout(timeout)
        s.sendto(q.to_wire(), (server, 53))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            s.settimeout(left)
            try:
                data, _ = s.recvfrom(4096)
            except socket.timeout:
                return None
            r = dns.message.from_wire(data)
            if r.id != q.id:
                continue  # a late answer to an earlier query on this socket
            addrs = {
                rd.address
                for rrset in r.answer
                if rrset.rdtype == dns.rdatatype.A
                for rd in rrset
            }
            return r.rcode(), addrs
    finally:
        if own:
            s.close()


class Load:
    """Two clients at `rate` q/s each until stopped: one opens a socket per query (as a stub
    resolver does), one keeps a single socket (as CoreDNS's forward does, so kube-proxy's UDP
    flow sticks to one resolver pod). Every answer is judged by `valid`."""

    def __init__(self, name, valid, rate=110):
        self.name, self.valid, self.rate = name, valid, rate
        self.stop = threading.Event()
        self.counts = {}
        # When each query went unanswered (wall clock), by client: set beside the log's
        # phases, it says which step lost it.
        self.lost_at = {}
        self.lock = threading.Lock()
        self.threads = [
            threading.Thread(target=self.run, args=(kind,), daemon=True)
            for kind in ("new-socket", "one-socket")
        ]

    def count(self, kind, what):
        with self.lock:
            c = self.counts.setdefault(kind, {"sent": 0, "lost": 0, "servfail": 0, "wrong": 0})
            c[what] += 1

    def run(self, kind):
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM) if kind == "one-socket" else None
        period = 1.0 / self.rate
        next_at = time.monotonic()
        # Bounded: at most an hour of queries, whatever happens to `stop`.
        for _ in range(self.rate * 3600):
            if self.stop.is_set():
                break
            self.count(kind, "sent")
            sent = time.strftime("%H:%M:%S")
            answer = ask(self.name, sock=sock, timeout=1.0)
            if answer is None:
                self.count(kind, "lost")
                with self.lock:
                    self.lost_at.setdefault(kind, []).append(sent)
            elif answer[0] == dns.rcode.SERVFAIL:
                self.count(kind, "servfail")
            elif answer[0] != dns.rcode.NOERROR or not self.valid(answer[1]):
                self.count(kind, "wrong")
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = time.monotonic()
        if sock:
            sock.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)


# --- set-up ------------------------------------------------------------------------------


def version():
    with open(os.path.join(REPO, "Cargo.toml")) as f:
        for line in f:
            if line.startswith("version = "):
                return line.split('"')[1]
    raise RuntimeError("no version in Cargo.toml")


def import_image(archive):
    if not archive:
        archive = "/tmp/healthroute-day2.tar"
        log("building the image (images/build.sh; a release build)")
        subprocess.run(
            ["bash", "images/build.sh"],
            cwd=REPO,
            env={**os.environ, "OCI_ARCHIVE": archive},
            check=True,
        )
    log(f"importing {archive} into the node's containerd")
    subprocess.run(
        ["ctr", "-a", f"{NODE_DIR}/run/containerd.sock", "-n", "k8s.io", "images", "import", archive],
        check=True,
        capture_output=True,
    )


def values(**overrides):
    """The user's values: zones (signed, K1: its key in a Secret), a fixed ClusterIP,
    IfNotPresent, the key Secrets; nothing else."""
    v = {
        "zones": [{"name": ZONE, "dnssec": {"keys": [{"secretName": "day2-dnssec", "secretKey": "csk.pem"}]}}],
        "image": {"pullPolicy": "IfNotPresent", "tag": version()},
        "resolver": {"service": {"clusterIP": CLUSTER_IP}},
        "push": {"existingSecret": "day2-push"},
        "peers": [
            {
                # This cluster is its own peer: the exchange is real (TSIG over the Service),
                # and a key rotated in one Secret must be taken by both sides of it.
                "name": "self",
                "addresses": [f"{EXCHANGE['ip']}:5300"],
                "keys": [
                    {"name": "day2-a.", "secretName": "day2-peer", "secretKey": "a"},
                ],
            }
        ],
    }
    for key, value in overrides.items():
        v[key] = value
    return v


def helm():
    import helm_python

    return helm_python, helm_python.Config(kubeconfig_path=KUBECONFIG, namespace=NS)


def secret(name, data):
    """Creates or replaces Secret `name` in the release namespace with exactly `data`."""
    manifest = kubectl("-n", NS, "create", "secret", "generic", name, "--dry-run=client",
                       "-o", "yaml", *[f"--from-literal={k}={v}" for k, v in data.items()])
    apply(manifest)


BACKENDS = f"""
apiVersion: v1
kind: Namespace
metadata: {{name: {APP}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {APP}}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: web
        image: localhost/hr-node/busybox:1
        imagePullPolicy: Never
        command: ["sh", "-c", "touch /tmp/ready && exec sleep 100000"]
        readinessProbe:
          exec: {{command: ["test", "-f", "/tmp/ready"]}}
          periodSeconds: 1
          failureThreshold: 1
        resources:
          requests: {{cpu: 5m, memory: 8Mi}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: {APP}}}
spec:
  selector: {{app: web}}
  ports: [{{port: 80, name: http}}]
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: web, namespace: {APP}}}
spec:
  name: web.{ZONE}.
  type: A
  routingPolicy: Simple
  records:
    - setIdentifier: pods
      service: {{name: web}}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: edit, namespace: {APP}}}
spec:
  name: edit.{ZONE}.
  type: A
  routingPolicy: Simple
  records:
    - setIdentifier: only
      values: ["192.0.2.1"]
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: across, namespace: {APP}}}
spec:
  name: across.{ZONE}.
  type: A
  routingPolicy: Failover
  records:
    - setIdentifier: there
      failover: {{role: Primary}}
      peer: {{cluster: self, recordGroup: {APP}/web}}
    - setIdentifier: fallback
      failover: {{role: Secondary}}
      values: ["192.0.2.250"]
"""


def web_pods():
    pods = kjson("-n", APP, "get", "pods", "-l", "app=web")["items"]
    return {p["metadata"]["name"]: p["status"].get("podIP") for p in pods if p["status"].get("podIP")}


def install(archive, skip_image):
    if not skip_image:
        import_image(archive)
    log("CRDs (server-side apply; warnings are printed)")
    out = subprocess.run(["kubectl", "apply", "--server-side", "-f", os.path.join(REPO, "crds")],
                         capture_output=True, text=True)
    warnings = [l for l in out.stderr.splitlines() if "Warning" in l or "unrecognized format" in l]
    figure("CRD apply warnings", len(warnings), "0", not warnings)
    for w in warnings[:5]:
        print("   ", w)
    kubectl("create", "namespace", NS, check=False)
    secret("day2-push", {"push.key": secrets.token_urlsafe(48)})
    secret("day2-peer", {"a": base64.b64encode(secrets.token_bytes(32)).decode()})
    secret("day2-dnssec", {"csk.pem": signing_key()})
    helm_python, cfg = helm()
    chart = helm_python.Chart.load(CHART)
    start = time.monotonic()
    try:
        cfg.status(RELEASE)
        log(f"release {RELEASE} is installed already (--keep): upgrading it")
        exchange_service()
        cfg.upgrade(chart, RELEASE, values(), namespace=NS, timeout=300)
    except helm_python.HelmError:
        cfg.install(chart, RELEASE, values(), namespace=NS, timeout=300)
    # The peer is this cluster's own exchange Service: its address is known only now.
    if exchange_service():
        cfg.upgrade(chart, RELEASE, values(), namespace=NS, timeout=300)
    for d in ("resolver", "operator"):
        kubectl("-n", NS, "rollout", "status", f"deploy/{deployment(d)}", "--timeout=180s",
                timeout=200)
        figure(f"install: {d} ready after", f"{time.monotonic() - start:.1f} s", "< 60 s",
               time.monotonic() - start < 60)
    # An upgrade's old pods drain for a while after the rollout is done: the phases start
    # when only the new ones are left.
    wait_until("the old pods gone", lambda: len(kjson("-n", NS, "get", "pods")["items"]) == len(serving_pods()),
               timeout=120, interval=1)
    apply(BACKENDS)
    kubectl("-n", APP, "rollout", "status", "deploy/web", "--timeout=120s", timeout=150)
    ips, took = wait_until(
        "the web pods answer",
        lambda: (lambda a, pods: a and a[1] == set(pods.values()) and a[1])(ask(f"web.{ZONE}"), web_pods()),
        timeout=60,
    )
    log(f"installed; web.{ZONE} answers {sorted(ips)} ({took:.1f} s after the backends were ready)")


def exchange_service():
    """Learns the exchange Service's ClusterIP; says whether it was not known before."""
    svc = [s for s in kjson("-n", NS, "get", "svc")["items"] if s["metadata"]["name"].endswith("-exchange")]
    before = EXCHANGE["ip"]
    EXCHANGE["ip"] = svc[0]["spec"]["clusterIP"]
    return EXCHANGE["ip"] != before


def deployment(kind):
    items = kjson("-n", NS, "get", "deploy")["items"]
    for d in items:
        if d["metadata"]["name"].endswith(kind):
            return d["metadata"]["name"]
    raise RuntimeError(f"no {kind} Deployment in {NS}: {[d['metadata']['name'] for d in items]}")


# --- phases ------------------------------------------------------------------------------


def phase_flip():
    """A backend turns unready (exec probe, period 1 s, failureThreshold 1): its IP leaves the
    answer within the probe's own detection + 1 s; back likewise."""
    pods = web_pods()
    name, ip = sorted(pods.items())[0]
    detection = 1 * 1  # periodSeconds x failureThreshold of the backends' probe
    for direction, cmd, wanted in (
        ("leaves", ["rm", "-f", "/tmp/ready"], lambda a: a and ip not in a[1] and a[1]),
        ("returns", ["touch", "/tmp/ready"], lambda a: a and ip in a[1]),
    ):
        t0 = time.monotonic()
        kubectl("-n", APP, "exec", name, "--", *cmd)
        wait_until(f"{ip} {direction}", lambda: wanted(ask(f"web.{ZONE}")), timeout=30)
        took = time.monotonic() - t0  # from the exec's start, the exec's own time included
        figure(f"flip: unready backend's IP {direction} the answer", f"{took:.2f} s",
               f"<= probe detection {detection} s + 1 s", took <= detection + 1)


def rollout(kind):
    dep = deployment(kind)
    kubectl("-n", NS, "rollout", "restart", f"deploy/{dep}")
    kubectl("-n", NS, "rollout", "status", f"deploy/{dep}", "--timeout=300s", timeout=320)


def phase_rollouts():
    ips = set(web_pods().values())
    valid = lambda got: bool(got) and got <= ips  # noqa: E731
    with Load(f"web.{ZONE}", valid) as load:
        time.sleep(3)
        for i in range(5):
            log(f"resolver rollout {i + 1}/5")
            rollout("resolver")
            time.sleep(2)
        for i in range(2):
            log(f"operator rollout {i + 1}/2")
            rollout("operator")
            time.sleep(2)
        log("helm upgrade with changed values (defaultTtl 60 -> 30)")
        helm_python, cfg = helm()
        cfg.upgrade(helm_python.Chart.load(CHART), RELEASE, values(defaultTtl=30), namespace=NS,
                    timeout=300)
        for kind in ("resolver", "operator"):
            kubectl("-n", NS, "rollout", "status", f"deploy/{deployment(kind)}", "--timeout=300s",
                    timeout=320)
        time.sleep(5)
    for kind, c in sorted(load.counts.items()):
        ok = c["lost"] == 0 and c["servfail"] == 0 and c["wrong"] == 0
        when = load.lost_at.get(kind)
        figure(f"rollouts: {kind} client", f"{c['sent']} queries, {c['lost']} lost"
               + (f" (sent at {', '.join(when[:5])})" if when else "")
               + f", {c['servfail']} SERVFAIL, {c['wrong']} wrong", "0 lost, 0 SERVFAIL, 0 wrong", ok)


def leader_pod():
    lease = kjson("-n", NS, "get", "lease", "healthroute-operator")
    return lease["spec"].get("holderIdentity")


def new_leader(old):
    """Waits until a pod other than `old` holds the leader Lease; returns (it, seconds)."""
    return wait_until("a new leader", lambda: (lambda h: h if h and h != old else None)(leader_pod()),
                      timeout=30)


def edit_served(value):
    """Edits the `edit` group to `value` and returns seconds until the resolver answers it."""
    patch = json.dumps({"spec": {"records": [{"setIdentifier": "only", "values": [value]}]}})
    t0 = time.monotonic()
    kubectl("-n", APP, "patch", "recordgroup", "edit", "--type=merge", "-p", patch)
    wait_until(f"edit {value} served", lambda: (lambda a: a and a[1] == {value})(ask(f"edit.{ZONE}")),
               timeout=60)
    return time.monotonic() - t0


def phase_leader():
    holder = leader_pod()
    log(f"leader: {holder}; deleting its pod")
    t0 = time.monotonic()
    kubectl("-n", NS, "delete", "pod", holder, "--wait=false")
    took = edit_served("192.0.2.2")
    figure("leader pod deleted: an edit served after", f"{took:.2f} s", "<= 2 s", took <= 2)
    new, _ = new_leader(holder)
    took = time.monotonic() - t0
    figure("leader pod deleted: another pod leads after", f"{took:.2f} s ({new})",
           "<= 2 s", took <= 2)
    kubectl("-n", NS, "rollout", "status", f"deploy/{deployment('operator')}", "--timeout=120s",
            timeout=150)
    # The leader is the one that leaves: the ReplicaSet removes the cheapest pod first.
    holder = leader_pod()
    kubectl("-n", NS, "annotate", "pod", holder, "controller.kubernetes.io/pod-deletion-cost=-1000")
    log(f"operator scaled 2 -> 1 (the leader {holder} leaves)")
    t0 = time.monotonic()
    kubectl("-n", NS, "scale", f"deploy/{deployment('operator')}", "--replicas=1")
    new, _ = new_leader(holder)
    took = time.monotonic() - t0
    figure("operator scaled 2 -> 1: the other pod leads after", f"{took:.2f} s ({new})",
           "<= 2 s", took <= 2)
    took = edit_served("192.0.2.3")
    figure("operator scaled 2 -> 1: an edit to the new leader served after", f"{took:.2f} s",
           "<= 2 s", took <= 2)
    kubectl("-n", NS, "scale", f"deploy/{deployment('operator')}", "--replicas=2")
    kubectl("-n", NS, "rollout", "status", f"deploy/{deployment('operator')}", "--timeout=120s",
            timeout=150)


def metrics(pod, port):
    raw = kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods/{pod}:{port}/proxy/metrics")
    out = {}
    for line in raw.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, _, val = line.rpartition(" ")
        try:
            out[key] = float(val)
        except ValueError:
            pass
    return out


def serving_pods():
    """The release's pods that run and are not on their way out (a rollout's old pods drain)."""
    return [p for p in kjson("-n", NS, "get", "pods")["items"]
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def pods_of(kind):
    return [p["metadata"]["name"] for p in serving_pods() if kind in p["metadata"]["name"]]


def summed(kind, port, prefix):
    total = {}
    for pod in pods_of(kind):
        for k, v in metrics(pod, port).items():
            if k.startswith(prefix):
                total[k] = total.get(k, 0) + v
    return total


def restarts():
    return {p["metadata"]["name"]: sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses", []))
            for p in serving_pods()}


def phase_keys():
    before_pods = restarts()
    refused = lambda: sum(v for k, v in summed("operator", 9090, "healthroute_operator_pushed_deltas_total").items()  # noqa: E731
                          if 'result="refused"' in k)
    bad = lambda: sum(v for k, v in summed("resolver", 9153, "healthroute_resolver_pushed_deltas_total").items()  # noqa: E731
                      if 'bad_signature' in k)
    r0, b0 = refused(), bad()
    log("push key rotated in its Secret")
    secret("day2-push", {"push.key": secrets.token_urlsafe(48)})
    # Pushes go on while the kubelet brings the Secret to each pod (its sync period, about a
    # minute, plus its cache): an edit every second or so until every pod says it took the
    # new key (a binary that never reads the file again refuses nothing either, and keeps the
    # old key for good), at most 240 s; each edit must be served.
    pods = pods_of("operator") + pods_of("resolver")
    took = []
    worst = 0.0
    start = time.monotonic()
    for i in range(240):
        worst = max(worst, edit_served(f"192.0.2.{10 + i % 200}"))
        if i % 10 == 9:
            took = [p for p in pods if "the push key changed" in kubectl("-n", NS, "logs", p, check=False)]
            if len(took) == len(pods):
                break
        if time.monotonic() - start > 240:
            break
        time.sleep(0.8)
    spent = time.monotonic() - start
    r1, b1 = refused(), bad()
    same_pods = restarts() == before_pods
    figure("push key rotated: refused pushes (operator) / bad signatures (resolvers)",
           f"{int(r1 - r0)} / {int(b1 - b0)}; pods that took the new key {len(took)} of {len(pods)} "
           f"within {spent:.0f} s; slowest edit {worst:.2f} s; pods restarted: {not same_pods}",
           "0 / 0, every pod takes it, no restart",
           r1 == r0 and b1 == b0 and same_pods and len(took) == len(pods))
    log("peer TSIG key rotated: a new secret under the same key name, in the Secret only")
    before_pods = restarts()
    exch = lambda: summed("resolver", 9153, "healthroute_exchange_queries_total")  # noqa: E731
    e0 = exch()
    secret("day2-peer", {"a": base64.b64encode(secrets.token_bytes(32)).decode()})
    # The peer record must keep answering through its exchange while every pod takes the new
    # secret from its mounted Secret: sampled every 200 ms for 90 s.
    web = set(web_pods().values())
    fell_back = 0
    samples = 0
    for _ in range(450):
        a = ask(f"across.{ZONE}")
        samples += 1
        if not a or a[1] != web:
            fell_back += 1
        time.sleep(0.2)
    e1 = exch()
    delta = {k: e1[k] - e0.get(k, 0) for k in e1}
    refused = {k: v for k, v in delta.items() if 'result="answered"' not in k and v > 0}
    answered = sum(v for k, v in delta.items() if 'result="answered"' in k)
    same_pods = restarts() == before_pods
    reloads = summed("resolver", 9153, "healthroute_peer_key_reloads_total")
    loaded = sum(v for k, v in reloads.items() if 'result="loaded"' in k)
    figure("peer key rotated in its Secret: exchanges refused / answered",
           f"{sum(refused.values()):.0f} {sorted(refused) or ''} / {answered:.0f}; key reloads counted: "
           f"{loaded:.0f}; pods restarted: {not same_pods}",
           "0 refused, no restart", not refused and answered > 0 and same_pods and loaded > 0)
    figure("peer key rotated: the peer record's answer fell back", f"{fell_back} of {samples} samples",
           "0", fell_back == 0)


def signing_key():
    """A new ECDSA P-256 key in PKCS#8 PEM (K1), as `openssl genpkey` writes it."""
    return subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
                          capture_output=True, text=True, check=True).stdout


def dnskeys(server):
    """The DNSKEY RRset a server answers for the zone, as `dig +short` prints it."""
    out = subprocess.run(["dig", "+short", "+time=1", "+tries=2", f"@{server}", ZONE, "DNSKEY"],
                         capture_output=True, text=True).stdout
    return sorted(l for l in out.splitlines() if l.strip())


def validated(dnskey):
    """Whether delv, with `dnskey` as the zone's trust anchor, validates through the Service
    (kube-proxy to any resolver pod) an answer, a name that does not exist and the apex SOA."""
    flags, proto, alg, key = dnskey.split(" ", 3)
    anchor = f"/tmp/day2-anchor-{os.getpid()}.conf"
    with open(anchor, "w") as f:
        f.write(f'trust-anchors {{ {ZONE}. static-key {flags} {proto} {alg} "{key.replace(" ", "")}"; }};\n')
    failed = []
    for name, rtype in ((f"web.{ZONE}", "A"), (f"nope.{ZONE}", "A"), (ZONE, "SOA")):
        out = subprocess.run(["delv", f"@{CLUSTER_IP}", "-a", anchor, f"+root={ZONE}", name, rtype],
                             capture_output=True, text=True, timeout=20)
        if "fully validated" not in out.stdout + out.stderr:
            failed.append(f"{name} {rtype}: {(out.stdout + out.stderr).strip()[:200]}")
    return failed


def phase_dnssec():
    """K1-K5 on the node: the zone signed with the key of a Secret, validated by delv through
    the Service; then the Secret's key replaced: every resolver pod signs with the new key
    without a restart, and delv validates with it."""
    pods = {p["metadata"]["name"]: p["status"]["podIP"] for p in serving_pods() if "resolver" in p["metadata"]["name"]}
    keys = {name: dnskeys(ip) for name, ip in pods.items()}
    first = next(iter(keys.values()))
    figure("dnssec: every resolver pod answers the Secret's DNSKEY", f"{sum(1 for k in keys.values() if k == first and len(k) == 1)} of {len(pods)}",
           "all", len(first) == 1 and all(k == first for k in keys.values()))
    failed = validated(first[0])
    figure("dnssec: delv through the Service (answer, no such name, SOA)", failed or "fully validated", "fully validated", not failed)
    before = restarts()
    log("the DNSSEC key replaced in its Secret")
    secret("day2-dnssec", {"csk.pem": signing_key()})
    start = time.monotonic()
    try:
        _, took = wait_until("every resolver pod signing with the new key",
                             lambda: all(dnskeys(ip) not in ([], first) for ip in pods.values()),
                             timeout=240, interval=1)
    except TimeoutError:
        took = None
    new = dnskeys(next(iter(pods.values())))
    failed = validated(new[0]) if new else ["no DNSKEY"]
    figure("dnssec: a new key in the Secret, taken by every pod without a restart",
           f"after {took:.0f} s; restarted: {restarts() != before}" if took is not None else "not within 240 s",
           "every pod, no restart", took is not None and restarts() == before)
    figure("dnssec: delv with the new key", failed or "fully validated", "fully validated", not failed)


def kubelet_summary():
    """The kubelet's own figures (`/stats/summary`), asked on loopback with the admin's client
    certificate: the API server's node proxy refuses this node's documentation address."""
    import ssl
    import tempfile
    import urllib.request

    import yaml

    with open(KUBECONFIG) as f:
        user = yaml.safe_load(f)["users"][0]["user"]
    with tempfile.TemporaryDirectory() as d:
        crt, key = os.path.join(d, "crt"), os.path.join(d, "key")
        with open(crt, "wb") as f:
            f.write(base64.b64decode(user["client-certificate-data"]))
        with open(key, "wb") as f:
            f.write(base64.b64decode(user["client-key-data"]))
        ctx = ssl.create_default_context()
        # The kubelet's serving certificate is self-signed (no serving CA on this node).
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.load_cert_chain(crt, key)
        with urllib.request.urlopen("https://127.0.0.1:10250/stats/summary", context=ctx, timeout=10) as r:
            return json.load(r)


def phase_resources():
    summary = kubelet_summary()
    requests = {}
    for p in kjson("-n", NS, "get", "pods")["items"]:
        for c in p["spec"]["containers"]:
            requests[p["metadata"]["name"]] = c.get("resources", {}).get("requests", {})
    for pod in summary.get("pods", []):
        ref = pod["podRef"]
        if ref["namespace"] != NS:
            continue
        mem = pod.get("memory", {}).get("workingSetBytes", 0) / 2**20
        cpu = pod.get("cpu", {}).get("usageNanoCores", 0) / 1e6
        req = requests.get(ref["name"], {})
        print(f"figure  resources: {ref['name']}: {mem:.1f} MiB working set, {cpu:.1f} mCPU "
              f"(requests {req.get('memory', '-')}, {req.get('cpu', '-')})", flush=True)


def phase_uninstall():
    helm_python, cfg = helm()
    t0 = time.monotonic()
    cfg.uninstall(RELEASE, timeout=300)
    log(f"helm uninstall returned after {time.monotonic() - t0:.1f} s; waiting for the garbage collector")

    def left():
        found = []
        for kind in ("configmaps", "leases", "secrets"):
            for o in kjson("-n", NS, "get", kind)["items"]:
                n = o["metadata"]["name"]
                if n.startswith("healthroute") or "healthroute" in json.dumps(o["metadata"].get("labels", {})):
                    if n not in ("day2-push", "day2-peer"):
                        found.append(f"{kind}/{n}")
        for kind in ("healthchecks.healthroute.io", "zonalshifts.healthroute.io"):
            for o in kjson("get", kind, "-A")["items"]:
                if o["metadata"].get("ownerReferences") or o["metadata"]["name"].startswith("peer."):
                    found.append(f"{kind}/{o['metadata']['namespace']}/{o['metadata']['name']}")
        return found

    try:
        _, took = wait_until("nothing left", lambda: not left() or None, timeout=60, interval=1)
        figure("uninstall: runtime objects left", f"0 ({took:.0f} s after helm returned)", "0", True)
    except TimeoutError:
        rest = left()
        figure("uninstall: runtime objects left", f"{len(rest)}: {rest[:10]}", "0", False)
    groups = kjson("-n", APP, "get", "recordgroups")["items"]
    served = [g["metadata"]["name"] for g in groups if (g.get("status") or {}).get("served")]
    figure("uninstall: RecordGroups still saying SERVED", f"{len(served)} {served}", "0", not served)


PHASES = {
    "flip": phase_flip,
    "rollouts": phase_rollouts,
    "leader": phase_leader,
    "keys": phase_keys,
    "dnssec": phase_dnssec,
    "resources": phase_resources,
    "uninstall": phase_uninstall,
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--image-archive", help="an OCI archive of the image (default: build one)")
    p.add_argument("--skip-image", action="store_true", help="the node already has the image")
    p.add_argument("--only", default=",".join(PHASES), help="phases, comma-separated")
    p.add_argument("--keep", action="store_true", help="no uninstall at the end (and no cleanup)")
    args = p.parse_args()
    wanted = [x for x in args.only.split(",") if x]
    unknown = [x for x in wanted if x not in PHASES]
    if unknown:
        sys.exit(f"unknown phases {unknown}; known: {', '.join(PHASES)}")
    kubectl("get", "--raw", "/readyz")
    install(args.image_archive, args.skip_image)
    try:
        for name in wanted:
            if name == "uninstall" and args.keep:
                continue
            log(f"--- {name}")
            try:
                PHASES[name]()
            except Exception as e:  # a phase that fails is a figure, and the rest still run
                figure(f"{name}: phase", f"failed: {e}", "completes", False)
    finally:
        if not args.keep:
            # The release's namespace too: Helm never deletes one, and the test made it.
            for ns in (APP, NS):
                kubectl("delete", "namespace", ns, "--wait=false", check=False)
    print("\n--- summary")
    for name, value, goal, ok in RESULTS:
        print(f"{'ok    ' if ok else 'MISSED'}  {name}: {value}  (goal: {goal})")
    missed = sum(1 for r in RESULTS if not r[3])
    print(f"{len(RESULTS) - missed} of {len(RESULTS)} figures meet their goal")
    sys.exit(1 if missed else 0)


if __name__ == "__main__":
    main()
