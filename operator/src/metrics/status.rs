//! The writer's numbers: status patches written and failed, the backlog, Events recorded,
//! and what the periodic re-check repaired after another writer changed it (statuses, Peer
//! checks, mirrors); the Peer checks' and the mirrors' writes are counted by the one writer
//! too, in their components' families ([`WriteCounters`], [`WriteMetrics`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};

#[derive(Debug, Default)]
pub struct StatusMetrics {
    pub writes: AtomicU64,
    pub write_errors: AtomicU64,
    /// Objects whose newest status waits to be written (queued or in flight).
    pub backlog: AtomicU64,
    pub events_recorded: AtomicU64,
    /// Statuses, Peer checks and mirrors the periodic re-check found changed on the server
    /// (or gone), and queued again.
    pub repairs: AtomicU64,
}

/// The writes of one kind of object the leader derives (Peer checks, mirrors), for the
/// metrics of the component that owns them.
#[derive(Debug, Default)]
pub struct WriteCounters {
    pub writes: AtomicU64,
    pub write_errors: AtomicU64,
    /// Writes not yet done (queued, in flight, or waiting out a backoff).
    pub pending: AtomicU64,
}

impl WriteCounters {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// What the one writer counts, each kind in its component's families.
#[derive(Debug, Default, Clone)]
pub struct WriteMetrics {
    pub status: Arc<StatusMetrics>,
    pub peer_checks: Arc<WriteCounters>,
    pub engine_shifts: Arc<WriteCounters>,
}

impl StatusMetrics {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn set(counter: &AtomicU64, n: u64) {
        counter.store(n, Ordering::Relaxed);
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
                "Statuses, Peer checks and engine-shift mirrors found changed by another writer at the periodic re-check, and written again.",
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
