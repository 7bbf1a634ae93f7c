//! The leader's statuses for one term: what each object's status says, judged against what
//! is published (P5), what was handed to the writer, and what waits.
//!
//! ```text
//!  compiled(changed groups, changed checks) ──▶ groups: awaiting until the publisher has
//!                                               caught up (or fails) ──▶ settle_groups
//!                                          ──▶ checks (all at a term's start), every shift,
//!                                              every ZonalAutoshift (with the Events its
//!                                              engine reported since its last status)
//!  push: not when it says what was last sent, or (first time this term) what the object shows,
//!        unless it carries Events
//!  recheck (every --status-recheck-interval): each object as last watched against what
//!  would be written; a difference nothing queued or just written explains is written again,
//!  without Events
//!  watched (each watch event): a group's sent status that its object shows exactly is kept as
//!  the index's (one copy)
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;

use super::build::{self, Publication};
use super::events::{self, Notice};
use super::kind::{OwnStatus, Status, StatusKey, StatusKind};
use super::published::Published;
use super::writer::{StatusQueue, StatusUpdate};
use crate::index::Index;
use crate::metrics::StatusMetrics;
use crate::publish::ReadBack;
use healthroute_api::{
    HealthCheckStatus, MetricStatus, RecordGroupStatus, ZonalAutoshiftStatus, ZonalShiftStatus,
};
use healthroute_compiler::{AutoshiftEvent, ObjectKey};
use healthroute_table::{RoutingTable, Value};

/// The statuses of the current leadership term (empty while not leading).
pub struct Ledger {
    /// To the status writer.
    queue: StatusQueue,
    metrics: Arc<StatusMetrics>,
    published: Published,
    /// Groups whose status waits for the publisher to catch up with the compiler.
    awaiting: BTreeSet<ObjectKey>,
    /// Every check's status is due at the next compile (the term's read-back was taken in).
    full: bool,
    /// The status last handed to the writer, per object, this term.
    sent: HashMap<StatusKey, Sent>,
    /// The last evaluation of each Metric check (H14), for its status.
    evaluations: HashMap<ObjectKey, MetricStatus>,
    /// Metric checks whose status has a newer evaluation to show.
    evaluated: BTreeSet<ObjectKey>,
    /// What each ZonalAutoshift's engine reported this term and no status carried yet: the
    /// Events of its next status.
    autoshift_events: HashMap<ObjectKey, Vec<Notice>>,
    /// The re-check pass under way, if any.
    recheck: Option<Recheck>,
}

/// A re-check pass under way (see [`Ledger::recheck_step`]).
struct Recheck {
    /// The kind and the last key judged (None: from its first); None once every kind is done.
    next: Option<(StatusKind, Option<ObjectKey>)>,
    /// The statuses written before the pass began that no watch event had shown yet.
    settling: HashSet<StatusKey>,
    /// How many were queued again so far.
    repaired: usize,
}

/// A status last handed to the writer.
#[derive(Debug)]
enum Sent {
    /// Boxed: most of the map's entries are `Shown`, a pointer's size.
    Own(Box<Status>),
    /// A RecordGroup's, once its object showed exactly it: the index's value, shared (at
    /// 10,000 groups a second copy of every status was the leader's largest extra).
    Shown(Arc<RecordGroupStatus>),
}

impl Sent {
    fn get<S: OwnStatus>(&self) -> Option<&S> {
        match self {
            Sent::Own(status) => S::of(status.as_ref()),
            Sent::Shown(status) => S::of_group(status),
        }
    }
}

/// `now` at the precision the API keeps times (whole seconds): a status written with it comes
/// back from the watch equal to what was sent, and [`Ledger::recheck`] can share it.
fn api_time(now: Timestamp) -> Timestamp {
    Timestamp::from_second(now.as_second()).unwrap_or(now)
}

impl Ledger {
    pub fn new(queue: StatusQueue, metrics: Arc<StatusMetrics>) -> Self {
        Ledger {
            queue,
            metrics,
            published: Published::default(),
            awaiting: BTreeSet::new(),
            full: false,
            sent: HashMap::new(),
            evaluations: HashMap::new(),
            evaluated: BTreeSet::new(),
            autoshift_events: HashMap::new(),
            recheck: None,
        }
    }

    /// A term begins (`leading`) or ends: every unsent status is dropped (a term that ends
    /// leaves them to the next leader, which writes its own).
    pub fn new_term(&mut self, leading: bool) {
        self.published = Published::default();
        self.awaiting.clear();
        self.full = false;
        self.sent.clear();
        self.queue.clear();
        self.autoshift_events.clear();
        self.recheck = None;
        if !leading {
            self.evaluations.clear();
            self.evaluated.clear();
        }
    }

