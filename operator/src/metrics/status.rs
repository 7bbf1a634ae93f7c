//! The status path's numbers: patches written and failed, the backlog, Events recorded, and
//! statuses repaired after another writer changed them.

use std::sync::atomic::{AtomicU64, Ordering};

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};

#[derive(Debug, Default)]
pub struct StatusMetrics {
    pub writes: AtomicU64,
    pub write_errors: AtomicU64,
    /// Objects whose newest status waits to be written (queued or in flight).
    pub backlog: AtomicU64,
    pub events_recorded: AtomicU64,
    /// Statuses the periodic re-check found changed on the server, and queued again.
    pub repairs: AtomicU64,
}

impl StatusMetrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn set_backlog(&self, n: usize) {
        self.backlog.store(n as u64, Ordering::Relaxed);
    }
}

impl Collector for StatusMetrics {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = Exposition::new(encoder);
        for (name, help, n) in [
            (
                "healthroute_operator_status_writes_total",
                "Status patches written.",
                &self.writes,
            ),
            (
                "healthroute_operator_status_write_errors_total",
                "Status patches that failed (retried with backoff unless superseded).",
                &self.write_errors,
            ),
            (
                "healthroute_operator_events_recorded_total",
                "Kubernetes Events recorded.",
                &self.events_recorded,
            ),
            (
                "healthroute_operator_status_repairs_total",
                "Statuses found changed by another writer at the periodic re-check, and written again.",
                &self.repairs,
            ),
        ] {
            out.counter(name, help, g(n))?;
        }
        out.gauge(
            "healthroute_operator_status_backlog",
            "Objects whose newest status is waiting to be written.",
            g(&self.backlog) as i64,
        )
    }
}
