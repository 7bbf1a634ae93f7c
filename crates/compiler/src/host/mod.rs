//! What a process that hosts the compiler does around it, the same in the operator's control
//! loop and in standalone mode: when to compile next, the compile itself, and what a compile
//! did to the ZonalAutoshifts, counted once for both binaries' `/metrics`.
//!
//! ```text
//!   host's loop ── deadline(now, clock) ──▶ a timer (std::time::Instant)
//!               ── compile(compiler, now) ──▶ Compiler::compile
//!                     autoshift events (AS11) ──▶ a log line each (info; warn for a run that
//!                                                 failed or did not start)
//!                                             ──▶ AutoshiftMetrics: runs ended, not started
//!                     engines' zones           ──▶ AutoshiftMetrics: zones autoshifted away from
//!                     unusable configurations (AS1) ──▶ AutoshiftMetrics, and a change list
//!               ◀── Compiled { report, configurations }
//!   operator:   report ─▶ statuses and Events (its ledger)
//!   standalone: configurations ─▶ log lines (it has no status to say them in)
//! ```
//!
//! No runtime: time comes in (`now` for the rules, a monotonic `Instant` for the host's
//! timer). What both hosts say the same way (the autoshift events' log lines and numbers) is
//! said here; what differs goes out as data.

mod metrics;
#[cfg(test)]
mod tests;

pub use metrics::AutoshiftMetrics;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use jiff::Timestamp;

use healthroute_api::PracticeRunOutcome;

use crate::autoshift::InvalidConfiguration;
use crate::{AutoshiftEvent, CompileReport, Compiler, ObjectKey};

/// The state a host keeps beside its compiler: the numbers it exports and the unusable
/// configurations as last reported. It does not own the compiler (the operator's index
/// does), so each call is handed it.
#[derive(Debug, Default)]
pub struct Host {
    metrics: Arc<AutoshiftMetrics>,
    /// The ZonalAutoshifts that cannot be used, as the last compile left them (AS1).
    unusable: BTreeMap<ObjectKey, InvalidConfiguration>,
}

/// What one compile did, for the host to tell.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compiled {
    pub report: CompileReport,
    /// The configurations that became unusable or usable since the last compile (AS1), by key.
    pub configurations: Vec<ConfigurationChange>,
}

/// A ZonalAutoshift whose usability changed (AS1): said once when it becomes unusable, again
/// when its reason changes, and once when it can be used again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigurationChange {
    /// It cannot be used, and did not (or not for this reason) at the last compile.
    Unusable {
        config: ObjectKey,
        why: InvalidConfiguration,
    },
    /// It could not be used at the last compile and can now (a deleted one is not reported).
    Usable { config: ObjectKey },
}

impl Host {
    /// A host that counts into `metrics` (which the binary registers for `/metrics`).
    pub fn new(metrics: Arc<AutoshiftMetrics>) -> Self {
        Host {
            metrics,
            unusable: BTreeMap::new(),
        }
    }

    /// The numbers this host counts into.
    pub fn metrics(&self) -> &Arc<AutoshiftMetrics> {
        &self.metrics
    }

    /// When the host's timer should compile next (a shift expiry, a checker going stale, an
    /// engine's wake-up, AS12), on the monotonic clock: `clock` is the `Instant` that stands
    /// for `now`. A deadline already passed is `clock` itself, never earlier; `None` while
    /// nothing changes on its own.
    pub fn deadline(&self, compiler: &Compiler, now: Timestamp, clock: Instant) -> Option<Instant> {
        compiler.time_to_deadline(now).map(|wait| clock + wait)
    }

    /// Compiles at `now`, logs and counts what the ZonalAutoshifts did (AS11), counts which
    /// cannot be used (AS1), and returns the report with the configurations whose usability
    /// changed.
    pub fn compile(&mut self, compiler: &mut Compiler, now: Timestamp) -> Compiled {
        let report = compiler.compile(now);
        report.autoshift_events.iter().for_each(log_event);
        self.metrics.count(&report.autoshift_events);
        self.metrics.set_active(active_zones(compiler));
        let configurations = self.take_usability(compiler);
        Compiled {
            report,
            configurations,
        }
    }

    /// The host stopped compiling (a replica that lost the lease): it exports no autoshifted
    /// zone and no unusable configuration, which are the leader's to say, and a next term
    /// reports every unusable configuration afresh.
    pub fn stand_by(&mut self) {
        self.metrics.clear_active();
        self.metrics.set_invalid(BTreeMap::new());
        self.unusable.clear();
    }

    /// Compares the unusable configurations with the last compile's; the gauge follows them.
    fn take_usability(&mut self, compiler: &Compiler) -> Vec<ConfigurationChange> {
        let now: BTreeMap<ObjectKey, InvalidConfiguration> = compiler
            .autoshift_keys()
            .filter_map(|k| Some((k.clone(), compiler.autoshift_invalid(k)?.clone())))
            .collect();
        if now == self.unusable {
            return Vec::new();
        }
        let mut changes: Vec<ConfigurationChange> = now
            .iter()
            .filter(|(key, why)| self.unusable.get(*key) != Some(*why))
            .map(|(key, why)| ConfigurationChange::Unusable {
                config: key.clone(),
                why: why.clone(),
            })
            .collect();
        changes.extend(
            self.unusable
                .keys()
                .filter(|k| !now.contains_key(*k) && compiler.autoshifts.contains_key(*k))
                .map(|k| ConfigurationChange::Usable { config: k.clone() }),
        );
        self.metrics.set_invalid(
            now.iter()
                .map(|(k, why)| (k.to_string(), why.reason.as_str()))
                .collect(),
        );
        self.unusable = now;
        changes
    }
}

/// AS11: each thing an engine did is a log line, in both binaries; a run that did not
/// succeed, or did not start, is a warning.
fn log_event(event: &AutoshiftEvent) {
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
        }
        AutoshiftEvent::PracticeRunNotStarted { config, reason, .. } => {
            tracing::warn!(zonal_autoshift = %config, reason = reason.as_str(), "{event}");
        }
    }
}

/// Per zone, how many configurations' autoshifts move traffic away from it now (AS11); read
/// from the engines, not from their statuses, so that it costs a walk over the configurations.
fn active_zones(compiler: &Compiler) -> BTreeMap<String, i64> {
    let mut active: BTreeMap<String, i64> = BTreeMap::new();
    for (key, engine) in &compiler.engines {
        if !compiler.autoshifts.contains_key(key) {
            continue;
        }
        if let Some(zone) = engine.autoshift_zone() {
            *active.entry(zone.to_owned()).or_default() += 1;
        }
    }
    active
}
