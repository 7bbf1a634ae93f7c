//! Standalone mode: a directory of manifests, compiled in-process, served by this resolver.
//!
//! ```text
//!   DIR ──poll (250 ms): manifest_dir::files, changed? ──▶ manifest_dir::read
//!       ──▶ Compiler ──▶ watch<RoutingTable> ──▶ server
//!                  bad edit: log every error, keep the last good configuration
//!   checker views ──▶ Compiler (H1: probes run on their own schedule; queries never wait)
//!   next deadline (shift expiry, stale checker, autoshift hold time, practice run) ──▶ compile again
//!   autoshift events (AS11) ──▶ a log line each, and AutoshiftMetrics (/metrics)
//!   unusable configurations (AS1) ──▶ a log line when one becomes so or its reason changes,
//!                                     and healthroute_autoshift_configuration_invalid
//! ```
//!
//! Time is the system clock here: the compiler is given `Timestamp::now()` at each compile.
//! Standalone mode writes no status, so what a ZonalAutoshift decides is told in the log and
//! the metrics; a practice run is asked for by editing its file (AS10), and a request already
//! in the file when the process starts counts as answered (it would otherwise run again at
//! every restart).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};
use healthroute_api::{PRACTICE_RUN_ANNOTATION, PracticeRunOutcome, ZonalAutoshiftStatus};
use healthroute_checker::CheckerEvent;

use crate::error::Error;
use crate::sources::manifest_dir::{self, ManifestFile};
use healthroute_compiler::autoshift::InvalidConfiguration;
use healthroute_compiler::manifests::{AppliedKeys, Manifests};
use healthroute_compiler::{AutoshiftEvent, Compiler, ObjectKey, ServedZones};
use healthroute_table::{RoutingTable, Value};
use jiff::Timestamp;
use tokio::sync::{mpsc, watch};

/// How often the directory is checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// What identifies the state of the directory: its listing, or why it cannot be listed.
type Fingerprint = Result<Vec<ManifestFile>, String>;

/// The compile loop of standalone mode. Publishes a table after every change that changes it.
pub struct Standalone {
    dir: PathBuf,
    compiler: Compiler,
    /// What the last good load applied (keys only: the compiler holds the objects).
    applied: Option<AppliedKeys>,
    fingerprint: Fingerprint,
    tables: watch::Sender<Option<Arc<RoutingTable<Value>>>>,
    /// Called with the manifests after each good load (the checker follows the checks).
    on_manifests: Box<dyn FnMut(&Manifests) + Send>,
    autoshift: Arc<AutoshiftMetrics>,
    /// The ZonalAutoshifts that cannot be used, as last told (AS1).
    invalid: BTreeMap<ObjectKey, InvalidConfiguration>,
}

impl Standalone {
    pub fn new(
        dir: PathBuf,
        zones: ServedZones,
        default_ttl: u32,
        tables: watch::Sender<Option<Arc<RoutingTable<Value>>>>,
        on_manifests: Box<dyn FnMut(&Manifests) + Send>,
    ) -> Self {
        Standalone {
            dir,
            // Standalone mode writes no status: the per-record texts would only take memory.
            compiler: Compiler::new(zones, default_ttl).without_statuses(),
            applied: None,
            fingerprint: Ok(Vec::new()),
            tables,
            on_manifests,
            autoshift: Arc::default(),
            invalid: BTreeMap::new(),
        }
    }

    /// The autoshift metrics, for the admin endpoint.
    pub fn autoshift_collector(&self) -> AutoshiftCollector {
        AutoshiftCollector(self.autoshift.clone())
    }

    /// Loads the directory if it changed. Returns an error (and changes nothing) when a
    /// manifest is bad.
    pub fn reload(&mut self) -> Result<bool, Error> {
        // One listing of the directory both tells whether it changed and is what is read.
        let listing: Fingerprint = manifest_dir::files(&self.dir).map_err(|e| e.to_string());
        if listing == self.fingerprint && self.applied.is_some() {
            return Ok(false);
        }
        self.fingerprint = listing.clone();
        let files = listing.map_err(|e| manifest_dir::unreadable(&self.dir, e))?;
        let mut manifests = manifest_dir::read(files)?;
        for w in &manifests.warnings {
            tracing::warn!("{w}");
        }
        if self.applied.is_none() {
            answer_requests_found_at_start(&mut manifests);
        }
        (self.on_manifests)(&manifests);
        let applied = manifests.apply_to(&mut self.compiler, self.applied.as_ref());
        self.applied = Some(applied);
        Ok(true)
    }

