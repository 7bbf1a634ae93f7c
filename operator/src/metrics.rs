//! The operator's counters and gauges: atomics updated where the work happens, read by the
//! registry's collector at each scrape of the admin endpoint.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};
use healthroute_checker::CheckerMetrics;

/// Counters of the control loop, the table publisher and the status writer.
#[derive(Debug, Default)]
pub struct OperatorMetrics {
    pub events: AtomicU64,
    pub compiles: AtomicU64,
    pub compile_micros_sum: AtomicU64,
    pub groups_recompiled: AtomicU64,
    pub checks_evaluated: AtomicU64,
    pub table_groups: AtomicU64,
    pub table_generation: AtomicU64,
    pub published_generation: AtomicU64,
    pub table_shards: AtomicU64,
    pub shards_written: AtomicU64,
    pub publish_micros_sum: AtomicU64,
    pub publish_failures: AtomicU64,
    pub publish_failing: AtomicBool,
    pub status_writes: AtomicU64,
    pub status_write_errors: AtomicU64,
    pub status_backlog: AtomicU64,
    pub events_recorded: AtomicU64,
    pub leader: AtomicBool,
    pub synced: AtomicBool,
    /// The last publish error while publishing fails (for /readyz).
    pub publish_error: Mutex<Option<String>>,
    /// Probe and Metric checks that no reachable checker reports on (H7: they hold their
    /// last status), as of the last compile.
    pub checks_without_checker: AtomicU64,
    /// Active ZonalShifts and when each expires (Unix seconds), as of the last compile.
    pub shift_expiries: Mutex<Vec<(String, String, i64)>>,
    /// The leader's Metric-check evaluator (H14), exported as the checker `metric-evaluator`.
    pub metric_evaluator: Arc<CheckerMetrics>,
}

impl OperatorMetrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Records the outcome of one publish attempt.
    pub fn set_publish_error(&self, error: Option<String>) {
        self.publish_failing
            .store(error.is_some(), Ordering::Relaxed);
        if let Ok(mut e) = self.publish_error.lock() {
            *e = error;
        }
    }

    /// Why this replica is not ready: watches not synced, or (as the leader) the table cannot
    /// be published.
    pub fn not_ready(&self) -> Option<String> {
        if !self.synced.load(Ordering::Relaxed) {
            return Some("watches not synced yet".into());
        }
        if self.leader.load(Ordering::Relaxed) && self.publish_failing.load(Ordering::Relaxed) {
            let error = self
                .publish_error
                .lock()
                .ok()
                .and_then(|e| e.clone())
                .unwrap_or_default();
            return Some(format!("the routing table cannot be published: {error}"));
        }
        None
    }
}

impl Collector for OperatorMetrics {
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
            (
                "healthroute_operator_shards_written_total",
                "Table ConfigMaps written.",
                &self.shards_written,
            ),
            (
                "healthroute_operator_publish_failures_total",
                "Table publishes that failed (retried with backoff).",
                &self.publish_failures,
            ),
            (
                "healthroute_operator_status_writes_total",
                "Status patches written.",
                &self.status_writes,
            ),
            (
                "healthroute_operator_status_write_errors_total",
                "Status patches that failed (retried with backoff unless superseded).",
                &self.status_write_errors,
            ),
            (
                "healthroute_operator_events_recorded_total",
                "Kubernetes Events recorded.",
                &self.events_recorded,
            ),
        ] {
            out.counter(name, help, g(n))?;
        }
        // Times are kept in microseconds and exposed in seconds.
        for (name, help, micros) in [
            (
                "healthroute_operator_compile_seconds_total",
                "Time spent compiling.",
                &self.compile_micros_sum,
            ),
            (
                "healthroute_operator_publish_seconds_total",
                "Time spent publishing.",
                &self.publish_micros_sum,
            ),
        ] {
            out.seconds_counter(name, help, g(micros))?;
        }
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
                "healthroute_operator_published_generation",
                "Generation of the last table published (continued across leaders).",
                &self.published_generation,
            ),
            (
                "healthroute_operator_table_shards",
                "Shards (ConfigMaps) of the published table.",
                &self.table_shards,
            ),
            (
                "healthroute_operator_status_backlog",
                "Objects whose newest status is waiting to be written.",
                &self.status_backlog,
            ),
            (
                "healthroute_operator_checks_without_checker",
                "Probe and Metric checks no reachable checker reports on: they keep their last status (H7).",
                &self.checks_without_checker,
            ),
        ] {
            out.gauge(name, help, g(n) as i64)?;
        }
        for (name, help, flag) in [
            (
                "healthroute_operator_publish_failing",
                "1 while the last attempt to publish the table failed.",
                &self.publish_failing,
            ),
            (
                "healthroute_operator_leader",
                "1 while this replica holds the lease.",
                &self.leader,
            ),
        ] {
            out.gauge(name, help, i64::from(flag.load(Ordering::Relaxed)))?;
        }
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

#[cfg(test)]
mod tests {
    use healthroute_admin::metrics::{Registry, encode};
    use healthroute_checker::CheckerCollector;

    use super::*;

    // The operator's registry as main builds it: its own families and its Metric-check
    // evaluator's, typed and named as the chart's alerts and dashboard read them.
    #[test]
    fn the_operator_exposition_names_and_types_every_family() {
        let metrics = Arc::new(OperatorMetrics::default());
        OperatorMetrics::add(&metrics.compile_micros_sum, 1_250_000);
        metrics.leader.store(true, Ordering::Relaxed);
        if let Ok(mut e) = metrics.shift_expiries.lock() {
            e.push(("shop/drain-a".into(), "zone-a".into(), 1_800_000_000));
        }
        metrics
            .metric_evaluator
            .latency
            .record(1, std::time::Duration::from_millis(3));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(metrics.clone()));
        registry.register_collector(Box::new(CheckerCollector {
            checker: "metric-evaluator".into(),
            metrics: metrics.metric_evaluator.clone(),
        }));
        let text = encode(&registry);
        for line in [
            "# TYPE healthroute_operator_compile_seconds_total counter",
            "healthroute_operator_compile_seconds_total 1.25",
            "# TYPE healthroute_operator_leader gauge",
            "healthroute_operator_leader 1",
            r#"healthroute_operator_zonal_shift_expiry_timestamp_seconds{zonal_shift="shop/drain-a",away_from="zone-a"} 1800000000"#,
            "# TYPE healthroute_checker_probe_latency_seconds histogram",
            r#"healthroute_checker_probe_latency_seconds_bucket{checker="metric-evaluator",le="0.005"} 1"#,
            r#"healthroute_checker_probe_latency_seconds_count{checker="metric-evaluator"} 1"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
