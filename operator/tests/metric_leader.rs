//! Metric checks in a cluster (SEMANTICS H14, H15): the operator's leader evaluates them, once,
//! with the token from the check's Secret; the verdict reaches the table and the check's
//! status (`status.metric`); a replica that stops leading stops asking. The real control loop
//! against the `tower-test` API stand-in, and a Prometheus stand-in on loopback.

#[allow(dead_code)]
mod support {
    pub mod fake_api;
}

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc::unbounded;
use healthroute_api::{HealthCheck, RecordGroup};
use healthroute_checker::{Cidr, TargetPolicy};
use healthroute_compiler::ServedZones;
use healthroute_operator::controller::{self, Config, Input, OperatorMetrics};
use healthroute_table::published::{DATA_KEY, Manifest};
use k8s_openapi::api::core::v1::Service;
use kube::runtime::watcher::Event;
use serde_json::json;
use support::fake_api::{FakeApi, Settings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

const IN_TIME: Duration = Duration::from_secs(15);
const ALARM: &str = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"0.2"]}]}}"#;

/// Answers ALARM to requests that carry the token; counts requests and keeps their heads.
async fn prometheus() -> (u16, Arc<AtomicUsize>, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let count = Arc::new(AtomicUsize::new(0));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let (c, h) = (count.clone(), heads.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let (c, h) = (c.clone(), h.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                c.fetch_add(1, Ordering::SeqCst);
                let ok = head.contains("authorization: Bearer t0k3n");
                h.lock().expect("lock").push(head);
                let (code, body) = if ok {
                    ("200 OK", ALARM)
                } else {
                    (
                        "401 Unauthorized",
                        r#"{"status":"error","errorType":"unauthorized","error":"no"}"#,
                    )
                };
                let _ = s
                    .write_all(
                        format!("HTTP/1.1 {code}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
                            .as_bytes(),
                    )
                    .await;
            });
        }
    });
    (port, count, heads)
}

// SEM-H14 SEM-H15 SEM-H13: the leader reads the token from the Secret, asks Prometheus, and
// the ALARM moves the failover answer and shows in status.metric; after leadership ends, no
// more queries.
#[tokio::test]
async fn the_leader_evaluates_metric_checks_once_for_the_cluster() {
    let (port, queries, heads) = prometheus().await;
    let (api, client) = FakeApi::start(Settings::default());
    api.put_secret("shop", "prom", &[("token", "t0k3n\n")]);

    let (inputs, rx) = unbounded();
    let (leader_tx, leader_rx) = watch::channel(true);
    let (stop, stop_rx) = watch::channel(false);
    let mut config = Config::new(
        "healthroute",
        ServedZones::new(["example.com"]).expect("zone"),
    );
    config.shards = 1;
    config.metric_policy = TargetPolicy::cluster_default();
    config.metric_policy.allow = vec!["127.0.0.0/8".parse::<Cidr>().expect("cidr")];
    let task = tokio::spawn(controller::run_with(
        client,
        config,
        rx,
        leader_rx,
        OperatorMetrics::default(),
        Default::default(),
        stop_rx,
    ));
    let group: RecordGroup = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": "www", "namespace": "shop", "generation": 1, "uid": "uid-www"},
        "spec": {"name": "www.example.com.", "type": "A", "routingPolicy": "Failover", "records": [
            {"setIdentifier": "primary", "failover": {"role": "Primary"}, "values": ["192.0.2.1"], "healthCheckRef": {"name": "errors"}},
            {"setIdentifier": "standby", "failover": {"role": "Secondary"}, "values": ["192.0.2.2"]}]}
    }))
    .expect("valid");
    let check: HealthCheck = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
        "metadata": {"name": "errors", "namespace": "shop", "generation": 1, "uid": "uid-errors"},
        "spec": {"type": "Metric", "requestIntervalSeconds": 1, "failureThreshold": 1,
                 "connectTimeoutSeconds": 1, "responseTimeoutSeconds": 1,
                 "metric": {"prometheus": {"url": format!("http://127.0.0.1:{port}"),
                                           "bearerTokenSecretRef": {"name": "prom", "key": "token"}},
                            "query": "errors > 0.05"}}
    }))
    .expect("valid");
    let send = |i: Input| inputs.unbounded_send(i).expect("loop running");
    send(Input::Group(Event::Init));
    send(Input::Group(Event::InitApply(group)));
    send(Input::Group(Event::InitDone));
    send(Input::Check(Event::Init));
    send(Input::Check(Event::InitApply(check)));
    send(Input::Check(Event::InitDone));
    send(Input::Slice(Event::Init));
    send(Input::Slice(Event::InitDone));
    send(Input::Lease(Event::Init));
    send(Input::Lease(Event::InitDone));
    send(Input::Shift(Event::Init));
    send(Input::Shift(Event::InitDone));
    send(Input::Service(Event::<Service>::Init));
    send(Input::Service(Event::<Service>::InitDone));
    send(Input::Autoshift(Event::Init));
    send(Input::Autoshift(Event::InitDone));
    send(Input::Node(Event::Init));
    send(Input::Node(Event::InitDone));

    let status = api
        .wait_for("the check's status with its evaluation", 0, IN_TIME, |s| {
            s.is_status_write()
                && s.path.contains("/healthchecks/errors/status")
                && s.body["status"]["metric"]["state"] == "ALARM"
        })
        .await;
    let st = &status.body["status"];
    assert_eq!(st["healthy"], false, "{st}");
    assert_eq!(st["metric"]["value"], "1 sample, 0.2", "{st}");
    assert!(st["metric"]["lastEvaluated"].is_string(), "{st}");
    assert!(
        !status.body.to_string().contains("t0k3n"),
        "the token is not in status"
    );
    let secret_reads = api
        .log()
        .iter()
        .filter(|s| s.method == "GET" && s.path.starts_with("/api/v1/namespaces/shop/secrets/prom"))
        .count();
    assert!(secret_reads >= 1);
    assert!(
        heads.lock().expect("lock")[0].contains("GET /api/v1/query?query=errors%20%3E%200.05 ")
    );

    // The table answers the standby while the alarm holds.
    api.wait_for("a table with the standby", 0, IN_TIME, |s| {
        (s.is_shard_write() || s.is_delta_write())
            && s.body["data"][DATA_KEY]
                .as_str()
                .is_some_and(|d| d.contains("192.0.2.2") && !d.contains("192.0.2.1"))
    })
    .await;
    let manifest: Manifest = serde_json::from_str(
        api.configmap("healthroute-table").expect("manifest")["data"][DATA_KEY]
            .as_str()
            .expect("data"),
    )
    .expect("manifest");
    assert!(manifest.generation >= 1);

    // Leadership ends: the queries stop (at most one already under way finishes).
    leader_tx.send(false).expect("loop running");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = queries.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        queries.load(Ordering::SeqCst) <= after + 1,
        "a replica that does not lead does not query Prometheus"
    );
    stop.send(true).expect("loop running");
    let _ = tokio::time::timeout(IN_TIME, task).await;
}
