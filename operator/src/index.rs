//! The watched world as a synchronous index (linkerd2's `k8s/index` shape): watch events go in
//! with [`Index::apply`] (no client, no `.await`), the compiler's inputs come out. Tests drive it
//! without an API server.
//!
//! ```text
//!  watch RecordGroup, HealthCheck, ZonalShift, ZonalAutoshift, EndpointSlice, Service,
//!        Node (zone and readiness only), checker Lease (a heartbeat, H7)
//!      └──▶ Index::apply ──▶ Compiler upsert_* / delete_* / set_heartbeat
//!                       └──▶ the objects as last seen, cut to what is read (crate::watched):
//!                            their status, for the status writer; a RecordGroup's spec is
//!                            the compiler's alone, an EndpointSlice kept as its endpoints
//! ```
//!
//! The resolvers' registrations (the generation each serves, where each takes pushes) are
//! not compiled: they go to the registry (`registry.rs`), which the control loop feeds
//! from the same stream; the index takes no [`Input::Resolver`].
//!
//! A ZonalAutoshift's engine starts from the status its object shows (the engine's memory
//! across leaders, AS11); [`Index::resume_autoshifts`] starts every engine again from there,
//! which is what a new leadership term does first. The compile that creates an engine holding
//! a shift also compiles its groups with it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;
use kube::runtime::watcher;

use crate::node::WatchedNode;
use crate::watched::{SERVICE_NAME_LABEL, WatchedGroup, lean_metadata};
use healthroute_api::{CHECKER_LABEL, HealthCheck, RecordGroup, ZonalAutoshift, ZonalShift};
use healthroute_compiler::manifests::{cluster_ips, endpoints_from_slices, group_input};
use healthroute_compiler::{
    AutoshiftInput, CheckInput, Compiler, EndpointInput, NodeInput, ObjectKey, ServedZones,
    ServiceEndpoints, ShiftInput,
};

/// One event from one watch.
pub enum Input {
    Group(watcher::Event<RecordGroup>),
    Check(watcher::Event<HealthCheck>),
    Shift(watcher::Event<ZonalShift>),
    Autoshift(watcher::Event<ZonalAutoshift>),
    Slice(watcher::Event<EndpointSlice>),
    Service(watcher::Event<Service>),
    Node(watcher::Event<WatchedNode>),
    /// A checker's heartbeat Lease (H7).
    Lease(watcher::Event<Lease>),
    /// A resolver's registration Lease: the registry's (`registry.rs`), not compiled.
    Resolver(watcher::Event<Lease>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    Group,
    Check,
    Shift,
    Autoshift,
    Slice,
    Service,
    Node,
    Lease,
}

const KINDS: usize = 8;

/// The watched world, fed into the compiler. Synchronous: tests drive it without a client.
pub struct Index {
    pub compiler: Compiler,
    /// RecordGroups as the status writer reads them; their specs are the compiler's.
    pub groups: BTreeMap<ObjectKey, WatchedGroup>,
    pub checks: BTreeMap<ObjectKey, HealthCheck>,
    /// The customers' ZonalShifts: the compiler's inputs.
    pub shifts: BTreeMap<ObjectKey, ZonalShift>,
    /// The ZonalShifts that mirror the engines' shifts (AS13): records, never inputs.
    pub engine_shifts: BTreeMap<ObjectKey, ZonalShift>,
    pub autoshifts: BTreeMap<ObjectKey, ZonalAutoshift>,
    /// Nodes by name, as detection reads them (the compiler holds the same).
    nodes: BTreeMap<String, NodeInput>,
    /// Whether the last RecordGroup, Node or Lease event changed what the compiler reads.
    /// They are mostly written for what it does not: a group's status (our own writes,
    /// coming back), a Node's heartbeat, a checker's Lease renewal.
    read_changed: bool,
    /// Each EndpointSlice as the compiler reads it (not the object: see [`SliceEndpoints`]).
    slices: BTreeMap<ObjectKey, SliceEndpoints>,
    /// The slices of each Service, so that one slice's change reads only its Service's.
    /// Sorted; mostly one slice (a `BTreeSet` would allocate a whole node for it).
    slices_of: HashMap<ObjectKey, Vec<ObjectKey>>,
    cluster_ips: BTreeMap<ObjectKey, Vec<std::net::IpAddr>>,
    /// Checker Leases seen (their renewals are the compiler's heartbeats).
    leases: BTreeSet<ObjectKey>,
    /// Keys listed since a watch restarted (Init): the others are gone at InitDone.
    relist: HashMap<Kind, BTreeSet<ObjectKey>>,
    synced: BTreeSet<u8>,
}

/// What the index keeps of an EndpointSlice: its Service and its endpoints, read as the
/// compiler reads them (`endpoints_from_slices`), so that a Service's endpoints are rebuilt
/// from its slices without keeping the objects (their managed fields, target references and
/// ports are most of their size, and nothing reads them).
struct SliceEndpoints {
    service: Option<ObjectKey>,
    endpoints: Vec<EndpointInput>,
}

pub(crate) fn key_of<K: ResourceExt>(o: &K) -> ObjectKey {
    ObjectKey::new(o.namespace().unwrap_or_default(), o.name_any())
}

/// Whether a ZonalAutoshift's status holds a shift its engine starts with.
impl Index {
    pub fn new(zones: ServedZones, default_ttl: u32) -> Self {
        Index {
            compiler: Compiler::new(zones, default_ttl),
            groups: BTreeMap::new(),
            checks: BTreeMap::new(),
            shifts: BTreeMap::new(),
            engine_shifts: BTreeMap::new(),
            autoshifts: BTreeMap::new(),
            nodes: BTreeMap::new(),
            read_changed: false,
            slices: BTreeMap::new(),
            slices_of: HashMap::new(),
            cluster_ips: BTreeMap::new(),
            leases: BTreeSet::new(),
            relist: HashMap::new(),
            synced: BTreeSet::new(),
        }
    }

