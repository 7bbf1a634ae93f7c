//! The control loop's state and what each input does to it: watch events into the index,
//! leadership terms, the publisher's feedback, the Metric-check evaluator, compiles, the
//! Peer checks' plan, the autoshift engines' reports, and the periodic status re-check. What
//! each object's status says is the status module's ([`Ledger`]), which Peer checks exist the
//! peers module's ([`PeerChecks`]); this file decides when.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use jiff::Timestamp;
use tokio::sync::watch;

use super::Config;
use crate::engine_shifts::EngineShifts;
use crate::index::{Index, Input, key_of};
use crate::metrics::{ControlMetrics, OperatorMetrics};
use crate::peers::PeerChecks;
use crate::publish::{PublishFeedback, PublishRequest};
use crate::readiness::Readiness;
use crate::registry::Registry;
use crate::status::{Ledger, StatusKey, StatusKind};
use healthroute_api::CheckType;
use healthroute_checker::{Checker, CheckerEvent};
use healthroute_compiler::ObjectKey;
use healthroute_compiler::host::{Compiled, Host};

/// How many objects' statuses one step of the re-check judges: about 4 ms at 100,000 groups,
/// where the whole pass took 0.6-0.9 s (and held every change that came meanwhile).
const RECHECK_STEP: usize = 500;

/// How many awaiting groups one step of the settle judges (a term's first table makes them
/// all await): the re-check's step, for the same reason.
const SETTLE_STEP: usize = 500;

/// The control loop's state: the index, the evaluator, the leadership term, and its
/// channels to the publisher and (through the ledger) to the status writer.
pub(super) struct Control {
    index: Index,
    /// The resolvers' registrations: the publisher's floor and where it pushes.
    registry: Registry,
    /// The leader's Metric-check evaluator (H14): follows the checks while leading.
    evaluator: Option<Checker>,
    /// The current leadership term, 0 while not the leader; `terms` counts them.
    term: u64,
    terms: u64,
    /// To the publisher: the newest table of the term.
    requests: watch::Sender<PublishRequest>,
    /// The term's statuses, to the status writer.
    statuses: Ledger,
    /// The Peer checks the groups need (X4), planned after compiles while leading.
    peers: PeerChecks,
    /// The ZonalShifts that mirror the engines' shifts (AS13), planned after compiles too.
    engine_shifts: EngineShifts,
    metrics: Arc<ControlMetrics>,
    /// What standalone mode does around its compiler too: the deadline, the compile, the
    /// autoshift numbers (AS1, AS11).
    host: Host,
    readiness: Arc<Readiness>,
}

impl Control {
    pub(super) fn new(
        config: &Config,
        evaluator: Option<Checker>,
        requests: watch::Sender<PublishRequest>,
        statuses: Ledger,
        (peers, engine_shifts): (PeerChecks, EngineShifts),
        metrics: &OperatorMetrics,
        readiness: Arc<Readiness>,
    ) -> Self {
        Control {
            index: Index::new(config.zones.clone(), config.default_ttl),
            registry: Registry::default(),
            evaluator,
            term: 0,
            terms: 0,
            requests,
            statuses,
            peers,
            engine_shifts,
            metrics: metrics.control.clone(),
            host: Host::new(metrics.autoshift.engines.clone()),
            readiness,
        }
    }

    /// When the last compile's outputs change on their own (a shift expires, a checker goes
    /// stale, an engine steps), on the monotonic clock: a compile is due then. None while a compile
    /// would do nothing (a standby, a partial list): a passed deadline must not wake the
    /// loop again and again.
    pub(super) fn deadline(&self) -> Option<Instant> {
        if self.term == 0 || !self.index.synced() {
            return None;
        }
        self.host
            .deadline(&self.index.compiler, Timestamp::now(), Instant::now())
    }

