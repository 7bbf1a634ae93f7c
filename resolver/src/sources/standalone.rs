//! Standalone mode: a directory of manifests, compiled in-process, served by this resolver.
//!
//! ```text
//!   DIR ──poll (250 ms): manifest_dir::files, changed? ──▶ manifest_dir::read
//!       ──▶ Compiler ──▶ watch<RoutingTable> ──▶ server
//!                  bad edit: log every error, keep the last good configuration
//!   checker views ──▶ Compiler (H1: probes run on their own schedule; queries never wait)
//!   Host (healthroute_compiler::host, the operator's too):
//!     next deadline (shift expiry, stale checker, autoshift hold time, practice run) ──▶ compile again
//!     compile ──▶ AutoshiftMetrics (/metrics: AS11, and the unusable configurations, AS1)
//!             ──▶ autoshift events (AS11): a log line each
//!             ──▶ unusable configurations (AS1): a log line when one becomes so or its reason
//!                 changes, and when it is in use again
//! ```
//!
//! Time is the system clock here: the compiler is given `Timestamp::now()` at each compile.
//! Standalone mode writes no status, so what a ZonalAutoshift decides is told in the log and
//! the metrics; a practice run is asked for by editing its file (AS10), and a request already
//! in the file when the process starts counts as answered (it would otherwise run again at
//! every restart).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use healthroute_api::{PRACTICE_RUN_ANNOTATION, ZonalAutoshiftStatus};
use healthroute_checker::CheckerEvent;

use crate::error::Error;
use crate::sources::manifest_dir::{self, ManifestFile};
use healthroute_compiler::host::{AutoshiftMetrics, Compiled, ConfigurationChange, Host};
use healthroute_compiler::manifests::{AppliedKeys, Manifests};
use healthroute_compiler::{Compiler, ServedZones};
use healthroute_table::{RoutingTable, Value};
use jiff::Timestamp;
use tokio::sync::{mpsc, watch};

/// How often the directory is checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How long the loop sleeps while nothing is due on its own (the poll wakes it anyway).
const IDLE: Duration = Duration::from_secs(3600);

/// The autoshift numbers as the admin endpoint registers them: the operator's type (AS11).
pub type AutoshiftCollector = Arc<AutoshiftMetrics>;

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
    /// What the operator does around its compiler too: deadline, compile, autoshift numbers.
    host: Host,
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
            host: Host::default(),
        }
    }

    /// The autoshift metrics, for the admin endpoint.
    pub fn autoshift_collector(&self) -> AutoshiftCollector {
        self.host.metrics().clone()
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

    /// Compiles and publishes when the table changed; logs what the ZonalAutoshifts did and
    /// rejected groups, once per change.
    pub fn compile_and_publish(&mut self) {
        if self.applied.is_none() {
            // Nothing good was ever loaded: publish nothing, so that a table from disk (P2)
            // keeps serving instead of an empty one.
            return;
        }
        let Compiled {
            report,
            configurations,
        } = self.host.compile(&mut self.compiler, Timestamp::now());
        configurations.iter().for_each(log_configuration_change);
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

    /// Runs until `shutdown` fires: polls the directory, applies checker events, recompiles.
    pub async fn run(
        mut self,
        mut events: mpsc::Receiver<CheckerEvent>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut poll = tokio::time::interval(POLL_INTERVAL);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let clock = Instant::now();
            let deadline = self
                .host
                .deadline(&self.compiler, Timestamp::now(), clock)
                .unwrap_or(clock + IDLE);
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
                _ = tokio::time::sleep_until(deadline.into()) => {}
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

/// AS1: without a status, a configuration that cannot be used says why in the log, once when
/// it becomes so and again when its reason changes (the host reports only changes).
fn log_configuration_change(change: &ConfigurationChange) {
    match change {
        ConfigurationChange::Unusable { config, why } => {
            tracing::warn!(zonal_autoshift = %config, reason = why.reason.as_str(), "{config}: the configuration cannot be used: {why}");
        }
        ConfigurationChange::Usable { config } => {
            tracing::info!(zonal_autoshift = %config, "{config}: the configuration is in use");
        }
    }
}
