//! The operator's control loop: watches feed a synchronous index (the compiler), a debounced
//! compile follows every burst of changes, and one leader-gated writer publishes the table
//! and the statuses.
//!
//! ```text
//!  watch RecordGroup, HealthCheck, ZonalShift, EndpointSlice, Service, checker Lease
//!      └──▶ Index::apply (no client, no await) ──▶ Compiler inputs
//!  debounce (20 ms) or next deadline (shift expiry, stale checker) ──▶ compile(now)
//!      └──▶ Writer (leader only): table ConfigMaps (changed shards) + status (changed objects)
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use jiff::Timestamp;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value as Json, json};
use tokio::sync::watch;

use crate::api::{HealthCheck, RecordGroup, ZonalShift};
use crate::compiler::{
    CheckInput, CheckerView, CompileReport, Compiler, ObjectKey, ServedZones, ShiftInput,
};
use crate::manifests::{cluster_ips, endpoints_from_slices, group_input};
use crate::publish::Publisher;
use crate::status::{self, FIELD_MANAGER};

/// Label on checker heartbeat Leases; the value is the checker's name.
pub const CHECKER_LABEL: &str = "healthroute.io/checker";

#[derive(Clone, Debug)]
pub struct Config {
    /// Where the table ConfigMaps and checker Leases live.
    pub namespace: String,
    pub shards: u32,
    pub zones: ServedZones,
    pub default_ttl: u32,
    pub debounce: Duration,
    /// This replica's name, on the Events it records.
    pub identity: String,
}

/// One event from one watch.
pub enum Input {
    Group(watcher::Event<RecordGroup>),
    Check(watcher::Event<HealthCheck>),
    Shift(watcher::Event<ZonalShift>),
    Slice(watcher::Event<EndpointSlice>),
    Service(watcher::Event<Service>),
    Lease(watcher::Event<Lease>),
    WatchError(&'static str, String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Group,
    Check,
    Shift,
    Slice,
    Service,
    Lease,
}

const KINDS: usize = 6;

/// The watched world, fed into the compiler. Synchronous: tests drive it without a client.
pub struct Index {
    pub compiler: Compiler,
    pub groups: BTreeMap<ObjectKey, RecordGroup>,
    pub checks: BTreeMap<ObjectKey, HealthCheck>,
    pub shifts: BTreeMap<ObjectKey, ZonalShift>,
    slices: BTreeMap<ObjectKey, EndpointSlice>,
    cluster_ips: BTreeMap<ObjectKey, Vec<std::net::IpAddr>>,
    leases: BTreeMap<ObjectKey, String>,
    /// Keys listed since a watch restarted (Init): the others are gone at InitDone.
    relist: HashMap<Kind, BTreeSet<ObjectKey>>,
    synced: BTreeSet<u8>,
    pub events: u64,
}

fn key_of<K: ResourceExt>(o: &K) -> ObjectKey {
    ObjectKey::new(o.namespace().unwrap_or_default(), o.name_any())
}

impl Index {
    pub fn new(zones: ServedZones, default_ttl: u32) -> Self {
        Index {
            compiler: Compiler::new(zones, default_ttl),
            groups: BTreeMap::new(),
            checks: BTreeMap::new(),
            shifts: BTreeMap::new(),
            slices: BTreeMap::new(),
            cluster_ips: BTreeMap::new(),
            leases: BTreeMap::new(),
            relist: HashMap::new(),
            synced: BTreeSet::new(),
            events: 0,
        }
    }

    /// True once every watch has listed its objects at least once.
    pub fn synced(&self) -> bool {
        self.synced.len() == KINDS
    }

    pub fn apply(&mut self, input: Input) {
        self.events += 1;
        match input {
            Input::Group(e) => self.event(Kind::Group, e, Self::upsert_group, Self::delete_group),
            Input::Check(e) => self.event(Kind::Check, e, Self::upsert_check, Self::delete_check),
            Input::Shift(e) => self.event(Kind::Shift, e, Self::upsert_shift, Self::delete_shift),
            Input::Slice(e) => self.event(Kind::Slice, e, Self::upsert_slice, Self::delete_slice),
            Input::Service(e) => {
                self.event(Kind::Service, e, Self::upsert_service, Self::delete_service)
            }
            Input::Lease(e) => self.event(Kind::Lease, e, Self::upsert_lease, Self::delete_lease),
            Input::WatchError(kind, e) => {
                tracing::warn!(kind, error = %e, "watch failed; retrying")
            }
        }
    }