    /// What the alerts read: checks without a reachable checker, active shifts' expiries.
    fn export_gauges(&self) {
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
        let expiries = self
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
        self.metrics.set_shift_expiries(expiries);
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
    pub(super) fn take_evaluation(&mut self, event: CheckerEvent) {
        match event {
            CheckerEvent::View { check, view } => {
                let still_metric = self
                    .index
                    .checks
                    .get(&check)
                    .is_some_and(|c| c.spec.check_type == CheckType::Metric);
                if self.term == 0 || !still_metric {
                    return; // from a term that ended, or a check that is no longer Metric
                }
                self.statuses.set_evaluation(
                    check.clone(),
                    healthroute_checker::metric_status(&view, Some(Timestamp::now())),
                );
                self.index.compiler.set_check_view(&check, view);
            }
            CheckerEvent::Heartbeat { checker, at } => {
                self.index.compiler.set_heartbeat(checker, at);
            }
        }
    }

    /// Takes in one watch event; false when it changed nothing a compile reads.
    pub(super) fn apply(&mut self, input: Input) -> bool {
        let check = matches!(input, Input::Check(_));
        let group = changed_group(&input);
        if check {
            self.peers.check_changed();
        }
        let watched = watched_status(&input);
        // A resolver that comes, goes or moves is told to the publisher by the next compile.
        let registered = self.registry.apply(&input);
        let changed = self.index.apply_changed(input) || registered;
        // The group's Peer checks are derived again (X4): not for a group whose status alone
        // changed.
        if let (Some(group), true) = (group, changed) {
            self.peers.group_changed(group);
        }
        if let Some(key) = watched {
            self.statuses.watched(&self.index, &key);
        }
        self.metrics.events.fetch_add(1, Ordering::Relaxed);
        if check && self.term != 0 {
            self.sync_evaluator();
        }
        changed
    }

    /// A new term begins with a read-back, and with every autoshift engine resumed from its
    /// object's status (what the last leader decided, AS11); a term that ends drops every
    /// unsent status.
    pub(super) fn set_leader(&mut self, is_leader: bool) {
        self.metrics.leader.store(is_leader, Ordering::Relaxed);
        self.readiness.set_leader(is_leader);
        self.readiness.set_publish_error(None);
        self.statuses.new_term(is_leader);
        self.peers.new_term(is_leader);
        self.engine_shifts.new_term(is_leader);
        if is_leader {
            self.terms += 1;
            self.term = self.terms;
            self.index.resume_autoshifts();
        } else {
            if self.term != 0 {
                // A standby holds the inputs only; it compiles again once it leads (P3).
                self.index.compiler.forget_outputs();
                self.metrics
                    .checks_without_checker
                    .store(0, Ordering::Relaxed);
                self.metrics.set_shift_expiries(Vec::new());
            }
            self.term = 0;
            self.host.stand_by();
        }
        self.sync_evaluator();
        self.requests.send_replace(PublishRequest {
            term: self.term,
            floor: self.registry.highest_served_generation(),
            table: None,
            push_to: self.registry.push_addresses(Timestamp::now()),
        });
    }

    /// Takes in what the publisher reports; true when a compile should follow at once.
    pub(super) fn take_feedback(&mut self, feedback: PublishFeedback) -> bool {
        match feedback {
            PublishFeedback::ReadBack { term, found } if term == self.term => {
                // Taken in by the next compile once every watch has listed: a group listed
                // later would miss its last good version.
                self.statuses.hold_read_back(found);
                true
            }
            PublishFeedback::Published {
                term,
                generation,
                table,
            } if term == self.term => {
                self.readiness.set_publish_error(None);
                self.statuses.take_published(generation, table);
                false
            }
            PublishFeedback::Failed { term, error } if term == self.term => {
                self.readiness.set_publish_error(Some(error.clone()));
                self.statuses.take_failure(error);
                false
            }
            _ => false, // from an earlier term
        }
    }

    pub(super) fn compile(&mut self) {
        if !self.index.synced() {
            return; // never publish a table built from a partial list
        }
        if !self.readiness.synced() {
            // Start-up is over with the first complete lists: what only it ran (the first
            // lists' decoding, clap, the schemas) need not stay mapped.
            tokio::spawn(healthroute_admin::memory::page_out_start_up_code());
        }
        self.readiness.set_synced();
        if self.term == 0 {
            // A standby compiles nothing: it takes over from its inputs, as a replica that
            // just started would, and holds no outcome, table or engine state meanwhile.
            return;
        }
        self.statuses.take_read_back(&mut self.index);
        let started = Instant::now();
        let now = Timestamp::now();
        // The unusable configurations' changes are standalone mode's to log: here the
        // configuration's status says it (AS1).
        let Compiled { report, .. } = self.host.compile(&mut self.index.compiler, now);
        let m = &self.metrics;
        m.compiled(
            started.elapsed(),
            report.recompiled,
            report.evaluated_checks,
        );
        m.table_generation
            .store(report.generation, Ordering::Relaxed);
        let table = self.index.compiler.table();
        m.table_groups
            .store(table.groups.len() as u64, Ordering::Relaxed);
        self.export_gauges();
        self.statuses
            .take_autoshift_events(&report.autoshift_events);
        // Off the table's path: the plan goes to its own writer (P7).
        self.peers.after_compile(&self.index);
        self.engine_shifts.after_compile(&self.index);
        if !self.statuses.seeded() {
            return;
        }
        let floor = self.registry.highest_served_generation();
        let push_to = self.registry.push_addresses(now);
        self.requests.send_if_modified(|r| {
            let changed = r.table.as_ref().is_none_or(|t| !Arc::ptr_eq(t, &table))
                || r.floor != floor
                || r.push_to != push_to;
            r.table = Some(table.clone());
            r.floor = floor;
            r.push_to = push_to;
            changed
        });
        self.statuses.compiled(
            &self.index,
            report.changed_groups,
            report.changed_checks,
            Timestamp::now(),
        );
    }

    /// The periodic re-check of every status against the objects as watched (leader only)
    /// begins a pass; the loop runs it in steps ([`Control::status_step`]).
    pub(super) fn start_recheck(&mut self) {
        if self.term == 0 {
            return;
        }
        self.statuses.start_recheck();
    }

    /// Whether the statuses have work to do in steps: awaiting groups to settle, or a
    /// re-check pass under way.
    pub(super) fn status_work(&self) -> bool {
        self.term != 0 && (self.statuses.settling() || self.statuses.rechecking())
    }

    /// One step of the statuses' work: the next [`SETTLE_STEP`] awaiting groups (a group's
    /// status follows its publication), else the next [`RECHECK_STEP`] objects of the
    /// re-check pass.
    pub(super) fn status_step(&mut self) {
        let now = Timestamp::now();
        if self.statuses.settling() {
            self.statuses.settle_step(&self.index, now, SETTLE_STEP);
        } else {
            self.statuses
                .recheck_step(&self.index, &self.peers, now, RECHECK_STEP);
        }
    }
}

/// For a RecordGroup event, the group it is about; `None` for the end of a relist, which may
/// have deleted any.
fn changed_group(input: &Input) -> Option<Option<ObjectKey>> {
    use kube::runtime::watcher::Event::{Apply, Delete, InitApply};
    match input {
        Input::Group(Apply(o) | InitApply(o) | Delete(o)) => Some(Some(key_of(o))),
        Input::Group(_) => Some(None),
        _ => None,
    }
}

/// The object whose status an event shows, for the ledger ([`Ledger::watched`]).
fn watched_status(input: &Input) -> Option<StatusKey> {
    use kube::runtime::watcher::Event::{Apply, InitApply};
    match input {
        Input::Group(Apply(o) | InitApply(o)) => Some((StatusKind::RecordGroup, key_of(o))),
        Input::Check(Apply(o) | InitApply(o)) => Some((StatusKind::HealthCheck, key_of(o))),
        Input::Shift(Apply(o) | InitApply(o)) => Some((StatusKind::ZonalShift, key_of(o))),
        Input::Autoshift(Apply(o) | InitApply(o)) => Some((StatusKind::ZonalAutoshift, key_of(o))),
        _ => None,
    }
}