    /// True once every watch has listed its objects at least once.
    pub fn synced(&self) -> bool {
        self.synced.len() == KINDS
    }

    /// Takes in one watch event.
    pub fn apply(&mut self, input: Input) {
        self.apply_changed(input);
    }

    /// Takes in one watch event; false when it changed nothing the compiler reads (a Node
    /// whose zone and readiness stay as they were, a Lease renewal that keeps its checker
    /// reachable, a RecordGroup whose status alone changed), so that no compile needs to
    /// follow.
    pub fn apply_changed(&mut self, input: Input) -> bool {
        match input {
            Input::Group(e) => {
                return self.event_read(Kind::Group, e, Self::upsert_group, Self::delete_group);
            }
            Input::Check(e) => self.event(Kind::Check, e, Self::upsert_check, Self::delete_check),
            Input::Shift(e) => self.event(Kind::Shift, e, Self::upsert_shift, Self::delete_shift),
            Input::Autoshift(e) => self.event(
                Kind::Autoshift,
                e,
                Self::upsert_autoshift,
                Self::delete_autoshift,
            ),
            Input::Slice(e) => self.event(Kind::Slice, e, Self::upsert_slice, Self::delete_slice),
            Input::Service(e) => {
                self.event(Kind::Service, e, Self::upsert_service, Self::delete_service)
            }
            // Nodes change often (their heartbeats), and mostly in what is not read.
            Input::Node(e) => {
                return self.event_read(Kind::Node, e, Self::upsert_node, Self::delete_node);
            }
            // A checker renews its Lease every second; a renewal that leaves it reachable as it
            // was changes nothing compiled (and would hold the next change back by the
            // debounce).
            Input::Lease(e) => {
                return self.event_read(Kind::Lease, e, Self::upsert_lease, Self::delete_lease);
            }
            // Not compiled: the registry's (registry.rs).
            Input::Resolver(_) => return false,
        }
        true
    }