    fn event<K: ResourceExt>(
        &mut self,
        kind: Kind,
        e: watcher::Event<K>,
        upsert: fn(&mut Self, K),
        delete: fn(&mut Self, &ObjectKey),
    ) {
        match e {
            watcher::Event::Apply(o) => upsert(self, o),
            watcher::Event::Delete(o) => delete(self, &key_of(&o)),
            watcher::Event::Init => {
                self.relist.insert(kind, BTreeSet::new());
            }
            watcher::Event::InitApply(o) => {
                self.relist.entry(kind).or_default().insert(key_of(&o));
                upsert(self, o);
            }
            watcher::Event::InitDone => {
                let listed = self.relist.remove(&kind).unwrap_or_default();
                for gone in self.keys(kind).into_iter().filter(|k| !listed.contains(k)) {
                    delete(self, &gone);
                }
                self.synced.insert(kind as u8);
            }
        }
    }

    fn keys(&self, kind: Kind) -> Vec<ObjectKey> {
        match kind {
            Kind::Group => self.groups.keys().cloned().collect(),
            Kind::Check => self.checks.keys().cloned().collect(),
            Kind::Shift => self.shifts.keys().cloned().collect(),
            Kind::Slice => self.slices.keys().cloned().collect(),
            Kind::Service => self.cluster_ips.keys().cloned().collect(),
            Kind::Lease => self.leases.keys().cloned().collect(),
        }
    }

    fn upsert_group(&mut self, g: RecordGroup) {
        let key = key_of(&g);
        self.compiler.upsert_group(key.clone(), group_input(&g));
        self.groups.insert(key, g);
    }
    fn delete_group(&mut self, key: &ObjectKey) {
        self.compiler.delete_group(key);
        self.groups.remove(key);
    }

    fn upsert_check(&mut self, c: HealthCheck) {
        let key = key_of(&c);
        let status = c.status.clone().unwrap_or_default();
        let mut input = CheckInput::new(c.spec.clone());
        input.last_healthy = status.healthy;
        input.views = status
            .checkers
            .iter()
            .map(|v| CheckerView {
                checker: v.name.clone(),
                zone: v.zone.clone(),
                healthy: v.healthy,
                message: v.message.clone(),
            })
            .collect();
        self.compiler.upsert_check(key.clone(), input);
        self.checks.insert(key, c);
    }
    fn delete_check(&mut self, key: &ObjectKey) {
        self.compiler.delete_check(key);
        self.checks.remove(key);
    }

    fn upsert_shift(&mut self, s: ZonalShift) {
        let key = key_of(&s);
        self.compiler.upsert_shift(
            key.clone(),
            ShiftInput {
                spec: s.spec.clone(),
                created: s.metadata.creation_timestamp.as_ref().map(|t| t.0),
                status: s.status.clone(),
            },
        );
        self.shifts.insert(key, s);
    }
    fn delete_shift(&mut self, key: &ObjectKey) {
        self.compiler.delete_shift(key);
        self.shifts.remove(key);
    }

    fn service_of(slice: &EndpointSlice) -> Option<ObjectKey> {
        let svc = slice.labels().get("kubernetes.io/service-name")?;
        Some(ObjectKey::new(slice.namespace().unwrap_or_default(), svc))
    }

    /// Rebuilds one Service's endpoints from all of its slices.
    fn refresh_service(&mut self, service: &ObjectKey) {
        let slices: Vec<&EndpointSlice> = self
            .slices
            .range(ObjectKey::new(&service.namespace, "")..)
            .take_while(|(k, _)| k.namespace == service.namespace)
            .map(|(_, s)| s)
            .filter(|s| Self::service_of(s).as_ref() == Some(service))
            .collect();
        let mut endpoints = endpoints_from_slices(slices)
            .remove(service)
            .unwrap_or_default();
        endpoints.cluster_ips = self.cluster_ips.get(service).cloned().unwrap_or_default();
        if endpoints.endpoints.is_empty() && endpoints.cluster_ips.is_empty() {
            self.compiler.delete_service(service);
        } else {
            self.compiler.upsert_service(service.clone(), endpoints);
        }
    }

