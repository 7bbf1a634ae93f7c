//! The control loop at the Kubernetes boundary, with `tower-test` scenarios (kube's own
//! approach): the real loop, publisher and status writer run against an API server stand-in
//! that checks and records each request, while a test feeds the watch events.
//!
//! What is shown: status writes that hang or fail never hold back a table (SEM-P7); a new
//! leader continues above the published generation (SEM-P4) and keeps serving the last good
//! version of a rejected group (SEM-P6, SEM-S8); a failing publish is reported as such, in
//! status, Events and metrics (SEM-P5); a status another writer changes is written back
//! within the re-check interval (SEM-P5).

// Shared with the control-plane bench, which reads parts this file does not.
#[allow(dead_code)]
mod support {
    pub mod fake_api;
}

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::channel::mpsc::{UnboundedSender, unbounded};
use healthroute_api::SERVED_GENERATION_ANNOTATION;
use healthroute_api::{HealthCheck, RecordGroup, RecordGroupStatus};
use healthroute_compiler::ServedZones;
use healthroute_operator::controller::{self, Config, Input, OperatorMetrics, Readiness};
use healthroute_operator::publish::FOLD_AFTER_DELTAS;
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
        self.send(Input::Shift(Event::Init));
        self.send(Input::Shift(Event::InitDone));
        self.send(Input::Service(Event::<Service>::Init));
        self.send(Input::Service(Event::<Service>::InitDone));
        self.send(Input::Autoshift(Event::Init));
        self.send(Input::Autoshift(Event::InitDone));
        self.send(Input::Node(Event::Init));
        self.send(Input::Node(Event::InitDone));
    }
}

