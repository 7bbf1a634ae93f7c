//! Rule-by-rule tests of the compiler, citing the rule ids of docs/semantics.md, plus property tests.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::testing::*;
use super::*;
use healthroute_api::{
    AppliedStatus, FailoverRole, RecordGroupSpec, RecordSpec, RoutingPolicy, ServiceAddresses,
    ShiftState,
};

/// Resolves `group` `draws` times and returns each distinct answer's share.
fn shares(c: &Compiler, group: &str, draws: usize) -> BTreeMap<String, f64> {
    let table = c.table();
    let g = table
        .groups
        .get(key(group).to_string().as_str())
        .unwrap_or_else(|| panic!("{group} is not served"));
    let mut rng = fastrand::Rng::with_seed(1);
    let mut counts = BTreeMap::<String, usize>::new();
    for _ in 0..draws {
        let r = table.resolve(g, &mut rng).expect("resolves");
        let mut vals = Vec::new();
        r.values.for_each(|v| vals.push(v.to_string()));
        vals.sort();
        *counts.entry(vals.join(",")).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(k, n)| (k, n as f64 / draws as f64))
        .collect()
}

fn answer(c: &Compiler, group: &str) -> String {
    let s = shares(c, group, 1);
    assert_eq!(s.len(), 1);
    s.into_keys().next().expect("one answer")
}

fn set_check(c: &mut Compiler, name: &str, healthy: bool) {
    let mut input = CheckInput::new(mk_check(name));
    input.views = vec![mk_view("checker-a", healthy)];
    c.upsert_check(key(name), input);
    c.set_heartbeat("checker-a", t0());
}

fn lr(c: &Compiler, group: &str) -> bool {
    c.outcome(&key(group)).expect("compiled").last_resort()
}

fn rejection(c: &Compiler, group: &str) -> Option<&'static str> {
    c.outcome(&key(group))
        .and_then(|o| o.compiled.as_ref().err())
        .map(|r| r.reason)
}

fn weighted_10_20_20(c: &mut Compiler) {
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Weighted,
            vec![
                checked(weighted(mk_record("a", &["192.0.2.1"]), 10), "hc-a"),
                checked(weighted(mk_record("b", &["192.0.2.2"]), 20), "hc-b"),
                checked(weighted(mk_record("c", &["192.0.2.3"]), 20), "hc-c"),
            ],
        )),
    );
    for hc in ["hc-a", "hc-b", "hc-c"] {
        set_check(c, hc, true);
    }
}

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

fn mk_failover(c: &mut Compiler, secondary_checked: bool) {
    let mut secondary = failover(
        mk_record("dr", &["198.51.100.1"]),
        FailoverRole::Secondary,
        None,
    );
    if secondary_checked {
        secondary = checked(secondary, "hc-dr");
    }
    c.upsert_group(
        key("www"),
        group_input(mk_group(
            "www",
            RoutingPolicy::Failover,
            vec![
                checked(
                    failover(
                        mk_record("main", &["192.0.2.1"]),
                        FailoverRole::Primary,
                        None,
                    ),
                    "hc-main",
                ),
                secondary,
            ],
        )),
    );
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

// SEM-S2 SEM-R3 SEM-H11: a Simple Service record answers its ready endpoints; with none
// ready, serving terminating ones; with none of those, all of them (last resort).
#[test]
fn simple_service_record_readiness() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("web"),
        group_input(mk_group(
            "web",
            RoutingPolicy::Simple,
            vec![mk_service_record("pods", "web")],
        )),
    );
    let svc = |eps: Vec<EndpointInput>| ServiceEndpoints {
        cluster_ips: vec!["10.96.0.10".parse().expect("ip")],
        endpoints: eps,
    };
    c.upsert_service(
        key("web"),
        svc(vec![
            mk_endpoint("10.0.0.1", true, "zone-a"),
            mk_endpoint("10.0.0.2", false, "zone-b"),
            mk_endpoint("fd00::1", true, "zone-a"),
        ]),
    );
    c.compile(t0());
    assert_eq!(answer(&c, "web"), "10.0.0.1");

    let mut terminating = mk_endpoint("10.0.0.3", false, "zone-a");
    terminating.serving = true;
    terminating.terminating = true;
    c.upsert_service(
        key("web"),
        svc(vec![mk_endpoint("10.0.0.2", false, "zone-b"), terminating]),
    );
    c.compile(t0());
    assert_eq!(answer(&c, "web"), "10.0.0.3");
    assert!(!lr(&c, "web"));

    c.upsert_service(
        key("web"),
        svc(vec![
            mk_endpoint("10.0.0.2", false, "zone-b"),
            mk_endpoint("10.0.0.4", false, "zone-a"),
        ]),
    );
    c.compile(t0());
    assert_eq!(answer(&c, "web"), "10.0.0.2,10.0.0.4");
    assert!(lr(&c, "web"));
}

