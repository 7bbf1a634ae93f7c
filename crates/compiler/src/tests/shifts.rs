//! Zonal shifts (SEMANTICS Z1–Z6): applied while active, ended by expiry or cancel, the
//! oldest of several wins, and never applied when it would empty a group.

use super::*;

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
    assert_eq!(c.next_deadline(), Some(at(3600)));
    // An expiry the clock passes between a compile and the caller's timer is due at once.
    c.compile(at(3599));
    assert_eq!(
        c.time_to_deadline(at(3601)),
        Some(std::time::Duration::ZERO)
    );
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
