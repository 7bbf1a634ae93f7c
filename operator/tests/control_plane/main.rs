//! The control loop at the Kubernetes boundary, with `tower-test` scenarios (kube's own
//! approach): the real loop, publisher and writer run against an API server stand-in that
//! checks and records each request, while a test feeds the watch events. This file holds
//! what every scenario shares (the fixtures, a running loop and its handles); the scenarios
//! are by topic:
//!
//! ```text
//!   publishing.rs   deltas, folds, shards in flight, a failing publish (SEM-P11, SEM-P5)
//!   leadership.rs   new leaders: generations, last good versions, read-back, watches
//!                   resuming (SEM-P3, SEM-P4, SEM-P6, SEM-P8)
//!   statuses.rs     statuses never hold back the table, are written back after another
//!                   writer, and Events (SEM-P7, SEM-P5)
//!   peers.rs        the Peer checks the leader writes (SEM-X4)
//!   autoshift.rs    the autoshift engines' status, resumed by a new leader (SEM-AS)
//! ```

mod autoshift;
mod leadership;
mod peers;
mod publishing;
mod statuses;

// Shared with the control-plane bench, which reads parts these tests do not.
#[allow(dead_code)]
#[path = "../support/mod.rs"]
mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::channel::mpsc::{UnboundedSender, unbounded};
use healthroute_api::{HealthCheck, RecordGroup, RecordGroupStatus};
use healthroute_compiler::ServedZones;
use healthroute_operator::controller::{self, Config, Input, OperatorMetrics, Readiness};
use healthroute_operator::publish::{DELETE_PACE, FOLD_AFTER_DELTAS};
use healthroute_table::contract::SERVED_GENERATION_ANNOTATION;
use healthroute_table::published::{self, DATA_KEY};
use healthroute_table::{RoutingTable, Value};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::watcher::Event;
use serde_json::{Value as Json, json};
use support::fake_api::{Answer, FakeApi, Seen, Settings};
use tokio::sync::watch;

const IN_TIME: Duration = Duration::from_secs(10);

fn rg(name: &str, dns_name: &str, ip: &str) -> RecordGroup {
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": name, "namespace": "shop", "generation": 1, "uid": format!("uid-{name}"),
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"name": dns_name, "type": "A", "routingPolicy": "Simple",
                 "records": [{"setIdentifier": "x", "values": [ip]}]}
    }))
    .expect("valid")
}

fn service_group(i: usize) -> RecordGroup {
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": format!("g{i}"), "namespace": "shop", "generation": 1, "uid": format!("uid-g{i}")},
        "spec": {"name": format!("g{i}.example.com."), "type": "A", "routingPolicy": "Simple",
                 "records": [{"setIdentifier": "pods", "service": {"name": format!("svc{i}")}}]}
    }))
    .expect("valid")
}

fn slice(i: usize, second_ready: bool) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc{i}-1"), "namespace": "shop", "labels": {"kubernetes.io/service-name": format!("svc{i}")}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [format!("10.0.{}.1", i % 250)], "conditions": {"ready": true}},
                      {"addresses": [format!("10.0.{}.2", i % 250)], "conditions": {"ready": second_ready}}]
    }))
    .expect("valid")
}

fn lease(served_generation: u64) -> Lease {
    serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "healthroute-checker-r1", "namespace": "healthroute",
                     "labels": {"healthroute.io/checker": "r1"},
                     "annotations": {SERVED_GENERATION_ANNOTATION: served_generation.to_string()}},
        "spec": {"holderIdentity": "r1", "renewTime": "2026-01-01T00:00:00.000000Z"}
    }))
    .expect("valid")
}

/// A running control loop and the handles a test drives it with.
struct Running {
    inputs: UnboundedSender<Input>,
    leader: watch::Sender<bool>,
    stop: watch::Sender<bool>,
    metrics: OperatorMetrics,
    readiness: Arc<Readiness>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn send(&self, input: Input) {
        self.inputs.unbounded_send(input).expect("loop running");
    }
    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(IN_TIME, self.task).await;
    }
}

/// Starts the loop as leader (or not) and lists `groups`, `slices` and `leases` as the
/// watches' first lists.
fn start(
    client: kube::Client,
    leader: bool,
    groups: Vec<RecordGroup>,
    slices: Vec<EndpointSlice>,
    leases: Vec<Lease>,
) -> Running {
    let running = start_unlisted(client, leader);
    running.list(groups, slices, leases);
    running
}

/// A leader over `n` Service groups (`service_group`, each Service's slice all ready) against
/// the API stand-in with `settings`, once it has written its first manifest.
async fn leader_published(settings: Settings, n: usize) -> (FakeApi, Running, Seen) {
    let (api, client) = FakeApi::start(settings);
    let running = start(
        client,
        true,
        (0..n).map(service_group).collect(),
        (0..n).map(|i| slice(i, true)).collect(),
        vec![],
    );
    let first = api
        .wait_for("the first manifest", 0, IN_TIME, |s| s.is_manifest_write())
        .await;
    (api, running, first)
}

/// Starts the loop with nothing listed yet (2 shards at least).
fn start_unlisted(client: kube::Client, leader: bool) -> Running {
    let mut config = Config::new(
        "healthroute",
        ServedZones::new(["example.com"]).expect("zone"),
    );
    config.shards = 2;
    start_with(client, leader, config)
}

