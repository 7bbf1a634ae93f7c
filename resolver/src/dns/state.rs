//! The process state every query reads: the serving table snapshot, the upstream, the metrics,
//! and whether the process is draining; with the admin endpoint's two views of it, readiness
//! (/readyz) and the metrics collector (/metrics).
//!
//! ```text
//!   table task ──store──▶ Shared.table (ArcSwap) ◀──load── fastpath, handler (never wait)
//!   stop signal ──▶ Shared.draining ──▶ /readyz unready (P9)
//!   scrape ──▶ ServingCollector ──▶ Metrics + the gauges of the table served now
//! ```
//!
//! Layer: above `serving`, `metrics` and `forward`, below the handler, the UDP loop and the
//! server; it imports none of them.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwapOption;
use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};

use crate::dns::dnssec::Signers;
use crate::dns::forward::Forwarder;
use crate::dns::metrics::Metrics;
use crate::dns::serving::ServingTable;

/// State shared by every query: the table snapshot, the upstream, the metrics.
pub struct Shared {
    pub table: ArcSwapOption<ServingTable>,
    pub upstream: Option<Forwarder>,
    pub metrics: Metrics,
    /// Set when a stop signal arrived: /readyz turns unready while queries are still
    /// answered, so that traffic moves away before the sockets close (P9).
    pub draining: AtomicBool,
    /// The signed zones' signers (K1); empty when no zone is signed.
    pub signers: Signers,
}

impl Shared {
    /// Replaces the table; queries already running finish on the old one.
    pub fn store(&self, table: ServingTable) {
        let new_groups = table.new_groups();
        self.table.store(Some(Arc::new(table)));
        self.metrics.table_loaded(new_groups);
    }
}

impl healthroute_admin::endpoint::Readiness for Shared {
    fn not_ready(&self) -> Option<String> {
        if self.draining.load(Ordering::Relaxed) {
            return Some("shutting down: still answering while traffic moves away".into());
        }
        match self.table.load_full() {
            Some(_) => None,
            None => Some("no routing table yet".into()),
        }
    }
}

/// The resolver's metrics in its process's registry: its counters, and the gauges of the
/// table it serves at the moment of the scrape.
pub struct ServingCollector(pub Arc<Shared>);

impl fmt::Debug for ServingCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServingCollector")
    }
}

impl Collector for ServingCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
        let table = self.0.table.load_full();
        let mut exposition = Exposition::new(encoder);
        self.0.metrics.encode(&mut exposition, table.as_deref())?;
        crate::dns::metrics::encode_signers(&mut exposition, &self.0.signers)
    }
}