    fn upsert_slice(&mut self, s: EndpointSlice) {
        let key = key_of(&s);
        let before = self.slices.get(&key).and_then(Self::service_of);
        let after = Self::service_of(&s);
        self.slices.insert(key, s);
        for svc in before.into_iter().chain(after) {
            self.refresh_service(&svc);
        }
    }
    fn delete_slice(&mut self, key: &ObjectKey) {
        if let Some(svc) = self.slices.remove(key).as_ref().and_then(Self::service_of) {
            self.refresh_service(&svc);
        }
    }

    fn upsert_service(&mut self, s: Service) {
        let key = key_of(&s);
        let ips = cluster_ips(&s);
        if self.cluster_ips.insert(key.clone(), ips).is_none() && !self.compiler_knows_service(&key)
        {
            return;
        }
        self.refresh_service(&key);
    }
    fn delete_service(&mut self, key: &ObjectKey) {
        if self.cluster_ips.remove(key).is_some() {
            self.refresh_service(key);
        }
    }
    fn compiler_knows_service(&self, key: &ObjectKey) -> bool {
        self.slices
            .values()
            .any(|s| Self::service_of(s).as_ref() == Some(key))
    }

    fn upsert_lease(&mut self, l: Lease) {
        let key = key_of(&l);
        let checker = l
            .labels()
            .get(CHECKER_LABEL)
            .cloned()
            .unwrap_or_else(|| l.name_any());
        if let Some(renewed) = l.spec.as_ref().and_then(|s| s.renew_time.as_ref()) {
            self.compiler.set_heartbeat(checker.clone(), renewed.0);
        }
        self.leases.insert(key, checker);
    }
    fn delete_lease(&mut self, key: &ObjectKey) {
        self.leases.remove(key);
    }
}

/// Counters of the control loop, exported on the admin endpoint.
#[derive(Debug, Default)]
pub struct OperatorMetrics {
    pub events: AtomicU64,
    pub compiles: AtomicU64,
    pub compile_micros_sum: AtomicU64,
    pub groups_recompiled: AtomicU64,
    pub table_groups: AtomicU64,
    pub table_generation: AtomicU64,
    pub shards_written: AtomicU64,
    pub publish_micros_sum: AtomicU64,
    pub status_writes: AtomicU64,
    pub write_errors: AtomicU64,
    pub leader: AtomicBool,
    pub synced: AtomicBool,
}

impl OperatorMetrics {
    pub fn render(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = String::new();
        for (name, kind, help, v) in [
            (
                "healthroute_operator_events_total",
                "counter",
                "Watch events applied to the index.",
                g(&self.events),
            ),
            (
                "healthroute_operator_compiles_total",
                "counter",
                "Compiles run.",
                g(&self.compiles),
            ),
            (
                "healthroute_operator_compile_seconds_sum",
                "counter",
                "Time spent compiling.",
                g(&self.compile_micros_sum) / 1000,
            ),
            (
                "healthroute_operator_groups_recompiled_total",
                "counter",
                "RecordGroups compiled again.",
                g(&self.groups_recompiled),
            ),
            (
                "healthroute_operator_table_groups",
                "gauge",
                "RecordGroups in the published table.",
                g(&self.table_groups),
            ),
            (
                "healthroute_operator_table_generation",
                "gauge",
                "Generation of the compiled table.",
                g(&self.table_generation),
            ),
            (
                "healthroute_operator_shards_written_total",
                "counter",
                "Table ConfigMaps written.",
                g(&self.shards_written),
            ),
            (
                "healthroute_operator_publish_seconds_sum",
                "counter",
                "Time spent publishing.",
                g(&self.publish_micros_sum) / 1000,
            ),
            (
                "healthroute_operator_status_writes_total",
                "counter",
                "Status patches written.",
                g(&self.status_writes),
            ),
            (
                "healthroute_operator_write_errors_total",
                "counter",
                "Failed writes (retried on the next compile).",
                g(&self.write_errors),
            ),
            (
                "healthroute_operator_leader",
                "gauge",
                "1 while this replica holds the lease.",
                u64::from(self.leader.load(Ordering::Relaxed)),
            ),
        ] {
            // Sums are kept in microseconds; expose seconds with millisecond precision.
            let value = if name.ends_with("_seconds_sum") {
                format!("{:.3}", v as f64 / 1000.0)
            } else {
                v.to_string()
            };
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        }
        out
    }
}

/// The leader-gated writer of the table and the statuses (P3, one writer).
pub struct Writer {
    client: Client,
    recorder: kube::runtime::events::Recorder,
    publisher: Publisher,
    /// The status last written per object, so that unchanged statuses are not written again.
    written: HashMap<(&'static str, ObjectKey), Json>,
    /// Write every status on the next flush (a new term, or a first run).
    full: bool,
}

impl Writer {
    pub fn new(client: Client, namespace: &str, shards: u32, identity: &str) -> Self {
        let reporter = kube::runtime::events::Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(identity.into()),
        };
        Writer {
            recorder: kube::runtime::events::Recorder::new(client.clone(), reporter),
            publisher: Publisher::new(
                Api::<ConfigMap>::namespaced(client.clone(), namespace),
                shards,
            ),
            client,
            written: HashMap::new(),
            full: true,
        }
    }

