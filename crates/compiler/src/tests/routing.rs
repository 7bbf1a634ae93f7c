//! The routing policies (SEMANTICS S1–S7) and the zone default TTL (D7): weighted,
//! failover, multivalue, and the last resort, plus the property that a served name always
//! answers with configured values.

use super::*;

// SEM-S1 SEM-S3 SEM-S9: weights 10/20/20 answer 20%, then 33% when the third is unhealthy.
#[test]
fn weighted_renormalises_after_health() {
    let mut c = mk_compiler();
    weighted_10_20_20(&mut c);
    c.compile(t0());
    let s = shares(&c, "api", 100_000);
    assert!((s["192.0.2.1"] - 0.20).abs() < 0.01, "{s:?}");
    assert!((s["192.0.2.3"] - 0.40).abs() < 0.01, "{s:?}");
    set_check(&mut c, "hc-c", false);
    c.compile(t0());
    let s = shares(&c, "api", 100_000);
    assert!((s["192.0.2.1"] - 1.0 / 3.0).abs() < 0.01, "{s:?}");
    assert!(!s.contains_key("192.0.2.3"), "{s:?}");
    assert!(!lr(&c, "api"));
}

// SEM-S3: zero-weight records answer only when every non-zero record is unhealthy, uniformly.
#[test]
fn zero_weight_only_when_weighted_records_are_down() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Weighted,
            vec![
                checked(weighted(mk_record("main", &["192.0.2.1"]), 50), "hc-main"),
                weighted(mk_record("spare1", &["192.0.2.8"]), 0),
                weighted(mk_record("spare2", &["192.0.2.9"]), 0),
            ],
        )),
    );
    set_check(&mut c, "hc-main", true);
    c.compile(t0());
    assert_eq!(answer(&c, "api"), "192.0.2.1");
    set_check(&mut c, "hc-main", false);
    c.compile(t0());
    let s = shares(&c, "api", 100_000);
    assert_eq!(s.len(), 2, "{s:?}");
    assert!((s["192.0.2.8"] - 0.5).abs() < 0.01, "{s:?}");
    assert!(
        !lr(&c, "api"),
        "healthy zero-weight records are not the last resort"
    );
}

// SEM-S6 SEM-S3: no record healthy: every record counts as healthy, weights again.
#[test]
fn weighted_last_resort_uses_weights() {
    let mut c = mk_compiler();
    weighted_10_20_20(&mut c);
    for hc in ["hc-a", "hc-b", "hc-c"] {
        set_check(&mut c, hc, false);
    }
    c.compile(t0());
    assert!(lr(&c, "api"));
    let s = shares(&c, "api", 100_000);
    assert!((s["192.0.2.1"] - 0.20).abs() < 0.01, "{s:?}");
    let status = c.group_status(&key("api")).expect("status");
    assert!(status.last_resort && status.served);
    assert_eq!(status.healthy_records.as_deref(), Some("0/3"));
}

// SEM-S4: primary healthy → primary; primary down → secondary; both down → primary.
#[test]
fn failover_table() {
    let cases = [
        (true, true, "192.0.2.1", false),
        (false, true, "198.51.100.1", false),
        (true, false, "192.0.2.1", false),
        (false, false, "192.0.2.1", true),
    ];
    for (primary, secondary, want, last_resort) in cases {
        let mut c = mk_compiler();
        mk_failover(&mut c, true);
        set_check(&mut c, "hc-main", primary);
        set_check(&mut c, "hc-dr", secondary);
        c.compile(t0());
        assert_eq!(
            answer(&c, "www"),
            want,
            "primary {primary} secondary {secondary}"
        );
        assert_eq!(lr(&c, "www"), last_resort);
    }
}

// SEM-S4 SEM-R2: a secondary with no health source is always healthy.
#[test]
fn failover_secondary_without_check() {
    let mut c = mk_compiler();
    mk_failover(&mut c, false);
    set_check(&mut c, "hc-main", false);
    c.compile(t0());
    assert_eq!(answer(&c, "www"), "198.51.100.1");
    assert!(!lr(&c, "www"));
}

// SEM-S4: priority tiers beyond Route 53: the first healthy tier answers; none → tier 0.
#[test]
fn failover_tiers() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("www"),
        group_input(mk_group(
            "www",
            RoutingPolicy::Failover,
            vec![
                checked(
                    failover(mk_record("t0", &["192.0.2.1"]), FailoverRole::Primary, None),
                    "h0",
                ),
                checked(
                    failover(
                        mk_record("t2", &["192.0.2.3"]),
                        FailoverRole::Secondary,
                        Some(2),
                    ),
                    "h2",
                ),
                checked(
                    failover(
                        mk_record("t1", &["192.0.2.2"]),
                        FailoverRole::Secondary,
                        Some(1),
                    ),
                    "h1",
                ),
            ],
        )),
    );
    for (h0, h1, h2, want) in [
        (false, true, true, "192.0.2.2"),
        (false, false, true, "192.0.2.3"),
        (false, false, false, "192.0.2.1"),
    ] {
        set_check(&mut c, "h0", h0);
        set_check(&mut c, "h1", h1);
        set_check(&mut c, "h2", h2);
        c.compile(t0());
        assert_eq!(answer(&c, "www"), want);
    }
}

