//! The Peer checks' numbers (SEMANTICS X4): how many the groups need, and the writes that
//! create, update and delete them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};

use super::WriteCounters;

#[derive(Debug, Default)]
pub struct PeerMetrics {
    /// Peer checks the RecordGroups need (as of the leader's last plan).
    pub checks: AtomicU64,
    /// The writes that create, update and delete them.
    pub writer: Arc<WriteCounters>,
}

impl Collector for PeerMetrics {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = Exposition::new(encoder);
        out.counter(
            "healthroute_operator_peer_check_writes_total",
            "Peer checks applied or deleted.",
            g(&self.writer.writes),
        )?;
        out.counter(
            "healthroute_operator_peer_check_write_errors_total",
            "Peer-check writes that failed (retried with backoff unless the server refused the body).",
            g(&self.writer.write_errors),
        )?;
        out.gauge(
            "healthroute_operator_peer_checks",
            "Peer checks the RecordGroups need.",
            g(&self.checks) as i64,
        )?;
        out.gauge(
            "healthroute_operator_peer_check_writes_pending",
            "Peer-check writes waiting to be sent.",
            g(&self.writer.pending) as i64,
        )
    }
}
