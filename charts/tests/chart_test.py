#!/usr/bin/env python3
"""Chart tests: lint, render (defaults and every option), validate every manifest against the
Kubernetes schemas of the lowest and highest versions the chart claims, check that
values.schema.json rejects bad values, and that the RBAC rules are exactly the API calls the
binaries make (operator/src/rbac.rs, passed as JSON in argv[1]). Renders are the same every
time (GitOps renders offline: no secret is made at render time), each Deployment's pod
template carries the checksum of every rendered object it reads, and the resolver's drain
outlasts its readiness probe (P9) or the chart does not render.

Run through `cargo test -p healthroute-operator --test chart`, which passes the RBAC lists."""
import base64
import hashlib
import json
import os
import re
import sys

import helm_python
import kubernetes_validate
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
CHART = os.path.join(HERE, "..", "healthroute")
VERSIONS = ["1.33.0", "1.37.0"]
# Every metric the resolver and the operator export (their /metrics renderers), for checking
# the dashboard's and the alerts' queries.
EXPORTED = [
    "healthroute_answers_total", "healthroute_last_resort", "healthroute_last_resort_answers_total",
    "healthroute_zone_affinity_answers_total", "healthroute_dns_queries_total",
    "healthroute_dns_request_duration_seconds", "healthroute_dns_forwarded_total",
    "healthroute_dns_upstream_failures_total", "healthroute_table_generation", "healthroute_table_age_seconds",
    "healthroute_table_loads_total", "healthroute_checker_probes_total", "healthroute_checker_view_flips_total",
    "healthroute_checker_check_probes_total", "healthroute_checker_check_flips_total",
    "healthroute_checker_probe_latency_seconds_sum", "healthroute_checker_probe_latency_seconds_count",
    "healthroute_operator_published_generation", "healthroute_operator_publish_failures_total",
    "healthroute_operator_publish_failing", "healthroute_operator_status_backlog", "healthroute_operator_leader",
    "healthroute_operator_checks_without_checker", "healthroute_operator_zonal_shift_expiry_timestamp_seconds",
    # Zonal autoshift: the operator's leader and standalone mode.
    "healthroute_autoshift_active", "healthroute_practice_runs_total", "healthroute_practice_runs_not_started_total",
]
# Kinds whose schema is not part of Kubernetes itself.
FOREIGN = {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}


def render(values):
    chart = helm_python.Chart.load(CHART)
    try:
        merged = chart.merge_values(values)
        chart.validate_schema(merged)
        out = chart.render(merged, name="hr", namespace="healthroute", is_install=True)
    finally:
        chart.close()
    docs = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                docs.append((path, doc))
    return docs, out


def validate(docs):
    for path, doc in docs:
        if (doc.get("apiVersion"), doc.get("kind")) in FOREIGN:
            continue
        for version in VERSIONS:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as e:
                raise AssertionError(f"{path}: {doc['kind']} invalid for {version}: {e.message}") from e


def rules_of(docs, kind, name):
    for _, doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc["rules"]
    raise AssertionError(f"no {kind} {name}")


def flatten(rules):
    out = set()
    for r in rules:
        for g in r["apiGroups"]:
            for res in r["resources"]:
                out.add((g, res, tuple(sorted(r["verbs"]))))
    return out


def check_rbac(docs, expected):
    for binary in ("operator", "resolver"):
        want_cluster = {(a["api_group"], a["resource"], tuple(sorted(a["verbs"]))) for a in expected[binary] if a["cluster"]}
        want_ns = {(a["api_group"], a["resource"], tuple(sorted(a["verbs"]))) for a in expected[binary] if not a["cluster"]}
        got_cluster = flatten(rules_of(docs, "ClusterRole", f"hr-{binary}"))
        got_ns = flatten(rules_of(docs, "Role", f"hr-{binary}"))
        assert got_cluster == want_cluster, f"{binary} ClusterRole: extra {got_cluster - want_cluster}, missing {want_cluster - got_cluster}"
        assert got_ns == want_ns, f"{binary} Role: extra {got_ns - want_ns}, missing {want_ns - got_ns}"


