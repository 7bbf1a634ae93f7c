//! Zone affinity (SEMANTICS A1–A5): what a resolver in each zone answers, table-driven.

use super::*;

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
        let r = resolve(&table, &served, &mut rng).expect("resolves");
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
    group_input(spec)
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
