//! The control loop's state and what each input does to it: leadership terms, the
//! publisher's feedback, the Metric-check evaluator, and when to compile.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use healthroute_table::{GroupKey, RoutingTable, Value};
use jiff::Timestamp;
use serde_json::Value as Json;
use tokio::sync::watch;

use super::Config;
use super::statuses::same;
use crate::index::{Index, Input};
use crate::metrics::OperatorMetrics;
use crate::publish::{PublishFeedback, PublishRequest, ReadBack};
use crate::status_writer::{StatusKey, StatusQueue};
use healthroute_admin::retry::ErrorLog;
use healthroute_checker::{Checker, CheckerEvent};
use healthroute_compiler::ObjectKey;

/// The control loop's state: the index, and what the leader knows of the published table.
pub(super) struct Control {
    pub(super) index: Index,
    pub(super) metrics: Arc<OperatorMetrics>,
    pub(super) queue: StatusQueue,
    pub(super) requests: watch::Sender<PublishRequest>,
    /// The current leadership term, 0 while not the leader; `terms` counts them.
    pub(super) term: u64,
    pub(super) terms: u64,
    /// What the term's publisher read back, until the watches have listed everything.
    pub(super) read_back: Option<ReadBack>,
    /// The term's read-back has been taken in: tables may be sent.
    pub(super) seeded: bool,
    /// What the resolvers can assemble: the last table published (or read back).
    pub(super) published: Arc<RoutingTable<Value>>,
    pub(super) publish_error: Option<String>,
    /// The generation that first carried each group's published version.
    pub(super) served_since: HashMap<GroupKey, u64>,
    /// Groups whose status waits for the publisher to catch up with the compiler.
    pub(super) awaiting: BTreeSet<ObjectKey>,
    /// Every status checked this term (re-checked in full at a term's start).
    pub(super) full_status: bool,
    /// The status last handed to the writer, per object, this term.
    pub(super) sent: HashMap<StatusKey, Json>,
    pub(super) watch_errors: ErrorLog,
    /// The leader's Metric-check evaluator (H14): follows the checks while leading.
    pub(super) evaluator: Option<Checker>,
    /// The last evaluation of each Metric check, for its status.
    pub(super) metric_status: HashMap<ObjectKey, healthroute_api::MetricStatus>,
    /// Metric checks whose status has a newer evaluation to show.
    pub(super) metric_dirty: BTreeSet<ObjectKey>,
}

impl Control {
    pub(super) fn new(
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
    pub(super) fn export_gauges(&self) {
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
    pub(super) fn sync_evaluator(&mut self) {
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

    pub(super) fn apply(&mut self, input: Input) {
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
    pub(super) fn set_leader(&mut self, is_leader: bool) {
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
    pub(super) fn take_feedback(&mut self, feedback: PublishFeedback) -> bool {
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

    pub(super) fn take_read_back(&mut self, found: ReadBack) {
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

    pub(super) fn take_published(&mut self, generation: u64, table: Arc<RoutingTable<Value>>) {
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

    pub(super) fn compile(&mut self) {
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
}
