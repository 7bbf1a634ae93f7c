//! Standalone mode: a directory of manifests, compiled in-process, served by this resolver.
//!
//! ```text
//!   DIR ──poll (250 ms): manifest_dir::files, changed? ──▶ manifest_dir::read
//!       ──▶ Compiler ──▶ watch<RoutingTable> ──▶ server
//!                  bad edit: log every error, keep the last good configuration
//!   checker views ──▶ Compiler (H1: probes run on their own schedule; queries never wait)
//!   next deadline (shift expiry, stale checker) ──▶ compile again
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use healthroute_checker::CheckerEvent;

use crate::error::Error;
use crate::manifest_dir::{self, ManifestFile};
use healthroute_compiler::manifests::{AppliedKeys, Manifests};
use healthroute_compiler::{Compiler, ServedZones};
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
        }
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
        let manifests = manifest_dir::read(files)?;
        for w in &manifests.warnings {
            tracing::warn!("{w}");
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
        if report.recompiled > 0 {
            for key in self.compiler.group_keys() {
                if let Some(Err(r)) = self.compiler.outcome(key).map(|o| &o.compiled) {
                    tracing::warn!(record_group = %key, reason = r.reason, "{}", r.message);
                }
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
