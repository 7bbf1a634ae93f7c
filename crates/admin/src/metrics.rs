//! The metrics of either binary: one prometheus-client [`Registry`] per process, encoded in the
//! Prometheus text format (0.0.4) by the library on each scrape.
//!
//! The numbers themselves stay where the work happens (plain atomics, lock-free on the query
//! path); each part of a binary registers a [`Collector`] that reads them at scrape time and
//! writes them through an [`Exposition`], which names every family by its full sample name
//! (`healthroute_dns_queries_total`, as dashboards and alerts spell it).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

pub use prometheus_client::collector::Collector;
pub use prometheus_client::encoding::DescriptorEncoder;
pub use prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
pub use prometheus_client::registry::Registry;

/// The text exposition of everything `registry` holds.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::with_capacity(4096);
    // Writing into a String cannot fail; a collector's error would end the text early.
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut out, registry) {
        tracing::warn!(error = %e, "a metrics collector failed; the exposition is cut short");
    }
    out
}

/// A counter's family name is its sample name without `_total` (the encoder adds it back).
fn family(name: &str, kind: MetricType) -> &str {
    match kind {
        MetricType::Counter => {
            debug_assert!(
                name.ends_with("_total"),
                "counter {name} must end in _total"
            );
            name.strip_suffix("_total").unwrap_or(name)
        }
        _ => name,
    }
}

/// Counts by a `result` label, for listeners whose rates a lock suits (the peer exchange,
/// pushed deltas): exported as one counter family, the results named in `always` from zero.
#[derive(Debug, Default)]
pub struct CountsByResult(std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>);

impl CountsByResult {
    pub fn count(&self, result: &'static str) {
        *self.lock().entry(result).or_default() += 1;
    }

    /// How many ended as `result`.
    pub fn get(&self, result: &str) -> u64 {
        self.lock().get(result).copied().unwrap_or(0)
    }

