//! The operator's control loop: watches feed a synchronous index (the compiler); a compile
//! follows every burst of changes; the table and the statuses leave through two separate
//! leader-gated writers, so neither ever waits on the other (SEMANTICS P7).
//!
//! ```text
//!  watches ──▶ Index::apply (no client, no await) ──▶ compile(now): at once after a quiet
//!                                                      spell, else at most every debounce
//!      compiled table ──watch (newest only)──▶ publisher task ──▶ table ConfigMaps
//!                      ◀── ReadBack / Published / Failed ───┘
//!      status of each changed object, judged against what is *published* (P5)
//!                 ──▶ StatusQueue (newest per object) ──▶ status writer task ──▶ /status, Events
//! ```
//!
//! A new leadership term starts with the publisher reading back the published table: the
//! compiler takes in the last good version of every rejected group from it (P6), and the next
//! generation continues above it and above every resolver's (P4). Only then is a table sent.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use healthroute_table::{CompiledGroup, GroupKey, RoutingTable, Value};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde_json::{Value as Json, json};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

pub use crate::index::{Index, Input};
pub use crate::metrics::OperatorMetrics;
use crate::publish::{PublishFeedback, PublishRequest, Publisher, ReadBack};
use crate::status::{self, Publication};
use crate::status_writer::{self, StatusKey, StatusQueue, StatusUpdate, WriterConfig};
use healthroute_admin::retry::{Backoff, ErrorLog};
use healthroute_api::CHECKER_LABEL;
use healthroute_api::METRIC_EVALUATOR;
use healthroute_api::{HealthCheck, RecordGroup, RecordGroupStatus, ZonalShift};
use healthroute_checker::{Checker, CheckerEvent, TargetPolicy};
use healthroute_compiler::ObjectKey;

#[derive(Clone, Debug)]
pub struct Config {
    /// Where the table ConfigMaps and checker Leases live.
    pub namespace: String,
    /// The fewest shards of the published table; more are used when the table needs them.
    pub shards: u32,
    pub zones: healthroute_compiler::ServedZones,
    pub default_ttl: u32,
    /// A compile follows a change at once after a quiet spell, and at most once per
    /// `debounce` under a stream of changes.
    pub debounce: Duration,
    /// The status writer: concurrency, timeout per request, and this replica's name.
    pub status: WriterConfig,
    /// Where the leader's Metric-check evaluator may connect (H15, as H12 for checkers).
    pub metric_policy: TargetPolicy,
}

impl Config {
    /// The defaults the binary ships, for `zones` and the table in `namespace`.
    pub fn new(namespace: impl Into<String>, zones: healthroute_compiler::ServedZones) -> Self {
        Config {
            namespace: namespace.into(),
            shards: 8,
            zones,
            default_ttl: healthroute_compiler::DEFAULT_TTL,
            debounce: Duration::from_millis(20),
            status: WriterConfig::default(),
            metric_policy: TargetPolicy::cluster_default(),
        }
    }
}

/// Every watch the operator needs, merged into one stream.
pub fn inputs(client: &Client, namespace: &str) -> impl Stream<Item = Input> + Send + use<> {
    fn w<K>(
        api: Api<K>,
        cfg: watcher::Config,
        kind: &'static str,
        wrap: fn(watcher::Event<K>) -> Input,
    ) -> futures::stream::BoxStream<'static, Input>
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
        K::DynamicType: Default,
    {
        // Bounded backoff, reset on success: a watch resumes within about a second of the API
        // server answering again (client-go's default waits up to 30 s).
        watcher(api, cfg)
            .backoff(Backoff::watch())
            .map(move |e| match e {
                Ok(e) => wrap(e),
                Err(err) => Input::WatchError(kind, err.to_string()),
            })
            .boxed()
    }
    let all = watcher::Config::default();
    futures::stream::select_all(vec![
        w(
            Api::<RecordGroup>::all(client.clone()),
            all.clone(),
            "RecordGroup",
            Input::Group,
        ),
        w(
            Api::<HealthCheck>::all(client.clone()),
            all.clone(),
            "HealthCheck",
            Input::Check,
        ),
        w(
            Api::<ZonalShift>::all(client.clone()),
            all.clone(),
            "ZonalShift",
            Input::Shift,
        ),
        w(
            Api::<EndpointSlice>::all(client.clone()),
            watcher::Config::default().labels("kubernetes.io/service-name"),
            "EndpointSlice",
            Input::Slice,
        ),
        w(
            Api::<Service>::all(client.clone()),
            all,
            "Service",
            Input::Service,
        ),
        w(
            Api::<Lease>::namespaced(client.clone(), namespace),
            watcher::Config::default().labels(CHECKER_LABEL),
            "Lease",
            Input::Lease,
        ),
    ])
}