// SEM-R3: addresses ClusterIP answers the Service IP while an endpoint is ready; with a
// health check as well, both must hold.
#[test]
fn cluster_ip_record_and_check_both_hold() {
    let mut c = mk_compiler();
    let mut rec = checked(mk_service_record("svc", "web"), "hc-web");
    rec.service.as_mut().expect("service").addresses = Some(ServiceAddresses::ClusterIp);
    c.upsert_group(
        key("web"),
        group_input(mk_group(
            "web",
            RoutingPolicy::Weighted,
            vec![
                weighted(rec, 1),
                weighted(mk_record("static", &["192.0.2.50"]), 1),
            ],
        )),
    );
    c.upsert_service(
        key("web"),
        ServiceEndpoints {
            cluster_ips: vec!["10.96.0.10".parse().expect("ip")],
            endpoints: vec![mk_endpoint("10.0.0.1", true, "zone-a")],
        },
    );
    set_check(&mut c, "hc-web", true);
    c.compile(t0());
    assert!(shares(&c, "web", 1000).contains_key("10.96.0.10"));
    set_check(&mut c, "hc-web", false);
    c.compile(t0());
    assert_eq!(answer(&c, "web"), "192.0.2.50");
}

fn mk_alias_setup(c: &mut Compiler, evaluate: bool) {
    c.upsert_group(
        key("dr"),
        group_input(mk_group(
            "dr",
            RoutingPolicy::Weighted,
            vec![
                checked(weighted(mk_record("x", &["203.0.113.1"]), 1), "hc-x"),
                checked(weighted(mk_record("y", &["203.0.113.2"]), 3), "hc-y"),
            ],
        )),
    );
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Weighted,
            vec![
                checked(weighted(mk_record("main", &["192.0.2.1"]), 100), "hc-main"),
                weighted(mk_alias_record("other", "dr", evaluate), 0),
            ],
        )),
    );
}

// SEM-R4 SEM-S7: an alias to a weighted group answers the target's values by its weights;
// with evaluateTargetHealth it is skipped while the target has no healthy record, and under
// the outer last resort the target answers by its own last resort.
#[test]
fn alias_to_weighted_group_with_evaluate_target_health() {
    let mut c = mk_compiler();
    mk_alias_setup(&mut c, true);
    set_check(&mut c, "hc-main", false);
    set_check(&mut c, "hc-x", true);
    set_check(&mut c, "hc-y", true);
    c.compile(t0());
    let s = shares(&c, "api", 100_000);
    assert!(
        (s["203.0.113.2"] - 0.75).abs() < 0.01,
        "flattened, by the target's weights: {s:?}"
    );
    assert!(!lr(&c, "api"));

    // Target unhealthy: the alias branch is skipped; nothing healthy → outer last resort.
    set_check(&mut c, "hc-x", false);
    set_check(&mut c, "hc-y", false);
    c.compile(t0());
    assert!(lr(&c, "api"));
    assert!(lr(&c, "dr"));
    let status = c.group_status(&key("api")).expect("status");
    assert!(!status.records[1].healthy);
    assert_eq!(
        answer(&c, "api"),
        "192.0.2.1",
        "last resort picks weight > 0 first"
    );

    // The target recovers: the alias is a candidate again (recompiled through the alias dep).
    set_check(&mut c, "hc-y", true);
    c.compile(t0());
    assert_eq!(answer(&c, "api"), "203.0.113.2");
}

// SEM-R4: without evaluateTargetHealth the alias is always healthy.
#[test]
fn alias_without_evaluate_is_always_healthy() {
    let mut c = mk_compiler();
    mk_alias_setup(&mut c, false);
    set_check(&mut c, "hc-main", false);
    set_check(&mut c, "hc-x", false);
    set_check(&mut c, "hc-y", false);
    c.compile(t0());
    assert!(!lr(&c, "api"));
    let s = shares(&c, "api", 10_000);
    assert!(
        s.contains_key("203.0.113.1") && s.contains_key("203.0.113.2"),
        "target's last resort: {s:?}"
    );
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
        let r = table.resolve(g, &mut rng).expect("resolves");
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
    let r = table
        .resolve(&table.groups["shop/mv"], &mut rng)
        .expect("resolves");
    assert_eq!(r.values.len(), 8, "last resort answers 8 of the 12");
}

fn mk_zonal(c: &mut Compiler) {
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Weighted,
            vec![
                in_zone(weighted(mk_record("a", &["192.0.2.1"]), 1), "zone-a"),
                in_zone(weighted(mk_record("b", &["192.0.2.2"]), 1), "zone-b"),
            ],
        )),
    );
}

// SEM-Z2 SEM-Z1 SEM-Z3: while active, zone-b's values are unhealthy; after expiry they return.
#[test]
fn zonal_shift_applied_then_expired() {
    let mut c = mk_compiler();
    mk_zonal(&mut c);
    c.upsert_shift(
        key("drain-b"),
        ShiftInput {
            spec: mk_shift("zone-b", "api", "1h"),
            created: Some(t0()),
            status: None,
        },
    );
    c.compile(at(1));
    assert_eq!(answer(&c, "api"), "192.0.2.1");
    let st = c
        .shift_status(&key("drain-b"), at(1))
        .expect("shift")
        .expect("valid");
    assert_eq!(st.status, Some(ShiftState::Active));
    assert_eq!(st.groups[0].applied_status, AppliedStatus::Applied);
    assert_eq!(c.next_deadline(at(1)), Some(at(3600)));
    c.compile(at(3600));
    assert_eq!(shares(&c, "api", 1000).len(), 2, "both zones again");
    let st = c
        .shift_status(&key("drain-b"), at(3600))
        .expect("shift")
        .expect("valid");
    assert_eq!(st.status, Some(ShiftState::Expired));
}