impl Running {
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
        self.send(Input::Shift(Event::Init));
        self.send(Input::Shift(Event::InitDone));
        self.send(Input::Service(Event::<Service>::Init));
        self.send(Input::Service(Event::<Service>::InitDone));
        self.send(Input::Autoshift(Event::Init));
        self.send(Input::Autoshift(Event::InitDone));
        self.send(Input::Node(Event::Init));
        self.send(Input::Node(Event::InitDone));
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

// SEM-P11: after the term's full table, each change is one delta holding the group that
// changed; past FOLD_AFTER_DELTAS the deltas are folded into the shards and a new manifest,
// between changes, and the deltas of the old manifest are deleted. What a resolver assembles
// from the objects on the server is the newest table at every step.
#[tokio::test]
async fn changes_are_deltas_folded_into_a_new_manifest() {
    let n = 40;
    let (api, running, _) = leader_published(Settings::default(), n).await;
    let changes = FOLD_AFTER_DELTAS + 3;
    for c in 0..changes {
        let before = api.log().len();
        let i = c % n;
        let ready = (c / n) % 2 == 1;
        running.send(Input::Slice(Event::Apply(slice(i, ready))));
        // The table commits that follow, until what a resolver assembles from the server has
        // the change (a fold's manifest, written between two changes, may come first).
        let mut skip = before;
        loop {
            let commit = api
                .wait_for("the change's table", skip, IN_TIME, |s| s.is_table_commit())
                .await;
            skip = api
                .log()
                .iter()
                .position(|s| s.path == commit.path && s.body == commit.body)
                .map_or(api.log().len(), |at| at + 1)
                .max(skip + 1);
            if c == 0 {
                assert!(commit.is_delta_write(), "{}", commit.path);
                let data = commit.body["data"][DATA_KEY].as_str().expect("data");
                let delta: published::Delta = serde_json::from_str(data).expect("delta");
                let keys: Vec<String> = delta.groups.keys().map(|k| k.to_string()).collect();
                assert_eq!(keys, [format!("shop/g{i}")], "the group that changed, only");
            }
            let g = format!(
                "{:?}",
                served_table(&api).groups[format!("shop/g{i}").as_str()].selection
            );
            if g.contains(&format!("10.0.{i}.2")) == ready {
                break;
            }
            assert!(commit.is_manifest_write(), "change {c}, its delta: {g}");
        }
    }
    // The fold: a second manifest, and only the deltas written on it remain.
    let fold = api
        .wait_for("the fold's manifest", 0, IN_TIME, |s| {
            s.is_manifest_write() && s.manifest_generation() > Some(1)
        })
        .await;
    let folded_at = fold.manifest_generation().expect("generation");
    assert!(folded_at > FOLD_AFTER_DELTAS as u64, "{folded_at}");
    let deadline = std::time::Instant::now() + IN_TIME;
    loop {
        let stale: Vec<String> = api
            .configmap_names()
            .into_iter()
            .filter(|name| {
                let cm = api.configmap(name).expect("listed");
                cm["metadata"]["labels"]["healthroute.io/table"] == "delta"
                    && cm["metadata"]["labels"]["healthroute.io/table-base"]
                        != folded_at.to_string().as_str()
            })
            .collect();
        if stale.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "old deltas left: {stale:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last = changes - 1;
    let g = format!(
        "{:?}",
        served_table(&api).groups[format!("shop/g{}", last % n).as_str()].selection
    );
    assert_eq!(
        g.contains(&format!("10.0.{}.2", last % n)),
        (last / n) % 2 == 1,
        "{g}"
    );
    running.stop().await;
}

// SEM-P11: a full table's shards are written a few at a time, the manifest once all are:
// with every table write left unanswered, exactly 4 shard writes are in flight and no
// manifest follows them.
#[tokio::test]
async fn a_full_tables_shards_are_written_four_at_a_time() {
    let (api, client) = FakeApi::start(Settings {
        tables: Answer::Hang,
        ..Settings::default()
    });
    let mut config = Config::new(
        "healthroute",
        ServedZones::new(["example.com"]).expect("zone"),
    );
    config.shards = 8;
    let running = start_with(client, true, config);
    let n = 40;
    running.list(
        (0..n).map(service_group).collect(),
        (0..n).map(|i| slice(i, true)).collect(),
        vec![],
    );
    let shard_writes = |api: &FakeApi| api.log().iter().filter(|s| s.is_shard_write()).count();
    for _ in 0..100 {
        if shard_writes(&api) >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(shard_writes(&api), 4, "{:?}", api.log());
    assert!(!api.log().iter().any(|s| s.is_manifest_write()));
    running.task.abort(); // its writes never end
}

// SEM-P11: a change that arrives while a fold's shard write is in flight does not wait for
// it: the write is cut short, the change goes out as a delta on the old manifest, and the fold
// writes the shard again afterwards and ends with a manifest that serves every change. Here
// shard writes hang until told otherwise, so a change that waited for one would never be
// written at all.
#[tokio::test]
async fn a_change_during_a_folds_shard_write_goes_out_at_once() {
    let n = 40;
    let (api, running, _) = leader_published(Settings::default(), n).await;
    api.set(|s| s.shard_write_delay = Duration::from_secs(3600));
    // One change at a time until the fold starts: every group unready, then the first ones
    // ready again (change c: group c % n, ready on the second round).
    let mut folding = 0;
    for c in 0..FOLD_AFTER_DELTAS {
        folding = api.log().len();
        running.send(Input::Slice(Event::Apply(slice(c % n, c >= n))));
        api.wait_for("the change's delta", folding, IN_TIME, |s| {
            s.is_delta_write()
        })
        .await;
    }
    api.wait_for("the fold's first shard write", folding, IN_TIME, |s| {
        s.is_shard_write()
    })
    .await;
    // g30 ready again while that write hangs: it goes out at once, as a delta.
    running.send(Input::Slice(Event::Apply(slice(30, true))));
    api.wait_for("the change during the fold", folding, IN_TIME, |s| {
        s.is_delta_write() && s.body.to_string().contains("shop/g30")
    })
    .await;
    let g30 = format!("{:?}", served_table(&api).groups["shop/g30"].selection);
    assert!(g30.contains("10.0.30.2"), "served at once: {g30}");
    // Shard writes answer again; the next change cuts the hanging write short too, and the
    // fold then ends with a manifest that serves both changes.
    api.set(|s| s.shard_write_delay = Duration::ZERO);
    running.send(Input::Slice(Event::Apply(slice(31, true))));
    api.wait_for("the fold's manifest", folding, IN_TIME, |s| {
        s.is_manifest_write() && s.manifest_generation() > Some(1)
    })
    .await;
    let table = served_table(&api);
    for i in 0..n {
        let g = format!(
            "{:?}",
            table.groups[format!("shop/g{i}").as_str()].selection
        );
        let ready = i < FOLD_AFTER_DELTAS - n || i == 30 || i == 31;
        assert_eq!(g.contains(&format!("10.0.{i}.2")), ready, "g{i}: {g}");
    }
    running.stop().await;
}

// SEM-P7 SEM-P1: with every status write hanging, and then failing, an EndpointSlice change
// still reaches the table at once; statuses wait, the table does not.
#[tokio::test]
async fn status_writes_that_hang_or_fail_never_hold_back_the_table() {
    let n = 300;
    let settings = Settings {
        statuses: Answer::Hang,
        ..Default::default()
    };
    let (api, running, first) = leader_published(settings, n).await;
    assert_eq!(first.manifest_generation(), Some(1));
    // The status writer is stuck on its first patches, which hang.
    api.wait_for("a status write", 0, IN_TIME, |s| s.is_status_write())
        .await;

    let before = api.log().len();
    running.send(Input::Slice(Event::Apply(slice(7, false))));
    let second = api
        .wait_for("the table after a readiness change", before, IN_TIME, |s| {
            s.is_table_commit()
        })
        .await;
    assert_eq!(second.manifest_generation(), Some(2));
    let g7 = served_table(&api);
    let g7 = format!("{:?}", g7.groups["shop/g7"].selection);
    assert!(g7.contains("10.0.7.1") && !g7.contains("10.0.7.2"), "{g7}");
    assert_eq!(
        running.metrics.status.writes.load(Ordering::Relaxed),
        0,
        "no status write has been answered"
    );
    assert!(
        running.metrics.status.backlog.load(Ordering::Relaxed) as usize >= n - 8,
        "the backlog is still there"
    );

    // Now status writes fail instead: the table still goes out at once.
    api.set(|s| s.statuses = Answer::Fail(500));
    let before = api.log().len();
    running.send(Input::Slice(Event::Apply(slice(8, false))));
    let third = api
        .wait_for("the table while statuses fail", before, IN_TIME, |s| {
            s.is_table_commit()
        })
        .await;
    assert_eq!(third.manifest_generation(), Some(3));
    running.stop().await;
}

// SEM-P4 SEM-P11: a new leader whose process counted nothing yet continues above the
// generation it finds published, and above the generation a resolver says it serves. Its
// first table is a new manifest; where the shards on the server are those the published
// manifest names, it names them again and carries what changed in a catch-up delta, without
// rewriting a shard; where they are not (a shard left by a leader that stopped before its
// manifest), the shards are written.
#[tokio::test]
async fn a_new_leader_continues_above_the_published_generation() {
    let old = [rg("api", "api.example.com.", "192.0.2.1")];
    for (lease_generation, expected, stray_shard) in
        [(None, 42, false), (Some(50), 51, false), (None, 42, true)]
    {
        let (api, client) = FakeApi::start(Settings::default());
        put_published(&api, &compiled(41, &old), 2);
        if stray_shard {
            let mut cm = api.configmap("healthroute-table-0").expect("shard 0");
            cm["metadata"]["annotations"]["healthroute.io/content-hash"] = json!("other");
            api.put_configmap(cm);
        }
        let leases = lease_generation.map(lease).into_iter().collect();
        // The group was edited while no leader was running.
        let running = start(
            client,
            true,
            vec![rg("api", "api.example.com.", "192.0.2.2")],
            vec![],
            leases,
        );
        let manifest = api
            .wait_for("a manifest", 0, IN_TIME, |s| s.is_manifest_write())
            .await;
        assert_eq!(manifest.manifest_generation(), Some(expected));
        let shards_written = api.log().iter().filter(|s| s.is_shard_write()).count();
        assert_eq!(shards_written > 0, stray_shard, "{:?}", api.log());
        let table = served_table(&api);
        assert!(format!("{:?}", table.groups["shop/api"]).contains("192.0.2.2"));
        running.stop().await;
    }
}

// SEM-P6 SEM-S8: a group renamed outside every zone under an earlier leader keeps serving its
// last good version under the next one, which reads it back from the published table; its
// status says so.
#[tokio::test]
async fn a_new_leader_keeps_the_last_good_version_of_a_rejected_group() {
    let (api, client) = FakeApi::start(Settings::default());
    let good = rg("api", "api.example.com.", "192.0.2.1");
    put_published(&api, &compiled(7, std::slice::from_ref(&good)), 2);
    let mut renamed = good.clone();
    renamed.spec.name = "api.elsewhere.org.".into();
    renamed.metadata.generation = Some(2);
    // A new group makes the new leader publish; the rejected one must ride along unchanged.
    // The read-back is done before the watches have listed anything (a cold start).
    let running = start_unlisted(client, true);
    api.wait_for("the read-back", 0, IN_TIME, |s| s.method == "GET")
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    running.list(
        vec![renamed, rg("web", "web.example.com.", "192.0.2.9")],
        vec![],
        vec![],
    );
    let manifest = api
        .wait_for("a manifest", 0, IN_TIME, |s| s.is_manifest_write())
        .await;
    assert_eq!(manifest.manifest_generation(), Some(8));
    let table = served_table(&api);
    assert_eq!(
        table.generation, 9,
        "the new manifest, and its catch-up delta"
    );
    let served = format!(
        "{:?}",
        table.groups.get("shop/api").expect("api still served")
    );
    assert!(
        served.contains("192.0.2.1") && served.contains("api.example.com."),
        "{served}"
    );
    assert!(table.groups.contains_key("shop/web"));

    let status = api
        .wait_for("api's status", 0, IN_TIME, |s| {
            s.is_status_write() && s.path.contains("/recordgroups/api/")
        })
        .await
        .body;
    assert_eq!(status["status"]["served"], true);
    assert_eq!(
        status["status"]["servedGeneration"], 7,
        "unchanged since generation 7"
    );
    assert_eq!(condition(&status, "Compiled")["reason"], "ZoneNotServed");
    let ready = condition(&status, "Ready");
    assert_eq!(ready["status"], "True");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("last good version")),
        "{ready}"
    );
    running.stop().await;
}

// SEM-P5: while the table cannot be written, the edited group's status says its new version is
// not served (and what is), an Event says so, the failure is counted and /readyz fails; once
// the write succeeds, all of it turns back.
#[tokio::test]
async fn a_failing_publish_is_reported_as_such() {
    let (api, client) = FakeApi::start(Settings::default());
    let running = start(
        client,
        true,
        vec![rg("api", "api.example.com.", "192.0.2.1")],
        vec![],
        vec![],
    );
    let status = |s: &Seen| s.is_status_write() && s.path.contains("/recordgroups/api/");
    let first = api.wait_for("api's first status", 0, IN_TIME, status).await;
    assert_eq!(condition(&first.body, "Ready")["status"], "True");
    assert_eq!(first.body["status"]["servedGeneration"], 1);

    api.set(|s| s.tables = Answer::Fail(500));
    let before = api.log().len();
    let mut edited = rg("api", "api.example.com.", "192.0.2.2");
    edited.metadata.generation = Some(2);
    running.send(Input::Group(Event::Apply(edited.clone())));
    let failed = api
        .wait_for(
            "api's status after a failed publish",
            before,
            IN_TIME,
            status,
        )
        .await
        .body;
    let ready = condition(&failed, "Ready");
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("PublishFailed"))
    );
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("500")
            && message.contains("still serve the version of table generation 1"),
        "{message}"
    );
    assert_eq!(
        failed["status"]["served"], true,
        "the old version is served"
    );
    assert_eq!(failed["status"]["servedGeneration"], 1);
    let event = api
        .wait_for("a PublishFailed Event", before, IN_TIME, |s| {
            s.is_event() && s.body["reason"] == "PublishFailed"
        })
        .await;
    assert_eq!(event.body["regarding"]["name"], "api");
    assert_eq!(event.body["type"], "Warning");
    assert!(running.metrics.publisher.failures.load(Ordering::Relaxed) >= 1);
    assert!(
        running
            .readiness
            .not_ready()
            .is_some_and(|why| why.contains("cannot be published")),
        "/readyz fails while the table cannot be published"
    );

    // The API server takes writes again: the retry publishes, and the status follows.
    api.set(|s| s.tables = Answer::Ok);
    let recovered = api
        .wait_for("api's status once published", before, IN_TIME, |s| {
            status(s) && condition(&s.body, "Ready")["status"] == "True"
        })
        .await
        .body;
    assert_eq!(recovered["status"]["servedGeneration"], 2);
    assert_eq!(
        served_table(&api).groups["shop/api"].selection,
        compiled(0, &[edited]).groups["shop/api"].selection
    );
    api.wait_for("a Published Event", before, IN_TIME, |s| {
        s.is_event() && s.body["reason"] == "Published"
    })
    .await;
    assert_eq!(running.readiness.not_ready(), None);
    running.stop().await;
}