    /// Writes the family `name`, with the results in `always` even before the first count
    /// (so that a rate over them exists from the start).
    pub fn encode(
        &self,
        out: &mut Exposition<'_>,
        name: &str,
        help: &str,
        always: &[&'static str],
    ) -> fmt::Result {
        let mut by_result = self.lock().clone();
        for result in always {
            by_result.entry(result).or_default();
        }
        out.counters(
            name,
            help,
            by_result
                .into_iter()
                .map(|(result, n)| ([("result", result)], n)),
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<&'static str, u64>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Writes families into the exposition from inside [`Collector::encode`].
pub struct Exposition<'a> {
    encoder: DescriptorEncoder<'a>,
}

impl<'a> Exposition<'a> {
    pub fn new(encoder: DescriptorEncoder<'a>) -> Self {
        Exposition { encoder }
    }

    fn one(&mut self, name: &str, help: &str, metric: &impl EncodeMetric) -> fmt::Result {
        let kind = metric.metric_type();
        let encoder = self
            .encoder
            .encode_descriptor(family(name, kind), help, None, kind)?;
        metric.encode(encoder)
    }

    fn labelled<L: EncodeLabelSet, M: EncodeMetric>(
        &mut self,
        name: &str,
        help: &str,
        kind: MetricType,
        samples: impl IntoIterator<Item = (L, M)>,
    ) -> fmt::Result {
        let mut encoder = self
            .encoder
            .encode_descriptor(family(name, kind), help, None, kind)?;
        for (labels, metric) in samples {
            metric.encode(encoder.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// A counter without labels; `name` ends in `_total`.
    pub fn counter(&mut self, name: &str, help: &str, value: u64) -> fmt::Result {
        self.one(name, help, &ConstCounter::new(value))
    }

    /// A counter of seconds (kept as microseconds by the caller, exposed as seconds).
    pub fn seconds_counter(&mut self, name: &str, help: &str, micros: u64) -> fmt::Result {
        self.one(name, help, &ConstCounter::new(micros as f64 / 1e6))
    }

    /// A gauge without labels.
    pub fn gauge(&mut self, name: &str, help: &str, value: i64) -> fmt::Result {
        self.one(name, help, &ConstGauge::new(value))
    }

    /// A gauge without labels, with a fraction.
    pub fn gauge_f64(&mut self, name: &str, help: &str, value: f64) -> fmt::Result {
        self.one(name, help, &ConstGauge::new(value))
    }

    /// A counter family, one sample per label set (none at all is a family without samples).
    pub fn counters<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (L, u64)>,
    ) -> fmt::Result {
        let samples = samples.into_iter().map(|(l, v)| (l, ConstCounter::new(v)));
        self.labelled(name, help, MetricType::Counter, samples)
    }

    /// A gauge family, one sample per label set.
    pub fn gauges<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (L, i64)>,
    ) -> fmt::Result {
        let samples = samples.into_iter().map(|(l, v)| (l, ConstGauge::new(v)));
        self.labelled(name, help, MetricType::Gauge, samples)
    }

    /// A histogram without labels.
    pub fn histogram(&mut self, name: &str, help: &str, histogram: &Histogram) -> fmt::Result {
        self.one(name, help, histogram)
    }

    /// A histogram family: per label set, the sum, the count, and `(upper bound, observations
    /// in that bucket alone)` in increasing order (the encoder makes them cumulative and adds
    /// `+Inf` when the last bound is finite).
    pub fn histograms<L: EncodeLabelSet>(
        &mut self,
        name: &str,
        help: &str,
        samples: impl IntoIterator<Item = (L, Histogram)>,
    ) -> fmt::Result {
        self.labelled(name, help, MetricType::Histogram, samples)
    }
}

/// One histogram's numbers at scrape time.
#[derive(Debug)]
pub struct Histogram {
    pub sum: f64,
    pub count: u64,
    pub buckets: Vec<(f64, u64)>,
}

impl EncodeMetric for Histogram {
    fn encode(&self, mut encoder: prometheus_client::encoding::MetricEncoder) -> fmt::Result {
        encoder.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            self.sum,
            self.count,
            &self.buckets,
            None,
        )
    }
    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// A latency histogram kept in atomics: recording is a bucket search and two relaxed adds, no
/// lock; a scrape reads a [`Histogram`] from it.
#[derive(Debug)]
pub struct AtomicHistogram<const N: usize> {
    /// Upper bounds of the buckets, in microseconds, increasing.
    bounds_us: [u64; N],
    buckets: [AtomicU64; N],
    /// Observations above the last bound.
    overflow: AtomicU64,
    sum_us: AtomicU64,
}

impl<const N: usize> AtomicHistogram<N> {
    pub fn new(bounds_us: [u64; N]) -> Self {
        debug_assert!(bounds_us.windows(2).all(|w| w[0] < w[1]));
        AtomicHistogram {
            bounds_us,
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            overflow: AtomicU64::new(0),
            sum_us: AtomicU64::new(0),
        }
    }

    /// Records `n` observations of `elapsed` each (a batch answered together shares one).
    #[inline]
    pub fn record(&self, n: u64, elapsed: Duration) {
        if n == 0 {
            return;
        }
        let us = elapsed.as_micros() as u64;
        let bucket = match self.bounds_us.iter().position(|b| us <= *b) {
            Some(i) => &self.buckets[i],
            None => &self.overflow,
        };
        bucket.fetch_add(n, Ordering::Relaxed);
        self.sum_us.fetch_add(us * n, Ordering::Relaxed);
    }

    /// The numbers as of now, in seconds.
    pub fn snapshot(&self) -> Histogram {
        let mut buckets: Vec<(f64, u64)> = self
            .bounds_us
            .iter()
            .zip(&self.buckets)
            .map(|(b, n)| (*b as f64 / 1e6, n.load(Ordering::Relaxed)))
            .collect();
        buckets.push((f64::INFINITY, self.overflow.load(Ordering::Relaxed)));
        Histogram {
            sum: self.sum_us.load(Ordering::Relaxed) as f64 / 1e6,
            count: buckets.iter().map(|(_, n)| n).sum(),
            buckets,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Sample;

    impl Collector for Sample {
        fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
            let mut out = Exposition::new(encoder);
            out.counter("demo_requests_total", "Requests.", 3)?;
            out.seconds_counter("demo_busy_seconds_total", "Busy time.", 1_500_000)?;
            out.gauge("demo_leader", "1 while leading.", 1)?;
            out.counters(
                "demo_answers_total",
                "Answers.",
                [([("group", "a\"b\\c\nd")], 2)],
            )?;
            out.histograms(
                "demo_latency_seconds",
                "Latency.",
                [(
                    [("checker", "zone-a")],
                    Histogram {
                        sum: 0.25,
                        count: 3,
                        buckets: vec![(0.1, 2), (1.0, 1)],
                    },
                )],
            )
        }
    }

    #[test]
    fn an_atomic_histogram_counts_every_observation_in_its_bucket() {
        let h = AtomicHistogram::new([10, 100]);
        h.record(2, Duration::from_micros(10));
        h.record(1, Duration::from_micros(50));
        h.record(1, Duration::from_millis(5));
        h.record(0, Duration::from_secs(1));
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(
            s.buckets,
            vec![(0.00001, 2), (0.0001, 1), (f64::INFINITY, 1)]
        );
        assert!((s.sum - 0.00507).abs() < 1e-12, "{}", s.sum);
    }

    // Names as dashboards spell them, types right (a histogram's _sum and _count belong to
    // it), label values escaped.
    #[test]
    fn collectors_are_encoded_in_the_text_format() {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Sample));
        let text = encode(&registry);
        for line in [
            "# TYPE demo_requests_total counter",
            "demo_requests_total 3",
            "demo_busy_seconds_total 1.5",
            "# TYPE demo_leader gauge",
            "demo_leader 1",
            r#"demo_answers_total{group="a\"b\\c\nd"} 2"#,
            "# TYPE demo_latency_seconds histogram",
            r#"demo_latency_seconds_bucket{checker="zone-a",le="0.1"} 2"#,
            r#"demo_latency_seconds_bucket{checker="zone-a",le="1"} 3"#,
            r#"demo_latency_seconds_bucket{checker="zone-a",le="+Inf"} 3"#,
            r#"demo_latency_seconds_sum{checker="zone-a"} 0.25"#,
            r#"demo_latency_seconds_count{checker="zone-a"} 3"#,
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "missing {line:?} in\n{text}"
            );
        }
    }
}