    pub fn apply(&mut self, event: CheckerEvent) {
        match event {
            CheckerEvent::View { check, view } => {
                self.compiler.set_check_view(&check, view);
            }
            CheckerEvent::Heartbeat { checker, at } => self.compiler.set_heartbeat(checker, at),
        }
    }

    /// Compiles and publishes when the table changed; logs rejected groups once per change.
    pub fn compile_and_publish(&mut self) {
        if self.applied.is_none() {
            // Nothing good was ever loaded: publish nothing, so that a table from disk (P2)
            // keeps serving instead of an empty one.
            return;
        }
        let now = Timestamp::now();
        let report = self.compiler.compile(now);
        if !report.autoshift_events.is_empty() {
            self.tell_autoshift_events(&report.autoshift_events);
        }
        self.tell_invalid_configurations();
        // The groups whose outcome changed, not every group: at 100,000 groups a walk over
        // all of them cost more than serving the change.
        for key in &report.changed_groups {
            if let Some(Err(r)) = self.compiler.outcome(key).map(|o| &o.compiled) {
                tracing::warn!(record_group = %key, reason = r.reason, "{}", r.message);
            }
        }
        let fresh = self.tables.borrow().as_ref().map(|t| t.generation) != Some(report.generation);
        if report.table_changes > 0 || fresh {
            self.tables.send_replace(Some(self.compiler.table()));
        }
    }

    /// Logs each autoshift event and counts it; refreshes the gauge of autoshifted zones.
    fn tell_autoshift_events(&self, events: &[AutoshiftEvent]) {
        for event in events {
            match event {
                AutoshiftEvent::AutoshiftStarted { config, .. }
                | AutoshiftEvent::AutoshiftEnded { config, .. }
                | AutoshiftEvent::PracticeRunStarted { config, .. } => {
                    tracing::info!(zonal_autoshift = %config, "{event}");
                }
                AutoshiftEvent::PracticeRunEnded {
                    config, outcome, ..
                } => {
                    if *outcome == PracticeRunOutcome::Succeeded {
                        tracing::info!(zonal_autoshift = %config, outcome = outcome.as_str(), "{event}");
                    } else {
                        tracing::warn!(zonal_autoshift = %config, outcome = outcome.as_str(), "{event}");
                    }
                    self.autoshift.count_outcome(*outcome);
                }
                AutoshiftEvent::PracticeRunNotStarted { config, reason, .. } => {
                    tracing::warn!(zonal_autoshift = %config, reason = reason.as_str(), "{event}");
                    self.autoshift.count_not_started(reason.as_str());
                }
            }
        }
        let mut active: BTreeMap<String, i64> = BTreeMap::new();
        for key in self.compiler.autoshift_keys() {
            if let Some(zone) = self
                .compiler
                .autoshift_status(key)
                .and_then(|s| s.active_zone)
            {
                *active.entry(zone).or_default() += 1;
            }
        }
        self.autoshift.set_active(active);
    }

    /// AS1: standalone mode writes no status, so a configuration that cannot be used says why
    /// in the log, once when it becomes so and again when its reason changes (not at every
    /// compile), and in `healthroute_autoshift_configuration_invalid` while it lasts.
    fn tell_invalid_configurations(&mut self) {
        let invalid: BTreeMap<ObjectKey, InvalidConfiguration> = self
            .compiler
            .autoshift_keys()
            .filter_map(|k| Some((k.clone(), self.compiler.autoshift_invalid(k)?.clone())))
            .collect();
        if invalid == self.invalid {
            return;
        }
        for (key, why) in &invalid {
            if self.invalid.get(key) != Some(why) {
                tracing::warn!(zonal_autoshift = %key, reason = why.reason.as_str(), "{key}: the configuration cannot be used: {why}");
            }
        }
        for key in self.invalid.keys().filter(|k| !invalid.contains_key(*k)) {
            if self.compiler.autoshift_keys().any(|k| k == key) {
                tracing::info!(zonal_autoshift = %key, "{key}: the configuration is in use");
            }
        }
        self.autoshift.set_invalid(
            invalid
                .iter()
                .map(|(k, why)| (k.to_string(), why.reason.as_str()))
                .collect(),
        );
        self.invalid = invalid;
    }