/// Starts the loop with `config` and nothing listed yet.
fn start_with(client: kube::Client, leader: bool, config: Config) -> Running {
    let (inputs, rx) = unbounded();
    let (leader_tx, leader_rx) = watch::channel(leader);
    let (stop, stop_rx) = watch::channel(false);
    let metrics = OperatorMetrics::default();
    let readiness = Arc::new(Readiness::default());
    let task = tokio::spawn(controller::run_with(
        client,
        config,
        rx,
        leader_rx,
        metrics.clone(),
        readiness.clone(),
        stop_rx,
    ));
    Running {
        inputs,
        leader: leader_tx,
        stop,
        metrics,
        readiness,
        task,
    }
}

impl Running {
    /// The watches' first lists.
    fn list(&self, groups: Vec<RecordGroup>, slices: Vec<EndpointSlice>, leases: Vec<Lease>) {
        self.send(Input::Group(Event::Init));
        for g in groups {
            self.send(Input::Group(Event::InitApply(g)));
        }
        self.send(Input::Group(Event::InitDone));
        self.send(Input::Slice(Event::Init));
        for s in slices {
            self.send(Input::Slice(Event::InitApply(s)));
        }
        self.send(Input::Slice(Event::InitDone));
        self.send(Input::Lease(Event::Init));
        for l in leases {
            self.send(Input::Lease(Event::InitApply(l)));
        }
        self.send(Input::Lease(Event::InitDone));
        self.send(Input::Check(Event::Init));
        self.send(Input::Check(Event::InitDone));
        self.list_no_shifts_services_autoshifts_or_nodes();
    }
}

impl Running {
    /// The first lists of the ZonalShift, Service, ZonalAutoshift and Node watches: empty.
    fn list_no_shifts_services_autoshifts_or_nodes(&self) {
        self.send(Input::Shift(Event::Init));
        self.send(Input::Shift(Event::InitDone));
        self.send(Input::Service(Event::<Service>::Init));
        self.send(Input::Service(Event::<Service>::InitDone));
        self.send(Input::Autoshift(Event::Init));
        self.send(Input::Autoshift(Event::InitDone));
        self.send(Input::Node(Event::Init));
        self.send(Input::Node(Event::InitDone));
    }

    /// The watches' first lists of `groups` and nothing else, checks left to the test.
    fn list_but_checks(&self, groups: Vec<RecordGroup>) {
        self.send(Input::Group(Event::Init));
        for g in groups {
            self.send(Input::Group(Event::InitApply(g)));
        }
        self.send(Input::Group(Event::InitDone));
        self.send(Input::Slice(Event::Init));
        self.send(Input::Slice(Event::InitDone));
        self.send(Input::Lease(Event::Init));
        self.send(Input::Lease(Event::InitDone));
        self.list_no_shifts_services_autoshifts_or_nodes();
    }
}

/// Puts `table` on the stand-in as an earlier leader would have published it.
fn put_published(api: &FakeApi, table: &RoutingTable<Value>, shards: u32) {
    let encoded = published::encode(table, shards).expect("encodes");
    for (i, hash, json) in &encoded.shards {
        api.put_configmap(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("healthroute-table-{i}"), "namespace": "healthroute",
                         "labels": {"healthroute.io/table": "shard"}, "annotations": {"healthroute.io/content-hash": hash}},
            "data": {DATA_KEY: String::from_utf8_lossy(json)}
        }));
    }
    let manifest = serde_json::to_string(&encoded.manifest).expect("json");
    api.put_configmap(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "healthroute-table", "namespace": "healthroute",
                     "labels": {"healthroute.io/table": "manifest"},
                     "annotations": {"healthroute.io/content-hash": published::content_hash(manifest.as_bytes())}},
        "data": {DATA_KEY: manifest}
    }));
}

/// The table the stand-in holds, assembled as a resolver would (manifest, shards, deltas).
fn served_table(api: &FakeApi) -> RoutingTable<Value> {
    assert!(api.configmap("healthroute-table").is_some(), "a manifest");
    let mut a = published::Assembler::default();
    for name in api.configmap_names() {
        let cm = api.configmap(&name).expect("listed");
        let role = cm["metadata"]["labels"]["healthroute.io/table"].as_str();
        a.set(
            role,
            cm["data"][DATA_KEY].as_str().expect("data").as_bytes(),
        )
        .expect("readable");
    }
    a.assemble().expect("newer").expect("complete")
}

/// A compiled table of plain groups, as an earlier leader would have published it.
fn compiled(generation: u64, groups: &[RecordGroup]) -> RoutingTable<Value> {
    let mut index = healthroute_operator::index::Index::new(
        ServedZones::new(["example.com"]).expect("zone"),
        60,
    );
    for g in groups {
        index.apply(Input::Group(Event::Apply(g.clone())));
    }
    index.compiler.compile(jiff::Timestamp::now());
    RoutingTable {
        generation,
        groups: index.compiler.table().groups.clone(),
    }
}

fn condition<'a>(status: &'a Json, kind: &str) -> &'a Json {
    status["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Json::Null)
}
