//! The table publisher's numbers: what it published, what it wrote, how long it took, and
//! whether its last attempt failed (P5).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};

#[derive(Debug, Default)]
pub struct PublisherMetrics {
    /// The generation of the last table published (continued across leaders).
    pub generation: AtomicU64,
    pub shards: AtomicU64,
    pub shards_written: AtomicU64,
    /// Deltas written (one per change between folds, P11).
    pub deltas_written: AtomicU64,
    /// Bytes of table data sent: shards, manifests, deltas.
    pub bytes_written: AtomicU64,
    pub folds: AtomicU64,
    pub micros_sum: AtomicU64,
    pub failures: AtomicU64,
    /// The last attempt of this term failed.
    pub failing: AtomicBool,
}

impl PublisherMetrics {
    /// Counts the time one attempt took, whatever its outcome.
    pub fn took(&self, elapsed: Duration) {
        self.micros_sum
            .fetch_add(elapsed.as_micros() as u64, Ordering::Relaxed);
    }

    /// A table the resolvers can assemble: `generation` in `shards` shards, `written` of
    /// them written now, and `delta` whether a delta was, with `bytes` sent in all.
    pub fn published(
        &self,
        generation: u64,
        shards: u32,
        written: usize,
        delta: bool,
        bytes: usize,
    ) {
        self.failing.store(false, Ordering::Relaxed);
        self.shards_written
            .fetch_add(written as u64, Ordering::Relaxed);
        self.deltas_written
            .fetch_add(u64::from(delta), Ordering::Relaxed);
        self.bytes_written
            .fetch_add(bytes as u64, Ordering::Relaxed);
        self.generation.store(generation, Ordering::Relaxed);
        self.shards.store(u64::from(shards), Ordering::Relaxed);
    }

    /// One step of a fold wrote `shards` shards and `bytes`; `done`: the fold ended.
    pub fn folded(&self, shards: usize, bytes: usize, done: bool) {
        self.shards_written
            .fetch_add(shards as u64, Ordering::Relaxed);
        self.bytes_written
            .fetch_add(bytes as u64, Ordering::Relaxed);
        self.folds.fetch_add(u64::from(done), Ordering::Relaxed);
    }

    pub fn failed(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.failing.store(true, Ordering::Relaxed);
    }

    /// A new term (or none) starts with nothing failed yet.
    pub fn new_term(&self) {
        self.failing.store(false, Ordering::Relaxed);
    }
}

impl Collector for PublisherMetrics {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let mut out = Exposition::new(encoder);
        out.counter(
            "healthroute_operator_shards_written_total",
            "Table ConfigMaps written.",
            g(&self.shards_written),
        )?;
        out.counter(
            "healthroute_operator_table_deltas_written_total",
            "Table deltas written: one per change between folds.",
            g(&self.deltas_written),
        )?;
        out.counter(
            "healthroute_operator_table_bytes_written_total",
            "Bytes of table data written: shards, manifests and deltas.",
            g(&self.bytes_written),
        )?;
        out.counter(
            "healthroute_operator_table_folds_total",
            "Folds of the deltas into the shards and a new manifest.",
            g(&self.folds),
        )?;
        out.counter(
            "healthroute_operator_publish_failures_total",
            "Table publishes that failed (retried with backoff).",
            g(&self.failures),
        )?;
        // Kept in microseconds, exposed in seconds.
        out.seconds_counter(
            "healthroute_operator_publish_seconds_total",
            "Time spent publishing.",
            g(&self.micros_sum),
        )?;
        out.gauge(
            "healthroute_operator_published_generation",
            "Generation of the last table published (continued across leaders).",
            g(&self.generation) as i64,
        )?;
        out.gauge(
            "healthroute_operator_table_shards",
            "Shards (ConfigMaps) of the published table.",
            g(&self.shards) as i64,
        )?;
        out.gauge(
            "healthroute_operator_publish_failing",
            "1 while the last attempt to publish the table failed.",
            i64::from(self.failing.load(Ordering::Relaxed)),
        )
    }
}