// SEM-P5: a status that another writer changes is written back within the re-check
// interval, though the object's spec did not change; a status the object shows is not
// written again.
#[tokio::test]
async fn a_status_changed_by_another_writer_is_written_back() {
    let (api, client) = FakeApi::start(Settings::default());
    let mut config = Config::new(
        "healthroute",
        ServedZones::new(["example.com"]).expect("zone"),
    );
    config.shards = 2;
    let recheck = Duration::from_millis(300);
    config.status_recheck = recheck;
    let running = start_with(client, true, config);
    let group = rg("api", "api.example.com.", "192.0.2.1");
    running.list(vec![group.clone()], vec![], vec![]);
    let status = |s: &Seen| s.is_status_write() && s.path.contains("/recordgroups/api/");
    let first = api.wait_for("api's status", 0, IN_TIME, status).await;
    let shown: RecordGroupStatus =
        serde_json::from_value(first.body["status"].clone()).expect("a RecordGroup status");
    assert!(shown.served);

    // The watch brings the write back; from then on the object shows it.
    let mut echoed = group.clone();
    echoed.status = Some(shown.clone());
    running.send(Input::Group(Event::Apply(echoed)));
    tokio::time::sleep(recheck * 2).await;
    let quiet = api.log().len();
    tokio::time::sleep(recheck * 3).await;
    assert!(
        !api.log().iter().skip(quiet).any(status),
        "a status the object shows is not written again: {:#?}",
        &api.log()[quiet..]
    );

    // Another writer says the group is not served.
    let mut overwritten = group.clone();
    overwritten.status = Some(RecordGroupStatus {
        served: false,
        ..shown.clone()
    });
    let before = api.log().len();
    running.send(Input::Group(Event::Apply(overwritten)));
    let repaired = api
        .wait_for(
            "api's status written back",
            before,
            recheck + Duration::from_secs(1),
            status,
        )
        .await;
    assert_eq!(repaired.body["status"]["served"], true);
    assert_eq!(
        repaired.body["status"], first.body["status"],
        "what the leader wrote, transition times included"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !api.log().iter().skip(before).any(|s| s.is_event()),
        "a repair records no Event"
    );
    assert!(running.metrics.status.repairs.load(Ordering::Relaxed) >= 1);
    running.stop().await;
}

