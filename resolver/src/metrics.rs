//! Resolver metrics, recorded lock-free on the query path and read at each scrape by the
//! process registry's collector ([`ServingCollector`]).
//!
//! Queries are counted in a fixed array indexed by (zone, type, rcode); the zones are known at
//! start. Answers per record group and set identifier are counted in [`AnswerCounters`]: a
//! counter is created when its record first appears in a table and kept while the process
//! lives, so it only goes up (M1); each serving table holds references to its groups'
//! counters, so a query counts without a lock.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use healthroute_admin::metrics::{AtomicHistogram, Collector, DescriptorEncoder, Exposition};

use crate::handler::Shared;
use crate::serving::ServingTable;

const TYPES: [&str; 8] = ["A", "AAAA", "CNAME", "TXT", "SOA", "NS", "ANY", "other"];
const RCODES: [&str; 7] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "other",
];
/// Upper bounds of the latency buckets, in microseconds.
const BUCKETS_US: [u64; 11] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 10_000, 100_000, 1_000_000,
];

/// Counter increments gathered over one receive batch and added when the tally is dropped:
/// one atomic add per distinct counter per batch instead of one per query, so that receive
/// loops on different cores do not trade the counters' cache lines query by query. It
/// borrows the counters (the query counters here, the answer counters of the table
/// snapshot), so it ends before the snapshot does.
#[derive(Default)]
pub struct Tally<'a> {
    counts: [(Option<&'a AtomicU64>, u64); Tally::CAPACITY],
    len: usize,
}

impl<'a> Tally<'a> {
    /// Distinct counters held; beyond them an increment is added at once (never lost).
    pub const CAPACITY: usize = 16;

    pub fn add(&mut self, counter: &'a AtomicU64) {
        let held = &mut self.counts[..self.len];
        if let Some(entry) = held
            .iter_mut()
            .find(|(c, _)| c.is_some_and(|c| std::ptr::eq(c, counter)))
        {
            entry.1 += 1;
        } else if self.len < Self::CAPACITY {
            self.counts[self.len] = (Some(counter), 1);
            self.len += 1;
        } else {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        for (counter, n) in &self.counts[..self.len] {
            if let Some(counter) = counter {
                counter.fetch_add(*n, Ordering::Relaxed);
            }
        }
    }
}

/// (record group, set identifier).
type RecordKey = (Arc<str>, Arc<str>);

/// A group with zone affinity, and whether its answers come from the resolver's zone.
type LocalityKey = (Arc<str>, bool);

/// Every answer counter this process has had, by (record group, set identifier), every
/// group's last-resort counter and its zone-affinity counters. Only table builds and the
/// exporter lock it.
#[derive(Default)]
pub struct AnswerCounters {
    records: Mutex<BTreeMap<RecordKey, Arc<AtomicU64>>>,
    last_resort: Mutex<BTreeMap<Arc<str>, Arc<AtomicU64>>>,
    /// By group and whether the answer came from this resolver's zone (A5).
    locality: Mutex<BTreeMap<LocalityKey, Arc<AtomicU64>>>,
}

impl AnswerCounters {
    /// The counter of answers from `set_identifier` of `group`, created at zero the first time.
    pub fn record(&self, group: &Arc<str>, set_identifier: &Arc<str>) -> Arc<AtomicU64> {
        let mut map = self.records.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((group.clone(), set_identifier.clone()))
            .or_default()
            .clone()
    }

    /// The counter of last-resort answers of `group` (S6).
    pub fn last_resort(&self, group: &Arc<str>) -> Arc<AtomicU64> {
        let mut map = self.last_resort.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(group.clone()).or_default().clone()
    }

    /// The counter of answers of a group with zone affinity, from this resolver's zone
    /// (`same_zone`) or from every zone (A5).
    pub fn locality(&self, group: &Arc<str>, same_zone: bool) -> Arc<AtomicU64> {
        let mut map = self.locality.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((group.clone(), same_zone)).or_default().clone()
    }

    /// The count of zone-affinity answers of `group` (tests).
    pub fn locality_count(&self, group: &str, same_zone: bool) -> u64 {
        let map = self.locality.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .find(|((g, s), _)| &**g == group && *s == same_zone)
            .map_or(0, |(_, n)| n.load(Ordering::Relaxed))
    }

    /// The count of one record (tests and the simulator).
    pub fn get(&self, group: &str, set_identifier: &str) -> u64 {
        let map = self.records.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .find(|((g, s), _)| &**g == group && &**s == set_identifier)
            .map_or(0, |(_, n)| n.load(Ordering::Relaxed))
    }

    fn encode(&self, out: &mut Exposition) -> fmt::Result {
        fn read<K: Clone>(map: &Mutex<BTreeMap<K, Arc<AtomicU64>>>) -> Vec<(K, u64)> {
            let map = map.lock().unwrap_or_else(|p| p.into_inner());
            map.iter()
                .map(|(k, n)| (k.clone(), n.load(Ordering::Relaxed)))
                .collect()
        }
        out.counters(
            "healthroute_answers_total",
            "Answers, by record group and set identifier (M1).",
            read(&self.records).iter().map(|((group, id), n)| {
                ([("record_group", &**group), ("set_identifier", &**id)], *n)
            }),
        )?;
        out.counters(
            "healthroute_zone_affinity_answers_total",
            "Answers of groups with zone affinity, from this resolver's zone (same-zone) or from every zone (all-zones) (A5).",
            read(&self.locality).iter().map(|((group, same), n)| {
                let locality = if *same { "same-zone" } else { "all-zones" };
                ([("record_group", &**group), ("locality", locality)], *n)
            }),
        )?;
        out.counters(
            "healthroute_last_resort_answers_total",
            "Answers given while no record of the group was healthy (S6).",
            read(&self.last_resort)
                .iter()
                .map(|(group, n)| ([("record_group", &**group)], *n)),
        )
    }
}

pub struct Metrics {
    /// Every answer counter, kept across tables.
    pub answers: AnswerCounters,
    /// Zone names; index `zones.len()` is "none" (outside every zone).
    zones: Vec<String>,
    queries: Vec<AtomicU64>,
    latency: AtomicHistogram<{ BUCKETS_US.len() }>,
    pub forwarded: AtomicU64,
    pub upstream_failures: AtomicU64,
    pub tables_loaded: AtomicU64,
    started: Instant,
    table_loaded_at_ms: AtomicU64,
}

impl Metrics {
    pub fn new(zones: Vec<String>) -> Self {
        let slots = (zones.len() + 1) * TYPES.len() * RCODES.len();
        Metrics {
            answers: AnswerCounters::default(),
            zones,
            queries: (0..slots).map(|_| AtomicU64::new(0)).collect(),
            latency: AtomicHistogram::new(BUCKETS_US),
            forwarded: AtomicU64::new(0),
            upstream_failures: AtomicU64::new(0),
            tables_loaded: AtomicU64::new(0),
            started: Instant::now(),
            table_loaded_at_ms: AtomicU64::new(0),
        }
    }

    pub fn record_query(
        &self,
        zone: Option<usize>,
        qtype: RecordType,
        rcode: ResponseCode,
        elapsed: Duration,
    ) {
        self.query_counter(zone, qtype, rcode)
            .fetch_add(1, Ordering::Relaxed);
        self.record_latency(1, elapsed);
    }

    /// The counter of queries in `zone` (none: outside every zone) of `qtype` answered `rcode`.
    pub fn query_counter(
        &self,
        zone: Option<usize>,
        qtype: RecordType,
        rcode: ResponseCode,
    ) -> &AtomicU64 {
        let z = zone.unwrap_or(self.zones.len()).min(self.zones.len());
        let t = match qtype {
            RecordType::A => 0,
            RecordType::AAAA => 1,
            RecordType::CNAME => 2,
            RecordType::TXT => 3,
            RecordType::SOA => 4,
            RecordType::NS => 5,
            RecordType::ANY => 6,
            _ => 7,
        };
        let r = match rcode {
            ResponseCode::NoError => 0,
            ResponseCode::FormErr => 1,
            ResponseCode::ServFail => 2,
            ResponseCode::NXDomain => 3,
            ResponseCode::NotImp => 4,
            ResponseCode::Refused => 5,
            _ => 6,
        };
        &self.queries[(z * TYPES.len() + t) * RCODES.len() + r]
    }

    /// Records the latency of `queries` answered together, `elapsed` after they arrived (a
    /// receive batch shares one clock reading, and three atomic adds).
    #[inline]
    pub fn record_latency(&self, queries: u64, elapsed: Duration) {
        self.latency.record(queries, elapsed);
    }

    pub fn table_loaded(&self) {
        self.tables_loaded.fetch_add(1, Ordering::Relaxed);
        self.table_loaded_at_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Everything, with the counters and gauges of `table` (the one being served).
    fn encode(&self, out: &mut Exposition, table: Option<&ServingTable>) -> fmt::Result {
        out.counters(
            "healthroute_dns_queries_total",
            "DNS queries answered, by zone, type and response code.",
            self.queries.iter().enumerate().filter_map(|(slot, n)| {
                let n = n.load(Ordering::Relaxed);
                if n == 0 {
                    return None;
                }
                let r = slot % RCODES.len();
                let t = (slot / RCODES.len()) % TYPES.len();
                let z = slot / (RCODES.len() * TYPES.len());
                let zone = self.zones.get(z).map_or("none", String::as_str);
                Some((
                    [("zone", zone), ("type", TYPES[t]), ("rcode", RCODES[r])],
                    n,
                ))
            }),
        )?;
        out.histogram(
            "healthroute_dns_request_duration_seconds",
            "Time from a parsed query to its answer sent.",
            &self.latency.snapshot(),
        )?;
        out.counter(
            "healthroute_dns_forwarded_total",
            "Queries forwarded to the upstream.",
            self.forwarded.load(Ordering::Relaxed),
        )?;
        out.counter(
            "healthroute_dns_upstream_failures_total",
            "Forwarded queries that got no answer from the upstream (answered SERVFAIL).",
            self.upstream_failures.load(Ordering::Relaxed),
        )?;
        out.counter(
            "healthroute_table_loads_total",
            "Routing tables loaded.",
            self.tables_loaded.load(Ordering::Relaxed),
        )?;
        if let Some(table) = table {
            let age_ms = self.started.elapsed().as_millis() as u64
                - self.table_loaded_at_ms.load(Ordering::Relaxed);
            out.gauge(
                "healthroute_table_generation",
                "Generation of the routing table being served.",
                table.generation as i64,
            )?;
            out.gauge_f64(
                "healthroute_table_age_seconds",
                "Seconds since the table being served was loaded.",
                age_ms as f64 / 1000.0,
            )?;
            out.gauges(
                "healthroute_last_resort",
                "Whether a group is answering by last resort now.",
                table.groups().iter().map(|g| {
                    (
                        [("record_group", &*g.wire.key)],
                        i64::from(g.wire.last_resort),
                    )
                }),
            )?;
        }
        self.answers.encode(out)
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
        self.0
            .metrics
            .encode(&mut Exposition::new(encoder), table.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metrics alone, without a table.
    #[derive(Debug)]
    struct Alone(Arc<Metrics>);

    impl fmt::Debug for Metrics {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Metrics")
        }
    }

    impl Collector for Alone {
        fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
            self.0.encode(&mut Exposition::new(encoder), None)
        }
    }

    fn render(m: &Arc<Metrics>) -> String {
        let mut registry = healthroute_admin::metrics::Registry::default();
        registry.register_collector(Box::new(Alone(m.clone())));
        healthroute_admin::metrics::encode(&registry)
    }

    #[test]
    fn a_batch_counts_every_query_once() {
        let m = Arc::new(Metrics::new(vec!["example.com.".into()]));
        {
            let mut batch = Tally::default();
            let a = m.query_counter(Some(0), RecordType::A, ResponseCode::NoError);
            let nx = m.query_counter(Some(0), RecordType::A, ResponseCode::NXDomain);
            for counter in [a, a, nx, a] {
                batch.add(counter);
            }
        }
        m.record_latency(4, Duration::from_micros(40));
        m.record_query(None, RecordType::SOA, ResponseCode::Refused, Duration::ZERO);
        let text = render(&m);
        for line in [
            r#"healthroute_dns_queries_total{zone="example.com.",type="A",rcode="NOERROR"} 3"#,
            r#"healthroute_dns_queries_total{zone="example.com.",type="A",rcode="NXDOMAIN"} 1"#,
            r#"healthroute_dns_queries_total{zone="none",type="SOA",rcode="REFUSED"} 1"#,
            r#"healthroute_dns_request_duration_seconds_bucket{le="1e-05"} 1"#,
            r#"healthroute_dns_request_duration_seconds_bucket{le="5e-05"} 5"#,
            r#"healthroute_dns_request_duration_seconds_bucket{le="+Inf"} 5"#,
            "healthroute_dns_request_duration_seconds_sum 0.00016",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn a_tally_adds_every_increment_once() {
        let counters: Vec<AtomicU64> = (0..40).map(|_| AtomicU64::new(0)).collect();
        {
            let mut tally = Tally::default();
            for _ in 0..3 {
                for c in &counters {
                    tally.add(c);
                }
            }
            // The first CAPACITY counters are held until the end; the rest were added at once.
            assert_eq!(counters[0].load(Ordering::Relaxed), 0);
            assert_eq!(counters[Tally::CAPACITY].load(Ordering::Relaxed), 3);
        }
        assert!(counters.iter().all(|c| c.load(Ordering::Relaxed) == 3));
    }
}