    /// Keeps what the term's publisher read back until the watches have listed everything.
    pub fn hold_read_back(&mut self, found: ReadBack) {
        self.published.hold_read_back(found);
    }

    /// Tables may be sent, and statuses judged: the term's read-back is taken in.
    pub fn seeded(&self) -> bool {
        self.published.seeded()
    }

    /// Takes in the read-back held, if any (once every watch has listed): every status is
    /// due again, each judged against what this term found published.
    pub fn take_read_back(&mut self, index: &mut Index) {
        if self.published.take_read_back(index) {
            self.full = true;
            self.awaiting = index.groups.keys().cloned().collect();
        }
    }

    /// `table` is published as `generation`: the statuses that waited for it follow.
    pub fn take_published(
        &mut self,
        index: &Index,
        generation: u64,
        table: Arc<RoutingTable<Value>>,
        now: Timestamp,
    ) {
        let now = api_time(now);
        self.published.take_published(generation, table);
        self.settle_groups(index, now);
    }

    /// Publishing failed: the groups whose version is not published say so (P5).
    pub fn take_failure(&mut self, index: &Index, error: String, now: Timestamp) {
        let now = api_time(now);
        self.published.fail(error);
        self.settle_groups(index, now);
    }

    /// The leader's newest evaluation of a Metric check, shown at the next compile.
    pub fn set_evaluation(&mut self, check: ObjectKey, evaluation: MetricStatus) {
        self.evaluations.insert(check.clone(), evaluation);
        self.evaluated.insert(check);
    }

    /// What the ZonalAutoshift engines reported at a compile of this term (AS11): Events on
    /// their objects, sent with their next status (the next seeded compile's).
    pub fn take_autoshift_events(&mut self, events: &[AutoshiftEvent]) {
        for event in events {
            let (key, notice) = events::autoshift_notice(event);
            self.autoshift_events.entry(key).or_default().push(notice);
        }
    }

    /// The statuses a compile of this term (seeded) changed: its groups once published, its
    /// checks (all of them at a term's start, and those with a newer evaluation), every
    /// shift and every ZonalAutoshift.
    pub fn compiled(
        &mut self,
        index: &Index,
        changed_groups: Vec<ObjectKey>,
        changed_checks: Vec<ObjectKey>,
        now: Timestamp,
    ) {
        let now = api_time(now);
        let full = std::mem::take(&mut self.full);
        self.awaiting.extend(changed_groups);
        self.settle_groups(index, now);
        let mut checks: Vec<ObjectKey> = if full {
            index.checks.keys().cloned().collect()
        } else {
            changed_checks
        };
        for key in std::mem::take(&mut self.evaluated) {
            if !checks.contains(&key) {
                checks.push(key);
            }
        }
        for key in checks {
            self.check(index, &key, now);
        }
        for key in index.shifts.keys() {
            self.shift(index, key, now);
        }
        for key in index.autoshifts.keys() {
            self.autoshift(index, key, now);
        }
        // Those of an object gone meanwhile have nothing to be recorded on.
        self.autoshift_events.clear();
        self.metrics.set_backlog(self.queue.backlog());
    }

    /// Writes the status of every awaiting group whose version the publisher has caught up
    /// with, or that a failing publish leaves behind (those stay awaiting until published).
    fn settle_groups(&mut self, index: &Index, now: Timestamp) {
        if !self.published.seeded() {
            return;
        }
        let table = index.compiler.table();
        for key in std::mem::take(&mut self.awaiting) {
            let publication = match self.published.publication(&key, &table) {
                None => {
                    self.awaiting.insert(key);
                    continue;
                }
                Some(p @ Publication::Failed { .. }) => {
                    self.awaiting.insert(key.clone());
                    p
                }
                Some(p) => p,
            };
            let Some(g) = index.groups.get(&key) else {
                self.sent.remove(&(StatusKind::RecordGroup, key));
                continue;
            };
            let old = self.last(&key, g.status.as_deref());
            if let Some((status, events)) = group_status(index, &key, publication, old, now) {
                self.push(
                    &key,
                    status,
                    g.status.as_deref(),
                    events,
                    g.object_ref(&key),
                );
                // A new term finds most statuses right: their copy goes at once.
                self.share_shown(&(StatusKind::RecordGroup, key.clone()), g.status.as_ref());
            }
        }
    }

    fn check(&mut self, index: &Index, key: &ObjectKey, now: Timestamp) {
        let Some(c) = index.checks.get(key) else {
            self.sent.remove(&(StatusKind::HealthCheck, key.clone()));
            return;
        };
        let old = self.last(key, c.status.as_ref());
        let evaluation = self.evaluations.get(key);
        if let Some(status) = check_status(index, key, evaluation, old, now) {
            self.push(
                key,
                status,
                c.status.as_ref(),
                Vec::new(),
                c.object_ref(&()),
            );
        }
    }