    /// An event of a kind whose upserts and deletes tell whether they changed what the
    /// compiler reads (`read_changed`): whether a compile needs to follow.
    fn event_read<K: ResourceExt>(
        &mut self,
        kind: Kind,
        e: watcher::Event<K>,
        upsert: fn(&mut Self, K),
        delete: fn(&mut Self, &ObjectKey),
    ) -> bool {
        let synced = self.synced();
        self.read_changed = false;
        self.event(kind, e, upsert, delete);
        self.read_changed || self.synced() != synced
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
            Kind::Shift => (self.shifts.keys())
                .chain(self.engine_shifts.keys())
                .cloned()
                .collect(),
            Kind::Autoshift => self.autoshifts.keys().cloned().collect(),
            Kind::Node => self.nodes.keys().map(|n| ObjectKey::new("", n)).collect(),
            Kind::Slice => self.slices.keys().cloned().collect(),
            Kind::Service => self.cluster_ips.keys().cloned().collect(),
            Kind::Lease => self.leases.iter().cloned().collect(),
        }
    }

    fn upsert_group(&mut self, g: RecordGroup) {
        let key = key_of(&g);
        // The echo of our own status write compiles to the same input: nothing to compile.
        let compiled = self.compiler.upsert_group(key.clone(), group_input(&g));
        let watched = WatchedGroup::of(g);
        // A group deleted and created again with the same spec (one relist can show only the
        // new one) is another object: the Peer checks it owns name its new uid (X4).
        let replaced = self
            .groups
            .get(&key)
            .is_none_or(|old| old.uid != watched.uid);
        self.read_changed |= compiled || replaced;
        self.groups.insert(key, watched);
    }
    fn delete_group(&mut self, key: &ObjectKey) {
        self.compiler.delete_group(key);
        self.read_changed |= self.groups.remove(key).is_some();
    }

    fn upsert_check(&mut self, mut c: HealthCheck) {
        lean_metadata(&mut c.metadata);
        let key = key_of(&c);
        let status = c.status.clone().unwrap_or_default();
        let mut input = CheckInput::new(c.spec.clone());
        input.last_healthy = status.healthy;
        input.views = status.checker_views().collect();
        // The leader's own Metric-check view lives in memory only (H14): a status event (often
        // the echo of our own write) must not drop it.
        let metric = c.spec.check_type == healthroute_api::CheckType::Metric;
        if let Some(own) = self
            .compiler
            .check_view(&key, healthroute_api::METRIC_EVALUATOR)
            .filter(|_| metric)
            .cloned()
        {
            input.views.retain(|v| v.checker != own.checker);
            input.views.push(own);
        }
        self.compiler.upsert_check(key.clone(), input);
        self.checks.insert(key, c);
    }
    fn delete_check(&mut self, key: &ObjectKey) {
        self.compiler.delete_check(key);
        self.checks.remove(key);
    }

    fn upsert_shift(&mut self, mut s: ZonalShift) {
        lean_metadata(&mut s.metadata);
        let key = key_of(&s);
        if healthroute_api::is_engine_shift(&s) {
            // A mirror of an engine's shift (AS13): shown, never compiled.
            if self.shifts.remove(&key).is_some() {
                self.compiler.delete_shift(&key);
            }
            self.engine_shifts.insert(key, s);
            return;
        }
        self.engine_shifts.remove(&key);
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
        self.engine_shifts.remove(key);
    }

    fn upsert_autoshift(&mut self, mut a: ZonalAutoshift) {
        lean_metadata(&mut a.metadata);
        let key = key_of(&a);
        // With its status: the engine starts from it the first time it is seen (AS11).
        self.compiler
            .upsert_autoshift(key.clone(), AutoshiftInput::from_object(&a));
        self.autoshifts.insert(key, a);
    }
    fn delete_autoshift(&mut self, key: &ObjectKey) {
        self.compiler.delete_autoshift(key);
        self.autoshifts.remove(key);
    }

    /// Starts every ZonalAutoshift's engine again from the status its object shows, as the
    /// last leader wrote it: the autoshift in force, the running practice run, the outcomes,
    /// the last request answered (AS10, AS11). What this replica's engines decided while it
    /// was not the leader was never written, and is dropped.
    pub fn resume_autoshifts(&mut self) {
        for (key, a) in &self.autoshifts {
            self.compiler.delete_autoshift(key);
            self.compiler
                .upsert_autoshift(key.clone(), AutoshiftInput::from_object(a));
        }
    }

