//! Publish latency through the in-process path: an EndpointSlice change applied to the index,
//! compiled, and its delta sent as a server-side-apply request (to a tower-test stand-in that
//! answers at once), with 10,000 RecordGroups loaded; the folds run between changes, as the
//! publisher task runs them, and are timed apart. Also the first compile and publish of the
//! whole table. Prints figures; asserts nothing.
//!
//! Run: `cargo bench -p healthroute-operator --bench publish [-- groups]` (default 10,000)

use std::time::Instant;

use healthroute_compiler::ServedZones;
use healthroute_operator::controller::{Index, Input};
use healthroute_operator::publish::Publisher;
use http::{Request, Response};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::client::Body;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::json;

const CHANGES: usize = 1_000;

fn group(i: usize) -> healthroute_api::RecordGroup {
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": format!("g{i}"), "namespace": format!("ns{}", i % 100)},
        "spec": {"name": format!("g{i}.example.com."), "type": "A", "routingPolicy": "Weighted",
                 "records": [{"setIdentifier": "pods", "weight": 1, "service": {"name": format!("svc{i}")}},
                             {"setIdentifier": "static", "weight": 1, "values": ["192.0.2.1"]}]}
    }))
    .expect("group")
}

fn slice(i: usize, ready: bool) -> EndpointSlice {
    let endpoints: Vec<_> = (0..10)
        .map(|e| json!({"addresses": [format!("10.{}.{}.{}", i / 256 % 256, i % 256, e)], "conditions": {"ready": e != 0 || ready}}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc{i}-x"), "namespace": format!("ns{}", i % 100), "labels": {"kubernetes.io/service-name": format!("svc{i}")}},
        "addressType": "IPv4",
        "endpoints": endpoints
    }))
    .expect("slice")
}

#[tokio::main]
async fn main() {
    let groups: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10_000);
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    // The stand-in API server: a list for the publisher's first look, then every apply echoed.
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let is_list = req.method() == http::Method::GET;
            let body = req.into_body().collect_bytes().await.unwrap_or_default();
            let reply = if is_list {
                serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": []})).unwrap_or_default()
            } else {
                body.to_vec()
            };
            send.send_response(
                Response::builder()
                    .body(Body::from(reply))
                    .expect("response"),
            );
        }
    });
    let client = Client::new(service, "healthroute");
    let mut publisher = Publisher::new(Api::<ConfigMap>::namespaced(client, "healthroute"), 16);
    let mut index = Index::new(ServedZones::new(["example.com"]).expect("zone"), 60);

    let t = Instant::now();
    for kind in 0..2 {
        match kind {
            0 => index.apply(Input::Group(watcher::Event::Init)),
            _ => index.apply(Input::Slice(watcher::Event::Init)),
        }
    }
    for i in 0..groups {
        index.apply(Input::Group(watcher::Event::InitApply(group(i))));
        index.apply(Input::Slice(watcher::Event::InitApply(slice(i, true))));
    }
    index.apply(Input::Group(watcher::Event::InitDone));
    index.apply(Input::Slice(watcher::Event::InitDone));
    let indexed = t.elapsed();
    let t = Instant::now();
    index.compiler.compile(jiff::Timestamp::now());
    let compiled = t.elapsed();
    let t = Instant::now();
    let first = publisher
        .publish(&index.compiler.table(), || true)
        .await
        .expect("publishes");
    let published = t.elapsed();
    let bytes = healthroute_table::published::encode(&index.compiler.table(), first.shards)
        .map(|e| e.shards.iter().map(|(_, _, j)| j.len()).sum::<usize>())
        .unwrap_or(0);
    println!(
        "{groups} RecordGroups, {} endpoints: index {:.0} ms, compile {:.0} ms, publish {} shards ({:.1} MiB) {:.0} ms",
        groups * 10,
        indexed.as_secs_f64() * 1e3,
        compiled.as_secs_f64() * 1e3,
        first.shards_written,
        bytes as f64 / (1024.0 * 1024.0),
        published.as_secs_f64() * 1e3
    );

    let mut latencies = Vec::with_capacity(CHANGES);
    let (mut bytes, mut deltas) = (0, 0);
    let (mut folds, mut fold_shards, mut fold_bytes) = (0, 0, 0);
    let mut fold_time = std::time::Duration::ZERO;
    for n in 0..CHANGES {
        let i = (n * 7919) % groups;
        let t = Instant::now();
        index.apply(Input::Slice(watcher::Event::Apply(slice(i, n % 2 == 1))));
        index.compiler.compile(jiff::Timestamp::now());
        let r = publisher
            .publish(&index.compiler.table(), || true)
            .await
            .expect("publishes");
        latencies.push(t.elapsed());
        bytes += r.bytes_written;
        deltas += usize::from(r.delta_written);
        // Between changes, as the publisher task does.
        let t = Instant::now();
        while publisher.folding() {
            let step = publisher.fold_step(|| true).await.expect("folds");
            fold_shards += step.shards_written;
            fold_bytes += step.bytes_written;
            folds += usize::from(step.done);
        }
        fold_time += t.elapsed();
    }
    latencies.sort();
    println!(
        "EndpointSlice change -> table request sent: p50 {:.2} ms, p99 {:.2} ms over {CHANGES} changes; {deltas} deltas, {:.0} bytes per change",
        latencies[CHANGES / 2].as_secs_f64() * 1e3,
        latencies[CHANGES * 99 / 100].as_secs_f64() * 1e3,
        bytes as f64 / CHANGES as f64
    );
    println!(
        "folds between changes: {folds}, {fold_shards} shards ({:.1} MiB) in {:.0} ms in all; with them, {:.0} bytes per change",
        fold_bytes as f64 / (1024.0 * 1024.0),
        fold_time.as_secs_f64() * 1e3,
        (bytes + fold_bytes) as f64 / CHANGES as f64
    );
}
