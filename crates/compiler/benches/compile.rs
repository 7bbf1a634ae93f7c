//! Compile time and memory for 10,000 RecordGroups with 100,000 endpoints, and the cost of
//! one incremental recompile. Prints figures; asserts nothing (machines here are shared).
//!
//! Run: `cargo bench -p healthroute-compiler --bench compile`

use std::hint::black_box;
use std::time::Instant;

use healthroute_api::{
    HealthCheckRef, RecordGroupSpec, RecordSpec, RecordTypeSpec, RoutingPolicy, ServiceRef,
};
use healthroute_compiler::{
    CheckInput, CheckerView, Compiler, EndpointInput, GroupInput, ObjectKey, ServedZones,
    ServiceEndpoints,
};
use jiff::Timestamp;

const GROUPS: usize = 10_000;
const ENDPOINTS_PER_SERVICE: usize = 5;

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn check_spec() -> healthroute_api::HealthCheckSpec {
    serde_json::from_value(serde_json::json!({
        "type": "HTTP", "target": {"address": "192.0.2.1", "port": 80}, "requestIntervalSeconds": 10
    }))
    .expect("valid")
}

fn main() {
    let now = Timestamp::now();
    let rss0 = rss_kib();
    let mut c = Compiler::new(ServedZones::new(["example.com"]).expect("zone"), 60);
    let ns = |i: usize| format!("ns{}", i % 100);
    for i in 0..GROUPS {
        let records = (0..2)
            .map(|r| RecordSpec {
                set_identifier: format!("r{r}"),
                weight: Some(1 + r as u32),
                failover: None,
                values: None,
                zone: None,
                service: Some(ServiceRef {
                    name: format!("svc{i}-{r}"),
                    addresses: None,
                }),
                alias: None,
                peer: None,
                health_check_ref: Some(HealthCheckRef {
                    name: format!("hc{i}"),
                }),
            })
            .collect();
        c.upsert_group(
            ObjectKey::new(ns(i), format!("g{i}")),
            GroupInput {
                spec: RecordGroupSpec {
                    name: format!("g{i}.ns{}.example.com.", i % 100),
                    record_type: RecordTypeSpec::A,
                    routing_policy: RoutingPolicy::Weighted,
                    ttl: None,
                    records,
                    zone_affinity: None,
                    minimum_zone_capacity_percent: None,
                },
                labels: Default::default(),
                created: Some(now),
            },
        );
        for r in 0..2 {
            let endpoints = (0..ENDPOINTS_PER_SERVICE)
                .map(|e| EndpointInput {
                    address: std::net::IpAddr::V4(std::net::Ipv4Addr::from(
                        0x0a00_0000u32 + (i * 10 + r * ENDPOINTS_PER_SERVICE + e) as u32,
                    )),
                    ready: true,
                    serving: true,
                    terminating: false,
                    zone: Some(format!("zone-{}", e % 3)),
                })
                .collect();
            c.upsert_service(
                ObjectKey::new(ns(i), format!("svc{i}-{r}")),
                ServiceEndpoints {
                    cluster_ips: vec![],
                    endpoints,
                },
            );
        }
        let mut check = CheckInput::new(check_spec());
        for k in 0..3 {
            check.views.push(CheckerView {
                checker: format!("checker-{k}"),
                zone: None,
                healthy: true,
                message: None,
                values: Vec::new(),
            });
        }
        c.upsert_check(ObjectKey::new(ns(i), format!("hc{i}")), check);
    }
    for k in 0..3 {
        c.set_heartbeat(format!("checker-{k}"), now);
    }
    let start = Instant::now();
    let report = c.compile(now);
    let full = start.elapsed();
    let rss1 = rss_kib();
    assert_eq!(report.recompiled, GROUPS);
    println!(
        "full compile: {GROUPS} groups, {} endpoints: {:.1} ms",
        GROUPS * 2 * ENDPOINTS_PER_SERVICE,
        full.as_secs_f64() * 1e3
    );
    println!(
        "resident memory: {:.1} MiB (inputs + compiled table + status), grew {:.1} MiB",
        rss1 as f64 / 1024.0,
        (rss1 - rss0) as f64 / 1024.0
    );

    // One readiness flip: the endpoint of one Service changes.
    let mut times = Vec::new();
    for round in 0..200 {
        let i = (round * 37) % GROUPS;
        let key = ObjectKey::new(ns(i), format!("svc{i}-0"));
        let mut endpoints = (0..ENDPOINTS_PER_SERVICE)
            .map(|e| EndpointInput {
                address: std::net::IpAddr::V4(std::net::Ipv4Addr::from(
                    0x0a00_0000u32 + (i * 10 + e) as u32,
                )),
                ready: true,
                serving: true,
                terminating: false,
                zone: Some(format!("zone-{}", e % 3)),
            })
            .collect::<Vec<_>>();
        endpoints[0].ready = round % 2 == 0;
        let t = Instant::now();
        c.upsert_service(
            key,
            ServiceEndpoints {
                cluster_ips: vec![],
                endpoints,
            },
        );
        let r = c.compile(now);
        black_box(c.table());
        times.push(t.elapsed());
        assert!(r.recompiled <= 1);
    }
    times.sort();
    println!(
        "incremental recompile after one EndpointSlice change: p50 {:.1} µs, p99 {:.1} µs (200 changes; includes checking all {GROUPS} health checks)",
        times[times.len() / 2].as_secs_f64() * 1e6,
        times[times.len() * 99 / 100].as_secs_f64() * 1e6
    );
    // A compile with nothing changed: the floor every periodic recompile pays.
    let t = Instant::now();
    let r = c.compile(now);
    println!(
        "idle compile (no change): {:.1} µs, recompiled {}",
        t.elapsed().as_secs_f64() * 1e6,
        r.recompiled
    );
}