// SEM-Z4: cancel ends the shift at once, the object stays; deleting it does the same.
#[test]
fn zonal_shift_cancelled_and_deleted() {
    let mut c = mk_compiler();
    mk_zonal(&mut c);
    let mut shift = ShiftInput {
        spec: mk_shift("zone-b", "api", "1h"),
        created: Some(t0()),
        status: None,
    };
    c.upsert_shift(key("drain-b"), shift.clone());
    c.compile(at(1));
    assert_eq!(answer(&c, "api"), "192.0.2.1");
    shift.spec.cancel = true;
    c.upsert_shift(key("drain-b"), shift.clone());
    c.compile(at(2));
    assert_eq!(shares(&c, "api", 1000).len(), 2);
    let st = c
        .shift_status(&key("drain-b"), at(2))
        .expect("shift")
        .expect("valid");
    assert_eq!(st.status, Some(ShiftState::Canceled));

    shift.spec.cancel = false;
    c.upsert_shift(
        key("drain-c"),
        ShiftInput {
            spec: mk_shift("zone-b", "api", "1h"),
            ..shift
        },
    );
    c.compile(at(3));
    assert_eq!(answer(&c, "api"), "192.0.2.1");
    c.delete_shift(&key("drain-c"));
    c.compile(at(4));
    assert_eq!(shares(&c, "api", 1000).len(), 2);
}

// SEM-Z5: the oldest active shift applies; a younger one reports Conflict.
#[test]
fn zonal_shift_conflict() {
    let mut c = mk_compiler();
    mk_zonal(&mut c);
    c.upsert_shift(
        key("old"),
        ShiftInput {
            spec: mk_shift("zone-b", "api", "1h"),
            created: Some(t0()),
            status: None,
        },
    );
    c.upsert_shift(
        key("young"),
        ShiftInput {
            spec: mk_shift("zone-a", "api", "1h"),
            created: Some(at(10)),
            status: None,
        },
    );
    c.compile(at(20));
    assert_eq!(answer(&c, "api"), "192.0.2.1");
    let young = c
        .shift_status(&key("young"), at(20))
        .expect("shift")
        .expect("valid");
    assert_eq!(young.groups[0].applied_status, AppliedStatus::NotApplied);
    assert_eq!(
        young.groups[0].reason,
        Some(healthroute_api::NotAppliedReason::Conflict)
    );
}

// SEM-Z6: a shift that would leave no healthy endpoint outside the zone is not applied.
#[test]
fn zonal_shift_fails_open() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Weighted,
            vec![
                in_zone(
                    checked(weighted(mk_record("a", &["192.0.2.1"]), 1), "hc-a"),
                    "zone-a",
                ),
                in_zone(weighted(mk_record("b", &["192.0.2.2"]), 1), "zone-b"),
            ],
        )),
    );
    set_check(&mut c, "hc-a", false);
    c.upsert_shift(
        key("drain-b"),
        ShiftInput {
            spec: mk_shift("zone-b", "api", "1h"),
            created: Some(t0()),
            status: None,
        },
    );
    c.compile(at(1));
    assert_eq!(
        answer(&c, "api"),
        "192.0.2.2",
        "traffic keeps flowing to zone-b"
    );
    assert!(!lr(&c, "api"));
    let st = c
        .shift_status(&key("drain-b"), at(1))
        .expect("shift")
        .expect("valid");
    assert_eq!(
        st.groups[0].reason,
        Some(healthroute_api::NotAppliedReason::NoHealthyCapacityElsewhere)
    );
    // zone-a recovers: the shift applies.
    set_check(&mut c, "hc-a", true);
    c.compile(at(2));
    assert_eq!(answer(&c, "api"), "192.0.2.1");
}

// SEM-Z2: Service endpoints carry their zone from the EndpointSlice.
#[test]
fn zonal_shift_on_service_endpoints() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("web"),
        group_input(mk_group(
            "web",
            RoutingPolicy::Simple,
            vec![mk_service_record("pods", "web")],
        )),
    );
    c.upsert_service(
        key("web"),
        ServiceEndpoints {
            cluster_ips: vec![],
            endpoints: vec![
                mk_endpoint("10.0.0.1", true, "zone-a"),
                mk_endpoint("10.0.0.2", true, "zone-b"),
            ],
        },
    );
    c.upsert_shift(
        key("drain-a"),
        ShiftInput {
            spec: mk_shift("zone-a", "web", "1h"),
            created: Some(t0()),
            status: None,
        },
    );
    c.compile(at(1));
    assert_eq!(answer(&c, "web"), "10.0.0.2");
}