/// Runs the control loop on the cluster's watches until `shutdown` turns true.
pub async fn run(
    client: Client,
    config: Config,
    leader: watch::Receiver<bool>,
    metrics: Arc<OperatorMetrics>,
    shutdown: watch::Receiver<bool>,
) {
    let inputs = inputs(&client, &config.namespace);
    run_with(client, config, inputs, leader, metrics, shutdown).await
}

/// Runs the control loop on `inputs` (the cluster's watches, or a test's), with the table
/// publisher and the status writer beside it, until `shutdown` turns true.
pub async fn run_with(
    client: Client,
    config: Config,
    inputs: impl Stream<Item = Input> + Send + Unpin,
    mut leader: watch::Receiver<bool>,
    metrics: Arc<OperatorMetrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let (requests_tx, requests_rx) = watch::channel(PublishRequest::default());
    let (feedback_tx, mut feedback) = mpsc::unbounded_channel();
    let publisher = Publisher::new(
        Api::<ConfigMap>::namespaced(client.clone(), &config.namespace),
        config.shards,
    );
    let publisher_task = tokio::spawn(crate::publish::run_publisher(
        publisher,
        requests_rx,
        feedback_tx,
        metrics.clone(),
    ));
    let queue = StatusQueue::default();
    let (writer_leader_tx, writer_leader) = watch::channel(false);
    let writer_task = tokio::spawn(status_writer::run(
        client.clone(),
        queue.clone(),
        writer_leader,
        metrics.clone(),
        config.status.clone(),
        shutdown.clone(),
    ));

    // H14: the leader evaluates Metric checks, once for the cluster; its views reach the
    // compiler here, in memory, and its last evaluation goes out with the check's status.
    let (evaluations_tx, mut evaluations) = mpsc::channel(1024);
    let mut evaluator = Checker::new(
        METRIC_EVALUATOR,
        None,
        config.metric_policy.clone(),
        evaluations_tx,
    )
    .metric_checks_only(crate::credentials::secret_credentials(client.clone()));
    evaluator.metrics = metrics.metric_evaluator.clone();
    evaluator.start_heartbeat(Duration::from_secs(1));

    let mut control = Control::new(&config, metrics.clone(), queue, requests_tx);
    control.evaluator = Some(evaluator);
    let mut inputs = inputs;
    let mut due: Option<Instant> = None;
    let mut last_compile: Option<Instant> = None;
    if *leader.borrow_and_update() {
        control.set_leader(true);
        let _ = writer_leader_tx.send(true);
    }
    loop {
        // A stream of inputs never holds a compile back by more than the debounce.
        if due.is_some_and(|t| t <= Instant::now()) {
            due = None;
            last_compile = Some(Instant::now());
            control.compile();
        }
        let deadline = control
            .index
            .compiler
            .time_to_deadline(Timestamp::now())
            .map(|d| Instant::now() + d);
        let wake = match (due, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            biased;
            _ = shutdown.changed() => break,
            Ok(()) = leader.changed() => {
                let is_leader = *leader.borrow_and_update();
                tracing::info!(leader = is_leader, "leadership changed");
                control.set_leader(is_leader);
                let _ = writer_leader_tx.send(is_leader);
            }
            Some(fb) = feedback.recv() => {
                if control.take_feedback(fb) {
                    due = Some(Instant::now());
                }
            }
            Some(event) = evaluations.recv() => {
                let view = matches!(event, CheckerEvent::View { .. });
                control.take_evaluation(event);
                if view {
                    let earliest = last_compile.map_or(Instant::now(), |t| t + config.debounce);
                    due.get_or_insert(earliest.max(Instant::now()));
                }
            }
            Some(input) = inputs.next() => {
                control.apply(input);
                // Everything already queued joins this compile.
                for _ in 0..4096 {
                    match inputs.next().now_or_never() {
                        Some(Some(input)) => control.apply(input),
                        _ => break,
                    }
                }
                let earliest = last_compile.map_or(Instant::now(), |t| t + config.debounce);
                due.get_or_insert(earliest.max(Instant::now()));
            }
            _ = async { match wake { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {
                due = None;
                last_compile = Some(Instant::now());
                control.compile();
            }
        }
    }
    drop(control); // closes the publisher's requests
    let _ = publisher_task.await;
    let _ = writer_task.await;
}

/// The control loop's state: the index, and what the leader knows of the published table.
struct Control {
    index: Index,
    metrics: Arc<OperatorMetrics>,
    queue: StatusQueue,
    requests: watch::Sender<PublishRequest>,
    /// The current leadership term, 0 while not the leader; `terms` counts them.
    term: u64,
    terms: u64,
    /// What the term's publisher read back, until the watches have listed everything.
    read_back: Option<ReadBack>,
    /// The term's read-back has been taken in: tables may be sent.
    seeded: bool,
    /// What the resolvers can assemble: the last table published (or read back).
    published: Arc<RoutingTable<Value>>,
    publish_error: Option<String>,
    /// The generation that first carried each group's published version.
    served_since: HashMap<GroupKey, u64>,
    /// Groups whose status waits for the publisher to catch up with the compiler.
    awaiting: BTreeSet<ObjectKey>,
    /// Every status checked this term (re-checked in full at a term's start).
    full_status: bool,
    /// The status last handed to the writer, per object, this term.
    sent: HashMap<StatusKey, Json>,
    watch_errors: ErrorLog,
    /// The leader's Metric-check evaluator (H14): follows the checks while leading.
    evaluator: Option<Checker>,
    /// The last evaluation of each Metric check, for its status.
    metric_status: HashMap<ObjectKey, healthroute_api::MetricStatus>,
    /// Metric checks whose status has a newer evaluation to show.
    metric_dirty: BTreeSet<ObjectKey>,
}

impl Control {
    fn new(
        config: &Config,
        metrics: Arc<OperatorMetrics>,
        queue: StatusQueue,
        requests: watch::Sender<PublishRequest>,
    ) -> Self {
        Control {
            index: Index::new(config.zones.clone(), config.default_ttl),
            metrics,
            queue,
            requests,
            term: 0,
            terms: 0,
            read_back: None,
            seeded: false,
            published: Arc::default(),
            publish_error: None,
            served_since: HashMap::new(),
            awaiting: BTreeSet::new(),
            full_status: false,
            sent: HashMap::new(),
            watch_errors: ErrorLog::default(),
            evaluator: None,
            metric_status: HashMap::new(),
            metric_dirty: BTreeSet::new(),
        }
    }

    /// What the alerts read: checks without a reachable checker, active shifts' expiries.
    fn export_gauges(&self) {
        use healthroute_api::CheckType;
        let compiler = &self.index.compiler;
        let orphaned = self
            .index
            .checks
            .iter()
            .filter(|(_, c)| c.spec.check_type != CheckType::Calculated && !c.spec.disabled)
            .filter(|(k, _)| {
                compiler
                    .check_health(k)
                    .is_some_and(|h| h.reachable_checkers == 0)
            })
            .count();
        self.metrics
            .checks_without_checker
            .store(orphaned as u64, Ordering::Relaxed);
        let now = Timestamp::now();
        let expiries: Vec<(String, String, i64)> = self
            .index
            .shifts
            .iter()
            .filter_map(|(k, s)| {
                let st = compiler.shift_status(k, now)?.ok()?;
                (st.status == Some(healthroute_api::ShiftState::Active)).then(|| {
                    (
                        k.to_string(),
                        s.spec.away_from.clone(),
                        st.expiry_time.map_or(0, |t| t.0.as_second()),
                    )
                })
            })
            .collect();
        if let Ok(mut e) = self.metrics.shift_expiries.lock() {
            *e = expiries;
        }
    }

    /// Runs exactly the Metric checks of the index while leading, none otherwise.
    fn sync_evaluator(&mut self) {
        let leading = self.term != 0;
        if let Some(evaluator) = &mut self.evaluator {
            if leading {
                evaluator.sync(self.index.checks.iter().map(|(k, c)| (k, &c.spec)));
            } else {
                evaluator.sync(std::iter::empty());
            }
        }
    }

    /// Takes in one event of the evaluator: a view of a Metric check, or its heartbeat.
    fn take_evaluation(&mut self, event: CheckerEvent) {
        match event {
            CheckerEvent::View { check, view } => {
                let still_metric = self
                    .index
                    .checks
                    .get(&check)
                    .is_some_and(|c| c.spec.check_type == healthroute_api::CheckType::Metric);
                if self.term == 0 || !still_metric {
                    return; // from a term that ended, or a check that is no longer Metric
                }
                self.metric_status.insert(
                    check.clone(),
                    healthroute_checker::metric_status(&view, Some(Timestamp::now())),
                );
                self.metric_dirty.insert(check.clone());
                self.index.compiler.set_check_view(&check, view);
            }
            CheckerEvent::Heartbeat { checker, at } => {
                self.index.compiler.set_heartbeat(checker, at);
            }
        }
    }

    fn apply(&mut self, input: Input) {
        if let Input::WatchError(kind, error) = &input {
            // Every watch retries within a second while the API server is away: say so once
            // a minute per distinct error, not at every retry.
            if self.watch_errors.should_log(&format!("{kind}: {error}")) {
                tracing::warn!(kind, %error, "watch failed; retrying (logged once a minute)");
            }
            return;
        }
        let check = matches!(input, Input::Check(_));
        self.index.apply(input);
        OperatorMetrics::add(&self.metrics.events, 1);
        if check && self.term != 0 {
            self.sync_evaluator();
        }
    }

    /// A new term begins with a read-back; a term that ends drops every unsent status.
    fn set_leader(&mut self, is_leader: bool) {
        self.metrics.leader.store(is_leader, Ordering::Relaxed);
        self.read_back = None;
        self.seeded = false;
        self.published = Arc::default();
        self.publish_error = None;
        self.served_since.clear();
        self.awaiting.clear();
        self.sent.clear();
        self.queue.clear();
        self.metrics.set_publish_error(None);
        if is_leader {
            self.terms += 1;
            self.term = self.terms;
        } else {
            self.term = 0;
            self.metric_status.clear();
            self.metric_dirty.clear();
        }
        self.sync_evaluator();
        self.requests.send_replace(PublishRequest {
            term: self.term,
            floor: self.index.highest_served_generation(),
            table: None,
        });
    }

    /// Takes in what the publisher reports; true when a compile should follow at once.
    fn take_feedback(&mut self, feedback: PublishFeedback) -> bool {
        match feedback {
            PublishFeedback::ReadBack { term, found } if term == self.term => {
                // Taken in by the next compile once every watch has listed: a group listed
                // later would miss its last good version.
                self.read_back = Some(found);
                true
            }
            PublishFeedback::Published {
                term,
                generation,
                table,
            } if term == self.term => {
                self.take_published(generation, table);
                self.settle_groups();
                false
            }
            PublishFeedback::Failed { term, error } if term == self.term => {
                self.publish_error = Some(error);
                self.settle_groups();
                false
            }
            _ => false, // from an earlier term
        }
    }

    fn take_read_back(&mut self, found: ReadBack) {
        let recovered = self
            .index
            .compiler
            .recover_served(found.groups.iter().map(|(k, g)| (&**k, g)));
        tracing::info!(
            generation = found.generation,
            groups = found.groups.len(),
            recovered,
            "read back the published table"
        );
        // Versions unchanged since an earlier leader keep the generation its status gave.
        for gk in found.groups.keys() {
            let Some((ns, name)) = gk.split_once('/') else {
                continue;
            };
            let since = self
                .index
                .groups
                .get(&ObjectKey::new(ns, name))
                .and_then(|g| g.status.as_ref())
                .and_then(|s| s.served_generation)
                .filter(|g| *g <= found.generation)
                .unwrap_or(found.generation);
            self.served_since.insert(gk.clone(), since);
        }
        self.published = Arc::new(RoutingTable {
            generation: found.generation,
            groups: found.groups,
        });
        self.seeded = true;
        self.full_status = true;
        self.awaiting = self.index.groups.keys().cloned().collect();
    }

    fn take_published(&mut self, generation: u64, table: Arc<RoutingTable<Value>>) {
        let before = std::mem::replace(&mut self.published, table.clone());
        for (gk, group) in &table.groups {
            if !before.groups.get(gk).is_some_and(|b| same(b, group)) {
                self.served_since.insert(gk.clone(), generation);
            }
        }
        self.served_since
            .retain(|gk, _| table.groups.contains_key(gk));
        self.publish_error = None;
    }

    fn compile(&mut self) {
        if !self.index.synced() {
            return; // never publish a table built from a partial list
        }
        if let Some(found) = self.read_back.take() {
            self.take_read_back(found);
        }
        self.metrics.synced.store(true, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let report = self.index.compiler.compile(Timestamp::now());
        let m = &self.metrics;
        OperatorMetrics::add(&m.compiles, 1);
        OperatorMetrics::add(&m.compile_micros_sum, started.elapsed().as_micros() as u64);
        OperatorMetrics::add(&m.groups_recompiled, report.recompiled as u64);
        OperatorMetrics::add(&m.checks_evaluated, report.evaluated_checks as u64);
        m.table_generation
            .store(report.generation, Ordering::Relaxed);
        let table = self.index.compiler.table();
        m.table_groups
            .store(table.groups.len() as u64, Ordering::Relaxed);
        self.export_gauges();
        if self.term == 0 || !self.seeded {
            return;
        }
        let floor = self.index.highest_served_generation();
        self.requests.send_if_modified(|r| {
            let changed =
                r.table.as_ref().is_none_or(|t| !Arc::ptr_eq(t, &table)) || r.floor != floor;
            r.table = Some(table.clone());
            r.floor = floor;
            changed
        });
        let now = Timestamp::now();
        let full = std::mem::take(&mut self.full_status);
        self.awaiting.extend(report.changed_groups);
        self.settle_groups();
        let mut checks: Vec<ObjectKey> = if full {
            self.index.checks.keys().cloned().collect()
        } else {
            report.changed_checks
        };
        for key in std::mem::take(&mut self.metric_dirty) {
            if !checks.contains(&key) {
                checks.push(key);
            }
        }
        for key in checks {
            self.check_status(&key, now);
        }
        let shifts: Vec<ObjectKey> = self.index.shifts.keys().cloned().collect();
        for key in shifts {
            self.shift_status(&key, now);
        }
        self.metrics
            .status_backlog
            .store(self.queue.backlog() as u64, Ordering::Relaxed);
    }

    /// Writes the status of every awaiting group whose version the publisher has caught up
    /// with, or that a failing publish leaves behind (those stay awaiting until published).
    fn settle_groups(&mut self) {
        if self.term == 0 || !self.seeded {
            return;
        }
        let now = Timestamp::now();
        let table = self.index.compiler.table();
        let error = self.publish_error.clone();
        for key in std::mem::take(&mut self.awaiting) {
            let gk = key.to_string();
            let wanted = table.groups.get(gk.as_str());
            let published = self.published.groups.get(gk.as_str());
            let in_sync = match (wanted, published) {
                (None, None) => true,
                (Some(a), Some(b)) => same(a, b),
                _ => false,
            };
            let since = published.map(|_| {
                self.served_since
                    .get(gk.as_str())
                    .copied()
                    .unwrap_or(self.published.generation)
            });
            let publication = match (in_sync, error.as_deref()) {
                (true, _) => Publication::InSync { since },
                (false, Some(error)) => {
                    self.awaiting.insert(key.clone());
                    Publication::Failed {
                        error,
                        serving_since: since,
                    }
                }
                (false, None) => {
                    self.awaiting.insert(key);
                    continue;
                }
            };
            if !self.index.groups.contains_key(&key) {
                self.sent.remove(&("RecordGroup", key));
                continue;
            }
            let old = self.sent_status(&key);
            if let Some(update) = group_update(&self.index, &key, publication, old, now) {
                let watched =
                    watched_status(self.index.groups.get(&key).and_then(|g| g.status.as_ref()));
                self.push(update, watched);
            }
        }
    }

    /// The status last sent for a RecordGroup this term, else the one on the server.
    fn sent_status(&self, key: &ObjectKey) -> Option<RecordGroupStatus> {
        match self.sent.get(&("RecordGroup", key.clone())) {
            Some(j) => serde_json::from_value(j.clone()).ok(),
            None => self.index.groups.get(key).and_then(|g| g.status.clone()),
        }
    }

    fn check_status(&mut self, key: &ObjectKey, now: Timestamp) {
        let Some(c) = self.index.checks.get(key) else {
            self.sent.remove(&("HealthCheck", key.clone()));
            return;
        };
        let Some(health) = self.index.compiler.check_health(key) else {
            return;
        };
        let old = match self.sent.get(&("HealthCheck", key.clone())) {
            Some(j) => serde_json::from_value(j.clone()).ok(),
            None => c.status.clone(),
        };
        let mut body = status::health_check(health, old.as_ref(), c.metadata.generation, now);
        if let (Some(m), Some(obj)) = (self.metric_status.get(key), body.as_object_mut()) {
            obj.insert(
                "metric".into(),
                serde_json::to_value(m).unwrap_or(Json::Null),
            );
        }
        let update = StatusUpdate {
            kind: "HealthCheck",
            key: key.clone(),
            status: body,
            events: Vec::new(),
            reference: c.object_ref(&()),
        };
        let watched = watched_status(c.status.as_ref());
        self.push(update, watched);
    }

    fn shift_status(&mut self, key: &ObjectKey, now: Timestamp) {
        let Some(s) = self.index.shifts.get(key) else {
            return;
        };
        let old: Option<healthroute_api::ZonalShiftStatus> =
            match self.sent.get(&("ZonalShift", key.clone())) {
                Some(j) => serde_json::from_value(j.clone()).ok(),
                None => s.status.clone(),
            };
        let body = match self.index.compiler.shift_status(key, now) {
            Some(Ok(st)) => serde_json::to_value(status::zonal_shift(
                st,
                old.as_ref(),
                s.metadata.generation,
                now,
            ))
            .unwrap_or(Json::Null),
            Some(Err(e)) => json!({"conditions": status::merge_conditions(
                old.as_ref().map_or(&[][..], |st| &st.conditions),
                vec![status::Desired { kind: status::types::APPLIED, status: false, reason: "InvalidSpec", message: e.to_string() }],
                now,
                s.metadata.generation,
            )}),
            None => return,
        };
        let events = serde_json::from_value(body.clone())
            .map(|new| status::shift_events(old.as_ref(), &new, &s.spec.away_from))
            .unwrap_or_default();
        let update = StatusUpdate {
            kind: "ZonalShift",
            key: key.clone(),
            status: body,
            events,
            reference: s.object_ref(&()),
        };
        let watched = watched_status(s.status.as_ref());
        self.push(update, watched);
    }

    /// Hands `update` to the writer unless it says what was last sent, or what the object
    /// already shows (a new leader rewrites nothing that is right).
    fn push(&mut self, update: StatusUpdate, watched: Option<Json>) {
        let key = (update.kind, update.key.clone());
        let fingerprint = without_times(&update.status);
        let same_as = |j: &Json| without_times(&select_like(j, &update.status)) == fingerprint;
        if self.sent.get(&key).is_some_and(same_as) {
            return;
        }
        if !self.sent.contains_key(&key) && watched.as_ref().is_some_and(same_as) {
            self.sent.insert(key, update.status);
            return;
        }
        self.sent.insert(key, update.status.clone());
        self.queue.push(update);
    }
}

/// The RecordGroup's status update for `publication`, with its Events.
fn group_update(
    index: &Index,
    key: &ObjectKey,
    publication: Publication<'_>,
    old: Option<RecordGroupStatus>,
    now: Timestamp,
) -> Option<StatusUpdate> {
    let g = index.groups.get(key)?;
    let data = index.compiler.group_status(key)?;
    let outcome = index.compiler.outcome(key)?;
    let st = status::record_group(
        data,
        outcome,
        publication,
        old.as_ref(),
        g.metadata.generation,
        now,
    );
    let events = status::group_events(old.as_ref(), &st);
    Some(StatusUpdate {
        kind: "RecordGroup",
        key: key.clone(),
        status: serde_json::to_value(&st).unwrap_or(Json::Null),
        events,
        reference: g.object_ref(&()),
    })
}

/// Whether two compiled versions of a group are the same (cheaply when they are one `Arc`).
fn same(a: &Arc<CompiledGroup<Value>>, b: &Arc<CompiledGroup<Value>>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

fn watched_status<T: serde::Serialize>(status: Option<&T>) -> Option<Json> {
    status.and_then(|s| serde_json::to_value(s).ok())
}

/// The fields of `have` that `like` sets: what another writer (a checker) owns is left out.
fn select_like(have: &Json, like: &Json) -> Json {
    match (have, like) {
        (Json::Object(h), Json::Object(l)) => Json::Object(
            l.keys()
                .filter_map(|k| h.get(k).map(|v| (k.clone(), v.clone())))
                .collect(),
        ),
        _ => have.clone(),
    }
}

/// A status without the times that change only on transitions, for comparing two.
fn without_times(v: &Json) -> Json {
    match v {
        Json::Object(map) => Json::Object(
            map.iter()
                .filter(|(k, v)| k.as_str() != "lastTransitionTime" && !v.is_null())
                .map(|(k, v)| (k.clone(), without_times(v)))
                .collect(),
        ),
        Json::Array(items) => Json::Array(items.iter().map(without_times).collect()),
        other => other.clone(),
    }
}
