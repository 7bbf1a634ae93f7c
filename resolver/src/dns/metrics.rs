//! Resolver metrics, recorded lock-free on the query path and read at each scrape by the
//! process state's collector (`state::ServingCollector`).
//!
//! Queries are counted in a fixed array indexed by (zone, type, rcode); the zones are known at
//! start. Answers per record group and set identifier are counted in the answer counters
//! ([`AnswerCounters`], kept here across tables). Layer: above `counters` and `serving` (whose
//! table gauges a scrape reads), below the process state; it knows nothing of the handler.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;

use healthroute_admin::metrics::{AtomicHistogram, Exposition};

use crate::dns::counters::AnswerCounters;
use crate::dns::dnssec::Signers;
use crate::dns::serving::ServingTable;

const TYPES: [&str; 8] = ["A", "AAAA", "CNAME", "TXT", "SOA", "NS", "ANY", "other"];
const RCODES: [&str; 7] = [
    "NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "other",
];
/// Upper bounds of the latency buckets, in microseconds.
const BUCKETS_US: [u64; 11] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 10_000, 100_000, 1_000_000,
];

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
    /// Groups new to a table, over every table loaded: a table that changes one group adds
    /// one (the others are shared with the table before).
    pub new_groups: AtomicU64,
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
            new_groups: AtomicU64::new(0),
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

    /// A table is served now; `new_groups` of its groups were new to it.
    pub fn table_loaded(&self, new_groups: usize) {
        self.tables_loaded.fetch_add(1, Ordering::Relaxed);
        self.new_groups
            .fetch_add(new_groups as u64, Ordering::Relaxed);
        self.table_loaded_at_ms
            .store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// Everything, with the counters and gauges of `table` (the one being served).
    pub fn encode(&self, out: &mut Exposition, table: Option<&ServingTable>) -> fmt::Result {
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
        out.counter(
            "healthroute_table_groups_encoded_total",
            "Record groups new to a table as it was loaded; a new table takes in only the groups that changed and shares the others.",
            self.new_groups.load(Ordering::Relaxed),
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
                table.groups().map(|g| {
                    (
                        [("record_group", &*g.compiled.key)],
                        i64::from(g.compiled.last_resort),
                    )
                }),
            )?;
        }
        let groups = table
            .into_iter()
            .flat_map(|t| t.groups().map(|g| &*g.compiled.key));
        self.answers.encode(out, groups)
    }
}