    fn shift(&mut self, index: &Index, key: &ObjectKey, now: Timestamp) {
        let Some(s) = index.shifts.get(key) else {
            return;
        };
        let old = self.last(key, s.status.as_ref());
        if let Some((status, events)) = shift_status(index, key, old, now) {
            self.push(key, status, s.status.as_ref(), events, s.object_ref(&()));
        }
    }

    /// A ZonalAutoshift's status is written after every compile that changed it: it is the
    /// engine's memory across leaders, not only a report.
    fn autoshift(&mut self, index: &Index, key: &ObjectKey, now: Timestamp) {
        let Some(a) = index.autoshifts.get(key) else {
            return;
        };
        let old = self.last(key, a.status.as_ref());
        let events = self.autoshift_events.remove(key).unwrap_or_default();
        if let Some(status) = autoshift_status(index, key, old, now) {
            self.push(key, status, a.status.as_ref(), events, a.object_ref(&()));
        }
    }

    /// The status last sent for an object this term, else the one it shows (`watched`).
    fn last<S: OwnStatus>(&self, key: &ObjectKey, watched: Option<&S>) -> Option<S> {
        match self.sent.get(&(S::KIND, key.clone())) {
            Some(sent) => sent.get::<S>().cloned(),
            None => watched.cloned(),
        }
    }

    /// Hands `status` to the writer unless it says what was last sent, or what the object
    /// already shows (a new leader rewrites nothing that is right), and has no Events to go
    /// with it.
    fn push<S: OwnStatus>(
        &mut self,
        key: &ObjectKey,
        status: S,
        watched: Option<&S>,
        events: Vec<Notice>,
        reference: ObjectReference,
    ) {
        let skey = (S::KIND, key.clone());
        let quiet = events.is_empty();
        match self.sent.get(&skey) {
            Some(sent) if quiet && sent.get::<S>().is_some_and(|sent| status.shown_by(sent)) => {
                return;
            }
            Some(_) => {}
            None if quiet && watched.is_some_and(|w| status.shown_by(w)) => {
                self.sent
                    .insert(skey, Sent::Own(Box::new(status.into_status())));
                return;
            }
            None => {}
        }
        let status = status.into_status();
        self.sent.insert(skey, Sent::Own(Box::new(status.clone())));
        self.queue.push(StatusUpdate {
            key: key.clone(),
            status,
            events,
            reference,
        });
    }

    /// Compares every object's status as last watched with what this term would write, and
    /// writes again each one that differs (changed by another writer since), unless a
    /// status of it is still queued or being written. Groups waiting for the publisher are
    /// left alone (P5). Returns how many were queued again. The whole pass at once: the
    /// control loop runs it in steps ([`Ledger::start_recheck`], [`Ledger::recheck_step`]).
    #[cfg(test)]
    pub fn recheck(&mut self, index: &Index, now: Timestamp) -> usize {
        self.start_recheck();
        let mut repaired = 0;
        while let Some(step) = self.recheck_step(index, now, usize::MAX) {
            repaired += step;
        }
        repaired
    }

    /// Begins a re-check pass, unless one is under way. Nothing is judged until the term's
    /// read-back is taken in.
    pub fn start_recheck(&mut self) {
        if self.recheck.is_none() && self.published.seeded() {
            // Written since the last pass and not seen by the watch since: the write may not
            // be back yet, so a difference says nothing until the next pass (a first start's
            // burst had hundreds of statuses written twice for that, logged as another
            // writer's).
            self.recheck = Some(Recheck {
                next: Some((StatusKind::RecordGroup, None)),
                settling: self.queue.take_written(),
                repaired: 0,
            });
        }
    }

    /// Whether a re-check pass is under way.
    pub fn rechecking(&self) -> bool {
        self.recheck.is_some()
    }

