//! The control plane under a slow API server: the real control loop, table publisher and
//! status writer against a stand-in that answers every write after 20 ms, with 10,000
//! RecordGroups (each over its own Service with 2 endpoints).
//!
//! Figures printed (nothing asserted):
//! - leader start to the first table, cold (lists and leadership at once) and as a follower
//!   taking over a published table (read back, one group changed);
//! - EndpointSlice change to the table write (the first table request, and the request that
//!   commits it: a delta, or a manifest when the change is published as a full table) while
//!   the new leader's full status backlog drains;
//! - RecordGroup edit (its TTL) to the first table request.
//!
//! Run: `cargo bench -p healthroute-operator --bench control_plane [-- GROUPS [CHANGES]]`

#[path = "../tests/support/fake_api.rs"]
#[allow(dead_code)]
mod fake_api;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fake_api::{FakeApi, Settings};
use futures::channel::mpsc::{UnboundedSender, unbounded};
use healthroute_api::RecordGroup;
use healthroute_compiler::ServedZones;
use healthroute_operator::controller::{self, Config, Input, OperatorMetrics, Readiness};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::Event;
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

const DELAY: Duration = Duration::from_millis(20);
const WAIT: Duration = Duration::from_secs(60);

fn group(i: usize) -> RecordGroup {
    group_with_ttl(i, None)
}

fn group_with_ttl(i: usize, ttl: Option<u32>) -> RecordGroup {
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": format!("g{i}"), "namespace": format!("ns{}", i % 100), "uid": format!("u{i}"), "generation": 1},
        "spec": {"name": format!("g{i}.example.com."), "type": "A", "routingPolicy": "Simple", "ttl": ttl,
                 "records": [{"setIdentifier": "pods", "service": {"name": format!("svc{i}")}}]}
    }))
    .expect("group")
}

fn slice(i: usize, ready: bool) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc{i}-x"), "namespace": format!("ns{}", i % 100),
                     "labels": {"kubernetes.io/service-name": format!("svc{i}")}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [format!("10.{}.{}.1", i / 256 % 256, i % 256)], "conditions": {"ready": true}},
                      {"addresses": [format!("10.{}.{}.2", i / 256 % 256, i % 256)], "conditions": {"ready": ready}}]
    }))
    .expect("slice")
}

struct Loop {
    inputs: UnboundedSender<Input>,
    leader: watch::Sender<bool>,
    stop: watch::Sender<bool>,
    metrics: OperatorMetrics,
    readiness: Arc<Readiness>,
}

fn start(client: kube::Client, leader: bool) -> Loop {
    let (inputs, rx) = unbounded();
    let (leader_tx, leader_rx) = watch::channel(leader);
    let (stop, stop_rx) = watch::channel(false);
    let metrics = OperatorMetrics::default();
    let readiness = Arc::new(Readiness::default());
    let mut config = Config::new(
        "healthroute",
        ServedZones::new(["example.com"]).expect("zone"),
    );
    // The stand-in never sends the watch events of the statuses it takes, so a re-check
    // would find every status missing and queue it again: not what a cluster does.
    config.status_recheck = Duration::from_secs(24 * 3600);
    tokio::spawn(controller::run_with(
        client,
        config,
        rx,
        leader_rx,
        metrics.clone(),
        readiness.clone(),
        stop_rx,
    ));
    Loop {
        inputs,
        leader: leader_tx,
        stop,
        metrics,
        readiness,
    }
}

fn list(l: &Loop, groups: usize) {
    let send = |i: Input| l.inputs.unbounded_send(i).expect("running");
    send(Input::Group(Event::Init));
    send(Input::Slice(Event::Init));
    for i in 0..groups {
        send(Input::Group(Event::InitApply(group(i))));
        send(Input::Slice(Event::InitApply(slice(i, true))));
    }
    send(Input::Group(Event::InitDone));
    send(Input::Slice(Event::InitDone));
    for e in [
        Input::Check(Event::Init),
        Input::Check(Event::InitDone),
        Input::Shift(Event::Init),
        Input::Shift(Event::InitDone),
        Input::Lease(Event::Init),
        Input::Lease(Event::InitDone),
        Input::Service(Event::<Service>::Init),
        Input::Service(Event::<Service>::InitDone),
        Input::Autoshift(Event::Init),
        Input::Autoshift(Event::InitDone),
        Input::Node(Event::Init),
        Input::Node(Event::InitDone),
    ] {
        send(e);
    }
}

