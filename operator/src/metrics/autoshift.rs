//! Zonal autoshift's numbers (SEMANTICS AS11), counted by the leader from what the engines
//! report at each compile: the zones autoshifted away from now, the practice runs' outcomes
//! and the runs that did not start. The families and their labels are standalone mode's
//! (`resolver/src/standalone.rs`), so one dashboard and one set of alerts read both.
//!
//! A replica that is not the leader exports no `healthroute_autoshift_active` series and
//! counts nothing: what the engines decide is the leader's.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};
use healthroute_api::PracticeRunOutcome;
use healthroute_compiler::AutoshiftEvent;

use crate::writes::WriteCounters;

#[derive(Debug, Default)]
pub struct AutoshiftMetrics {
    counts: Mutex<Counts>,
    /// The writes of the ZonalShifts that mirror the engines' shifts (AS13; the operator's
    /// alone: standalone mode writes no object).
    pub engine_shift_writes: Arc<WriteCounters>,
}

#[derive(Debug, Default)]
struct Counts {
    /// Per zone, the configurations autoshifted away from it now (zones seen this term stay,
    /// at 0, so that the series ends at 0 rather than vanishing mid-alert).
    active: BTreeMap<String, i64>,
    outcomes: BTreeMap<&'static str, u64>,
    not_started: BTreeMap<&'static str, u64>,
}

/// Every outcome a run ends with, exported from the start at 0 so that a rate is defined.
const OUTCOMES: [PracticeRunOutcome; 4] = [
    PracticeRunOutcome::Succeeded,
    PracticeRunOutcome::Failed,
    PracticeRunOutcome::Interrupted,
    PracticeRunOutcome::CapacityCheckFailed,
];

impl AutoshiftMetrics {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts what one compile's engines did: each run that ended by its outcome, each run
    /// that did not start by its reason.
    pub fn count(&self, events: &[AutoshiftEvent]) {
        let mut counts = self.counts();
        for event in events {
            match event {
                AutoshiftEvent::PracticeRunEnded { outcome, .. } => {
                    *counts.outcomes.entry(outcome.as_str()).or_default() += 1;
                }
                AutoshiftEvent::PracticeRunNotStarted { reason, .. } => {
                    *counts.not_started.entry(reason.as_str()).or_default() += 1;
                }
                _ => {}
            }
        }
    }

    /// The zones autoshifted away from now, with how many configurations shift each.
    pub fn set_active(&self, now: BTreeMap<String, i64>) {
        let mut counts = self.counts();
        for n in counts.active.values_mut() {
            *n = 0;
        }
        counts.active.extend(now);
    }

    /// This replica stopped leading: it exports no autoshifted zone.
    pub fn clear_active(&self) {
        self.counts().active.clear();
    }
}

impl Collector for AutoshiftMetrics {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let counts = self.counts();
        let mut out = Exposition::new(encoder);
        out.gauges(
            "healthroute_autoshift_active",
            "ZonalAutoshift configurations whose autoshift moves traffic away from the zone now.",
            counts
                .active
                .iter()
                .map(|(zone, n)| ([("zone", zone.as_str())], *n)),
        )?;
        out.counters(
            "healthroute_practice_runs_total",
            "Practice runs that ended, by outcome (CapacityCheckFailed: not started for capacity).",
            OUTCOMES.map(|o| {
                let name = o.as_str();
                (
                    [("outcome", name)],
                    counts.outcomes.get(name).copied().unwrap_or(0),
                )
            }),
        )?;
        out.counters(
            "healthroute_practice_runs_not_started_total",
            "Practice runs that were due or asked for and did not start, by reason.",
            counts
                .not_started
                .iter()
                .map(|(reason, n)| ([("reason", *reason)], *n)),
        )?;
        let w = &self.engine_shift_writes;
        out.counter(
            "healthroute_operator_engine_shift_writes_total",
            "Writes of the ZonalShifts that show the autoshift engines' shifts (applied, status, deleted).",
            WriteCounters::get(&w.writes),
        )?;
        out.counter(
            "healthroute_operator_engine_shift_write_errors_total",
            "Engine-shift writes that failed (retried with backoff unless the server refused the body).",
            WriteCounters::get(&w.write_errors),
        )?;
        out.gauge(
            "healthroute_operator_engine_shift_writes_pending",
            "Engine-shift writes waiting to be sent.",
            WriteCounters::get(&w.pending) as i64,
        )
    }
}