    /// Judges up to `budget` more objects of the pass under way, in the order of their kind
    /// and key; returns how many of them were queued again, or None once the pass is done
    /// (or there was none). At 100,000 groups a whole pass took 0.6-0.9 s: in steps, a
    /// change that arrives meanwhile is compiled and published after one step, not after
    /// the pass.
    pub fn recheck_step(&mut self, index: &Index, now: Timestamp, budget: usize) -> Option<usize> {
        let mut pass = self.recheck.take()?;
        if !self.published.seeded() {
            return None;
        }
        let now = api_time(now);
        let table = index.compiler.table();
        let settling = &pass.settling;
        let mut left = budget;
        let mut repaired = 0;
        while left > 0 {
            let Some((kind, after)) = pass.next.take() else {
                break;
            };
            let (left, repaired) = (&mut left, &mut repaired);
            let last = match kind {
                StatusKind::RecordGroup => {
                    self.judge_range(&index.groups, after, left, repaired, |ledger, key, g| {
                        if ledger.awaiting.contains(key) {
                            return 0;
                        }
                        let (watched, reference) = (g.status.as_deref(), g.object_ref(key));
                        ledger.judge(key, watched, reference, settling, |ledger, old| {
                            let publication = ledger.published.publication(key, &table)?;
                            group_status(index, key, publication, old, now).map(|(s, _)| s)
                        })
                    })
                }
                StatusKind::HealthCheck => {
                    self.judge_range(&index.checks, after, left, repaired, |ledger, key, c| {
                        let (watched, reference) = (c.status.as_ref(), c.object_ref(&()));
                        ledger.judge(key, watched, reference, settling, |ledger, old| {
                            check_status(index, key, ledger.evaluations.get(key), old, now)
                        })
                    })
                }
                StatusKind::ZonalShift => {
                    self.judge_range(&index.shifts, after, left, repaired, |ledger, key, s| {
                        let (watched, reference) = (s.status.as_ref(), s.object_ref(&()));
                        ledger.judge(key, watched, reference, settling, |_, old| {
                            shift_status(index, key, old, now).map(|(s, _)| s)
                        })
                    })
                }
                StatusKind::ZonalAutoshift => self.judge_range(
                    &index.autoshifts,
                    after,
                    left,
                    repaired,
                    |ledger, key, a| {
                        let (watched, reference) = (a.status.as_ref(), a.object_ref(&()));
                        ledger.judge(key, watched, reference, settling, |_, old| {
                            autoshift_status(index, key, old, now)
                        })
                    },
                ),
            };
            pass.next = match last {
                Some(last) => Some((kind, Some(last))),
                None => recheck_after(kind).map(|kind| (kind, None)),
            };
        }
        StatusMetrics::add(&self.metrics.repairs, repaired as u64);
        self.metrics.set_backlog(self.queue.backlog());
        pass.repaired += repaired;
        if pass.next.is_some() {
            self.recheck = Some(pass);
        } else if pass.repaired > 0 {
            tracing::info!(
                repaired = pass.repaired,
                "statuses changed by another writer since written; writing them again"
            );
        }
        Some(repaired)
    }

    /// One object of a re-check: the status this term would write, built from the last one
    /// sent (else the watched one), is queued again when the object does not show it
    /// ([`Ledger::repair`]). `build` gives None when nothing would be written.
    fn judge<S: OwnStatus>(
        &mut self,
        key: &ObjectKey,
        watched: Option<&S>,
        reference: ObjectReference,
        settling: &HashSet<StatusKey>,
        build: impl FnOnce(&Self, Option<S>) -> Option<S>,
    ) -> usize {
        let old = self.last(key, watched);
        build(self, old).map_or(0, |status| {
            self.repair(key, status, watched, reference, settling)
        })
    }

    /// Judges the objects of `map` after `after`, at most `left` of them (counted down);
    /// returns the last one judged while more may follow, None once the map is done.
    fn judge_range<V>(
        &mut self,
        map: &BTreeMap<ObjectKey, V>,
        after: Option<ObjectKey>,
        left: &mut usize,
        repaired: &mut usize,
        mut judge: impl FnMut(&mut Self, &ObjectKey, &V) -> usize,
    ) -> Option<ObjectKey> {
        use std::ops::Bound::{Excluded, Unbounded};
        let range = match &after {
            Some(after) => map.range::<ObjectKey, _>((Excluded(after), Unbounded)),
            None => map.range::<ObjectKey, _>(..),
        };
        let mut last: Option<&ObjectKey> = None;
        for (key, value) in range {
            if *left == 0 {
                return last.cloned();
            }
            *left -= 1;
            *repaired += judge(self, key, value);
            last = Some(key);
        }
        None
    }

    /// An object's watch event, once the index holds it: a status written before it is back
    /// (or another writer's change came after it), so the next recheck judges the object;
    /// and a RecordGroup whose object shows exactly the status sent keeps one copy of it at
    /// once, not two until that recheck (a first start's 10,000 writes held 20 MiB for up
    /// to a minute).
    pub fn watched(&mut self, index: &Index, key: &StatusKey) {
        self.queue.seen(key);
        if key.0 == StatusKind::RecordGroup {
            let status = index.groups.get(&key.1).and_then(|g| g.status.as_ref());
            self.share_shown(key, status);
        }
    }