def check_security(docs):
    for path, doc in docs:
        if doc["kind"] != "Deployment":
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] and sc["readOnlyRootFilesystem"] and not sc["allowPrivilegeEscalation"], path
            assert sc["capabilities"]["drop"] == ["ALL"], path
            assert sc["seccompProfile"]["type"] == "RuntimeDefault", path
            assert set(sc["capabilities"].get("add", [])) <= {"NET_BIND_SERVICE"}, path
            assert c["livenessProbe"]["httpGet"]["path"] == "/livez" and c["readinessProbe"]["httpGet"]["path"] == "/readyz", path
            assert "limits" in c["resources"] and "requests" in c["resources"], path


def check_image(docs):
    """The default image is the one images/build.sh tags: its repository, the workspace's version."""
    root = os.path.join(HERE, "..", "..")
    version = re.search(r'^version = "([^"]+)"', open(os.path.join(root, "Cargo.toml")).read(), re.M).group(1)
    build = open(os.path.join(root, "images", "build.sh")).read()
    repo = re.search(r'image=\$\{IMAGE:-([^:}]+):\$version\}', build).group(1)
    want = f"{repo}:{version}"
    for path, doc in docs:
        if doc["kind"] != "Deployment":
            continue
        for c in doc["spec"]["template"]["spec"]["containers"]:
            assert c["image"] == want, f"{path}: image {c['image']}, but images/build.sh tags {want}"
            assert c["command"][0] in ("/healthroute-operator", "/healthroute-resolver"), path


