//! The control loop's numbers: watch events, compiles, the compiled table, leadership, and
//! the gauges the alerts read (checks without a checker, active shifts' expiries).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};

/// One active ZonalShift: its key, the zone it shifts away from, when it expires (Unix s).
pub type ShiftExpiry = (String, String, i64);

#[derive(Debug, Default)]
pub struct ControlMetrics {
    pub events: AtomicU64,
    pub compiles: AtomicU64,
    pub compile_micros_sum: AtomicU64,
    pub groups_recompiled: AtomicU64,
    pub checks_evaluated: AtomicU64,
    pub table_groups: AtomicU64,
    pub table_generation: AtomicU64,
    pub leader: AtomicBool,
    /// Probe and Metric checks that no reachable checker reports on (H7: they hold their
    /// last status), as of the last compile.
    pub checks_without_checker: AtomicU64,
    /// Active ZonalShifts and when each expires, as of the last compile.
    pub shift_expiries: Mutex<Vec<ShiftExpiry>>,
}

impl ControlMetrics {
    /// Counts one compile that took `took`.
    pub fn compiled(&self, took: Duration, recompiled: usize, evaluated: usize) {
        self.compiles.fetch_add(1, Ordering::Relaxed);
        self.compile_micros_sum
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        self.groups_recompiled
            .fetch_add(recompiled as u64, Ordering::Relaxed);
        self.checks_evaluated
            .fetch_add(evaluated as u64, Ordering::Relaxed);
    }

    pub fn set_shift_expiries(&self, expiries: Vec<ShiftExpiry>) {
        *self
            .shift_expiries
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = expiries;
    }
}

impl Collector for ControlMetrics {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = Exposition::new(encoder);
        for (name, help, n) in [
            (
                "healthroute_operator_events_total",
                "Watch events applied to the index.",
                &self.events,
            ),
            (
                "healthroute_operator_compiles_total",
                "Compiles run.",
                &self.compiles,
            ),
            (
                "healthroute_operator_groups_recompiled_total",
                "RecordGroups compiled again.",
                &self.groups_recompiled,
            ),
            (
                "healthroute_operator_checks_evaluated_total",
                "HealthCheck statuses evaluated again (inputs or checker reachability changed).",
                &self.checks_evaluated,
            ),
        ] {
            out.counter(name, help, g(n))?;
        }
        // Kept in microseconds, exposed in seconds.
        out.seconds_counter(
            "healthroute_operator_compile_seconds_total",
            "Time spent compiling.",
            g(&self.compile_micros_sum),
        )?;
        for (name, help, n) in [
            (
                "healthroute_operator_table_groups",
                "RecordGroups in the compiled table.",
                &self.table_groups,
            ),
            (
                "healthroute_operator_table_generation",
                "Compiles that changed the table, in this process.",
                &self.table_generation,
            ),
            (
                "healthroute_operator_checks_without_checker",
                "Probe and Metric checks no reachable checker reports on: they keep their last status (H7).",
                &self.checks_without_checker,
            ),
        ] {
            out.gauge(name, help, g(n) as i64)?;
        }
        out.gauge(
            "healthroute_operator_leader",
            "1 while this replica holds the lease.",
            i64::from(self.leader.load(Ordering::Relaxed)),
        )?;
        let expiries = self
            .shift_expiries
            .lock()
            .map(|e| e.clone())
            .unwrap_or_default();
        out.gauges(
            "healthroute_operator_zonal_shift_expiry_timestamp_seconds",
            "When each active ZonalShift expires (Z3, Z4).",
            expiries.iter().map(|(shift, away_from, at)| {
                (
                    [
                        ("zonal_shift", shift.as_str()),
                        ("away_from", away_from.as_str()),
                    ],
                    *at,
                )
            }),
        )
    }
}