    /// A new leadership term: nothing is known to be written.
    pub fn reset(&mut self) {
        self.publisher.reset();
        self.written.clear();
        self.full = true;
    }

    /// Publishes the table and writes every status that differs from the last written one.
    /// Stops at once when `leader` turns false.
    pub async fn flush(
        &mut self,
        index: &Index,
        report: &CompileReport,
        leader: &watch::Receiver<bool>,
        metrics: &OperatorMetrics,
    ) {
        if !*leader.borrow() {
            return;
        }
        let full = std::mem::take(&mut self.full);
        let groups: Vec<&ObjectKey> = if full {
            index.groups.keys().collect()
        } else {
            report.changed_groups.iter().collect()
        };
        let checks: Vec<&ObjectKey> = if full {
            index.checks.keys().collect()
        } else {
            report.changed_checks.iter().collect()
        };
        let started = std::time::Instant::now();
        match self.publisher.publish(&index.compiler.table()).await {
            Ok(r) => {
                metrics
                    .shards_written
                    .fetch_add(r.shards_written as u64, Ordering::Relaxed);
                metrics
                    .publish_micros_sum
                    .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                metrics.write_errors.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "publishing the table failed");
            }
        }
        let now = Timestamp::now();
        for key in groups {
            if !*leader.borrow() {
                return;
            }
            let Some(g) = index.groups.get(key) else {
                continue;
            };
            let (Some(data), Some(outcome)) = (
                index.compiler.group_status(key),
                index.compiler.outcome(key),
            ) else {
                continue;
            };
            let st =
                status::record_group(data, outcome, g.status.as_ref(), g.metadata.generation, now);
            let body = serde_json::to_value(&st).unwrap_or(Json::Null);
            if self
                .write::<RecordGroup>("RecordGroup", key, body, metrics)
                .await
            {
                let events = status::group_events(g.status.as_ref(), &st);
                self.emit(g, events).await;
            }
        }
        for key in checks {
            if !*leader.borrow() {
                return;
            }
            let Some(c) = index.checks.get(key) else {
                continue;
            };
            let Some(health) = index.compiler.check_health(key) else {
                continue;
            };
            let body = status::health_check(health, c.status.as_ref(), c.metadata.generation, now);
            self.write::<HealthCheck>("HealthCheck", key, body, metrics)
                .await;
        }
        for (key, s) in &index.shifts {
            if !*leader.borrow() {
                return;
            }
            let body = match index.compiler.shift_status(key, now) {
                Some(Ok(st)) => serde_json::to_value(status::zonal_shift(
                    st,
                    s.status.as_ref(),
                    s.metadata.generation,
                    now,
                ))
                .unwrap_or(Json::Null),
                Some(Err(e)) => json!({"conditions": status::merge_conditions(
                    s.status.as_ref().map_or(&[][..], |st| &st.conditions),
                    vec![status::Desired { kind: status::types::APPLIED, status: false, reason: "InvalidSpec", message: e }],
                    now,
                    s.metadata.generation,
                )}),
                None => continue,
            };
            let new: Option<crate::api::ZonalShiftStatus> =
                serde_json::from_value(body.clone()).ok();
            if self
                .write::<ZonalShift>("ZonalShift", key, body, metrics)
                .await
                && let Some(new) = new
            {
                let events = status::shift_events(s.status.as_ref(), &new);
                self.emit(s, events).await;
            }
        }
    }