    fn upsert_node(&mut self, n: WatchedNode) {
        let name = n.name_any();
        let input = n.input();
        if self.nodes.get(&name) != Some(&input) {
            self.compiler.upsert_node(name.clone(), input.clone());
            self.nodes.insert(name, input);
            self.read_changed = true;
        }
    }
    fn delete_node(&mut self, key: &ObjectKey) {
        if self.nodes.remove(&*key.name).is_some() {
            self.compiler.delete_node(&key.name);
            self.read_changed = true;
        }
    }

    fn service_of(slice: &EndpointSlice) -> Option<ObjectKey> {
        let svc = slice.labels().get(SERVICE_NAME_LABEL)?;
        Some(ObjectKey::new(slice.namespace().unwrap_or_default(), svc))
    }

    /// Rebuilds one Service's endpoints from all of its slices, in the order of their keys.
    fn refresh_service(&mut self, service: &ObjectKey) {
        let mut endpoints = ServiceEndpoints {
            endpoints: self
                .slices_of
                .get(service)
                .into_iter()
                .flatten()
                .filter_map(|k| self.slices.get(k))
                .flat_map(|s| s.endpoints.iter().cloned())
                .collect(),
            ..ServiceEndpoints::default()
        };
        endpoints.cluster_ips = self.cluster_ips.get(service).cloned().unwrap_or_default();
        if endpoints.endpoints.is_empty() && endpoints.cluster_ips.is_empty() {
            self.compiler.delete_service(service);
        } else {
            self.compiler.upsert_service(service.clone(), endpoints);
        }
    }

    fn upsert_slice(&mut self, s: EndpointSlice) {
        let key = key_of(&s);
        let before = self.slices.get(&key).and_then(|s| s.service.clone());
        let after = Self::service_of(&s);
        // One slice read alone, as all of its Service's would be read together.
        let mut endpoints = after
            .as_ref()
            .and_then(|svc| endpoints_from_slices([&s]).remove(svc))
            .map(|e| e.endpoints)
            .unwrap_or_default();
        endpoints.shrink_to_fit();
        if let Some(old) = &before {
            self.forget_slice(old, &key);
        }
        if let Some(svc) = &after {
            let slices = self
                .slices_of
                .entry(svc.clone())
                .or_insert_with(|| Vec::with_capacity(1));
            if let Err(at) = slices.binary_search(&key) {
                slices.insert(at, key.clone());
            }
        }
        self.slices.insert(
            key,
            SliceEndpoints {
                service: after.clone(),
                endpoints,
            },
        );
        for svc in before.into_iter().chain(after) {
            self.refresh_service(&svc);
        }
    }
    fn delete_slice(&mut self, key: &ObjectKey) {
        let Some(svc) = self.slices.remove(key).and_then(|s| s.service) else {
            return;
        };
        self.forget_slice(&svc, key);
        self.refresh_service(&svc);
    }

    /// Takes `slice` out of `service`'s slices.
    fn forget_slice(&mut self, service: &ObjectKey, slice: &ObjectKey) {
        if let Some(slices) = self.slices_of.get_mut(service) {
            if let Ok(at) = slices.binary_search(slice) {
                slices.remove(at);
            }
            if slices.is_empty() {
                self.slices_of.remove(service);
            }
        }
    }

    fn upsert_service(&mut self, s: Service) {
        let key = key_of(&s);
        let ips = cluster_ips(&s);
        let known = self.slices_of.contains_key(&key);
        if self.cluster_ips.insert(key.clone(), ips).is_none() && !known {
            return;
        }
        self.refresh_service(&key);
    }
    fn delete_service(&mut self, key: &ObjectKey) {
        if self.cluster_ips.remove(key).is_some() {
            self.refresh_service(key);
        }
    }