    /// Keeps a group's sent status as the index's value when the object shows exactly it:
    /// one copy instead of two, the same status either way.
    fn share_shown(&mut self, key: &StatusKey, watched: Option<&Arc<RecordGroupStatus>>) {
        let Some(watched) = watched else {
            return;
        };
        if let Some(sent) = self.sent.get_mut(key)
            && let Sent::Own(own) = sent
            && let Status::RecordGroup(own) = own.as_ref()
            && own == watched.as_ref()
        {
            *sent = Sent::Shown(watched.clone());
        }
    }

    /// Queues `status` again when the object does not show it. Not while a status of the
    /// object is queued or in flight: the object cannot show it yet. Without Events: they
    /// went out with the transition.
    fn repair<S: OwnStatus>(
        &mut self,
        key: &ObjectKey,
        status: S,
        watched: Option<&S>,
        reference: ObjectReference,
        settling: &HashSet<StatusKey>,
    ) -> usize {
        let skey = (S::KIND, key.clone());
        if watched.is_some_and(|w| status.shown_by(w))
            || self.queue.holds(&skey)
            || settling.contains(&skey)
        {
            return 0;
        }
        tracing::debug!(kind = %S::KIND, object = %key, "status differs from what was written");
        let status = status.into_status();
        self.sent.insert(skey, Sent::Own(Box::new(status.clone())));
        self.queue.push(StatusUpdate {
            key: key.clone(),
            status,
            events: Vec::new(),
            reference,
        });
        1
    }
}

/// The kind a re-check pass judges after `kind`'s objects: groups, checks, shifts, autoshifts.
fn recheck_after(kind: StatusKind) -> Option<StatusKind> {
    match kind {
        StatusKind::RecordGroup => Some(StatusKind::HealthCheck),
        StatusKind::HealthCheck => Some(StatusKind::ZonalShift),
        StatusKind::ZonalShift => Some(StatusKind::ZonalAutoshift),
        StatusKind::ZonalAutoshift => None,
    }
}

/// A RecordGroup's status for `publication`, with the Events since `old`.
fn group_status(
    index: &Index,
    key: &ObjectKey,
    publication: Publication<'_>,
    old: Option<RecordGroupStatus>,
    now: Timestamp,
) -> Option<(RecordGroupStatus, Vec<Notice>)> {
    let g = index.groups.get(key)?;
    let data = index.compiler.group_status(key)?;
    let outcome = index.compiler.outcome(key)?;
    let status = build::record_group(data, outcome, publication, old.as_ref(), g.generation, now);
    let events = events::group_events(old.as_ref(), &status);
    Some((status, events))
}

/// A HealthCheck's status, with the leader's last evaluation of it (a Metric check's).
fn check_status(
    index: &Index,
    key: &ObjectKey,
    evaluation: Option<&MetricStatus>,
    old: Option<HealthCheckStatus>,
    now: Timestamp,
) -> Option<HealthCheckStatus> {
    let c = index.checks.get(key)?;
    let health = index.compiler.check_health(key)?;
    let mut status = build::health_check(health, old.as_ref(), c.metadata.generation, now);
    status.metric = evaluation.cloned();
    Some(status)
}

/// A ZonalShift's status, with the Events since `old`.
fn shift_status(
    index: &Index,
    key: &ObjectKey,
    old: Option<ZonalShiftStatus>,
    now: Timestamp,
) -> Option<(ZonalShiftStatus, Vec<Notice>)> {
    let s = index.shifts.get(key)?;
    let generation = s.metadata.generation;
    let status = match index.compiler.shift_status(key, now)? {
        Ok(st) => build::zonal_shift(st, old.as_ref(), generation, now),
        Err(e) => build::zonal_shift_invalid(e.to_string(), old.as_ref(), generation, now),
    };
    let events = events::shift_events(old.as_ref(), &status, &s.spec.away_from);
    Some((status, events))
}

/// A ZonalAutoshift's status: its engine's, with its conditions. `None` before a compile
/// has stepped its engine.
fn autoshift_status(
    index: &Index,
    key: &ObjectKey,
    old: Option<ZonalAutoshiftStatus>,
    now: Timestamp,
) -> Option<ZonalAutoshiftStatus> {
    let a = index.autoshifts.get(key)?;
    let status = index.compiler.autoshift_status(key)?;
    Some(build::zonal_autoshift(
        status,
        &a.spec,
        index.compiler.autoshift_error(key),
        old.as_ref(),
        a.metadata.generation,
        now,
    ))
}

#[cfg(test)]
mod tests {
    use healthroute_api::RecordGroup;
    use healthroute_compiler::ServedZones;
    use k8s_openapi::api::core::v1::Service;
    use kube::runtime::watcher::Event;
    use serde_json::json;
    use tokio::time::Instant;