/// The signed zones' metrics (K6): signatures made, the cache's hits, misses and entries,
/// key files that could not be used, and the time to expiry of the oldest signature the
/// cache serves.
pub fn encode_signers(out: &mut Exposition, signers: &Signers) -> fmt::Result {
    if signers.is_empty() {
        return Ok(());
    }
    let zones = signers.zones();
    let apex: Vec<&str> = zones.iter().map(|z| z.apex.as_str()).collect();
    let counter = |pick: fn(&crate::dns::dnssec::SignerCounters) -> &AtomicU64| {
        zones
            .iter()
            .zip(&apex)
            .map(move |(z, a)| ([("zone", *a)], pick(&z.counters).load(Ordering::Relaxed)))
    };
    out.counters(
        "healthroute_dnssec_signatures_total",
        "RRSIGs made (K3): a signed answer from the cache makes none.",
        counter(|c| &c.signatures),
    )?;
    out.counters(
        "healthroute_dnssec_cache_hits_total",
        "RRsets whose RRSIGs came from the cache.",
        counter(|c| &c.cache_hits),
    )?;
    out.counters(
        "healthroute_dnssec_cache_misses_total",
        "RRsets signed because the cache had no fresh RRSIGs for them.",
        counter(|c| &c.cache_misses),
    )?;
    out.counters(
        "healthroute_dnssec_key_reload_failures_total",
        "Key files that changed but could not be used; the keys before them kept signing (K5).",
        counter(|c| &c.reload_failures),
    )?;
    let signers_now: Vec<_> = zones.iter().map(|z| z.signer.load_full()).collect();
    out.gauges(
        "healthroute_dnssec_cache_entries",
        "RRset variants whose RRSIGs the cache holds.",
        signers_now
            .iter()
            .zip(&apex)
            .map(|(s, a)| ([("zone", *a)], s.cached() as i64)),
    )?;
    let now = crate::dns::dnssec::unix_now();
    out.gauges(
        "healthroute_dnssec_signature_expiry_seconds",
        "Seconds until the oldest signature the cache serves expires (at least signatureValidity - signatureRefresh).",
        signers_now.iter().zip(&apex).filter_map(|(s, a)| {
            let expires = s.earliest_expiry()?;
            Some(([("zone", *a)], expires as i64 - now as i64))
        }),
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use healthroute_admin::metrics::{Collector, DescriptorEncoder};

    use super::*;
    use crate::dns::counters::Tally;

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

    /// The metrics with the table they count for.
    struct WithTable(Arc<Metrics>, Arc<ServingTable>);

    impl fmt::Debug for WithTable {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("WithTable")
        }
    }

    impl Collector for WithTable {
        fn encode(&self, encoder: DescriptorEncoder) -> fmt::Result {
            self.0.encode(&mut Exposition::new(encoder), Some(&self.1))
        }
    }

    // SEM-S6 SEM-M1: answers given by last resort are counted by group; a group never in last
    // resort has no counter but scrapes as zero while it is served, and a group's count stays
    // once it is healthy again.
    #[test]
    fn last_resort_answers_are_counted_and_kept() {
        use healthroute_table::{Answer, CompiledGroup, RoutingTable, Selection, Target, Value};

        let m = Arc::new(Metrics::new(vec!["example.com.".into()]));
        let zones = [crate::dns::serving::ZoneConfig {
            apex: "example.com.".into(),
            default_ttl: 60,
            ..Default::default()
        }];
        let group = |name: &str, last_resort: bool| {
            Arc::new(CompiledGroup {
                key: format!("t/{name}").into(),
                name: format!("{name}.example.com.").into(),
                record_type: healthroute_table::RecordType::A,
                ttl: 30,
                last_resort,
                zone_affinity: None,
                selection: Selection::Fixed(Answer {
                    set_identifier: "x".into(),
                    target: Target::Values(vec![Value::A([192, 0, 2, 1].into())]),
                }),
            })
        };
        let serve = |generation, down_in_last_resort: bool| {
            let routing = RoutingTable {
                generation,
                groups: [group("down", down_in_last_resort), group("up", false)]
                    .into_iter()
                    .map(|g| (g.key.clone(), g))
                    .collect(),
            };
            Arc::new(ServingTable::build(&routing, &zones, None, &m.answers).expect("builds"))
        };
        let ask = |t: &ServingTable, name: &str, n: usize| {
            let qname = crate::dns::wire::wire_name(name);
            let mut rng = fastrand::Rng::with_seed(3);
            let mut tally = Tally::default();
            for _ in 0..n {
                t.lookup(&qname, 1, &mut rng, &mut tally);
            }
        };
        let scrape = |t: &Arc<ServingTable>| {
            let mut registry = healthroute_admin::metrics::Registry::default();
            registry.register_collector(Box::new(WithTable(m.clone(), t.clone())));
            healthroute_admin::metrics::encode(&registry)
        };

        let first = serve(1, true);
        ask(&first, "down.example.com.", 3);
        ask(&first, "up.example.com.", 2);
        let text = scrape(&first);
        for line in [
            r#"healthroute_last_resort_answers_total{record_group="t/down"} 3"#,
            r#"healthroute_last_resort_answers_total{record_group="t/up"} 0"#,
            r#"healthroute_answers_total{record_group="t/up",set_identifier="x"} 2"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert_eq!(
            m.answers.last_resort_count("t/up"),
            None,
            "never in last resort"
        );

        // Healthy again: answers count per record only, the last-resort count stays.
        let second = serve(2, false);
        ask(&second, "down.example.com.", 4);
        let text = scrape(&second);
        for line in [
            r#"healthroute_last_resort_answers_total{record_group="t/down"} 3"#,
            r#"healthroute_answers_total{record_group="t/down",set_identifier="x"} 7"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