    /// Runs until `shutdown` fires: polls the directory, applies checker events, recompiles.
    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<CheckerEvent>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut poll = tokio::time::interval(POLL_INTERVAL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let deadline = self
                .compiler
                .time_to_deadline(Timestamp::now())
                .unwrap_or(Duration::from_secs(3600));
            tokio::select! {
                _ = poll.tick() => {
                    match self.reload() {
                        Ok(true) => tracing::info!(dir = %self.dir.display(), "manifests loaded"),
                        Ok(false) => {}
                        Err(e) => tracing::error!(dir = %self.dir.display(), "keeping the last good configuration:\n{e}"),
                    }
                }
                Some(event) = events.recv() => {
                    self.apply(event);
                    // Coalesce a burst of events into one compile.
                    while let Ok(event) = events.try_recv() {
                        self.apply(event);
                    }
                }
                _ = tokio::time::sleep(deadline) => {}
                _ = shutdown.changed() => return,
            }
            self.compile_and_publish();
        }
    }
}

/// AS10: a practice run request already in a file when the process starts was asked of an
/// earlier run of it (standalone mode keeps no status to remember that): it counts as
/// answered, and only a new value asks again.
fn answer_requests_found_at_start(manifests: &mut Manifests) {
    for (key, autoshift) in manifests.autoshifts.iter_mut() {
        let Some(value) = autoshift
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PRACTICE_RUN_ANNOTATION))
        else {
            continue;
        };
        tracing::info!(zonal_autoshift = %key, request = %value, "a practice run request found at start counts as answered; write a new value to ask again");
        autoshift
            .status
            .get_or_insert_with(ZonalAutoshiftStatus::default)
            .last_request = Some(value.trim().to_owned());
    }
}

/// What the ZonalAutoshifts did in this process (SEMANTICS AS11), for /metrics.
#[derive(Debug, Default)]
pub struct AutoshiftMetrics {
    counts: Mutex<AutoshiftCounts>,
}

#[derive(Debug, Default)]
struct AutoshiftCounts {
    /// Per zone, the configurations autoshifted away from it now (zones seen stay, at 0).
    active: BTreeMap<String, i64>,
    outcomes: BTreeMap<&'static str, u64>,
    not_started: BTreeMap<&'static str, u64>,
    /// The configurations that cannot be used now (`namespace/name`), with their reason.
    invalid: BTreeMap<String, &'static str>,
}

impl AutoshiftMetrics {
    fn counts(&self) -> std::sync::MutexGuard<'_, AutoshiftCounts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
    fn count_outcome(&self, outcome: PracticeRunOutcome) {
        *self.counts().outcomes.entry(outcome.as_str()).or_default() += 1;
    }
    fn count_not_started(&self, reason: &'static str) {
        *self.counts().not_started.entry(reason).or_default() += 1;
    }
    fn set_invalid(&self, now: BTreeMap<String, &'static str>) {
        self.counts().invalid = now;
    }
    fn set_active(&self, now: BTreeMap<String, i64>) {
        let mut counts = self.counts();
        for n in counts.active.values_mut() {
            *n = 0;
        }
        counts.active.extend(now);
    }
}

/// The autoshift metrics in the admin registry.
#[derive(Debug, Clone)]
pub struct AutoshiftCollector(pub Arc<AutoshiftMetrics>);

impl Collector for AutoshiftCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let counts = self.0.counts();
        let mut out = Exposition::new(encoder);
        out.gauges(
            "healthroute_autoshift_active",
            "ZonalAutoshift configurations whose autoshift moves traffic away from the zone now.",
            counts
                .active
                .iter()
                .map(|(zone, n)| ([("zone", zone.as_str())], *n)),
        )?;
        // Every outcome from the start, at 0, so that a rate over them is defined.
        let outcomes = [
            PracticeRunOutcome::Succeeded,
            PracticeRunOutcome::Failed,
            PracticeRunOutcome::Interrupted,
            PracticeRunOutcome::CapacityCheckFailed,
        ]
        .map(|o| {
            let name = o.as_str();
            (
                [("outcome", name)],
                counts.outcomes.get(name).copied().unwrap_or(0),
            )
        });
        out.counters(
            "healthroute_practice_runs_total",
            "Practice runs that ended, by outcome (CapacityCheckFailed: not started for capacity).",
            outcomes,
        )?;
        out.counters(
            "healthroute_practice_runs_not_started_total",
            "Practice runs that were due or asked for and did not start, by reason.",
            counts
                .not_started
                .iter()
                .map(|(reason, n)| ([("reason", *reason)], *n)),
        )?;
        // A series only while the configuration cannot be used: fixing it (or deleting it)
        // ends the series, as the condition it stands for ends.
        out.gauges(
            "healthroute_autoshift_configuration_invalid",
            "ZonalAutoshift configurations that cannot be used (1), with why in a word; the log and the simulator say it in words.",
            counts.invalid.iter().map(|(config, reason)| {
                (
                    [("zonal_autoshift", config.as_str()), ("reason", *reason)],
                    1,
                )
            }),
        )
    }
}