// SEM-S8: bad configuration is rejected with a reason and never reaches the table.
#[test]
fn rejections() {
    let mut c = mk_compiler();
    // Alias cycle.
    c.upsert_group(
        key("a"),
        group_input(mk_group(
            "a",
            RoutingPolicy::Simple,
            vec![mk_alias_record("x", "b", false)],
        )),
    );
    c.upsert_group(
        key("b"),
        group_input(mk_group(
            "b",
            RoutingPolicy::Simple,
            vec![mk_alias_record("x", "a", false)],
        )),
    );
    // Missing target.
    c.upsert_group(
        key("m"),
        group_input(mk_group(
            "m",
            RoutingPolicy::Simple,
            vec![mk_alias_record("x", "nope", false)],
        )),
    );
    // Outside the served zones.
    let mut out = mk_group(
        "out",
        RoutingPolicy::Simple,
        vec![mk_record("x", &["192.0.2.1"])],
    );
    out.name = "www.other.org.".into();
    c.upsert_group(key("out"), group_input(out));
    // Failover without primary.
    c.upsert_group(
        key("f"),
        group_input(mk_group(
            "f",
            RoutingPolicy::Failover,
            vec![failover(
                mk_record("s", &["192.0.2.1"]),
                FailoverRole::Secondary,
                None,
            )],
        )),
    );
    // Bad value for the type.
    c.upsert_group(
        key("bad"),
        group_input(mk_group(
            "bad",
            RoutingPolicy::Simple,
            vec![mk_record("x", &["not-an-ip"])],
        )),
    );
    c.compile(t0());
    assert_eq!(rejection(&c, "a"), Some(reasons::ALIAS_CYCLE));
    assert_eq!(rejection(&c, "b"), Some(reasons::ALIAS_CYCLE));
    assert_eq!(rejection(&c, "m"), Some(reasons::MISSING_TARGET));
    assert_eq!(rejection(&c, "out"), Some(reasons::ZONE_NOT_SERVED));
    assert_eq!(rejection(&c, "f"), Some(reasons::NO_PRIMARY));
    assert_eq!(rejection(&c, "bad"), Some(reasons::INVALID_SPEC));
    assert!(c.table().groups.is_empty(), "nothing rejected is served");
    assert!(!c.group_status(&key("a")).expect("status").served);
}

// SEM-S8: two groups claiming one name and type: the older wins; the younger is rejected.
// CNAME conflicts with any other type at the same name.
#[test]
fn name_conflict_older_wins() {
    let mut c = mk_compiler();
    let mut young = group_input(mk_group(
        "www",
        RoutingPolicy::Simple,
        vec![mk_record("y", &["192.0.2.2"])],
    ));
    young.created = Some(at(100));
    c.upsert_group(key("young"), young);
    c.upsert_group(
        key("old"),
        group_input(mk_group(
            "www",
            RoutingPolicy::Simple,
            vec![mk_record("o", &["192.0.2.1"])],
        )),
    );
    c.compile(t0());
    assert_eq!(rejection(&c, "young"), Some(reasons::NAME_CONFLICT));
    assert_eq!(answer(&c, "old"), "192.0.2.1");
    // The winner goes away: the other one is served.
    c.delete_group(&key("old"));
    c.compile(t0());
    assert_eq!(rejection(&c, "young"), None);
    assert_eq!(answer(&c, "young"), "192.0.2.2");
}

// SEM-S8: an edit that breaks a group keeps the last good version of it served.
#[test]
fn last_good_version_is_kept() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Simple,
            vec![mk_record("x", &["192.0.2.1"])],
        )),
    );
    c.compile(t0());
    let before = c.table();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Simple,
            vec![mk_record("x", &["bad"])],
        )),
    );
    c.compile(t0());
    assert_eq!(rejection(&c, "api"), Some(reasons::INVALID_SPEC));
    assert_eq!(answer(&c, "api"), "192.0.2.1");
    assert_eq!(c.table().groups, before.groups);
    let st = c.group_status(&key("api")).expect("status");
    assert!(st.served);
    // SEM-P5: the status tells the health of what is served, not the rejected version's 0.
    assert_eq!(
        st.healthy_records.as_deref(),
        Some("last good version, 1 answering")
    );
    assert!(!st.last_resort);
    // What the written status says of it: healthroute-operator, status::tests.
}

