//! Record health (SEMANTICS R1–R5): health checks, Service endpoints (H11, R3) and aliases
//! (R4) decide which records are candidates, never what they answer.

use super::*;

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