// SEM-P3: a replica that is not the leader writes nothing and compiles nothing, and one that
// becomes leader starts by reading back what is published; one that steps down forgets its
// outputs and compiles again only when it leads again.
#[tokio::test]
async fn only_the_leader_writes_and_a_term_starts_with_a_read_back() {
    let (api, client) = FakeApi::start(Settings::default());
    let running = start(
        client,
        false,
        vec![rg("api", "api.example.com.", "192.0.2.1")],
        vec![],
        vec![],
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(api.log().is_empty(), "a follower sent {:?}", api.log());
    let compiles = || running.metrics.control.compiles.load(Ordering::Relaxed);
    assert_eq!(compiles(), 0, "a follower compiled");
    running.leader.send(true).expect("leader");
    api.wait_for("a manifest", 0, IN_TIME, |s| s.is_manifest_write())
        .await;
    let log = api.log();
    assert_eq!(log[0].method, "GET", "the term starts by reading back");
    assert!(log[0].path.contains("configmaps"), "{}", log[0].path);
    assert!(compiles() > 0);
    // Stepping down: no compile until the next term, which publishes the edit made meanwhile.
    running.leader.send(false).expect("follower");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after_term = compiles();
    running.send(Input::Group(Event::Apply(rg(
        "api",
        "api.example.com.",
        "192.0.2.7",
    ))));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(compiles(), after_term, "a follower compiled");
    let before = api.log().len();
    running.leader.send(true).expect("leader");
    api.wait_for("the next term's table", before, IN_TIME, |s| {
        s.is_table_commit()
    })
    .await;
    let table = served_table(&api);
    assert!(format!("{:?}", table.groups["shop/api"]).contains("192.0.2.7"));
    running.stop().await;
}

fn is_init_done(input: &Input) -> bool {
    matches!(
        input,
        Input::Group(Event::InitDone)
            | Input::Check(Event::InitDone)
            | Input::Shift(Event::InitDone)
            | Input::Slice(Event::InitDone)
            | Input::Service(Event::InitDone)
            | Input::Autoshift(Event::InitDone)
            | Input::Node(Event::InitDone)
            | Input::Lease(Event::InitDone)
    )
}

/// How many watches `controller::inputs` runs (ZonalAutoshifts and Nodes made 6 into 8).
const WATCHES: usize = 8;

// SEM-P8: after an outage, every watch lists again within a second of the API server
// answering (bounded backoff), however long the outage lasted. Virtual time: the check is
// exact, not a race against the machine's load.
#[tokio::test(start_paused = true)]
async fn watches_resume_within_a_second_of_the_api_server_returning() {
    use futures::StreamExt;
    use http::{Request, Response};
    use kube::client::Body;
    use tokio::time::Instant;

    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "healthroute");
    let outage = Duration::from_secs(77);
    let back_at = Instant::now() + outage;
    let firsts = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<
        String,
        Duration,
    >::new()));
    let seen = firsts.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let path = req.uri().path().to_owned();
            let query = req.uri().query().unwrap_or_default().to_owned();
            let watching = query.contains("watch=true");
            // A streaming list: the initial events (none here), then the bookmark that ends them.
            let initial = query.contains("sendInitialEvents=true");
            if Instant::now() < back_at {
                let mut r = Response::new(Body::from(
                    serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503, "reason": "ServiceUnavailable", "message": "apiserver is restarting"}))
                        .expect("json"),
                ));
                *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                send.send_response(r);
            } else if initial {
                seen.lock()
                    .expect("lock")
                    .entry(path)
                    .or_insert_with(|| Instant::now() - back_at);
                let end = json!({"type": "BOOKMARK", "object": {"kind": "Status", "apiVersion": "v1",
                    "metadata": {"resourceVersion": "1", "annotations": {"k8s.io/initial-events-end": "true"}}}});
                send.send_response(Response::new(Body::from(format!("{end}\n").into_bytes())));
            } else if watching {
                held.push(send); // a watch that stays open
            } else {
                seen.lock()
                    .expect("lock")
                    .entry(path)
                    .or_insert_with(|| Instant::now() - back_at);
                send.send_response(Response::new(Body::from(
                    serde_json::to_vec(&json!({"metadata": {"resourceVersion": "1"}, "items": []}))
                        .expect("json"),
                )));
            }
        }
    });
    let mut inputs = controller::inputs(&client, "healthroute");
    let mut listed = 0;
    let deadline = Instant::now() + outage + Duration::from_secs(30);
    while listed < WATCHES && Instant::now() < deadline {
        match tokio::time::timeout_at(deadline, inputs.next()).await {
            Ok(Some(input)) => listed += usize::from(is_init_done(&input)),
            _ => break,
        }
    }
    let firsts = firsts.lock().expect("lock").clone();
    assert_eq!(
        firsts.len(),
        WATCHES,
        "every watch listed again: {firsts:?}"
    );
    for (path, after) in firsts {
        assert!(
            after <= Duration::from_secs(1),
            "{path} listed {after:?} after the API server was back"
        );
    }
}

