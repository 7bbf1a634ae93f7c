//! The operator's counters and gauges, exported on its admin endpoint.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

    pub fn render(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let b = |a: &AtomicBool| u64::from(a.load(Ordering::Relaxed));
        let mut out = String::new();
        for (name, kind, help, v) in [
            (
                "healthroute_operator_events_total",
                "counter",
                "Watch events applied to the index.",
                g(&self.events),
            ),
            (
                "healthroute_operator_compiles_total",
                "counter",
                "Compiles run.",
                g(&self.compiles),
            ),
            (
                "healthroute_operator_compile_seconds_total",
                "counter",
                "Time spent compiling.",
                g(&self.compile_micros_sum),
            ),
            (
                "healthroute_operator_groups_recompiled_total",
                "counter",
                "RecordGroups compiled again.",
                g(&self.groups_recompiled),
            ),
            (
                "healthroute_operator_checks_evaluated_total",
                "counter",
                "HealthCheck statuses evaluated again (inputs or checker reachability changed).",
                g(&self.checks_evaluated),
            ),
            (
                "healthroute_operator_table_groups",
                "gauge",
                "RecordGroups in the compiled table.",
                g(&self.table_groups),
            ),
            (
                "healthroute_operator_table_generation",
                "gauge",
                "Compiles that changed the table, in this process.",
                g(&self.table_generation),
            ),
            (
                "healthroute_operator_published_generation",
                "gauge",
                "Generation of the last table published (continued across leaders).",
                g(&self.published_generation),
            ),
            (
                "healthroute_operator_table_shards",
                "gauge",
                "Shards (ConfigMaps) of the published table.",
                g(&self.table_shards),
            ),
            (
                "healthroute_operator_shards_written_total",
                "counter",
                "Table ConfigMaps written.",
                g(&self.shards_written),
            ),
            (
                "healthroute_operator_publish_seconds_total",
                "counter",
                "Time spent publishing.",
                g(&self.publish_micros_sum),
            ),
            (
                "healthroute_operator_publish_failures_total",
                "counter",
                "Table publishes that failed (retried with backoff).",
                g(&self.publish_failures),
            ),
            (
                "healthroute_operator_publish_failing",
                "gauge",
                "1 while the last attempt to publish the table failed.",
                b(&self.publish_failing),
            ),
            (
                "healthroute_operator_status_writes_total",
                "counter",
                "Status patches written.",
                g(&self.status_writes),
            ),
            (
                "healthroute_operator_status_write_errors_total",
                "counter",
                "Status patches that failed (retried with backoff unless superseded).",
                g(&self.status_write_errors),
            ),
            (
                "healthroute_operator_status_backlog",
                "gauge",
                "Objects whose newest status is waiting to be written.",
                g(&self.status_backlog),
            ),
            (
                "healthroute_operator_events_recorded_total",
                "counter",
                "Kubernetes Events recorded.",
                g(&self.events_recorded),
            ),
            (
                "healthroute_operator_leader",
                "gauge",
                "1 while this replica holds the lease.",
                b(&self.leader),
            ),
            (
                "healthroute_operator_checks_without_checker",
                "gauge",
                "Probe and Metric checks no reachable checker reports on: they keep their last status (H7).",
                g(&self.checks_without_checker),
            ),
        ] {
            // Times are kept in microseconds; expose seconds with microsecond precision.
            let value = if name.ends_with("_seconds_total") {
                format!("{:.6}", v as f64 / 1e6)
            } else {
                v.to_string()
            };
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n"
            ));
        }
        out.push_str("# HELP healthroute_operator_zonal_shift_expiry_timestamp_seconds When each active ZonalShift expires (Z3, Z4).\n# TYPE healthroute_operator_zonal_shift_expiry_timestamp_seconds gauge\n");
        for (shift, away_from, at) in self.shift_expiries.lock().iter().flat_map(|v| v.iter()) {
            out.push_str(&format!(
                "healthroute_operator_zonal_shift_expiry_timestamp_seconds{{zonal_shift=\"{}\",away_from=\"{}\"}} {at}\n",
                label(shift),
                label(away_from)
            ));
        }
        out
    }
}

/// A label value in the text format: backslash, double quote and newline escaped.
fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}
