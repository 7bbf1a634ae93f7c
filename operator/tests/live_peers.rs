//! Peer clusters on a real API server (SEMANTICS X2, X4, X8): two "clusters" as two
//! namespaces of one API server, each with its own operator process (`--watch-namespace`, so
//! that each compiles only its own) and its own resolver process in cluster mode (its own
//! `--config` with its peer and its exchange listener, on loopback ports). Cluster A's
//! Failover group has its pods as primary and cluster B's group as a peer secondary.
//!
//!   cargo build -p healthroute-resolver
//!   HEALTHROUTE_TEST_KUBECONFIG=~/.kube/config cargo test -p healthroute-operator --test live_peers -- --include-ignored --nocapture
//!
//! The operators run as the kubeconfig's user (cluster-admin on a test cluster), not with the
//! chart's RBAC. The TSIG key comes from a Secret in each namespace, written by this test to
//! a file that the resolver's configuration names with a relative `secretFile` (as the
//! chart's projected volume does). Pods have no kubelet here: the test sets their status.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use healthroute_api::{HealthCheck, RecordGroup, ZonalShift};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::json;

const ZONE: &str = "peers.live.example";
const NAME: &str = "api.peers.live.example.";
/// What cluster B's group answers.
const B_VALUE: &str = "198.51.100.7";
/// Cluster A's pods.
const A_PODS: [(&str, &str); 2] = [("web-0", "192.0.2.21"), ("web-1", "192.0.2.22")];

fn kubeconfig() -> String {
    std::env::var("HEALTHROUTE_TEST_KUBECONFIG")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            panic!("HEALTHROUTE_TEST_KUBECONFIG is not set: this test needs a live API server")
        })
}

async fn client(path: &str) -> Client {
    let kubeconfig = Kubeconfig::read_from(path).expect("readable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("usable kubeconfig");
    Client::try_from(config).expect("client")
}

fn apply() -> PatchParams {
    PatchParams::apply("healthroute-live-test").force()
}

/// The resolver binary, built beside the operator's (cargo does not build another package's
/// binary for this test).
fn resolver_binary() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_healthroute-operator")).with_file_name(format!(
        "healthroute-resolver{}",
        std::env::consts::EXE_SUFFIX
    ));
    assert!(
        path.exists(),
        "{} is missing: run `cargo build -p healthroute-resolver` first",
        path.display()
    );
    path
}

/// A free loopback port (UDP and TCP), found by binding and releasing it.
fn free_port() -> u16 {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        let port = udp.local_addr().expect("addr").port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// The processes this test started, killed when it ends (also on a failed assertion).
struct Processes(Vec<(String, Child)>);

impl Processes {
    fn start(&mut self, what: &str, mut command: Command, logs: &Path) {
        let log = std::fs::File::create(logs.join(format!("{what}.log"))).expect("log file");
        let err = log.try_clone().expect("log file");
        let child = command
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {what}: {e}"));
        self.0.push((what.into(), child));
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One A query over UDP; the IPv4 addresses answered, sorted (None: no answer in time).
async fn query_a(server: SocketAddr, name: &str) -> Option<Vec<String>> {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.ok()?;
    let id = (std::process::id() as u16) ^ 0x5a5a;
    let mut q = vec![(id >> 8) as u8, id as u8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.trim_end_matches('.').split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    socket.send_to(&q, server).await.ok()?;
    let mut buf = [0u8; 1500];
    let n = tokio::time::timeout(Duration::from_millis(500), socket.recv(&mut buf))
        .await
        .ok()?
        .ok()?;
    let r = &buf[..n];
    if r.len() < 12 || r[..2] != q[..2] {
        return None;
    }
    fn skip_name(r: &[u8], mut pos: usize) -> Option<usize> {
        loop {
            let len = *r.get(pos)?;
            if len == 0 {
                return Some(pos + 1);
            }
            if len & 0xc0 == 0xc0 {
                return Some(pos + 2);
            }
            pos += 1 + len as usize;
        }
    }
    let answers = u16::from_be_bytes([r[6], r[7]]);
    let mut pos = skip_name(r, 12)? + 4;
    let mut out = Vec::new();
    for _ in 0..answers {
        pos = skip_name(r, pos)?;
        let rtype = u16::from_be_bytes([*r.get(pos)?, *r.get(pos + 1)?]);
        let len = u16::from_be_bytes([*r.get(pos + 8)?, *r.get(pos + 9)?]) as usize;
        let data = r.get(pos + 10..pos + 10 + len)?;
        if rtype == 1 && len == 4 {
            out.push(Ipv4Addr::new(data[0], data[1], data[2], data[3]).to_string());
        }
        pos += 10 + len;
    }
    out.sort();
    Some(out)
}

/// Waits up to `secs` seconds (polling every 100 ms) for `f`; returns how long it took.
async fn wait_secs<F: std::future::Future<Output = bool>>(
    what: &str,
    secs: u64,
    logs: &Path,
    mut f: impl FnMut() -> F,
) -> Duration {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(secs) {
        if f().await {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "timed out after {secs} s waiting for {what}; the processes' logs are in {}",
        logs.display()
    );
}

/// Sets the pods' readiness as a kubelet would.
async fn set_ready(pods: &Api<Pod>, ready: bool) {
    let status = if ready { "True" } else { "False" };
    for (name, ip) in A_PODS {
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": status},
                               {"type": "ContainersReady", "status": status}]}})),
        )
        .await
        .expect("pod status");
    }
}