// SEM-R5 SEM-R1: health decides candidacy only; the record's values never change.
#[test]
fn health_never_changes_values() {
    let mut c = mk_compiler();
    weighted_10_20_20(&mut c);
    c.compile(t0());
    let st = c.group_status(&key("api")).expect("status");
    set_check(&mut c, "hc-a", false);
    c.compile(t0());
    let st2 = c.group_status(&key("api")).expect("status");
    assert!(!st2.records[0].healthy);
    assert!(
        st2.records[0]
            .reason
            .as_deref()
            .unwrap_or("")
            .contains("hc-a")
    );
    assert_eq!(
        c.groups[&key("api")].spec.records[0].values,
        Some(vec!["192.0.2.1".to_string()])
    );
    assert_eq!(st.records[1], st2.records[1]);
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

// Incremental: a health flip recompiles the groups that read the check (and their alias
// users), not the others.
#[test]
fn recompile_touches_only_dependents() {
    let mut c = mk_compiler();
    for i in 0..100 {
        let name = format!("g{i}");
        c.upsert_group(
            key(&name),
            group_input(mk_group(
                &name,
                RoutingPolicy::Simple,
                vec![checked(mk_record("x", &["192.0.2.1"]), &format!("hc{i}"))],
            )),
        );
        set_check(&mut c, &format!("hc{i}"), true);
    }
    c.upsert_group(
        key("alias"),
        group_input(mk_group(
            "alias",
            RoutingPolicy::Simple,
            vec![mk_alias_record("x", "g7", true)],
        )),
    );
    let first = c.compile(t0());
    assert_eq!(first.recompiled, 101);
    set_check(&mut c, "hc7", false);
    let report = c.compile(t0());
    assert_eq!(report.recompiled, 2, "g7 and the alias to it");
    assert_eq!(report.table_changes, 2);
    assert_eq!(report.generation, first.generation + 1);
    let idle = c.compile(t0());
    assert_eq!((idle.recompiled, idle.table_changes), (0, 0));
    assert_eq!(idle.generation, report.generation);
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
            let r = table.resolve(g, &mut rng).expect("resolves");
            prop_assert!(!r.values.is_empty());
            let mut ok = true;
            r.values.for_each(|v| ok &= configured.contains(&v.to_string()));
            prop_assert!(ok);
        }
        // A shift never turns a group with healthy records into a last-resort one.
        prop_assert_eq!(g.last_resort, !any_healthy);
    }
}

// SEM-H7 SEM-H1: a checker that stops reporting drops out by time alone: the next compile
// after its heartbeat is 3 intervals old changes the answer, and next_deadline says when.
#[test]
fn stale_checker_drops_out_without_new_input() {
    let mut c = mk_compiler();
    mk_failover(&mut c, false);
    let mut check = CheckInput::new(mk_check("hc-main"));
    check.views = vec![
        mk_view("zone-a", true),
        mk_view("zone-b", false),
        mk_view("zone-c", false),
    ];
    c.upsert_check(key("hc-main"), check);
    c.set_heartbeat("zone-a", t0());
    c.set_heartbeat("zone-b", at(25));
    c.set_heartbeat("zone-c", at(25));
    c.compile(at(25));
    assert_eq!(
        answer(&c, "www"),
        "192.0.2.1",
        "1/3 healthy is more than 18%"
    );
    let deadline = c.next_deadline(at(25)).expect("a heartbeat goes stale");
    assert_eq!(deadline, at(30) + jiff::SignedDuration::from_millis(1));
    c.compile(deadline);
    assert_eq!(
        answer(&c, "www"),
        "198.51.100.1",
        "zone-a dropped out: 0/2 healthy"
    );
}

// SEM-H7: heartbeats alone re-evaluate nothing; a checker that goes stale re-evaluates the
// checks that read it, once, and so does its return.
#[test]
fn heartbeats_re_evaluate_only_on_reachability_changes() {
    let mut c = mk_compiler();
    for i in 0..500 {
        let mut check = CheckInput::new(mk_check(&format!("hc-{i}")));
        let reader = if i % 2 == 0 { "zone-a" } else { "zone-b" };
        check.views = vec![mk_view(reader, true)];
        c.upsert_check(key(&format!("hc-{i}")), check);
    }
    c.set_heartbeat("zone-a", t0());
    c.set_heartbeat("zone-b", t0());
    assert_eq!(c.compile(t0()).evaluated_checks, 500, "first evaluation");
    // A heartbeat a second from both checkers, for 20 s: nothing to evaluate.
    for s in 1..=20 {
        c.set_heartbeat("zone-a", at(s));
        c.set_heartbeat("zone-b", at(s));
        let report = c.compile(at(s));
        assert_eq!(report.evaluated_checks, 0, "at {s} s");
    }
    // zone-b stops. Its checks (interval 10 s) lose it when its last heartbeat is 30 s old.
    let deadline = c.next_deadline(at(21)).expect("zone-b goes stale");
    assert_eq!(deadline, at(50) + jiff::SignedDuration::from_millis(1));
    c.set_heartbeat("zone-a", at(49));
    assert_eq!(c.compile(at(49)).evaluated_checks, 0);
    let report = c.compile(deadline);
    assert_eq!(
        report.evaluated_checks, 250,
        "the checks zone-b reads, once"
    );
    assert_eq!(c.compile(at(51)).evaluated_checks, 0);
    // It comes back: the same checks, once.
    c.set_heartbeat("zone-b", at(52));
    assert_eq!(c.compile(at(52)).evaluated_checks, 250);
    assert_eq!(c.compile(at(53)).evaluated_checks, 0);
}

