//! The leader's statuses for one term: what each object's status says, judged against what
//! is published (P5), what was handed to the writer, and what waits.
//!
//! ```text
//!  compiled(changed groups, changed checks) ──▶ groups: awaiting until the publisher has
//!                                               caught up (or fails); judged in steps
//!                                               between the loop's inputs ──▶ settle_step
//!                                          ──▶ checks (all at a term's start, in steps
//!                                              before the groups), every shift,
//!                                              every ZonalAutoshift (with the Events its
//!                                              engine reported since its last status)
//!  push: not when it says what was last sent, or (first time this term) what the object shows,
//!        unless it carries Events
//!  recheck (every --status-recheck-interval): each object as last watched against what
//!  would be written; a difference nothing queued or just written explains is written again,
//!  without Events; then the Peer checks and the mirrors as watched against what the leader
//!  wants of them (peers::PeerChecks::wanted, engine_shifts::wanted), repaired alike
//!  watched (each watch event): a group's sent status that its object shows exactly is kept as
//!  the index's (one copy)
//! ```
//!
//! ```text
//!   mod.rs       the term, the compiles' statuses, what was sent
//!   recheck.rs   the periodic re-check, in steps, and its repairs
//!   of_index.rs  the status each object would have now, from the index and the compiler
//!   tests.rs
//! ```

mod of_index;
mod recheck;
#[cfg(test)]
mod tests;

use of_index::{autoshift_status, check_status, group_status, shift_status};
use recheck::Recheck;

use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;

use super::build::Publication;
use super::events::{self, Notice};
use super::kind::{OwnStatus, Status, StatusKey, StatusKind};
use super::published::Published;
use crate::index::Index;
use crate::metrics::StatusMetrics;
use crate::writes::{StatusUpdate, WriteKind, WriteQueue, status_key};
use healthroute_api::{MetricStatus, RecordGroupStatus};
use healthroute_compiler::{AutoshiftEvent, ObjectKey};
use healthroute_table::contract::ReadBack;
use healthroute_table::{RoutingTable, Value};