    /// Publishes Events for transitions a person should notice; failures are only logged.
    async fn emit<K: kube::Resource<DynamicType = ()>>(
        &self,
        object: &K,
        events: Vec<status::Notice>,
    ) {
        let reference = object.object_ref(&());
        for n in events {
            let event = kube::runtime::events::Event {
                type_: if n.warning {
                    kube::runtime::events::EventType::Warning
                } else {
                    kube::runtime::events::EventType::Normal
                },
                reason: n.reason.into(),
                note: Some(n.note),
                action: n.action.into(),
                secondary: None,
            };
            if let Err(e) = self.recorder.publish(&event, &reference).await {
                tracing::debug!(error = %e, "event not recorded");
            }
        }
    }

    /// Applies a status unless it is the one last written; true when it was written now.
    async fn write<K>(
        &mut self,
        kind: &'static str,
        key: &ObjectKey,
        status: Json,
        metrics: &OperatorMetrics,
    ) -> bool
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        // Conditions carry times that change only on transitions; compare without them so
        // that an unchanged status is not written again.
        let fingerprint = without_times(&status);
        if self.written.get(&(kind, key.clone())) == Some(&fingerprint) {
            return false;
        }
        let api: Api<K> = Api::namespaced(self.client.clone(), &key.namespace);
        let patch = json!({
            "apiVersion": crate::api::GROUP.to_owned() + "/" + crate::api::VERSION,
            "kind": kind,
            "status": status,
        });
        match api
            .patch_status(
                &key.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(patch),
            )
            .await
        {
            Ok(_) => {
                metrics.status_writes.fetch_add(1, Ordering::Relaxed);
                self.written.insert((kind, key.clone()), fingerprint);
                true
            }
            Err(e) => {
                metrics.write_errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(kind, object = %key, error = %e, "status write failed; retried on the next compile");
                false
            }
        }
    }
}

fn without_times(v: &Json) -> Json {
    match v {
        Json::Object(map) => Json::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "lastTransitionTime")
                .map(|(k, v)| (k.clone(), without_times(v)))
                .collect(),
        ),
        Json::Array(items) => Json::Array(items.iter().map(without_times).collect()),
        other => other.clone(),
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
        watcher(api, cfg)
            .default_backoff()
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

/// Runs the control loop until `shutdown` turns true.
pub async fn run(
    client: Client,
    config: Config,
    mut leader: watch::Receiver<bool>,
    metrics: Arc<OperatorMetrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut inputs = inputs(&client, &config.namespace);
    let mut index = Index::new(config.zones.clone(), config.default_ttl);
    let mut writer = Writer::new(client, &config.namespace, config.shards, &config.identity);
    let mut due: Option<tokio::time::Instant> = None;
    loop {
        let deadline = index
            .compiler
            .time_to_deadline(Timestamp::now())
            .map(|d| tokio::time::Instant::now() + d);
        let wake = match (due, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            Some(input) = inputs.next() => {
                index.apply(input);
                metrics.events.fetch_add(1, Ordering::Relaxed);
                due.get_or_insert_with(|| tokio::time::Instant::now() + config.debounce);
                continue;
            }
            _ = async { match wake { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {}
            Ok(()) = leader.changed() => {
                let is_leader = *leader.borrow_and_update();
                metrics.leader.store(is_leader, Ordering::Relaxed);
                tracing::info!(leader = is_leader, "leadership changed");
                writer.reset();
            }
            _ = shutdown.changed() => return,
        }
        due = None;
        if !index.synced() {
            continue; // never publish a table built from a partial list
        }
        metrics.synced.store(true, Ordering::Relaxed);
        let started = std::time::Instant::now();
        let report: CompileReport = index.compiler.compile(Timestamp::now());
        metrics.compiles.fetch_add(1, Ordering::Relaxed);
        metrics
            .compile_micros_sum
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        metrics
            .groups_recompiled
            .fetch_add(report.recompiled as u64, Ordering::Relaxed);
        metrics
            .table_generation
            .store(report.generation, Ordering::Relaxed);
        metrics.table_groups.store(
            index.compiler.table().groups.len() as u64,
            Ordering::Relaxed,
        );
        writer.flush(&index, &report, &leader, &metrics).await;
    }
}