// SEM-S8 SEM-P6: a group that this process only ever saw rejected serves the version an
// earlier leader published; a group that compiles here, or that is gone, is not affected.
#[test]
fn recovered_versions_serve_while_a_group_is_rejected() {
    let mut c = mk_compiler();
    let simple = |name: &str, ip: &str| {
        group_input(mk_group(
            name,
            RoutingPolicy::Simple,
            vec![mk_record("x", &[ip])],
        ))
    };
    // What an earlier leader published.
    let mut earlier = mk_compiler();
    for name in ["api", "web", "gone"] {
        earlier.upsert_group(key(name), simple(name, "192.0.2.1"));
    }
    earlier.compile(t0());
    let published = earlier.table();

    let mut renamed = simple("api", "192.0.2.2");
    renamed.spec.name = "api.elsewhere.org.".into();
    c.upsert_group(key("api"), renamed);
    c.upsert_group(key("web"), simple("web", "192.0.2.3"));
    c.compile(t0());
    assert_eq!(rejection(&c, "api"), Some(reasons::ZONE_NOT_SERVED));
    assert!(
        !c.table().groups.contains_key("shop/api"),
        "nothing to serve yet"
    );

    let recovered = c.recover_served(published.groups.iter().map(|(k, g)| (&**k, g)));
    assert_eq!(recovered, 1, "only api: web compiled here, gone is gone");
    let report = c.compile(at(1));
    assert!(
        report.changed_groups.contains(&key("api")),
        "its status changes"
    );
    assert_eq!(answer(&c, "api"), "192.0.2.1", "the published version");
    assert_eq!(answer(&c, "web"), "192.0.2.3", "the version compiled here");
    assert!(!c.table().groups.contains_key("shop/gone"));
    assert!(c.group_status(&key("api")).expect("status").served);
}

// --- zone affinity (A1-A5) -------------------------------------------------------------------

/// What a resolver in `zone` answers for `group`: each distinct answer's share.
fn zone_shares(c: &Compiler, group: &str, zone: Option<&str>) -> BTreeMap<String, f64> {
    let table = c.table();
    let g = table
        .groups
        .get(key(group).to_string().as_str())
        .unwrap_or_else(|| panic!("{group} is not served"));
    let mut served = (**g).clone();
    served.selection = g.selection_for(zone).0.clone();
    let mut rng = fastrand::Rng::with_seed(7);
    let draws = 4000;
    let mut counts = BTreeMap::<String, usize>::new();
    for _ in 0..draws {
        let r = table.resolve(&served, &mut rng).expect("resolves");
        let mut vals = Vec::new();
        r.values.for_each(|v| vals.push(v.to_string()));
        vals.sort();
        *counts.entry(vals.join(",")).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(k, n)| (k, (n as f64 / draws as f64 * 20.0).round() / 20.0))
        .collect()
}

fn affine(mut spec: RecordGroupSpec, minimum: Option<u8>) -> GroupInput {
    spec.zone_affinity = Some(healthroute_api::ZoneAffinity::PreferSameZone);
    spec.minimum_zone_capacity_percent = minimum;
    group_input_of(spec)
}

fn group_input_of(spec: RecordGroupSpec) -> GroupInput {
    GroupInput {
        spec,
        labels: Default::default(),
        created: Some(t0()),
    }
}

/// Per resolver zone (none: a resolver without one), each answer and its share.
type ZoneExpectations = &'static [(Option<&'static str>, &'static [(&'static str, f64)])];

/// One case: the records of group `g`, checks that are down, the minimum capacity, and per
/// resolver zone what it answers (answer -> share, shares rounded to 5%).
struct AffinityCase {
    name: &'static str,
    policy: RoutingPolicy,
    records: Vec<RecordSpec>,
    down: &'static [&'static str],
    minimum: Option<u8>,
    expect: ZoneExpectations,
}

fn run_affinity_case(case: &AffinityCase) {
    let mut c = mk_compiler();
    for check in ["up", "down"] {
        set_check(&mut c, check, check == "up");
    }
    for check in case.down {
        set_check(&mut c, check, false);
    }
    c.upsert_service(
        key("web"),
        ServiceEndpoints {
            cluster_ips: vec![],
            endpoints: vec![
                mk_endpoint("10.0.0.1", true, "zone-a"),
                mk_endpoint("10.0.0.2", true, "zone-a"),
                mk_endpoint("10.0.0.3", true, "zone-b"),
            ],
        },
    );
    c.upsert_group(
        key("g"),
        affine(
            mk_group("g", case.policy, case.records.clone()),
            case.minimum,
        ),
    );
    c.upsert_group(
        key("target"),
        affine(
            mk_group(
                "target",
                RoutingPolicy::MultiValue,
                vec![
                    in_zone(mk_record("ta", &["198.51.100.1"]), "zone-a"),
                    in_zone(mk_record("tb", &["198.51.100.2"]), "zone-b"),
                ],
            ),
            None,
        ),
    );
    c.compile(t0());
    for (zone, want) in case.expect {
        let got = zone_shares(&c, "g", *zone);
        let want: BTreeMap<String, f64> = want.iter().map(|(k, v)| (k.to_string(), *v)).collect();
        assert_eq!(got, want, "{}: a resolver in {zone:?}", case.name);
    }
}