// SEM-S5: multivalue answers up to 8 healthy values; none healthy → up to 8 of all.
#[test]
fn multivalue_cap_and_last_resort() {
    let mut c = mk_compiler();
    let records: Vec<_> = (1..=12)
        .map(|i| {
            checked(
                mk_record(&format!("r{i}"), &[&format!("192.0.2.{i}")]),
                &format!("hc{i}"),
            )
        })
        .collect();
    c.upsert_group(
        key("mv"),
        group_input(mk_group("mv", RoutingPolicy::MultiValue, records)),
    );
    for i in 1..=12 {
        set_check(&mut c, &format!("hc{i}"), i <= 10);
    }
    c.compile(t0());
    let table = c.table();
    let g = &table.groups["shop/mv"];
    let mut rng = fastrand::Rng::with_seed(3);
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..2000 {
        let r = resolve(&table, g, &mut rng).expect("resolves");
        assert_eq!(r.values.len(), 8);
        r.values.for_each(|v| {
            seen.insert(v.to_string());
        });
    }
    assert_eq!(
        seen.len(),
        10,
        "only healthy values, all of them over time: {seen:?}"
    );
    for i in 1..=12 {
        set_check(&mut c, &format!("hc{i}"), false);
    }
    c.compile(t0());
    assert!(lr(&c, "mv"));
    let table = c.table();
    let r = resolve(&table, &table.groups["shop/mv"], &mut rng).expect("resolves");
    assert_eq!(r.values.len(), 8, "last resort answers 8 of the 12");
}

// SEM-D7: TTL from the group, else the zone default.
#[test]
fn ttl_defaults() {
    let mut c = mk_compiler();
    let mut g = mk_group(
        "api",
        RoutingPolicy::Simple,
        vec![mk_record("x", &["192.0.2.1"])],
    );
    c.upsert_group(key("api"), group_input(g.clone()));
    g.ttl = Some(5);
    g.name = "api2.example.com.".into();
    c.upsert_group(key("api2"), group_input(g));
    c.compile(t0());
    assert_eq!(c.table().groups["shop/api"].ttl, 60);
    assert_eq!(c.table().groups["shop/api2"].ttl, 5);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    // SEM-S6 SEM-S2 SEM-S3 SEM-S4 SEM-S5: whatever the health, a served name answers, and only
    // with configured values; a zonal shift never empties a group (SEM-Z6).
    #[test]
    fn answers_are_never_empty_and_always_configured(
        policy in prop_oneof![Just(RoutingPolicy::Weighted), Just(RoutingPolicy::Failover), Just(RoutingPolicy::MultiValue)],
        records in proptest::collection::vec((0u32..4, any::<bool>(), 0usize..3), 1..6),
        shift_zone in proptest::option::of(0usize..3),
        seed in any::<u64>(),
    ) {
        let zones = ["zone-a", "zone-b", "zone-c"];
        let mut c = mk_compiler();
        let specs: Vec<_> = records.iter().enumerate().map(|(i, (w, _, z))| {
            let mut r = in_zone(checked(mk_record(&format!("r{i}"), &[&format!("192.0.2.{}", i + 1)]), &format!("hc{i}")), zones[*z]);
            match policy {
                RoutingPolicy::Weighted => r.weight = Some(*w),
                RoutingPolicy::Failover => {
                    r = failover(r, if i == 0 { FailoverRole::Primary } else { FailoverRole::Secondary }, (i > 0).then_some(i as u32));
                }
                _ => {}
            }
            r
        }).collect();
        c.upsert_group(key("g"), group_input(mk_group("g", policy, specs)));
        for (i, (_, healthy, _)) in records.iter().enumerate() {
            set_check(&mut c, &format!("hc{i}"), *healthy);
        }
        if let Some(z) = shift_zone {
            c.upsert_shift(key("s"), ShiftInput { spec: mk_shift(zones[z], "g", "1h"), created: Some(t0()), status: None });
        }
        c.compile(at(1));
        let configured: Vec<String> = (1..=records.len()).map(|i| format!("192.0.2.{i}")).collect();
        let table = c.table();
        let g = &table.groups["shop/g"];
        let mut rng = fastrand::Rng::with_seed(seed);
        let any_healthy = records.iter().any(|(_, h, _)| *h);
        for _ in 0..50 {
            let r = resolve(&table, g, &mut rng).expect("resolves");
            prop_assert!(!r.values.is_empty());
            let mut ok = true;
            r.values.for_each(|v| ok &= configured.contains(&v.to_string()));
            prop_assert!(ok);
        }
        // A shift never turns a group with healthy records into a last-resort one.
        prop_assert_eq!(g.last_resort, !any_healthy);
    }
}