fn a_values() -> Vec<String> {
    A_PODS.iter().map(|(_, ip)| ip.to_string()).collect()
}

// SEM-X4 SEM-X2 SEM-X8: the operator of cluster A creates the Peer check that A's group
// needs, owned by the group; A's resolver asks B's over the signed exchange; while A's pods
// are unready A answers B's values, and its own again once they are ready; the check goes
// when no group names the peer any more.
#[tokio::test]
#[ignore = "needs a live API server (HEALTHROUTE_TEST_KUBECONFIG) and the resolver binary (cargo build -p healthroute-resolver), run with --include-ignored"]
async fn live_a_peer_cluster_answers_while_the_primary_is_down() {
    let path = kubeconfig();
    let client = client(&path).await;
    let resolver = resolver_binary();
    let pid = std::process::id();
    let (ns_a, ns_b) = (format!("hr-peers-a-{pid}"), format!("hr-peers-b-{pid}"));
    let node = format!("hr-peers-node-{pid}");
    let logs = std::env::temp_dir().join(format!("healthroute-live-peers-{pid}"));
    std::fs::create_dir_all(&logs).expect("log dir");

    for crd in [HealthCheck::crd(), RecordGroup::crd(), ZonalShift::crd()] {
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(&crd.name_any(), &apply(), &Patch::Apply(&crd))
            .await
            .expect("CRD applies");
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // the CRDs become established
    for ns in [&ns_a, &ns_b] {
        Api::<Namespace>::all(client.clone())
            .patch(
                ns,
                &apply(),
                &Patch::Apply(
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                ),
            )
            .await
            .expect("namespace");
    }
    Api::<Node>::all(client.clone())
        .patch(
            &node,
            &apply(),
            &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node, "labels": {"topology.kubernetes.io/zone": "zone-a"}}})),
        )
        .await
        .expect("node");

    // Cluster A's pods behind the Service web.
    let services: Api<Service> = Api::namespaced(client.clone(), &ns_a);
    services
        .patch(
            "web",
            &apply(),
            &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}})),
        )
        .await
        .expect("service");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns_a);
    for (name, _) in A_PODS {
        pods.patch(
            name,
            &apply(),
            &Patch::Apply(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"nodeName": node, "containers": [{"name": "web", "image": "web:none"}]}})),
        )
        .await
        .expect("pod");
    }
    set_ready(&pods, true).await;

    // One TSIG key, as `openssl rand -base64 32` makes it, in a Secret on each side.
    let out = Command::new("openssl")
        .args(["rand", "-base64", "32"])
        .output()
        .expect("openssl");
    let secret = String::from_utf8(out.stdout)
        .expect("base64")
        .trim()
        .to_owned();
    assert!(secret.len() >= 40, "openssl gave {secret:?}");
    let (dns_a, dns_b) = (free_port(), free_port());
    let (exchange_a, exchange_b) = (free_port(), free_port());
    let mut processes = Processes(Vec::new());
    for (ns, me, peer, dns, listen, peer_listen) in [
        (&ns_a, "a", "b", dns_a, exchange_a, exchange_b),
        (&ns_b, "b", "a", dns_b, exchange_b, exchange_a),
    ] {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        secrets
            .patch(
                "peer-keys",
                &apply(),
                &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "peer-keys"},
                "stringData": {"a-b": secret}})),
            )
            .await
            .expect("secret");
        // The resolver reads the key from the Secret's data, as the chart mounts it.
        let data = secrets
            .get("peer-keys")
            .await
            .expect("secret")
            .data
            .and_then(|d| d.get("a-b").cloned())
            .expect("the key in the Secret");
        let dir = logs.join(me);
        std::fs::create_dir_all(dir.join("keys")).expect("config dir");
        std::fs::write(dir.join("keys/a-b"), &data.0).expect("key file");
        let config = dir.join("healthroute.yaml");
        std::fs::write(
            &config,
            format!(
                "zones: [{ZONE}]\nlisten: 127.0.0.1:{dns}\nexchange: {{listen: 127.0.0.1:{listen}}}\n\
                 peers:\n  - name: {peer}\n    addresses: [\"127.0.0.1:{peer_listen}\"]\n    \
                 keys: [{{name: a-b., algorithm: hmac-sha256, secretFile: keys/a-b}}]\n"
            ),
        )
        .expect("config");

        let mut operator = Command::new(env!("CARGO_BIN_EXE_healthroute-operator"));
        operator
            .env("KUBECONFIG", &path)
            .args(["--zone", ZONE, "--namespace", ns, "--watch-namespace", ns])
            .args(["--identity", &format!("operator-{me}")])
            .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())]);
        processes.start(&format!("operator-{me}"), operator, &logs);
        let mut command = Command::new(&resolver);
        command
            .env("KUBECONFIG", &path)
            .arg("--config")
            .arg(&config)
            .args(["--table-namespace", ns, "--udp-sockets", "1"])
            .args(["--checker-name", &format!("resolver-{me}-{pid}")])
            .args(["--admin-listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--shutdown-drain", "0"]);
        if me == "b" {
            // Cluster B names no peer source: no checker, so that it does not run A's checks
            // (one API server here; in two clusters each sees only its own).
            command.arg("--no-checker");
        }
        processes.start(&format!("resolver-{me}"), command, &logs);
    }

    let groups_a: Api<RecordGroup> = Api::namespaced(client.clone(), &ns_a);
    let groups_b: Api<RecordGroup> = Api::namespaced(client.clone(), &ns_b);
    groups_b
        .patch("api", &apply(), &Patch::Apply(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "metadata": {"name": "api"},
            "spec": {"name": NAME, "type": "A", "routingPolicy": "Simple",
                     "records": [{"setIdentifier": "b", "values": [B_VALUE]}]}})))
        .await
        .expect("group b");
    let group_a = |with_peer: bool| {
        let mut records = vec![
            json!({"setIdentifier": "pods", "failover": {"role": "Primary"},
                                      "service": {"name": "web"}}),
        ];
        if with_peer {
            records.push(
                json!({"setIdentifier": "b", "failover": {"role": "Secondary"},
                                "peer": {"cluster": "b", "recordGroup": format!("{ns_b}/api")}}),
            );
        } else {
            records.push(
                json!({"setIdentifier": "static", "failover": {"role": "Secondary"},
                                "values": ["203.0.113.9"]}),
            );
        }
        json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "metadata": {"name": "api"},
               "spec": {"name": NAME, "type": "A", "routingPolicy": "Failover", "records": records}})
    };
    let started = Instant::now();
    let a = groups_a
        .patch("api", &apply(), &Patch::Apply(group_a(true)))
        .await
        .expect("group a");
    let uid_a = a.uid().expect("a uid");

    // X4: the operator creates the check, labelled and owned by the group.
    let checks: Api<HealthCheck> = Api::namespaced(client.clone(), &ns_a);
    let check_name = format!("peer.b.{ns_b}.api");
    let created = wait_secs("the Peer check", 30, &logs, || async {
        checks
            .get_opt(&check_name)
            .await
            .ok()
            .flatten()
            .is_some_and(|c| {
                c.labels()
                    .get("healthroute.io/peer-check")
                    .map(String::as_str)
                    == Some("true")
                    && c.owner_references()
                        .iter()
                        .any(|o| o.uid == uid_a && o.kind == "RecordGroup")
                    && c.spec.check_type == healthroute_api::CheckType::Peer
            })
    })
    .await;
    let server_a: SocketAddr = ([127, 0, 0, 1], dns_a).into();
    let server_b: SocketAddr = ([127, 0, 0, 1], dns_b).into();
    wait_secs("B to answer its own value", 30, &logs, || async {
        query_a(server_b, NAME).await == Some(vec![B_VALUE.into()])
    })
    .await;
    wait_secs("A to answer its pods", 30, &logs, || async {
        query_a(server_a, NAME).await == Some(a_values())
    })
    .await;
    // X9: A's checker writes what B answered into the check's status.
    let checker = format!("resolver-a-{pid}");
    let viewed = wait_secs("A's checker's view of B", 60, &logs, || async {
        checks
            .get_opt(&check_name)
            .await
            .ok()
            .flatten()
            .is_some_and(|c| {
                c.status.is_some_and(|s| {
                    s.checkers.iter().any(|v| {
                        v.name == checker
                            && v.healthy
                            && v.values
                                .iter()
                                .map(ToString::to_string)
                                .eq([format!("A {B_VALUE}")])
                    })
                })
            })
    })
    .await;
    let since_start = started.elapsed();

    // A's pods turn unready: A answers what B answers.
    set_ready(&pods, false).await;
    let to_peer = wait_secs("A to answer B's value", 30, &logs, || async {
        query_a(server_a, NAME).await == Some(vec![B_VALUE.into()])
    })
    .await;
    // X9: the record's status shows the peer's values.
    wait_secs("the peer record's status", 30, &logs, || async {
        groups_a
            .get_status("api")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| {
                s.records.iter().any(|r| {
                    r.set_identifier == "b" && r.healthy && r.values == [B_VALUE.to_string()]
                })
            })
    })
    .await;

    // Ready again: A's own pods.
    set_ready(&pods, true).await;
    let back = wait_secs("A to answer its pods again", 30, &logs, || async {
        query_a(server_a, NAME).await == Some(a_values())
    })
    .await;

    // No group names the peer any more: the operator deletes the check.
    groups_a
        .patch("api", &apply(), &Patch::Apply(group_a(false)))
        .await
        .expect("group a without its peer");
    let gone = wait_secs("the Peer check's deletion", 30, &logs, || async {
        checks.get_opt(&check_name).await.is_ok_and(|c| c.is_none())
    })
    .await;

    println!(
        "live peers: check created {created:?} after the group; A's checker's view of B \
         {viewed:?} later ({since_start:?} from the group); A answered B's value {to_peer:?} \
         after its pods turned unready, its own {back:?} after they were ready again; the \
         check was deleted {gone:?} after the peer record was removed"
    );

    drop(processes);
    for (name, _) in A_PODS {
        let _ = pods
            .delete(
                name,
                &DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                },
            )
            .await;
    }
    for ns in [&ns_a, &ns_b] {
        let _ = Api::<Namespace>::all(client.clone())
            .delete(ns, &DeleteParams::default())
            .await;
    }
    let _ = Api::<Node>::all(client.clone())
        .delete(&node, &DeleteParams::default())
        .await;
}