def check_monitoring(docs):
    """The PrometheusRule carries files/alerts.yaml; the dashboard is valid JSON, labelled for
    Grafana's sidecar, and every query names only metrics the binaries export."""
    rule = next(d for _, d in docs if d["kind"] == "PrometheusRule")
    with open(os.path.join(CHART, "files", "alerts.yaml")) as f:
        assert rule["spec"] == yaml.safe_load(f), "the PrometheusRule is not files/alerts.yaml"
    alerts = [r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert alerts == ["HealthrouteLastResort", "HealthrouteTablePublishFailing", "HealthrouteCheckerQuorumLost",
                      "HealthrouteNoLeader", "HealthrouteZonalShiftExpiringSoon", "HealthrouteAutoshiftActive",
                      "HealthroutePracticeRunFailed"], alerts
    with open(os.path.join(HERE, "..", "..", "docs", "user-guide.md")) as f:
        guide = f.read().lower()
    for a in alerts:
        assert f"### {a.lower()}" in guide, f"no runbook entry for {a} in docs/user-guide.md"
    cm = next(d for _, d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "hr-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1" and cm["metadata"]["namespace"] == "monitoring"
    dash = json.loads(cm["data"]["healthroute.json"])
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    exported = set(EXPORTED)
    for e in exprs:
        for name in re.findall(r"healthroute_[a-z_]+", e):
            base = re.sub(r"_(bucket|sum|count)$", "", name)
            assert name in exported or base in exported, f"{name} (in {e!r}) is not a metric healthroute exports"


def find(docs, kind, name):
    for _, d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    return None


def resolver_config(docs):
    """The resolver's --config file, as the ConfigMap holds it, and the pod spec that mounts it."""
    cm = find(docs, "ConfigMap", "hr-resolver-config")
    assert cm, "no resolver ConfigMap"
    pod = find(docs, "Deployment", "hr-resolver")["spec"]["template"]["spec"]
    return yaml.safe_load(cm["data"]["healthroute.yaml"]), pod


def zone_as_configured(zone):
    """A zone of the values as the resolver's file holds it: a DNSSEC key's Secret key becomes
    the file keys/<Secret>/<key> (K1), the rest as written."""
    if not isinstance(zone, dict) or "dnssec" not in zone:
        return zone
    dnssec = dict(zone["dnssec"])
    dnssec["keys"] = [{"file": f"keys/{k['secretName']}/{k['secretKey']}",
                       **{f: k[f] for f in ("role", "state") if f in k}} for k in dnssec["keys"]]
    return {**zone, "dnssec": dnssec}


def check_resolver_config(docs, values):
    """The resolver reads zones, peers and the exchange from its file; every key file it names
    is an item of the projected volume mounted beside the file."""
    config, pod = resolver_config(docs)
    c = pod["containers"][0]
    assert "--config=/etc/healthroute/healthroute.yaml" in c["args"], c["args"]
    assert not [a for a in c["args"] if a.startswith("--zone")], "zones come from the file"
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert mount["mountPath"] == "/etc/healthroute" and mount["readOnly"], mount
    assert config["zones"] == [zone_as_configured(z) for z in values["zones"]], config
    volume = next(v for v in pod["volumes"] if v["name"] == "config")["projected"]
    files = {}
    for source in volume["sources"]:
        kind, ref = next(iter(source.items()))
        for item in ref["items"]:
            files[item["path"]] = (kind, ref["name"], item["key"])
    assert files["healthroute.yaml"] == ("configMap", "hr-resolver-config", "healthroute.yaml"), files
    peers = values.get("peers") or []
    assert config.get("peers", []) == [
        {"name": p["name"], "addresses": p["addresses"],
         "keys": [{"name": k["name"], "algorithm": k.get("algorithm", "hmac-sha256"),
                   "secretFile": f"keys/{k['secretName']}/{k['secretKey']}"} for k in p["keys"]]}
        for p in peers], config
    for p in peers:
        for k in p["keys"]:
            # secretFile is relative to the file's folder, the mount's root.
            assert files[f"keys/{k['secretName']}/{k['secretKey']}"] == ("secret", k["secretName"], k["secretKey"]), files
    for z in values["zones"]:
        # SEM-K1: a signed zone's keys are files of Secret keys beside the settings.
        for k in (z.get("dnssec") or {}).get("keys", []) if isinstance(z, dict) else []:
            assert files[f"keys/{k['secretName']}/{k['secretKey']}"] == ("secret", k["secretName"], k["secretKey"]), files
    ports = {(p["name"], p["containerPort"], p["protocol"]) for p in c["ports"]}
    exchange = find(docs, "Service", "hr-resolver-exchange")
    if peers:
        port = values["exchange"]["port"]
        assert config["exchange"] == {"listen": f"0.0.0.0:{port}"}, config
        assert {("exchange", port, "UDP"), ("exchange-tcp", port, "TCP")} <= ports, ports
        assert exchange, "no exchange Service"
        assert {(p["port"], p["protocol"]) for p in exchange["spec"]["ports"]} == {(port, "UDP"), (port, "TCP")}
    else:
        assert "exchange" not in config and exchange is None, config
        assert not [p for p in ports if p[0].startswith("exchange")], ports


def check_push(docs, secret):
    """P12: the operator signs pushed deltas with the key in `secret` and every resolver
    takes them on its pod IP with the same key; nothing of it when `secret` is None. The
    chart never makes the key (a key made at render time changes at every offline render),
    and mounts it without subPath, so that kubelet brings a changed Secret to running pods,
    which read the file again."""
    operator = find(docs, "Deployment", "hr-operator")["spec"]["template"]["spec"]
    resolver = find(docs, "Deployment", "hr-resolver")["spec"]["template"]["spec"]
    op_args, res = operator["containers"][0]["args"], resolver["containers"][0]
    assert not [d for _, d in docs if d["kind"] == "Secret"], "the chart renders no Secret"
    if secret is None:
        assert not any(a.startswith("--push") for a in op_args + res["args"]), (op_args, res["args"])
        assert not [v for v in operator.get("volumes", []) if v["name"] == "push-key"], operator
        return
    assert "--push-key-file=/etc/healthroute-push/push.key" in op_args, op_args
    volume = next(v for v in operator["volumes"] if v["name"] == "push-key")
    assert volume["secret"]["secretName"] == secret and volume["secret"]["defaultMode"] == 0o440, volume
    assert operator["securityContext"]["fsGroup"] == 65532, operator["securityContext"]
    mounts = operator["containers"][0]["volumeMounts"] + res["volumeMounts"]
    assert not [m for m in mounts if "subPath" in m], "a subPath mount is never refreshed by kubelet"
    assert {"--push-listen=0.0.0.0:8055", "--push-key-file=/etc/healthroute/push.key"} <= set(res["args"]), res["args"]
    env = {e["name"]: e for e in res["env"]}
    assert env["PUSH_ADVERTISE"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}, env
    assert {"name": "push", "containerPort": 8055, "protocol": "TCP"} in res["ports"], res["ports"]
    config = next(v for v in resolver["volumes"] if v["name"] == "config")
    assert {"secret": {"name": secret, "items": [{"key": "push.key", "path": "push.key"}]}} in \
        config["projected"]["sources"], config


def check_deterministic(values):
    """Two renders of the same values are byte for byte the same (`helm template` in a
    GitOps loop, where `lookup` finds nothing): nothing random, no time."""
    first, second = render(values)[1], render(values)[1]
    assert first == second, [k for k in first if first[k] != second.get(k)]


def referenced(pod):
    """The ConfigMaps and Secrets a pod spec reads: (kind, name)."""
    out = set()
    for v in pod.get("volumes", []):
        if "configMap" in v:
            out.add(("ConfigMap", v["configMap"]["name"]))
        if "secret" in v:
            out.add(("Secret", v["secret"]["secretName"]))
        for source in v.get("projected", {}).get("sources", []):
            for kind, key in (("ConfigMap", "configMap"), ("Secret", "secret")):
                if key in source:
                    out.add((kind, source[key]["name"]))
    for c in pod.get("containers", []) + pod.get("initContainers", []):
        for e in c.get("envFrom", []):
            for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
                if key in e:
                    out.add((kind, e[key]["name"]))
        for e in c.get("env", []):
            ref = e.get("valueFrom", {})
            for kind, key in (("ConfigMap", "configMapKeyRef"), ("Secret", "secretKeyRef")):
                if key in ref:
                    out.add((kind, ref[key]["name"]))
    return out


def check_checksums(docs, out):
    """Every Deployment's pod template carries a `checksum/...` annotation equal to the
    sha256 of each rendered template holding a ConfigMap or Secret it reads, so a change of
    what it reads rolls it; what the chart does not render (the push key, the peers' keys)
    has none. Returns how many rendered objects were consumed."""
    rendered = {(d["kind"], d["metadata"]["name"]): path for path, d in docs if d["kind"] in ("ConfigMap", "Secret")}
    consumed = 0
    for _, d in docs:
        if d["kind"] != "Deployment":
            continue
        template = d["spec"]["template"]
        sums = {v for k, v in (template["metadata"].get("annotations") or {}).items() if k.startswith("checksum/")}
        for ref in referenced(template["spec"]):
            path = rendered.get(ref)
            if path is None:
                continue
            consumed += 1
            want = hashlib.sha256(out[path].encode()).hexdigest()
            assert want in sums, f"{d['metadata']['name']} reads {ref} ({path}) without its checksum: {sums}"
    return consumed


def check_drain(docs, values):
    """P9: the resolver keeps answering until kube-proxy no longer sends it anything: the
    drain is at least the readiness probe's failing time plus 3 s, the drain given is the one
    passed, and the grace period outlasts it."""
    r = {"shutdownDrainSeconds": 8, "readinessProbe": {"periodSeconds": 1, "failureThreshold": 2}}
    r.update(values.get("resolver", {}))
    pod = find(docs, "Deployment", "hr-resolver")["spec"]["template"]["spec"]
    c = pod["containers"][0]
    probe = c["readinessProbe"]
    drain = r["shutdownDrainSeconds"]
    assert probe["periodSeconds"] == r["readinessProbe"]["periodSeconds"], probe
    assert probe["failureThreshold"] == r["readinessProbe"]["failureThreshold"], probe
    assert f"--shutdown-drain={drain}" in c["args"], c["args"]
    assert drain >= probe["periodSeconds"] * probe["failureThreshold"] + 3, (drain, probe)
    assert pod["terminationGracePeriodSeconds"] > drain, pod["terminationGracePeriodSeconds"]


def refused(values):
    """The error a render of `values` fails with; fails itself when it renders."""
    try:
        render(values)
    except helm_python.HelmError as e:
        return str(e)
    raise AssertionError(f"rendered: {values}")


def check_pod_values(docs, values):
    """The values every chart of its kind offers land where they should, for both
    Deployments; the chart's selector labels and checksum win a clash."""
    for component in ("operator", "resolver"):
        v = values[component]
        d = find(docs, "Deployment", f"hr-{component}")
        pod = d["spec"]["template"]
        spec, c = pod["spec"], pod["spec"]["containers"][0]
        assert d["spec"]["revisionHistoryLimit"] == v["revisionHistoryLimit"], d["spec"]
        assert spec["priorityClassName"] == v["priorityClassName"], spec
        labels = pod["metadata"]["labels"]
        for k, val in v["podLabels"].items():
            if k.startswith("app.kubernetes.io/"):
                assert labels[k] != val, f"{component}: podLabels overrode the chart's {k}"
            else:
                assert labels[k] == val, labels
        assert set(d["spec"]["selector"]["matchLabels"].items()) <= set(labels.items()), labels
        annotations = pod["metadata"]["annotations"]
        for k, val in v["podAnnotations"].items():
            if k.startswith("checksum/"):
                assert annotations[k] != val, f"{component}: podAnnotations overrode {k}"
            else:
                assert annotations[k] == val, annotations
        env = [e["name"] for e in c["env"]]
        assert env[-len(v["extraEnv"]):] == [e["name"] for e in v["extraEnv"]], env
        assert len(env) == len(set(env)), env
        for probe in ("livenessProbe", "readinessProbe"):
            for k, val in v[probe].items():
                assert c[probe][k] == val, (component, probe, c[probe])
        assert spec["affinity"] == v["affinity"], spec["affinity"]
        spread = spec["topologySpreadConstraints"]
        selector = {"matchLabels": {"app.kubernetes.io/instance": "hr", "app.kubernetes.io/component": component}}
        given = v["topologySpreadConstraints"]
        assert spread[-len(given):] == [{"labelSelector": selector, **t} for t in given], spread
    # The resolver's zone toggle stays, before the constraints given.
    spread = find(docs, "Deployment", "hr-resolver")["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert spread[0]["topologyKey"] == "topology.kubernetes.io/zone" and len(spread) == 3, spread
    env = {e["name"]: e for e in find(docs, "Deployment", "hr-resolver")["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CHECKER_ZONE"] == {"name": "CHECKER_ZONE", "value": values["resolver"]["zone"]}, env["CHECKER_ZONE"]


def main():
    expected = json.loads(sys.argv[1])
    lint = helm_python.lint(CHART, strict=True)
    messages = [m for m in lint.get("messages", []) if str(m.get("severity", "")).upper() not in ("INFO", "1")]
    assert not messages, f"helm lint: {messages}"

    defaults, out = render(None)
    validate(defaults)
    check_rbac(defaults, expected)
    check_security(defaults)
    check_image(defaults)
    kinds = {d["kind"] for _, d in defaults}
    assert {"Deployment", "Service", "PodDisruptionBudget", "ClusterRole", "Role"} <= kinds, kinds
    notes = next(v for k, v in out.items() if k.endswith("NOTES.txt"))
    assert "example.com:53 {" in notes and "forward ." in notes, notes
    svc = next(d for _, d in defaults if d["kind"] == "Service" and d["metadata"]["name"] == "hr-resolver")
    assert svc["spec"]["trafficDistribution"] == "PreferSameZone", svc["spec"]
    check_resolver_config(defaults, {"zones": ["example.com"]})
    assert find(defaults, "Service", "hr-resolver-public") is None
    # Pushes are on once a Secret with the key is named; the chart never makes one.
    check_push(defaults, None)
    own, own_out = render({"push": {"existingSecret": "my-push-key"}})
    validate(own)
    check_push(own, "my-push-key")
    check_push(render({"push": {"enabled": False, "existingSecret": "my-push-key"}})[0], None)
    check_deterministic(None)
    check_deterministic({"push": {"existingSecret": "my-push-key"}})
    assert check_checksums(defaults, out) == 1 and check_checksums(own, own_out) == 1
    # Defaults: no zone given, the pod's label (where the cluster copies it from the node).
    pod = find(defaults, "Deployment", "hr-resolver")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["CHECKER_ZONE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['topology.kubernetes.io/zone']"
    assert pod["affinity"]["podAntiAffinity"], pod["affinity"]
    assert "priorityClassName" not in pod, pod

    # P9: the drain outlasts the readiness probe's failing plus the margin, for any probe.
    check_drain(defaults, {})
    slow = {"resolver": {"shutdownDrainSeconds": 9, "readinessProbe": {"periodSeconds": 2, "failureThreshold": 3}}}
    check_drain(render(slow)[0], slow)
    e = refused({"resolver": {"shutdownDrainSeconds": 8, "readinessProbe": {"periodSeconds": 2, "failureThreshold": 3}}})
    assert "resolver.shutdownDrainSeconds is 8" in e and "9 or more" in e and "readinessProbe.periodSeconds 2" in e, e
    e = refused({"resolver": {"readinessProbe": {"periodSeconds": 10}}})
    assert "23 or more" in e, e

    # SEM-P12: a resolver without its checker takes pushes too (its registration Lease tells
    # the leader where).
    no_checker, _ = render({"resolver": {"checker": {"enabled": False}}, "push": {"existingSecret": "my-push-key"}})
    validate(no_checker)
    check_push(no_checker, "my-push-key")
    args = find(no_checker, "Deployment", "hr-resolver")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-checker" in args, args
    # SEM-P7: the leader's writes besides the table go at the chart's pace.
    op_args = find(defaults, "Deployment", "hr-operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--status-qps=50" in op_args and "--status-burst=100" in op_args, op_args
    unpaced, _ = render({"operator": {"statusWrites": {"qps": 0}}})
    op_args = find(unpaced, "Deployment", "hr-operator")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--status-qps=0" in op_args and "--status-burst=100" in op_args, op_args
    e = refused({"operator": {"statusWrites": {"qps": -1}}})
    assert "qps" in e, e
    off, _ = render({"resolver": {"service": {"trafficDistribution": ""}}})
    svc = next(d for _, d in off if d["kind"] == "Service" and d["metadata"]["name"] == "hr-resolver")
    assert "trafficDistribution" not in svc["spec"], svc["spec"]

    with open(os.path.join(HERE, "values-all.yaml")) as f:
        everything = yaml.safe_load(f)
    docs, out = render(everything)
    validate(docs)
    check_rbac(docs, expected)
    check_security(docs)
    check_deterministic(everything)
    assert check_checksums(docs, out) == 1
    check_push(docs, "healthroute-push")
    check_drain(docs, everything)
    check_pod_values(docs, everything)
    kinds = {d["kind"] for _, d in docs}
    assert {"HorizontalPodAutoscaler", "ServiceMonitor", "PrometheusRule"} <= kinds, kinds
    check_monitoring(docs)
    operator = next(d for _, d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "hr-operator")
    args = operator["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--metric-allow=10.0.0.0/8" in args and "--metric-deny=10.1.0.0/16" in args, args
    svc = next(d for _, d in docs if d["kind"] == "Service" and d["metadata"]["name"] == "hr-resolver")
    assert svc["spec"]["clusterIP"] == "10.96.0.53"
    assert {p["protocol"] for p in svc["spec"]["ports"] if p["port"] == 53} == {"UDP", "TCP"}
    notes = next(v for k, v in out.items() if k.endswith("NOTES.txt"))
    assert "shop.example.com:53 {\n    forward . 10.96.0.53" in notes, notes
    assert "--zone=shop.example.com" in args and "--zone=internal.example.org" in args, args

    # Peers, the exchange and the resolvers for the outside.
    check_resolver_config(docs, everything)
    exchange = find(docs, "Service", "hr-resolver-exchange")
    assert exchange["spec"]["type"] == "LoadBalancer" and exchange["spec"]["externalTrafficPolicy"] == "Local", exchange
    assert exchange["metadata"]["annotations"] == {"example.com/scheme": "internal"}, exchange["metadata"]
    assert exchange["spec"]["loadBalancerSourceRanges"] == ["203.0.113.0/24"], exchange["spec"]
    public = find(docs, "Service", "hr-resolver-public")
    assert public["spec"]["type"] == "LoadBalancer" and public["spec"]["externalTrafficPolicy"] == "Local", public
    assert public["spec"]["loadBalancerClass"] == "example.com/lb", public["spec"]
    assert public["metadata"]["annotations"] == {"external-dns.alpha.kubernetes.io/hostname": "ns1.shop.example.com"}
    assert {(p["port"], p["protocol"]) for p in public["spec"]["ports"]} == {(53, "UDP"), (53, "TCP"), (5300, "UDP"), (5300, "TCP")}
    assert public["spec"]["selector"] == svc["spec"]["selector"], public["spec"]
    resolver = find(docs, "Deployment", "hr-resolver")["spec"]["template"]
    assert resolver["spec"]["securityContext"]["fsGroup"] == 65532, resolver["spec"]["securityContext"]
    # The configuration rolls the pods when it changes.
    other, _ = render({**everything, "peers": everything["peers"][:1]})
    again = find(other, "Deployment", "hr-resolver")["spec"]["template"]
    assert again["metadata"]["annotations"]["checksum/config"] != resolver["metadata"]["annotations"]["checksum/config"]
    # Only DNS on the public Service unless asked; no exchange without peers.
    dns_only, _ = render({**everything, "resolver": {**everything["resolver"], "publicService": {"enabled": True}}})
    validate(dns_only)
    public = find(dns_only, "Service", "hr-resolver-public")
    assert {(p["port"], p["protocol"]) for p in public["spec"]["ports"]} == {(53, "UDP"), (53, "TCP")}, public
    no_peers, _ = render({**everything, "peers": []})
    validate(no_peers)
    check_resolver_config(no_peers, {**everything, "peers": []})

    for bad in ({"zones": []}, {"operator": {"replicas": "two"}}, {"resolver": {"service": {"clusterIP": "not-an-ip"}}},
                {"resolver": {"checker": {"allowCidrs": ["everything"]}}},
                {"resolver": {"service": {"trafficDistribution": "SameZonePlease"}}},
                {"peers": [{"name": "West_1", "addresses": ["192.0.2.1:5300"], "keys": [{"name": "k.", "secretName": "s", "secretKey": "k"}]}]},
                {"peers": [{"name": "west", "addresses": [], "keys": [{"name": "k.", "secretName": "s", "secretKey": "k"}]}]},
                {"peers": [{"name": "west", "addresses": ["192.0.2.1:5300"], "keys": [
                    {"name": f"k{i}.", "secretName": "s", "secretKey": f"k{i}"} for i in range(3)]}]},
                {"peers": [{"name": "west", "addresses": ["192.0.2.1:5300"], "keys": [{"name": "k.", "secret": "c2VjcmV0"}]}]},
                {"peers": [{"name": "west", "addresses": ["192.0.2.1:5300"], "keys": [
                    {"name": "k.", "secretName": "s", "secretKey": "k", "algorithm": "hmac-md5"}]}]},
                {"zones": [{"name": "example.com", "nameservers": [{"name": "ns1.example.com.", "addresses": ["not an ip"]}]}]},
                {"zones": [{"name": "example.com", "glue": []}]},
                {"exchange": {"port": 70000}},
                {"push": {"port": 0}}, {"push": {"existingSecret": "Not_A_Name"}}, {"push": {"key": "inline"}},
                {"resolver": {"shutdownDrainSeconds": 3}}, {"resolver": {"readinessProbe": {"periodSecond": 1}}},
                {"resolver": {"readinessProbe": {"failureThreshold": 0}}}, {"operator": {"livenessProbe": {"path": "/"}}},
                {"resolver": {"zone": "not a zone"}}, {"operator": {"priorityClassName": "Not_A_Class"}},
                {"resolver": {"extraEnv": [{"value": "no name"}]}}, {"operator": {"extraEnv": {"RUST_LOG": "debug"}}},
                {"resolver": {"podLabels": {"team": "not a label value"}}}, {"resolver": {"podAnnotations": {"n": 1}}},
                {"resolver": {"revisionHistoryLimit": -1}}, {"operator": {"topologySpreadConstraints": [{"maxSkew": 1}]}},
                {"resolver": {"publicService": {"loadBalancerSourceRanges": ["everywhere"]}}}):
        try:
            render(bad)
        except helm_python.HelmError:
            continue
        raise AssertionError(f"values.schema.json accepted {bad}")
    print("chart tests: 1 passed, 0 failed")


if __name__ == "__main__":
    main()