/// Sends one change; the time until the first table request (a shard or a delta; the commit
/// when there is none) and until the request that commits it.
async fn to_table(api: &FakeApi, send: impl FnOnce()) -> (Duration, Duration) {
    let before = api.log().len();
    let sent = Instant::now();
    send();
    let manifest = api
        .wait_for("the change's table", before, WAIT, |s| s.is_table_commit())
        .await;
    let shard = api
        .log()
        .into_iter()
        .skip(before)
        .find(|s| s.is_shard_write() || s.is_delta_write())
        .map_or(manifest.at, |s| s.at);
    (shard - sent, manifest.at - sent)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

#[tokio::main]
async fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let groups = args.first().copied().unwrap_or(10_000);
    let changes = args.get(1).copied().unwrap_or(200);
    let settings = Settings {
        write_delay: DELAY,
        ..Default::default()
    };

    // 1. Cold: lists and leadership at once.
    let (api, client) = FakeApi::start(settings.clone());
    let t0 = Instant::now();
    let cold = start(client, true);
    list(&cold, groups);
    let first = api
        .wait_for("the first manifest", 0, WAIT, |s| s.is_manifest_write())
        .await;
    let shards = api.log().iter().filter(|s| s.is_shard_write()).count();
    println!(
        "{groups} RecordGroups, every write answered after {} ms: cold start to the first table {:.0} ms ({shards} shards)",
        DELAY.as_millis(),
        ms(first.at - t0)
    );

    // 2. EndpointSlice changes while the full status backlog drains.
    let mut to_shard = Vec::with_capacity(changes);
    let mut to_manifest = Vec::with_capacity(changes);
    let mut backlog_at_end = 0;
    let compiles_before = cold.metrics.control.compiles.load(Ordering::Relaxed);
    let compile_us_before = cold
        .metrics
        .control
        .compile_micros_sum
        .load(Ordering::Relaxed);
    let mut applied = Vec::with_capacity(changes);
    for n in 0..changes {
        let i = (n * 7919) % groups;
        let ready = (n / groups) % 2 == 1;
        applied.push((i, ready));
        let (shard, manifest) = to_table(&api, || {
            cold.inputs
                .unbounded_send(Input::Slice(Event::Apply(slice(i, ready))))
                .expect("running")
        })
        .await;
        to_shard.push(shard);
        to_manifest.push(manifest);
        backlog_at_end = cold.metrics.status.backlog.load(Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    to_shard.sort();
    to_manifest.sort();
    let compiles = cold.metrics.control.compiles.load(Ordering::Relaxed) - compiles_before;
    let compile_us = cold
        .metrics
        .control
        .compile_micros_sum
        .load(Ordering::Relaxed)
        - compile_us_before;
    println!(
        "compile after one change: {:.2} ms on average over {compiles} compiles",
        compile_us as f64 / compiles.max(1) as f64 / 1e3
    );
    println!(
        "EndpointSlice change -> first table request: p50 {:.1} ms, p99 {:.1} ms; -> committing request: p50 {:.1} ms, p99 {:.1} ms ({changes} changes; status backlog {} when the last was measured, {} statuses written)",
        ms(percentile(&to_shard, 50)),
        ms(percentile(&to_shard, 99)),
        ms(percentile(&to_manifest, 50)),
        ms(percentile(&to_manifest, 99)),
        backlog_at_end,
        cold.metrics.status.writes.load(Ordering::Relaxed),
    );

    // 2b. RecordGroup edits (a TTL set): what a spec change costs besides its own group.
    let mut edits = Vec::with_capacity(changes);
    for n in 0..changes {
        let i = (n * 7919 + 1) % groups;
        let ttl = Some(30 + 30 * (n / groups % 2) as u32);
        let (shard, _) = to_table(&api, || {
            cold.inputs
                .unbounded_send(Input::Group(Event::Apply(group_with_ttl(i, ttl))))
                .expect("running")
        })
        .await;
        edits.push(shard);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    edits.sort();
    println!(
        "RecordGroup edit -> first table request: p50 {:.1} ms, p99 {:.1} ms ({changes} edits)",
        ms(percentile(&edits, 50)),
        ms(percentile(&edits, 99)),
    );
    let _ = cold.stop.send(true);

    // 3. A follower takes over the table the first leader published, with one group changed.
    let (api2, client2) = FakeApi::start(settings);
    for name in api.configmap_names() {
        if let Some(cm) = api.configmap(&name) {
            api2.put_configmap(cm);
        }
    }
    let follower = start(client2, false);
    list(&follower, groups);
    // The follower watched the same changes.
    for (i, ready) in applied {
        follower
            .inputs
            .unbounded_send(Input::Slice(Event::Apply(slice(i, ready))))
            .expect("running");
    }
    // Synced as a follower: compiled, nothing written.
    while !follower.readiness.synced() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    follower
        .inputs
        .unbounded_send(Input::Slice(Event::Apply(slice(groups - 1, false))))
        .expect("running");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let t1 = Instant::now();
    follower.leader.send(true).expect("leader");
    let taken = api2
        .wait_for("the new leader's manifest", 0, WAIT, |s| {
            s.is_manifest_write()
        })
        .await;
    let earlier = api
        .log()
        .iter()
        .filter_map(|s| s.manifest_generation())
        .max();
    println!(
        "follower -> leader: first table {:.0} ms after taking the lease ({} shards found, {} rewritten; generation {:?}, the earlier leader's last {:?})",
        ms(taken.at - t1),
        api.configmap_names().len().saturating_sub(1),
        api2.log().iter().filter(|s| s.is_shard_write()).count(),
        taken.manifest_generation(),
        earlier,
    );
    let _ = follower.stop.send(true);
}