fn pods_slice(service: &str, ready: bool) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-1"), "namespace": "shop", "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [format!("10.9.{}.1", service.len())], "conditions": {"ready": ready}}]
    }))
    .expect("valid")
}

// One Event per fact, as sent to the API server: three records of one group turning unhealthy
// are three Events, each naming its record in its note and in `related` (the aggregation
// key); the last resort is one more; an alias cycle is an Event with its reason.
#[tokio::test]
async fn events_name_each_record_and_each_rejection() {
    let (api, client) = FakeApi::start(Settings::default());
    let group: RecordGroup = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": "web", "namespace": "shop", "generation": 1, "uid": "uid-web"},
        "spec": {"name": "web.example.com.", "type": "A", "routingPolicy": "MultiValue", "records": [
            {"setIdentifier": "a", "service": {"name": "svca"}},
            {"setIdentifier": "b", "service": {"name": "svcbb"}},
            {"setIdentifier": "c", "service": {"name": "svcccc"}}]}
    }))
    .expect("valid");
    let services = ["svca", "svcbb", "svcccc"];
    let running = start(
        client,
        true,
        vec![group],
        services.iter().map(|s| pods_slice(s, true)).collect(),
        vec![],
    );
    api.wait_for("the first status", 0, IN_TIME, |s| {
        s.is_status_write() && s.path.contains("/recordgroups/web/status")
    })
    .await;
    let before = api.log().len();
    for s in services {
        running.send(Input::Slice(Event::Apply(pods_slice(s, false))));
    }
    api.wait_for("the LastResortEntered Event", before, IN_TIME, |s| {
        s.is_event() && s.body["reason"] == "LastResortEntered"
    })
    .await;
    let events: Vec<Json> = api
        .log()
        .iter()
        .skip(before)
        .filter(|s| s.is_event() && s.body["reason"] == "RecordUnhealthy")
        .map(|s| s.body.clone())
        .collect();
    let mut named: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["related"]["fieldPath"].as_str().unwrap_or("").to_owned(),
                e["note"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    named.sort();
    assert_eq!(named.len(), 3, "{events:#?}");
    for ((path, note), id) in named.iter().zip(["a", "b", "c"]) {
        assert_eq!(path, &format!("spec.records{{{id}}}"));
        assert!(
            note.starts_with(&format!("record {id} is unhealthy: service ")),
            "{note}"
        );
        assert!(!note.contains("Some("), "{note}");
    }
    for e in &events {
        assert_eq!(e["regarding"]["name"], "web");
        assert_eq!(e["type"], "Warning");
    }

    // A rejection is an Event with its reason.
    let before = api.log().len();
    let cyclic = |name: &str, target: &str| -> RecordGroup {
        serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
            "metadata": {"name": name, "namespace": "shop", "generation": 1, "uid": format!("uid-{name}")},
            "spec": {"name": format!("{name}.example.com."), "type": "A", "routingPolicy": "Simple",
                     "records": [{"setIdentifier": "x", "alias": {"recordGroup": target}}]}
        }))
        .expect("valid")
    };
    running.send(Input::Group(Event::Apply(cyclic("ping", "pong"))));
    running.send(Input::Group(Event::Apply(cyclic("pong", "ping"))));
    let event = api
        .wait_for("an AliasCycle Event", before, IN_TIME, |s| {
            s.is_event() && s.body["reason"] == "AliasCycle"
        })
        .await;
    assert_eq!(event.body["type"], "Warning");
    assert!(
        event.body["note"].as_str().is_some_and(
            |n| n.starts_with("this version is rejected: ") && n.contains("leads back")
        ),
        "{}",
        event.body
    );
    running.stop().await;
}

