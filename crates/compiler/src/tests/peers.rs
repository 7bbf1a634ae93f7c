//! Peer sources (SEMANTICS X2-X5): a record that answers what a peer cluster's group answers
//! as healthy there, through its Peer check.

use super::*;
use crate::peer::check_spec;
use healthroute_api::PeerTarget;

const PEER: &str = "peer.eu-west.shop.api";

fn target() -> PeerTarget {
    PeerTarget {
        cluster: "eu-west".into(),
        record_group: "shop/api".into(),
    }
}

/// What checker `name` last heard from the peer.
fn heard(name: &str, healthy: bool, values: &[&str]) -> CheckerView {
    CheckerView {
        values: values
            .iter()
            .map(|v| v.parse().expect("a `TYPE value` text"))
            .collect(),
        ..mk_view(name, healthy)
    }
}

fn set_peer(c: &mut Compiler, views: Vec<CheckerView>) {
    for v in &views {
        c.set_heartbeat(&v.checker, t0());
    }
    let mut input = CheckInput::new(check_spec(&target()));
    input.views = views;
    c.upsert_check(key(PEER), input);
}

// SEM-X2 SEM-S4: a Failover group whose secondary is another cluster's group fails over
// to what the peer answers as healthy (of the group's type only) and back.
#[test]
fn failover_to_a_peer_and_back() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("www"),
        group_input(mk_group(
            "www",
            RoutingPolicy::Failover,
            vec![
                checked(
                    failover(
                        mk_record("here", &["192.0.2.1"]),
                        FailoverRole::Primary,
                        None,
                    ),
                    "hc-here",
                ),
                failover(
                    mk_peer_record("there", "eu-west", "shop/api"),
                    FailoverRole::Secondary,
                    None,
                ),
            ],
        )),
    );
    set_peer(
        &mut c,
        vec![heard(
            "checker-a",
            true,
            &["A 198.51.100.7", "A 198.51.100.8", "AAAA 2001:db8::7"],
        )],
    );
    for (local, peer, want, last_resort) in [
        (true, true, "192.0.2.1", false),
        (false, true, "198.51.100.7,198.51.100.8", false),
        (true, true, "192.0.2.1", false),
        (false, false, "192.0.2.1", true),
    ] {
        set_check(&mut c, "hc-here", local);
        if !peer {
            set_peer(&mut c, vec![heard("checker-a", false, &["A 198.51.100.7"])]);
        }
        c.compile(t0());
        assert_eq!(answer(&c, "www"), want, "local {local} peer {peer}");
        assert_eq!(lr(&c, "www"), last_resort);
    }
    let status = &c.outcome(&key("www")).expect("compiled").records;
    let there = status
        .iter()
        .find(|r| r.set_identifier == "there")
        .expect("there");
    assert!(!there.healthy);
    let reason = there.reason.as_deref().unwrap_or_default();
    assert!(reason.starts_with("peer eu-west shop/api: "), "{reason}");
}

// SEM-X3 SEM-S1: weights renormalise across clusters; the peer's values share its weight.
#[test]
fn weighted_across_clusters_renormalises() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Weighted,
            vec![
                weighted(mk_record("here", &["192.0.2.1"]), 25),
                weighted(mk_peer_record("there", "eu-west", "shop/api"), 75),
            ],
        )),
    );
    set_peer(&mut c, vec![heard("checker-a", true, &["A 198.51.100.7"])]);
    c.compile(t0());
    let s = shares(&c, "api", 20_000);
    assert!((s["198.51.100.7"] - 0.75).abs() < 0.02, "{s:?}");
    set_peer(&mut c, vec![heard("checker-a", false, &["A 198.51.100.7"])]);
    c.compile(t0());
    assert_eq!(
        shares(&c, "api", 1_000).into_keys().collect::<Vec<_>>(),
        ["192.0.2.1"]
    );
}

// SEM-X3 SEM-S6: under the last resort a peer record answers what its checkers last had;
// one that never had a value takes no part.
#[test]
fn last_resort_uses_the_last_values_heard() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::MultiValue,
            vec![
                checked(mk_record("here", &["192.0.2.1"]), "hc-here"),
                mk_peer_record("there", "eu-west", "shop/api"),
            ],
        )),
    );
    set_check(&mut c, "hc-here", false);
    set_peer(&mut c, vec![heard("checker-a", false, &["A 198.51.100.7"])]);
    c.compile(t0());
    assert!(lr(&c, "api"));
    assert_eq!(answer(&c, "api"), "192.0.2.1,198.51.100.7");
    set_peer(&mut c, vec![heard("checker-a", false, &[])]);
    c.compile(t0());
    assert!(lr(&c, "api"));
    assert_eq!(answer(&c, "api"), "192.0.2.1");
}

// SEM-X4 SEM-H7: the peer check follows the checker quorum; the values are those most
// healthy checkers agree on (ties: the first checker by name).
#[test]
fn values_by_most_healthy_checkers() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Simple,
            vec![mk_peer_record("there", "eu-west", "shop/api")],
        )),
    );
    set_peer(
        &mut c,
        vec![
            heard("checker-a", true, &["A 198.51.100.1"]),
            heard("checker-b", true, &["A 198.51.100.2"]),
            heard("checker-c", true, &["A 198.51.100.2"]),
            heard("checker-d", false, &["A 198.51.100.3"]),
        ],
    );
    c.compile(t0());
    assert_eq!(answer(&c, "api"), "198.51.100.2");
    set_peer(
        &mut c,
        vec![
            heard("checker-b", true, &["A 198.51.100.2"]),
            heard("checker-a", true, &["A 198.51.100.1"]),
        ],
    );
    c.compile(t0());
    assert_eq!(answer(&c, "api"), "198.51.100.1");
    // One zone partitioned from the peer is not a failover: 1 of 4 unhealthy.
    set_peer(
        &mut c,
        vec![
            heard("checker-a", false, &["A 198.51.100.1"]),
            heard("checker-b", true, &["A 198.51.100.1"]),
            heard("checker-c", true, &["A 198.51.100.1"]),
            heard("checker-d", true, &["A 198.51.100.1"]),
        ],
    );
    c.compile(t0());
    assert!(!lr(&c, "api"));
}

// SEM-X5: a peer that reports only values of another type is an unhealthy source.
#[test]
fn values_of_another_type_make_the_record_unhealthy() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Failover,
            vec![
                failover(
                    mk_peer_record("there", "eu-west", "shop/api"),
                    FailoverRole::Primary,
                    None,
                ),
                failover(
                    mk_record("here", &["192.0.2.1"]),
                    FailoverRole::Secondary,
                    None,
                ),
            ],
        )),
    );
    set_peer(
        &mut c,
        vec![heard("checker-a", true, &["AAAA 2001:db8::7"])],
    );
    c.compile(t0());
    assert_eq!(answer(&c, "api"), "192.0.2.1");
    let status = &c.outcome(&key("api")).expect("compiled").records;
    let reason = status[0].reason.as_deref().unwrap_or_default();
    assert!(reason.contains("answers no A value"), "{reason}");
}