// SEM-A1 SEM-A2 SEM-A3 SEM-A4: the zone decision per policy and edge case, table-driven.
#[test]
fn zone_affinity_answers_per_zone() {
    use RoutingPolicy::*;
    let za = |r| in_zone(r, "zone-a");
    let zb = |r| in_zone(r, "zone-b");
    let zc = |r| in_zone(r, "zone-c");
    let cases = vec![
        AffinityCase {
            name: "weighted: each zone its own records, weights renormalised in the zone",
            policy: Weighted,
            records: vec![
                za(weighted(mk_record("a1", &["192.0.2.1"]), 30)),
                za(weighted(mk_record("a2", &["192.0.2.2"]), 10)),
                zb(weighted(mk_record("b1", &["192.0.2.3"]), 60)),
            ],
            down: &[],
            minimum: Some(0),
            expect: &[
                (Some("zone-a"), &[("192.0.2.1", 0.75), ("192.0.2.2", 0.25)]),
                (Some("zone-b"), &[("192.0.2.3", 1.0)]),
                (
                    None,
                    &[("192.0.2.1", 0.3), ("192.0.2.2", 0.1), ("192.0.2.3", 0.6)],
                ),
                (
                    Some("zone-x"),
                    &[("192.0.2.1", 0.3), ("192.0.2.2", 0.1), ("192.0.2.3", 0.6)],
                ),
            ],
        },
        AffinityCase {
            name: "an unhealthy record leaves its zone: zone-a answers from every zone",
            policy: Weighted,
            records: vec![
                checked(za(weighted(mk_record("a1", &["192.0.2.1"]), 50)), "down"),
                zb(weighted(mk_record("b1", &["192.0.2.3"]), 50)),
            ],
            down: &[],
            minimum: None,
            expect: &[(Some("zone-a"), &[("192.0.2.3", 1.0)])],
        },
        AffinityCase {
            name: "a zone with only weight-0 records holds no candidate",
            policy: Weighted,
            records: vec![
                za(weighted(mk_record("a0", &["192.0.2.1"]), 0)),
                zb(weighted(mk_record("b1", &["192.0.2.3"]), 10)),
                zc(weighted(mk_record("c1", &["192.0.2.4"]), 10)),
            ],
            down: &[],
            minimum: Some(0),
            expect: &[
                (Some("zone-a"), &[("192.0.2.3", 0.5), ("192.0.2.4", 0.5)]),
                (Some("zone-b"), &[("192.0.2.3", 1.0)]),
            ],
        },
        AffinityCase {
            name: "values without a zone lie in no zone",
            policy: MultiValue,
            records: vec![
                za(mk_record("a", &["192.0.2.1"])),
                mk_record("nozone", &["192.0.2.9"]),
            ],
            down: &[],
            minimum: Some(0),
            expect: &[
                (Some("zone-a"), &[("192.0.2.1", 1.0)]),
                (Some("zone-b"), &[("192.0.2.1,192.0.2.9", 1.0)]),
            ],
        },
        AffinityCase {
            name: "under the minimum capacity a zone answers from every zone",
            policy: MultiValue,
            records: vec![
                za(mk_record("a", &["192.0.2.1"])),
                zb(mk_record(
                    "b",
                    &["192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"],
                )),
            ],
            down: &[],
            // Even split 2.5 endpoints; zone-a holds 1 (40%): under 50%.
            minimum: None,
            expect: &[
                (
                    Some("zone-a"),
                    &[("192.0.2.1,192.0.2.2,192.0.2.3,192.0.2.4,192.0.2.5", 1.0)],
                ),
                (
                    Some("zone-b"),
                    &[("192.0.2.2,192.0.2.3,192.0.2.4,192.0.2.5", 1.0)],
                ),
            ],
        },
        AffinityCase {
            name: "minimum 40% keeps that zone local",
            policy: MultiValue,
            records: vec![
                za(mk_record("a", &["192.0.2.1"])),
                zb(mk_record(
                    "b",
                    &["192.0.2.2", "192.0.2.3", "192.0.2.4", "192.0.2.5"],
                )),
            ],
            down: &[],
            minimum: Some(40),
            expect: &[(Some("zone-a"), &[("192.0.2.1", 1.0)])],
        },
        AffinityCase {
            name: "failover never changes tier for a zone",
            policy: Failover,
            records: vec![
                za(failover(
                    mk_record("primary", &["192.0.2.1"]),
                    FailoverRole::Primary,
                    None,
                )),
                zb(failover(
                    mk_record("standby", &["192.0.2.2"]),
                    FailoverRole::Secondary,
                    None,
                )),
            ],
            down: &[],
            minimum: Some(0),
            expect: &[
                (Some("zone-a"), &[("192.0.2.1", 1.0)]),
                (Some("zone-b"), &[("192.0.2.1", 1.0)]),
            ],
        },
        AffinityCase {
            name: "simple: the record's values narrowed to the zone",
            policy: Simple,
            records: vec![mk_service_record("pods", "web")],
            down: &[],
            minimum: Some(0),
            expect: &[
                (Some("zone-a"), &[("10.0.0.1,10.0.0.2", 1.0)]),
                (Some("zone-b"), &[("10.0.0.3", 1.0)]),
                (Some("zone-c"), &[("10.0.0.1,10.0.0.2,10.0.0.3", 1.0)]),
            ],
        },
        AffinityCase {
            name: "an alias lies in no zone; its target keeps its own affinity",
            policy: Weighted,
            records: vec![
                za(weighted(mk_record("a", &["192.0.2.1"]), 50)),
                weighted(mk_alias_record("elsewhere", "target", false), 50),
            ],
            down: &[],
            minimum: Some(0),
            expect: &[
                (Some("zone-a"), &[("192.0.2.1", 1.0)]),
                (
                    Some("zone-b"),
                    &[("192.0.2.1", 0.5), ("198.51.100.1,198.51.100.2", 0.5)],
                ),
            ],
        },
        AffinityCase {
            name: "last resort: the same answer in every zone",
            policy: MultiValue,
            records: vec![
                checked(za(mk_record("a", &["192.0.2.1"])), "down"),
                checked(zb(mk_record("b", &["192.0.2.2"])), "down"),
            ],
            down: &[],
            minimum: Some(0),
            expect: &[
                (Some("zone-a"), &[("192.0.2.1,192.0.2.2", 1.0)]),
                (Some("zone-b"), &[("192.0.2.1,192.0.2.2", 1.0)]),
            ],
        },
    ];
    for case in &cases {
        run_affinity_case(case);
    }
}