    fn upsert_lease(&mut self, l: Lease) {
        let key = key_of(&l);
        let checker = l
            .labels()
            .get(CHECKER_LABEL)
            .cloned()
            .unwrap_or_else(|| l.name_any());
        let renewed = l
            .spec
            .as_ref()
            .and_then(|s| s.renew_time.as_ref())
            .map(|t| t.0);
        self.read_changed |= renewed.is_none_or(|at| {
            self.compiler
                .heartbeat_changes_reachability(&checker, at, jiff::Timestamp::now())
        });
        if let Some(renewed) = renewed {
            self.compiler.set_heartbeat(checker, renewed);
        }
        self.leases.insert(key);
    }
    fn delete_lease(&mut self, key: &ObjectKey) {
        self.read_changed |= self.leases.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use kube::runtime::watcher::Event;
    use serde_json::json;

    use super::*;
    use healthroute_api::METRIC_EVALUATOR;
    use healthroute_compiler::CheckerView;

    fn checker_lease(name: &str, renewed: &str) -> Lease {
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": format!("healthroute-checker-{name}"), "namespace": "healthroute",
                         "labels": {CHECKER_LABEL: name}},
            "spec": {"holderIdentity": name, "renewTime": renewed}
        }))
        .expect("valid")
    }

    // SEM-H7: a checker's Lease renewal that leaves it reachable as the last compile counted
    // it asks for no compile (it would hold the next change back by the debounce); its first
    // Lease, and a renewal after it went stale, do.
    #[test]
    fn a_lease_renewal_that_changes_no_reachability_asks_for_no_compile() {
        let mut index = Index::new(ServedZones::new(["example.com"]).expect("zone"), 60);
        index.apply(Input::Check(Event::Apply(check("TCP"))));
        let now = jiff::Timestamp::now();
        let at = |t: jiff::Timestamp| t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string();
        let renewal = |t| Input::Lease(Event::Apply(checker_lease("a", &at(t))));
        assert!(index.apply_changed(renewal(now)), "a new checker");
        index.compiler.compile(now);
        assert!(!index.apply_changed(renewal(now)), "a renewal");
        assert!(!index.apply_changed(renewal(now)), "and another");
        // A compile long after: the checker went stale; its next renewal makes it reachable.
        index
            .compiler
            .compile(now + jiff::SignedDuration::from_secs(600));
        assert!(index.apply_changed(renewal(now)), "reachable again");
        assert!(index.apply_changed(Input::Lease(Event::Delete(checker_lease("a", &at(now))))));
    }

    // SEM-P5: a RecordGroup event that changes only its status (the leader's own status
    // write coming back) asks for no compile (nor a new plan of the Peer checks, SEM-X4); a
    // change of its spec, labels or uid, and its deletion, do.
    #[test]
    fn a_group_whose_status_alone_changed_asks_for_no_compile() {
        let mut index = Index::new(ServedZones::new(["example.com"]).expect("zone"), 60);
        let group = |labels: serde_json::Value, ttl: u32, status: serde_json::Value| {
            let g: RecordGroup = serde_json::from_value(json!({
                "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
                "metadata": {"name": "api", "namespace": "shop", "labels": labels,
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "spec": {"name": "api.example.com.", "type": "A", "ttl": ttl,
                         "routingPolicy": "Simple",
                         "records": [{"setIdentifier": "x", "values": ["192.0.2.1"]}]},
                "status": status
            }))
            .expect("valid");
            Input::Group(Event::Apply(g))
        };
        let none = json!({});
        assert!(
            index.apply_changed(group(none.clone(), 60, json!({}))),
            "a new group"
        );
        assert!(
            !index.apply_changed(group(none.clone(), 60, json!({"servedGeneration": 3}))),
            "its status written"
        );
        assert_eq!(
            index.groups[&ObjectKey::new("shop", "api")]
                .status
                .as_ref()
                .and_then(|s| s.served_generation),
            Some(3),
            "the status is kept all the same"
        );
        assert!(
            index.apply_changed(group(none.clone(), 30, json!({}))),
            "its spec"
        );
        let Input::Group(Event::Apply(mut again)) = group(none.clone(), 30, json!({})) else {
            unreachable!()
        };
        again.metadata.uid = Some("u-2".into());
        assert!(
            index.apply_changed(Input::Group(Event::Apply(again))),
            "deleted and created again with the same spec: another object (X4 owner)"
        );
        assert!(
            index.apply_changed(group(json!({"team": "b"}), 30, json!({}))),
            "its labels"
        );
        let g = group(json!({"team": "b"}), 30, json!({}));
        let Input::Group(Event::Apply(g)) = g else {
            unreachable!()
        };
        assert!(
            index.apply_changed(Input::Group(Event::Delete(g))),
            "deleted"
        );
    }

    fn check(check_type: &str) -> HealthCheck {
        let spec = if check_type == "Metric" {
            json!({"type": "Metric", "metric": {"prometheus": {"url": "http://p:9090"}, "query": "up == 0"}})
        } else {
            json!({"type": check_type, "target": {"address": "192.0.2.1", "port": 80}})
        };
        serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
            "metadata": {"name": "m", "namespace": "shop"}, "spec": spec,
            "status": {"healthy": false}
        }))
        .expect("valid")
    }

    // SEM-H14: the leader's in-memory view of a Metric check survives the watch echo of a
    // status write; a check that is no longer Metric does not keep it.
    #[test]
    fn the_evaluators_view_survives_status_echoes_only_while_metric() {
        let mut index = Index::new(ServedZones::new(["example.com"]).expect("zone"), 60);
        let key = ObjectKey::new("shop", "m");
        index.apply(Input::Check(Event::Apply(check("Metric"))));
        let view = CheckerView {
            checker: METRIC_EVALUATOR.into(),
            zone: None,
            healthy: false,
            message: Some("ALARM: 1 sample, 1".into()),
            values: Vec::new(),
        };
        index.compiler.set_check_view(&key, view.clone());
        index.apply(Input::Check(Event::Apply(check("Metric"))));
        assert_eq!(
            index.compiler.check_view(&key, METRIC_EVALUATOR),
            Some(&view)
        );
        index.apply(Input::Check(Event::Apply(check("HTTP"))));
        assert_eq!(index.compiler.check_view(&key, METRIC_EVALUATOR), None);
    }

    // SEM-AS13: the leader's mirror of an engine's shift is kept apart and never compiled; a
    // relist that no longer has it forgets it.
    #[test]
    fn engine_shift_mirrors_are_records_not_inputs() {
        let mut index = Index::new(ServedZones::new(["example.com"]).expect("zone"), 60);
        let mirror: ZonalShift = serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalShift",
            "metadata": {"name": "app-autoshift", "namespace": "shop",
                "labels": {healthroute_api::ENGINE_SHIFT_LABEL: "app"},
                "ownerReferences": [{"apiVersion": "healthroute.io/v1alpha1",
                    "kind": "ZonalAutoshift", "name": "app", "uid": "u-1", "controller": true}]},
            "spec": {"awayFrom": "zone-a", "target": {"recordGroup": "api"}, "expiresIn": "72h"},
        }))
        .expect("mirror");
        let key = ObjectKey::new("shop", "app-autoshift");
        index.apply(Input::Shift(Event::Apply(mirror)));
        assert!(index.shifts.is_empty());
        assert!(index.engine_shifts.contains_key(&key));
        assert!(
            index
                .compiler
                .shift_status(&key, jiff::Timestamp::now())
                .is_none(),
            "not compiled"
        );
        index.apply(Input::Shift(Event::Init));
        index.apply(Input::Shift(Event::InitDone));
        assert!(index.engine_shifts.is_empty());
    }

    /// Every watch listed once, with `objects` (`InitApply` events) in their lists.
    fn listed(objects: Vec<Input>) -> Index {
        fn all(init: bool) -> [Input; 8] {
            fn marker<K>(init: bool) -> Event<K> {
                if init { Event::Init } else { Event::InitDone }
            }
            [
                Input::Group(marker(init)),
                Input::Check(marker(init)),
                Input::Shift(marker(init)),
                Input::Autoshift(marker(init)),
                Input::Slice(marker(init)),
                Input::Service(marker(init)),
                Input::Node(marker(init)),
                Input::Lease(marker(init)),
            ]
        }
        let mut index = Index::new(ServedZones::new(["example.com"]).expect("zone"), 60);
        for input in all(true).into_iter().chain(objects).chain(all(false)) {
            index.apply(input);
        }
        index
    }

    /// The objects of a small namespace as the API server sends them, with managed fields and
    /// a last-applied configuration (`whole`), or without (what the watches read).
    fn shop(whole: bool) -> Vec<Input> {
        let meta = |name: &str, extra: serde_json::Value| {
            let mut m = json!({"name": name, "namespace": "shop", "uid": format!("u-{name}"),
                               "resourceVersion": "1", "generation": 1,
                               "creationTimestamp": "2026-01-01T00:00:00Z"});
            if let (Some(m), Some(extra)) = (m.as_object_mut(), extra.as_object()) {
                m.extend(extra.clone());
                if whole {
                    m.insert(
                        "managedFields".into(),
                        json!([{
                        "manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1",
                        "fieldsV1": {"f:metadata": {"f:labels": {}}, "f:spec": {"f:x": {}}}}]),
                    );
                    m.insert(
                        "annotations".into(),
                        json!({
                        "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}"}),
                    );
                }
            }
            m
        };
        let group = |name: &str, record: serde_json::Value| -> RecordGroup {
            serde_json::from_value(json!({
                "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
                "metadata": meta(name, json!({"labels": {"team": "a"}})),
                "spec": {"name": format!("{name}.example.com."), "type": "A",
                         "routingPolicy": "Simple", "records": [record]}
            }))
            .expect("valid")
        };
        let slice: EndpointSlice = serde_json::from_value(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": meta("web-x1", json!({"labels": {SERVICE_NAME_LABEL: "web"}})),
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["192.0.2.10"], "zone": "zone-a", "nodeName": "n1",
                 "conditions": {"ready": true},
                 "targetRef": {"kind": "Pod", "name": "web-1", "namespace": "shop"}},
                {"addresses": ["192.0.2.11"], "conditions": {"ready": false}}],
            "ports": [{"port": 8080}]
        }))
        .expect("valid");
        let check: HealthCheck = serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
            "metadata": meta("hc", json!({})),
            "spec": {"type": "TCP", "target": {"address": "192.0.2.1", "port": 80}}
        }))
        .expect("valid");
        let service: Service = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Service", "metadata": meta("web", json!({})),
            "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}
        }))
        .expect("valid");
        vec![
            Input::Group(Event::InitApply(group(
                "api",
                json!({"setIdentifier": "x", "values": ["192.0.2.1"]}),
            ))),
            Input::Group(Event::InitApply(group(
                "web",
                json!({"setIdentifier": "pods", "service": {"name": "web"}}),
            ))),
            Input::Check(Event::InitApply(check)),
            Input::Slice(Event::InitApply(slice)),
            Input::Service(Event::InitApply(service)),
        ]
    }

    // The index keeps no managed fields and no one else's annotations, whatever fed it, and
    // what it keeps compiles to the same table as the whole objects did.
    #[test]
    fn objects_are_kept_without_managed_fields_and_compile_the_same() {
        let mut whole = listed(shop(true));
        let mut lean = listed(shop(false));
        let key = ObjectKey::new("shop", "api");
        let kept = &whole.groups[&key];
        assert_eq!(kept.generation, Some(1));
        assert_eq!(kept.uid.as_deref(), Some("u-api"));
        let check = &whole.checks[&ObjectKey::new("shop", "hc")].metadata;
        assert_eq!(check.managed_fields, None);
        assert_eq!(check.annotations, None);
        assert_eq!(check.uid.as_deref(), Some("u-hc"));
        let now = jiff::Timestamp::from_second(1_800_000_000).expect("valid");
        whole.compiler.compile(now);
        lean.compiler.compile(now);
        let (a, b) = (whole.compiler.table(), lean.compiler.table());
        assert_eq!(a.groups, b.groups);
        assert_eq!(
            a.groups.len(),
            2,
            "{:?}",
            a.groups.keys().collect::<Vec<_>>()
        );
        assert_eq!(
            whole
                .compiler
                .group_status(&ObjectKey::new("shop", "web"))
                .map(|s| s.healthy_records),
            Some(Some("1/1".into())),
            "the ready endpoint of the slice"
        );
    }
}