/// A group whose secondary answers what `shop/api` answers in the peer cluster `west`.
fn peer_group(name: &str) -> RecordGroup {
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": name, "namespace": "shop", "generation": 1, "uid": format!("uid-{name}")},
        "spec": {"name": format!("{name}.example.com."), "type": "A", "routingPolicy": "Failover",
                 "records": [
                     {"setIdentifier": "here", "failover": {"role": "Primary"}, "values": ["192.0.2.1"]},
                     {"setIdentifier": "west", "failover": {"role": "Secondary"},
                      "peer": {"cluster": "west", "recordGroup": "shop/api"}}]}
    }))
    .expect("valid")
}

const PEER_CHECK_PATH: &str =
    "/apis/healthroute.io/v1alpha1/namespaces/shop/healthchecks/peer.west.shop.api?";

// SEM-X4: the leader applies the Peer check a group's peer source needs, labelled and owned
// by every group that names it, under its own field manager; when the last group is gone,
// it deletes the check (only the object it saw, by uid).
#[tokio::test]
async fn the_leader_creates_the_peer_check_and_deletes_it_with_the_last_group() {
    let (api, client) = FakeApi::start(Settings::default());
    let running = start(
        client,
        true,
        vec![peer_group("www"), peer_group("shop")],
        vec![],
        vec![],
    );
    let applied = api
        .wait_for("the Peer check's apply", 0, IN_TIME, |s| {
            s.method == "PATCH" && s.path.starts_with(PEER_CHECK_PATH)
        })
        .await;
    assert!(
        applied
            .path
            .contains("fieldManager=healthroute-operator%2Fpeers")
            && applied.path.contains("force=true"),
        "{}",
        applied.path
    );
    let body = &applied.body;
    assert_eq!(body["kind"], "HealthCheck");
    assert_eq!(
        body["metadata"]["labels"]["healthroute.io/peer-check"],
        "true"
    );
    assert_eq!(body["spec"]["type"], "Peer");
    assert_eq!(
        body["spec"]["peer"],
        json!({"cluster": "west", "recordGroup": "shop/api"})
    );
    assert_eq!(
        body["metadata"]["ownerReferences"],
        json!([
            {"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "name": "shop", "uid": "uid-shop"},
            {"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "name": "www", "uid": "uid-www"},
        ])
    );
    let checks = api.log().iter().filter(|s| s.is_check_write()).count();
    assert_eq!(checks, 1, "one check for both groups");

    // The watch sees the check as applied; nothing more is written for it.
    let mut seen = body.clone();
    seen["metadata"]["uid"] = json!("uid-check");
    let check: HealthCheck = serde_json::from_value(seen).expect("a HealthCheck");
    running.send(Input::Check(Event::Apply(check.clone())));
    running.send(Input::Group(Event::Delete(peer_group("shop"))));
    let shrunk = api
        .wait_for("the apply without the deleted owner", 0, IN_TIME, |s| {
            s.method == "PATCH"
                && s.path.starts_with(PEER_CHECK_PATH)
                && s.body["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|o| o.len() == 1)
        })
        .await;
    assert_eq!(shrunk.body["metadata"]["ownerReferences"][0]["name"], "www");
    let mut seen = shrunk.body.clone();
    seen["metadata"]["uid"] = json!("uid-check");
    running.send(Input::Check(Event::Apply(
        serde_json::from_value(seen).expect("a HealthCheck"),
    )));

    let before = api.log().len();
    running.send(Input::Group(Event::Delete(peer_group("www"))));
    let deleted = api
        .wait_for("the Peer check's delete", before, IN_TIME, |s| {
            s.method == "DELETE"
        })
        .await;
    assert!(
        deleted
            .path
            .starts_with(PEER_CHECK_PATH.trim_end_matches('?')),
        "{}",
        deleted.path
    );
    assert_eq!(deleted.body["preconditions"]["uid"], "uid-check");
    running.stop().await;
}

// SEM-X4: a HealthCheck of that name without the operator's label is the user's: the leader
// neither applies over it nor deletes it.
#[tokio::test]
async fn a_users_peer_check_is_used_as_it_is() {
    let (api, client) = FakeApi::start(Settings::default());
    let running = start_unlisted(client, true);
    let users: HealthCheck = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
        "metadata": {"name": "peer.west.shop.api", "namespace": "shop", "uid": "uid-users"},
        "spec": {"type": "Peer", "peer": {"cluster": "west", "recordGroup": "shop/api"},
                 "requestIntervalSeconds": 30, "failureThreshold": 5}
    }))
    .expect("valid");
    // The check is in the first list: the first plan already sees it.
    running.send(Input::Check(Event::Init));
    running.send(Input::Check(Event::InitApply(users)));
    running.send(Input::Check(Event::InitDone));
    running.list_but_checks(vec![peer_group("www")]);
    api.wait_for("the first manifest", 0, IN_TIME, |s| s.is_manifest_write())
        .await;
    running.send(Input::Group(Event::Delete(peer_group("www"))));
    let before = api.log().len();
    api.wait_for("the table without www", before, IN_TIME, |s| {
        s.is_table_commit()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writes: Vec<String> = api
        .log()
        .iter()
        .filter(|s| s.is_check_write())
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert!(writes.is_empty(), "{writes:#?}");
    running.stop().await;
}

// SEM-P7 SEM-X4: with every Peer-check write hanging, a readiness change still reaches the
// table at once.
#[tokio::test]
async fn peer_check_writes_that_hang_never_hold_back_the_table() {
    let (api, client) = FakeApi::start(Settings {
        checks: Answer::Hang,
        ..Default::default()
    });
    let mut groups: Vec<RecordGroup> = (0..20).map(service_group).collect();
    groups.push(peer_group("www"));
    let running = start(
        client,
        true,
        groups,
        (0..20).map(|i| slice(i, true)).collect(),
        vec![],
    );
    api.wait_for("the Peer check's apply", 0, IN_TIME, |s| s.is_check_write())
        .await;
    api.wait_for("the first manifest", 0, IN_TIME, |s| s.is_manifest_write())
        .await;
    let before = api.log().len();
    running.send(Input::Slice(Event::Apply(slice(7, false))));
    api.wait_for("the table after a readiness change", before, IN_TIME, |s| {
        s.is_table_commit()
    })
    .await;
    assert_eq!(
        running.metrics.peers.writer.writes.load(Ordering::Relaxed),
        0
    );
    running.stop().await;
}

// Zonal autoshift (SEMANTICS AS): three frontend groups, each a Service with one endpoint in
// each of three zones, and a ZonalAutoshift `frontend` over them.

const FRONTEND: [&str; 3] = ["api", "web", "search"];
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

fn frontend_group(i: usize) -> RecordGroup {
    let name = FRONTEND[i];
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": name, "namespace": "shop", "generation": 1, "uid": format!("uid-{name}"),
                     "labels": {"tier": "frontend"}},
        "spec": {"name": format!("{name}.example.com."), "type": "A", "routingPolicy": "MultiValue",
                 "records": [{"setIdentifier": "pods", "service": {"name": format!("svc-{name}")}}]}
    }))
    .expect("valid")
}