    use super::super::writer::WriteOutcome;
    use super::*;
    use crate::index::Input;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("valid")
    }

    fn api(status: Option<RecordGroupStatus>) -> RecordGroup {
        let mut g: RecordGroup = serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
            "metadata": {"name": "api", "namespace": "shop", "generation": 1},
            "spec": {"name": "api.example.com.", "type": "A", "routingPolicy": "Simple",
                     "records": [{"setIdentifier": "x", "values": ["192.0.2.1"]}]}
        }))
        .expect("valid");
        g.status = status;
        g
    }

    /// An index that has listed `api` and nothing else.
    fn listed() -> Index {
        let mut index = Index::new(ServedZones::new(["example.com"]).expect("zone"), 60);
        index.apply(Input::Group(Event::Init));
        index.apply(Input::Group(Event::InitApply(api(None))));
        index.apply(Input::Group(Event::InitDone));
        for input in [
            Input::Check(Event::Init),
            Input::Check(Event::InitDone),
            Input::Shift(Event::Init),
            Input::Shift(Event::InitDone),
            Input::Slice(Event::Init),
            Input::Slice(Event::InitDone),
            Input::Service(Event::<Service>::Init),
            Input::Service(Event::<Service>::InitDone),
            Input::Lease(Event::Init),
            Input::Lease(Event::InitDone),
            Input::Autoshift(Event::Init),
            Input::Autoshift(Event::InitDone),
            Input::Node(Event::Init),
            Input::Node(Event::InitDone),
        ] {
            index.apply(input);
        }
        index
    }

    fn fleet(status: Option<ZonalAutoshiftStatus>) -> healthroute_api::ZonalAutoshift {
        let mut a: healthroute_api::ZonalAutoshift = serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalAutoshift",
            "metadata": {"name": "fleet", "namespace": "shop", "generation": 1,
                         "creationTimestamp": "2027-01-15T08:00:00Z"},
            "spec": {"target": {"recordGroup": "api"}, "autoshift": "Enabled",
                     "practiceRun": {"outcomeAlarms": [{"name": "outcome"}]}}
        }))
        .expect("valid");
        a.status = status;
        a
    }

    fn compile(ledger: &mut Ledger, index: &mut Index, now: Timestamp) {
        let report = index.compiler.compile(now);
        ledger.compiled(index, report.changed_groups, report.changed_checks, now);
    }

    // SEM-AS11: a ZonalAutoshift's status is written at the first compile of a term (it is the
    // engine's memory), an engine's report goes out as Events with the next status even when
    // the status itself says nothing new, and the re-check writes back what another writer
    // changed.
    #[test]
    fn a_zonal_autoshift_status_carries_the_engines_events_and_is_repaired() {
        use healthroute_api::{NotStartedReason, ZonalAutoshift};
        use healthroute_compiler::AutoshiftEvent;
        let mut index = listed();
        index.apply(Input::Autoshift(Event::Apply(fleet(None))));
        let (mut ledger, queue, _) = leading(&mut index);
        let written = queue.take_ready(Instant::now()).expect("fleet's status");
        queue.finish(written.clone(), &WriteOutcome::Written, Instant::now());
        let Status::ZonalAutoshift(shown) = written.status.clone() else {
            panic!("a ZonalAutoshift's status: {written:?}");
        };
        let shown = *shown;
        assert_eq!(
            shown.autoshift,
            Some(healthroute_api::AutoshiftState::Inactive)
        );
        assert!(shown.conditions.iter().any(|c| c.type_ == "Autoshift"));
        assert_eq!(written.reference.kind.as_deref(), Some("ZonalAutoshift"));
        index.apply(Input::Autoshift(Event::Apply(fleet(Some(shown.clone())))));
        compile(&mut ledger, &mut index, t(10));
        assert_eq!(queue.backlog(), 0, "nothing new");

        // An engine's report with nothing new in the status still goes out, as an Event.
        ledger.take_autoshift_events(&[AutoshiftEvent::PracticeRunNotStarted {
            config: ObjectKey::new("shop", "fleet"),
            reason: NotStartedReason::BlockedDate,
            message: "2027-01-15 is a blocked date".into(),
            request: None,
        }]);
        compile(&mut ledger, &mut index, t(20));
        let told = queue
            .take_ready(Instant::now())
            .expect("the Event's update");
        queue.finish(told.clone(), &WriteOutcome::Written, Instant::now());
        assert_eq!(
            told.events.iter().map(|n| n.reason).collect::<Vec<_>>(),
            ["PracticeRunNotStarted"]
        );

        // Another writer clears the last request answered: the re-check writes it back.
        let mut overwritten: ZonalAutoshift = fleet(Some(shown.clone()));
        if let Some(st) = overwritten.status.as_mut() {
            st.conditions.clear();
            st.next_practice_run = None;
        }
        index.apply(Input::Autoshift(Event::Apply(overwritten)));
        ledger.watched(
            &index,
            &(StatusKind::ZonalAutoshift, ObjectKey::new("shop", "fleet")),
        );
        assert_eq!(ledger.recheck(&index, t(30)), 1);
        let again = queue.take_ready(Instant::now()).expect("written again");
        assert!(again.events.is_empty());
        assert!(again.status.shown_by(&written.status));
    }

    // SEM-P5: a status someone else overwrote stays wrong until the periodic re-check: that
    // writes what the leader would write again (without Events), once, and nothing while the
    // object shows it.
    #[test]
    fn a_status_changed_by_another_writer_is_written_again_at_the_recheck() {
        let mut index = listed();
        let (mut ledger, queue, metrics) = leading(&mut index);
        assert_eq!(queue.backlog(), 0, "the status waits for the table (P5)");
        assert_eq!(
            ledger.recheck(&index, t(0)),
            0,
            "nor does a re-check write it"
        );
        ledger.take_published(&index, 1, index.compiler.table(), t(0));
        let written = queue.take_ready(Instant::now()).expect("api's status");
        queue.finish(written.clone(), &WriteOutcome::Written, Instant::now());
        let Status::RecordGroup(shown) = written.status.clone() else {
            panic!("a RecordGroup's status: {written:?}");
        };
        assert!(shown.served);

        // The watch brings the write back: nothing to repair.
        index.apply(Input::Group(Event::Apply(api(Some(shown.clone())))));
        compile(&mut ledger, &mut index, t(10));
        assert_eq!(ledger.recheck(&index, t(10)), 0);
        assert_eq!(queue.backlog(), 0);

        // Another writer says it is not served. Its spec did not change: no compile fixes it.
        let mut overwritten = shown.clone();
        overwritten.served = false;
        overwritten.conditions.clear();
        index.apply(Input::Group(Event::Apply(api(Some(overwritten)))));
        compile(&mut ledger, &mut index, t(20));
        assert_eq!(queue.backlog(), 0, "only the re-check sees it");
        assert_eq!(ledger.recheck(&index, t(30)), 1);
        assert_eq!(ledger.recheck(&index, t(31)), 0, "once while it is queued");
        let again = queue.take_ready(Instant::now()).expect("written again");
        assert!(again.events.is_empty(), "{:?}", again.events);
        assert!(again.status.shown_by(&written.status) && written.status.shown_by(&again.status));
        assert_eq!(
            again.status, written.status,
            "the same transition times too"
        );
        assert_eq!(
            metrics.repairs.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }

    // SEM-P5: the re-check runs in steps (a change that comes meanwhile is compiled after one
    // step, not after the whole pass): each step judges the next objects in order, a tick
    // while a pass is under way does not start it again, and every object is judged once.
    #[test]
    fn the_recheck_runs_in_steps_and_judges_each_object_once() {
        let mut index = listed();
        let named = |name: &str, status: Option<RecordGroupStatus>| {
            let mut g = api(status);
            g.metadata.name = Some(name.into());
            g.spec.name = format!("{name}.example.com.");
            Input::Group(Event::Apply(g))
        };
        let names = ["api", "b", "c", "d", "e"];
        for name in &names[1..] {
            index.apply(named(name, None));
        }
        let (mut ledger, queue, metrics) = leading(&mut index);
        ledger.take_published(&index, 1, index.compiler.table(), t(0));
        // Every status is written, and another writer then says none is served.
        while let Some(written) = queue.take_ready(Instant::now()) {
            queue.finish(written.clone(), &WriteOutcome::Written, Instant::now());
            let Status::RecordGroup(mut shown) = written.status else {
                panic!("a RecordGroup's status: {written:?}");
            };
            index.apply(named(&written.key.name, Some(shown.clone())));
            ledger.watched(&index, &(StatusKind::RecordGroup, written.key.clone()));
            shown.served = false;
            index.apply(named(&written.key.name, Some(shown)));
        }
        assert!(!ledger.rechecking());
        ledger.start_recheck();
        assert!(ledger.rechecking());
        assert_eq!(ledger.recheck_step(&index, t(30), 2), Some(2));
        ledger.start_recheck(); // the next tick, while the pass is under way
        assert_eq!(ledger.recheck_step(&index, t(30), 2), Some(2));
        assert_eq!(
            queue.backlog(),
            4,
            "api, b, c and d, in the order of their keys"
        );
        assert_eq!(
            ledger.recheck_step(&index, t(31), 2),
            Some(1),
            "e, and the pass ends"
        );
        assert!(!ledger.rechecking());
        assert_eq!(ledger.recheck_step(&index, t(31), 2), None);
        let mut again = Vec::new();
        while let Some(update) = queue.take_ready(Instant::now()) {
            again.push(update.key.name.to_string());
        }
        assert_eq!(again, names);
        assert_eq!(
            metrics.repairs.load(std::sync::atomic::Ordering::Relaxed),
            5
        );
    }

    /// A leader at the start of its term: the read-back taken in, `index` compiled once.
    fn leading(index: &mut Index) -> (Ledger, StatusQueue, Arc<StatusMetrics>) {
        let queue = StatusQueue::default();
        let metrics = Arc::new(StatusMetrics::default());
        let mut ledger = Ledger::new(queue.clone(), metrics.clone());
        ledger.new_term(true);
        ledger.hold_read_back(ReadBack::default());
        ledger.take_read_back(index);
        compile(&mut ledger, index, t(0));
        (ledger, queue, metrics)
    }

    /// A leader that compiled `index`, saw its table published and wrote api's status.
    fn api_written(index: &mut Index) -> (Ledger, StatusQueue, Arc<StatusMetrics>, StatusUpdate) {
        let (mut ledger, queue, metrics) = leading(index);
        ledger.take_published(index, 1, index.compiler.table(), t(0));
        let written = queue.take_ready(Instant::now()).expect("api's status");
        queue.finish(written.clone(), &WriteOutcome::Written, Instant::now());
        (ledger, queue, metrics, written)
    }

    // SEM-P5: a status just written whose watch event has not arrived yet is not "changed by
    // another writer": the recheck leaves it to the next one, which writes it again only if
    // the object still does not show it.
    #[test]
    fn a_write_the_watch_has_not_brought_back_is_not_repaired_at_once() {
        let mut index = listed();
        let (mut ledger, queue, metrics, _) = api_written(&mut index);
        // No watch event since: the object still shows no status.
        assert_eq!(
            ledger.recheck(&index, t(10)),
            0,
            "its echo may be on the way"
        );
        assert_eq!(queue.backlog(), 0);
        assert_eq!(
            ledger.recheck(&index, t(70)),
            1,
            "a recheck later, it is not"
        );
        assert!(queue.take_ready(Instant::now()).is_some(), "written again");
        assert_eq!(
            metrics.repairs.load(std::sync::atomic::Ordering::Relaxed),
            1
        );
    }

    // SEM-P5: once the object shows exactly what was written, the leader keeps one copy of the
    // status (the index's, shared), and what it writes after another writer's change is the
    // same as before, transition times and all.
    #[test]
    fn a_status_the_object_shows_is_kept_once() {
        let mut index = listed();
        let (mut ledger, queue, _, written) = api_written(&mut index);
        let Status::RecordGroup(shown) = written.status.clone() else {
            panic!("a RecordGroup's status: {written:?}");
        };
        let key = ObjectKey::new("shop", "api");
        let skey = (StatusKind::RecordGroup, key.clone());
        assert!(matches!(ledger.sent.get(&skey), Some(Sent::Own(_))));

        // The watch's echo of the write: the control loop hands each watched group over at
        // once (`Control::apply`), so the copy goes before any recheck.
        index.apply(Input::Group(Event::Apply(api(Some(shown.clone())))));
        let watched = index.groups[&key].status.clone().expect("watched status");
        let shared = |ledger: &Ledger| matches!(ledger.sent.get(&skey), Some(Sent::Shown(s)) if Arc::ptr_eq(s, &watched));
        ledger.watched(&index, &skey);
        assert!(shared(&ledger), "{:?}", ledger.sent.get(&skey));
        assert_eq!(ledger.recheck(&index, t(10)), 0);
        assert!(shared(&ledger), "{:?}", ledger.sent.get(&skey));

        // A new term judges the group against what it shows: right as it is, and kept once.
        ledger.new_term(true);
        ledger.hold_read_back(ReadBack {
            generation: 1,
            groups: index.compiler.table().groups.clone(),
        });
        ledger.take_read_back(&mut index);
        compile(&mut ledger, &mut index, t(20));
        assert_eq!(queue.backlog(), 0, "nothing to write");
        assert!(shared(&ledger), "{:?}", ledger.sent.get(&skey));

        let mut overwritten = shown.clone();
        overwritten.served = false;
        overwritten.conditions.clear();
        index.apply(Input::Group(Event::Apply(api(Some(overwritten)))));
        assert_eq!(ledger.recheck(&index, t(30)), 1);
        let again = queue.take_ready(Instant::now()).expect("written again");
        assert_eq!(
            again.status, written.status,
            "the same transition times too"
        );
    }

    // Times are kept at the API's precision, so that what the watch brings back is equal to
    // what was sent.
    #[test]
    fn times_are_whole_seconds() {
        let now = Timestamp::from_millisecond(1_800_000_000_250).expect("valid");
        assert_eq!(api_time(now), t(0));
    }
}
