//! Zonal autoshift's numbers (SEMANTICS AS1, AS11), one type for both binaries: recorded by
//! the [`Host`](super::Host) at each compile, exported by the operator's leader and by a
//! standalone resolver under the same families and labels, so that one dashboard and one set
//! of alerts read both:
//!
//! ```text
//!   healthroute_autoshift_active{zone}                              gauge
//!   healthroute_practice_runs_total{outcome}                        counter, every outcome from 0
//!   healthroute_practice_runs_not_started_total{reason}             counter
//!   healthroute_autoshift_configuration_invalid{zonal_autoshift,reason}  gauge, 1 while it lasts
//! ```
//!
//! A prometheus-client [`Collector`]: the binary registers it in its registry, and it reads the
//! numbers at each scrape (the compiler builds no runtime and no logger; the encoder is
//! neither).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, MutexGuard};

use healthroute_api::PracticeRunOutcome;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::AutoshiftEvent;

/// Every outcome a run ends with, exported from the start at 0 so that a rate is defined.
const OUTCOMES: [PracticeRunOutcome; 4] = [
    PracticeRunOutcome::Succeeded,
    PracticeRunOutcome::Failed,
    PracticeRunOutcome::Interrupted,
    PracticeRunOutcome::CapacityCheckFailed,
];

/// What the ZonalAutoshifts did in this process (AS11) and which cannot be used (AS1).
#[derive(Debug, Default)]
pub struct AutoshiftMetrics {
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// Per zone, the configurations autoshifted away from it now; a zone seen stays, at 0, so
    /// that its series ends at 0 rather than vanishing mid-alert.
    active: BTreeMap<String, i64>,
    outcomes: BTreeMap<&'static str, u64>,
    not_started: BTreeMap<&'static str, u64>,
    /// The configurations that cannot be used now (`namespace/name`), with their reason.
    invalid: BTreeMap<String, &'static str>,
}

impl AutoshiftMetrics {
    fn counts(&self) -> MutexGuard<'_, Counts> {
        // The numbers stay consistent whatever panicked while holding them: each is one write.
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

    /// No zone is exported any more (a replica that stopped leading).
    pub fn clear_active(&self) {
        self.counts().active.clear();
    }

    /// The configurations that cannot be used now (`namespace/name` and reason).
    pub fn set_invalid(&self, now: BTreeMap<String, &'static str>) {
        self.counts().invalid = now;
    }
}

impl Collector for AutoshiftMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.encode_into(&mut encoder)
    }
}

impl AutoshiftMetrics {
    /// Writes the four families, for a collector that exports them beside its own (the
    /// operator's, with its engine-shift writes).
    pub fn encode_into(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let counts = self.counts();
        // Family names without `_total`: the text encoder adds it to a counter's samples.
        family(
            encoder,
            ("healthroute_autoshift_active", MetricType::Gauge),
            "ZonalAutoshift configurations whose autoshift moves traffic away from the zone now.",
            counts
                .active
                .iter()
                .map(|(zone, n)| ([("zone", zone.as_str())], ConstGauge::new(*n))),
        )?;
        family(
            encoder,
            ("healthroute_practice_runs", MetricType::Counter),
            "Practice runs that ended, by outcome (CapacityCheckFailed: not started for capacity).",
            OUTCOMES.map(|o| {
                let name = o.as_str();
                let n = counts.outcomes.get(name).copied().unwrap_or(0);
                ([("outcome", name)], ConstCounter::new(n))
            }),
        )?;
        family(
            encoder,
            ("healthroute_practice_runs_not_started", MetricType::Counter),
            "Practice runs that were due or asked for and did not start, by reason.",
            counts
                .not_started
                .iter()
                .map(|(reason, n)| ([("reason", *reason)], ConstCounter::new(*n))),
        )?;
        // A series only while the configuration cannot be used: fixing it (or deleting it)
        // ends the series, as the condition it stands for ends.
        family(
            encoder,
            (
                "healthroute_autoshift_configuration_invalid",
                MetricType::Gauge,
            ),
            "ZonalAutoshift configurations that cannot be used (1), with why in a word; the status, the log and the simulator say it in words.",
            counts.invalid.iter().map(|(config, reason)| {
                (
                    [("zonal_autoshift", config.as_str()), ("reason", *reason)],
                    ConstGauge::new(1i64),
                )
            }),
        )
    }
}

/// One family: its name and type, and its samples (a family without samples is still
/// described, so that a query over it finds the metric).
fn family<L: EncodeLabelSet, M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    (name, kind): (&str, MetricType),
    help: &str,
    samples: impl IntoIterator<Item = (L, M)>,
) -> fmt::Result {
    let mut family = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, metric) in samples {
        metric.encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}