/// The address of group `i`'s endpoint in zone `z`.
fn zonal_ip(i: usize, z: usize) -> String {
    format!("10.7.{i}.{}", z + 1)
}

/// Group `i`'s endpoints, one per zone; zone-a's ready or not.
fn zonal_slice(i: usize, zone_a_ready: bool) -> EndpointSlice {
    let name = FRONTEND[i];
    let endpoints: Vec<Json> = ZONES
        .iter()
        .enumerate()
        .map(|(z, zone)| {
            json!({"addresses": [zonal_ip(i, z)], "zone": zone,
                   "conditions": {"ready": z != 0 || zone_a_ready}})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc-{name}-1"), "namespace": "shop",
                     "labels": {"kubernetes.io/service-name": format!("svc-{name}")}},
        "addressType": "IPv4",
        "endpoints": endpoints
    }))
    .expect("valid")
}

/// The practice runs' outcome alarm: healthy (not in ALARM), as its last status says.
fn outcome_alarm() -> HealthCheck {
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
        "metadata": {"name": "outcome", "namespace": "shop", "generation": 1},
        "spec": {"type": "TCP", "target": {"address": "127.0.0.1", "port": 9}},
        "status": {"healthy": true}
    }))
    .expect("valid")
}

/// The ZonalAutoshift over the frontend groups, with a practice run request and a status.
fn frontend_autoshift(
    request: Option<&str>,
    status: Option<Json>,
) -> healthroute_api::ZonalAutoshift {
    let annotations = match request {
        Some(r) => json!({"healthroute.io/practice-run": r}),
        None => json!({}),
    };
    // Made a minute ago: its first scheduled run is a cadence away (AS6).
    let created = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_secs(60))
        .expect("in range")
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let mut object = json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalAutoshift",
        "metadata": {"name": "frontend", "namespace": "shop", "generation": 1, "uid": "uid-frontend",
                     "creationTimestamp": created, "annotations": annotations},
        "spec": {"target": {"selector": {"matchLabels": {"tier": "frontend"}}}, "autoshift": "Enabled",
                 "detection": {"holdTime": "1h"},
                 "practiceRun": {"outcomeAlarms": [{"name": "outcome"}], "cadence": "168h"}}
    });
    if let Some(status) = status {
        object["status"] = status;
    }
    serde_json::from_value(object).expect("valid")
}

impl Running {
    /// The first lists of every watch: the frontend groups and their slices (zone-a ready or
    /// not), the outcome alarm and the ZonalAutoshift.
    fn list_frontend(&self, zone_a_ready: bool, autoshift: healthroute_api::ZonalAutoshift) {
        self.send(Input::Group(Event::Init));
        for i in 0..FRONTEND.len() {
            self.send(Input::Group(Event::InitApply(frontend_group(i))));
        }
        self.send(Input::Group(Event::InitDone));
        self.send(Input::Slice(Event::Init));
        for i in 0..FRONTEND.len() {
            self.send(Input::Slice(Event::InitApply(zonal_slice(i, zone_a_ready))));
        }
        self.send(Input::Slice(Event::InitDone));
        self.send(Input::Check(Event::Init));
        self.send(Input::Check(Event::InitApply(outcome_alarm())));
        self.send(Input::Check(Event::InitDone));
        self.send(Input::Autoshift(Event::Init));
        self.send(Input::Autoshift(Event::InitApply(autoshift)));
        self.send(Input::Autoshift(Event::InitDone));
        for input in [
            Input::Lease(Event::Init),
            Input::Lease(Event::InitDone),
            Input::Shift(Event::Init),
            Input::Shift(Event::InitDone),
            Input::Service(Event::<Service>::Init),
            Input::Service(Event::<Service>::InitDone),
            Input::Node(Event::Init),
            Input::Node(Event::InitDone),
        ] {
            self.send(input);
        }
    }
}

fn is_autoshift_status(s: &support::fake_api::Seen) -> bool {
    s.is_status_write() && s.path.contains("/zonalautoshifts/frontend/status")
}

/// Whether the published table answers `group`'s endpoint in zone-a.
fn answers_zone_a(api: &FakeApi, i: usize) -> bool {
    let table = served_table(api);
    let key = format!("shop/{}", FRONTEND[i]);
    format!("{:?}", table.groups[key.as_str()].selection).contains(&zonal_ip(i, 0))
}