fn metric_spec() -> healthroute_api::HealthCheckSpec {
    let mut spec = mk_check("m");
    spec.check_type = healthroute_api::CheckType::Metric;
    spec.target = None;
    spec.metric = Some(healthroute_api::MetricCheck {
        prometheus: healthroute_api::PrometheusSource {
            url: "http://prometheus.monitoring:9090".into(),
            bearer_token_secret_ref: None,
            ca_secret_ref: None,
            bearer_token_file: None,
            ca_file: None,
        },
        query: "errors > 0.05".into(),
        insufficient_data_health_status: None,
    });
    spec
}

// SEM-H13 SEM-H14 SEM-H10 SEM-H8: a Metric check's one evaluator decides it (its evaluation is
// the reason); it can be a Calculated check's child, and inverted like any check.
#[test]
fn metric_checks_count_their_one_evaluator_and_nest_in_calculated_checks() {
    let mut c = mk_compiler();
    let evaluate = |c: &mut Compiler, inverted: bool, alarm: bool| {
        let mut spec = metric_spec();
        spec.inverted = inverted;
        let mut input = CheckInput::new(spec);
        input.views = vec![CheckerView {
            checker: healthroute_api::METRIC_EVALUATOR.into(),
            zone: None,
            healthy: !alarm,
            message: Some(
                if alarm {
                    "ALARM: 1 sample, 0.2"
                } else {
                    "OK: no samples"
                }
                .into(),
            ),
        }];
        c.upsert_check(key("m"), input);
        c.set_heartbeat(healthroute_api::METRIC_EVALUATOR, t0());
    };
    set_check(&mut c, "up", true);
    let mut calc = mk_check("calc");
    calc.check_type = healthroute_api::CheckType::Calculated;
    calc.target = None;
    calc.calculated = Some(healthroute_api::CalculatedCheck {
        children: vec!["m".into(), "up".into()],
        health_threshold: 2,
    });
    c.upsert_check(key("calc"), CheckInput::new(calc));

    evaluate(&mut c, false, true);
    c.compile(t0());
    let m = c.check_health(&key("m")).expect("m");
    assert!(!m.healthy);
    assert_eq!(m.reason, "metric ALARM: 1 sample, 0.2");
    assert!(
        !c.check_health(&key("calc")).expect("calc").healthy,
        "a child in ALARM"
    );

    evaluate(&mut c, false, false);
    c.compile(t0());
    assert!(c.check_health(&key("m")).expect("m").healthy);
    assert!(c.check_health(&key("calc")).expect("calc").healthy);

    evaluate(&mut c, true, true);
    c.compile(t0());
    assert!(
        c.check_health(&key("m")).expect("m").healthy,
        "inverted ALARM"
    );
}

// What a compiler leaves out (the decision path, the record statuses) never changes the table.
#[test]
fn lighter_compilers_serve_the_same_table() {
    let mut full = mk_compiler();
    let mut light = mk_compiler().without_statuses();
    for c in [&mut full, &mut light] {
        weighted_10_20_20(c);
        set_check(c, "hc-a", false);
        c.compile(t0());
    }
    assert_eq!(full.table().groups, light.table().groups);
    assert_eq!(
        full.group_status(&key("api"))
            .expect("status")
            .records
            .len(),
        3
    );
    assert!(
        light
            .outcome(&key("api"))
            .expect("outcome")
            .records
            .is_empty()
    );
}