/// The statuses of the current leadership term (empty while not leading).
pub struct Ledger {
    /// To the one writer.
    queue: WriteQueue,
    metrics: Arc<StatusMetrics>,
    published: Published,
    /// Groups whose status waits for the publisher to catch up with the compiler.
    awaiting: BTreeSet<ObjectKey>,
    /// The pass over `awaiting` under way ([`Ledger::settle_step`]): the last group judged
    /// (`None`: none yet). A pass starts when the publisher or the compiler moved.
    settle: Option<Option<ObjectKey>>,
    /// The publisher or the compiler moved during the pass: another one follows it, for the
    /// groups it already passed.
    settle_again: bool,
    /// Every check's status is due at the next compile (the term's read-back was taken in).
    full: bool,
    /// Checks whose status is due (every check at a term's start, else those a compile
    /// changed or a newer evaluation), judged in steps before the awaiting groups
    /// ([`Ledger::settle_step`]): a change need not wait behind 10,000 of them either.
    checks_due: BTreeSet<ObjectKey>,
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

/// A status last handed to the writer.
#[derive(Debug)]
enum Sent {
    /// Shared with the write that carries it (the queue holds no copy of its own); most of
    /// the map's entries are `Shown`, a pointer's size.
    Own(Arc<Status>),
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
    pub fn new(queue: WriteQueue, metrics: Arc<StatusMetrics>) -> Self {
        Ledger {
            queue,
            metrics,
            published: Published::default(),
            awaiting: BTreeSet::new(),
            settle: None,
            settle_again: false,
            full: false,
            checks_due: BTreeSet::new(),
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
        self.settle = None;
        self.settle_again = false;
        self.full = false;
        self.checks_due.clear();
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
    pub fn take_published(&mut self, generation: u64, table: Arc<RoutingTable<Value>>) {
        self.published.take_published(generation, table);
        self.wake_settle();
    }

    /// Publishing failed: the groups whose version is not published say so (P5).
    pub fn take_failure(&mut self, error: String) {
        self.published.fail(error);
        self.wake_settle();
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
    /// checks (those with a newer evaluation, and all of them at a term's start, in steps),
    /// every shift and every ZonalAutoshift.
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
        self.make_room();
        self.wake_settle();
        if full {
            self.checks_due.extend(index.checks.keys().cloned());
        }
        self.checks_due.extend(changed_checks);
        self.checks_due.append(&mut self.evaluated);
        for key in index.shifts.keys() {
            self.shift(index, key, now);
        }
        for key in index.autoshifts.keys() {
            self.autoshift(index, key, now);
        }
        // Those of an object gone meanwhile have nothing to be recorded on.
        self.autoshift_events.clear();
        self.set_backlog();
    }

    /// Sizes what the settle of the awaiting groups fills (what was sent, the writes owed) for
    /// all of them at once: grown by doubling, the two maps were rehashed inside a step (at
    /// 57,344 groups, 39 ms of one step, which a change waited for) at a term's first table.
    /// Room for as many entries as groups await, counting those held already: a second pass
    /// over groups sent before does not double the maps.
    fn make_room(&mut self) {
        let groups = self.awaiting.len();
        self.sent.reserve(groups.saturating_sub(self.sent.len()));
        self.queue
            .reserve(WriteKind::Status(StatusKind::RecordGroup), groups);
    }

    /// The publisher or the compiler moved: the awaiting groups are judged again, in steps
    /// ([`Ledger::settle_step`]).
    fn wake_settle(&mut self) {
        if self.settle.is_some() {
            self.settle_again = true;
        } else if !self.awaiting.is_empty() {
            self.settle = Some(None);
        }
    }

    /// Checks or awaiting groups are to be judged ([`Ledger::settle_step`] has work).
    pub fn settling(&self) -> bool {
        !self.checks_due.is_empty()
            || self.published.comparing()
            || (self.settle.is_some() && self.published.seeded())
    }

    /// Judges up to `budget` more objects: first the checks a term's start made due, then the
    /// awaiting groups (beside up to `budget` groups of the term's first table compared with
    /// the read-back, [`Published::compare_step`]), in key order, writing the status of each
    /// whose version the publisher has caught up with, or that a failing publish leaves behind
    /// (those stay awaiting until published). A term's first table makes every group await (10,000 and more): in steps,
    /// a change that arrives meanwhile is compiled and published after one step, not after
    /// them all. Returns how many were judged.
    pub fn settle_step(&mut self, index: &Index, now: Timestamp, budget: usize) -> usize {
        let checks = self.checks_step(index, api_time(now), budget);
        if checks > 0 {
            return checks;
        }
        // The term's first table against the read-back, while it is still being compared:
        // as many groups again, beside the step (statuses judged meanwhile compare their own
        // group's two versions), so that statuses do not wait for it.
        self.published.compare_step(budget);
        let Some(after) = self.settle.take() else {
            return 0;
        };
        if !self.published.seeded() {
            self.settle = Some(after);
            return 0;
        }
        let now = api_time(now);
        let keys: Vec<ObjectKey> = match &after {
            None => self.awaiting.iter().take(budget).cloned().collect(),
            Some(last) => self
                .awaiting
                .range((Bound::Excluded(last), Bound::Unbounded))
                .take(budget)
                .cloned()
                .collect(),
        };
        let table = index.compiler.table();
        for key in &keys {
            self.settle_group(index, key, &table, now);
        }
        self.settle = if keys.len() == budget {
            keys.last().cloned().map(Some)
        } else if std::mem::take(&mut self.settle_again) && !self.awaiting.is_empty() {
            Some(None)
        } else {
            None
        };
        self.set_backlog();
        keys.len()
    }

    /// Judges one awaiting group: its status is written once its version is published (or
    /// its publishing fails); it leaves `awaiting` unless it is not published yet.
    fn settle_group(
        &mut self,
        index: &Index,
        key: &ObjectKey,
        table: &RoutingTable<Value>,
        now: Timestamp,
    ) {
        let publication = match self.published.publication(key, table) {
            None => return,
            Some(p @ Publication::Failed { .. }) => p,
            Some(p) => {
                self.awaiting.remove(key);
                p
            }
        };
        let Some(g) = index.groups.get(key) else {
            self.awaiting.remove(key);
            self.sent.remove(&(StatusKind::RecordGroup, key.clone()));
            return;
        };
        let old = self.last(key, g.status.as_deref());
        if let Some((status, events)) = group_status(index, key, publication, old, now) {
            self.push(key, status, g.status.as_deref(), events, || {
                g.object_ref(key)
            });
            // A new term finds most statuses right: their copy goes at once.
            self.share_shown(&(StatusKind::RecordGroup, key.clone()), g.status.as_ref());
        }
    }

    /// Judges up to `budget` of the checks due since the term's start.
    fn checks_step(&mut self, index: &Index, now: Timestamp, budget: usize) -> usize {
        let mut judged = 0;
        while judged < budget
            && let Some(key) = self.checks_due.pop_first()
        {
            self.check(index, &key, now);
            judged += 1;
        }
        judged
    }

    fn check(&mut self, index: &Index, key: &ObjectKey, now: Timestamp) {
        let Some(c) = index.checks.get(key) else {
            self.sent.remove(&(StatusKind::HealthCheck, key.clone()));
            return;
        };
        let old = self.last(key, c.status.as_ref());
        let evaluation = self.evaluations.get(key);
        if let Some(status) = check_status(index, key, evaluation, old, now) {
            self.push(key, status, c.status.as_ref(), Vec::new(), || {
                c.object_ref(&())
            });
        }
    }

    fn shift(&mut self, index: &Index, key: &ObjectKey, now: Timestamp) {
        let Some(s) = index.shifts.get(key) else {
            return;
        };
        let old = self.last(key, s.status.as_ref());
        if let Some((status, events)) = shift_status(index, key, old, now) {
            self.push(key, status, s.status.as_ref(), events, || s.object_ref(&()));
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
            self.push(key, status, a.status.as_ref(), events, || a.object_ref(&()));
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
        about: impl FnOnce() -> ObjectReference,
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
                    .insert(skey, Sent::Own(Arc::new(status.into_status())));
                return;
            }
            None => {}
        }
        let status = Arc::new(status.into_status());
        self.sent.insert(skey, Sent::Own(status.clone()));
        self.queue
            .push(StatusUpdate::new(key.clone(), status, events, about));
    }

    /// An object's watch event, once the index holds it: a status written before it is back
    /// (or another writer's change came after it), so the next recheck judges the object;
    /// and a RecordGroup whose object shows exactly the status sent keeps one copy of it at
    /// once, not two until that recheck (a first start's 10,000 writes held 20 MiB for up
    /// to a minute).
    pub fn watched(&mut self, index: &Index, key: &StatusKey) {
        // The object as watched shows every write of it: its status, and (a HealthCheck, a
        // ZonalShift) the Peer check or the mirror written whole.
        let object = match key.0 {
            StatusKind::HealthCheck => Some(WriteKind::PeerCheck),
            StatusKind::ZonalShift => Some(WriteKind::EngineShift),
            _ => None,
        };
        if let Some(kind) = object {
            self.queue.seen(&(kind, key.1.clone()));
        }
        self.queue.seen(&status_key(key.clone()));
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

    /// The statuses waiting to be written, in their gauge.
    fn set_backlog(&self) {
        let statuses = WriteKind::Status(StatusKind::RecordGroup);
        self.metrics.set_backlog(self.queue.backlog_of(statuses));
    }
}