// SEM-AS4 SEM-AS10 SEM-AS11: the leader writes what the engine decided (an autoshift away
// from zone-a, the request answered) with its Events, and a new leader resumes from that
// status: while it was a follower its own engine started the asked-for run on a healthy
// zone-a, but once leading it keeps the last leader's autoshift (same start, zone-a now in
// its hold time, still shifted away from in the table it publishes), answers no request
// again and records no Event of its own.
#[tokio::test]
async fn a_new_leader_resumes_the_autoshift_from_its_status() {
    // The first leader: zone-a's endpoints are down in every group.
    let (api_a, client_a) = FakeApi::start(Settings::default());
    let first = start_unlisted(client_a, true);
    first.list_frontend(false, frontend_autoshift(Some("start:1"), None));
    let written = api_a
        .wait_for(
            "the ZonalAutoshift's status",
            0,
            IN_TIME,
            is_autoshift_status,
        )
        .await;
    let status = written.body["status"].clone();
    assert_eq!(status["autoshift"], "Active", "{status:#}");
    assert_eq!(status["activeZone"], "zone-a");
    assert_eq!(status["lastRequest"], "start:1");
    assert_eq!(status["notStarted"]["reason"], "AutoshiftActive");
    assert_eq!(status["shifts"][0]["status"]["type"], "Autoshift");
    assert_eq!(status["shifts"][0]["status"]["appliedGroups"], "3/3");
    assert_eq!(condition(&written.body, "Ready")["reason"], "Configured");
    let autoshift = condition(&written.body, "Autoshift");
    assert_eq!(
        (&autoshift["status"], &autoshift["reason"]),
        (&json!("True"), &json!("ZoneImpaired"))
    );
    assert!(
        autoshift["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("traffic moves away from zone-a since ")),
        "{autoshift}"
    );
    let rejected = api_a
        .wait_for("the refused request's Event", 0, IN_TIME, |s| {
            s.is_event() && s.body["reason"] == "PracticeRunNotStarted"
        })
        .await;
    assert_eq!(rejected.body["type"], "Warning");
    assert_eq!(rejected.body["regarding"]["kind"], "ZonalAutoshift");
    let started = api_a
        .wait_for("the AutoshiftStarted Event", 0, IN_TIME, |s| {
            s.is_event() && s.body["reason"] == "AutoshiftStarted"
        })
        .await;
    assert_eq!(started.body["type"], "Normal");
    assert_eq!(started.body["related"]["fieldPath"], "status.zones{zone-a}");
    assert!(
        started.body["note"].as_str().is_some_and(
            |n| n.starts_with("autoshift away from zone-a started: zone-a is impaired")
        ),
        "{}",
        started.body
    );
    let autoshift_metrics = |r: &Running| {
        let mut registry = healthroute_admin::metrics::Registry::default();
        r.metrics.register(&mut registry);
        healthroute_admin::metrics::encode(&registry)
    };
    let shown = autoshift_metrics(&first);
    for line in [
        r#"healthroute_autoshift_active{zone="zone-a"} 1"#,
        r#"healthroute_practice_runs_not_started_total{reason="AutoshiftActive"} 1"#,
    ] {
        assert!(shown.lines().any(|l| l == line), "{line} in\n{shown}");
    }
    first.stop().await;

    // The next leader, a follower first: it lists the object before that status arrives, with
    // zone-a healthy again, so its own engine starts the asked-for run instead.
    let (api_b, client_b) = FakeApi::start(Settings::default());
    let next = start_unlisted(client_b, false);
    next.list_frontend(true, frontend_autoshift(Some("start:1"), None));
    for _ in 0..100 {
        if next.metrics.control.compiles.load(Ordering::Relaxed) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !autoshift_metrics(&next).contains("healthroute_autoshift_active{"),
        "a follower exports no autoshifted zone"
    );
    next.send(Input::Autoshift(Event::Apply(frontend_autoshift(
        Some("start:1"),
        Some(status.clone()),
    ))));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(api_b.log().is_empty(), "a follower writes nothing");
    next.leader.send(true).expect("leader");
    let resumed = api_b
        .wait_for("the new leader's status", 0, IN_TIME, is_autoshift_status)
        .await;
    let now = &resumed.body["status"];
    assert_eq!(now["activeZone"], "zone-a", "{now:#}");
    assert_eq!(
        now["autoshiftStartTime"], status["autoshiftStartTime"],
        "the same autoshift"
    );
    assert!(
        now["healthySince"].is_string(),
        "zone-a is in its hold time"
    );
    assert!(now["practiceRun"].is_null(), "no run of the follower's");
    assert_eq!(
        now["shifts"][0]["status"]["appliedGroups"], "3/3",
        "{now:#}"
    );
    assert_eq!(now["lastRequest"], "start:1");
    assert_eq!(
        condition(&resumed.body, "Autoshift")["reason"],
        "ZoneRecovering"
    );
    api_b
        .wait_for("the new leader's table", 0, IN_TIME, |s| {
            s.is_manifest_write()
        })
        .await;
    for (i, group) in FRONTEND.iter().enumerate() {
        assert!(
            !answers_zone_a(&api_b, i),
            "{group} still shifted away from zone-a"
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let events: Vec<String> = api_b
        .log()
        .iter()
        .filter(|s| s.is_event())
        .map(|s| s.body["reason"].to_string())
        .collect();
    assert!(events.is_empty(), "the new leader only resumed: {events:?}");
    assert!(
        autoshift_metrics(&next)
            .lines()
            .any(|l| l == r#"healthroute_autoshift_active{zone="zone-a"} 1"#)
    );
    next.stop().await;
}
