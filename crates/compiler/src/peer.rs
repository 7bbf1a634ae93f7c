//! Peer sources (SEMANTICS X2-X4): a record that answers what a RecordGroup of a peer cluster
//! answers as healthy there. Its health and its values come from a HealthCheck of type Peer,
//! one per peer target a namespace's records name (`peer.<cluster>.<namespace>.<name>`), so
//! that every checker asks the peer and the thresholds (H5) and quorum (H7) apply as to any
//! check. The operator creates these checks as objects; standalone mode and the simulator
//! add them to the manifests they load ([`derived_checks`]).

use std::collections::BTreeMap;

use healthroute_api::{CheckType, HealthCheckSpec, ObjectKey, PeerTarget, RecordGroupSpec};

/// Seconds between two exchanges with a peer from one checker: faster than a probe's default
/// (30 s), since a peer's answer already folds in its own checks.
pub const PEER_CHECK_INTERVAL_SECONDS: u32 = 10;

/// The check that asks `target`'s peer (X4).
pub fn check_spec(target: &PeerTarget) -> HealthCheckSpec {
    HealthCheckSpec {
        check_type: CheckType::Peer,
        target: None,
        search_string: None,
        request_interval_seconds: PEER_CHECK_INTERVAL_SECONDS,
        failure_threshold: 3,
        connect_timeout_seconds: None,
        response_timeout_seconds: 2,
        healthy_checker_percent: 18,
        inverted: false,
        disabled: false,
        calculated: None,
        metric: None,
        peer: Some(target.clone()),
    }
}

/// The Peer checks the given groups' records need, by key, each with the groups that need it
/// (for the operator's owner references).
pub fn derived_checks<'a>(
    groups: impl IntoIterator<Item = (&'a ObjectKey, &'a RecordGroupSpec)>,
) -> BTreeMap<ObjectKey, (HealthCheckSpec, Vec<ObjectKey>)> {
    let mut out: BTreeMap<ObjectKey, (HealthCheckSpec, Vec<ObjectKey>)> = BTreeMap::new();
    for (group, spec) in groups {
        for target in spec.records.iter().filter_map(|r| r.peer.as_ref()) {
            let entry = out
                .entry(group.sibling(&target.check_name()))
                .or_insert_with(|| (check_spec(target), Vec::new()));
            if !entry.1.contains(group) {
                entry.1.push(group.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::testing::*;
    use crate::{CheckInput, CheckerView, Compiler};
    use healthroute_api::{FailoverRole, RecordSpec, RoutingPolicy};

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
            values: values.iter().map(|v| v.to_string()).collect(),
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

    fn set_check(c: &mut Compiler, name: &str, healthy: bool) {
        let mut input = CheckInput::new(mk_check(name));
        input.views = vec![mk_view("checker-a", healthy)];
        c.upsert_check(key(name), input);
        c.set_heartbeat("checker-a", t0());
    }

    /// Each distinct answer of `group` over `draws` picks, with its share.
    fn shares(c: &Compiler, group: &str, draws: usize) -> BTreeMap<String, f64> {
        let table = c.table();
        let g = table
            .groups
            .get(key(group).to_string().as_str())
            .unwrap_or_else(|| panic!("{group} is not served"));
        let mut rng = fastrand::Rng::with_seed(7);
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
        s.into_keys().next().expect("one answer")
    }

    fn last_resort(c: &Compiler, group: &str) -> bool {
        c.outcome(&key(group)).expect("compiled").last_resort()
    }

    fn peer_record(id: &str, cluster: &str, group: &str) -> RecordSpec {
        RecordSpec {
            values: None,
            peer: Some(PeerTarget {
                cluster: cluster.into(),
                record_group: group.into(),
            }),
            ..mk_record(id, &[])
        }
    }

    // SEM-X4: one Peer check per peer target and namespace, shared by the groups naming it.
    #[test]
    fn one_check_per_peer_target_and_namespace() {
        let a = mk_group(
            "a",
            RoutingPolicy::Weighted,
            vec![
                peer_record("eu", "eu-west", "shop/api"),
                peer_record("us", "us-east", "shop/api"),
            ],
        );
        let b = mk_group(
            "b",
            RoutingPolicy::Simple,
            vec![peer_record("eu", "eu-west", "shop/api")],
        );
        let (ka, kb, kc) = (
            ObjectKey::new("t", "a"),
            ObjectKey::new("t", "b"),
            ObjectKey::new("u", "b"),
        );
        let checks = derived_checks([(&ka, &a), (&kb, &b), (&kc, &b)]);
        let keys: Vec<String> = checks.keys().map(|k| k.to_string()).collect();
        assert_eq!(
            keys,
            [
                "t/peer.eu-west.shop.api",
                "t/peer.us-east.shop.api",
                "u/peer.eu-west.shop.api"
            ]
        );
        let (spec, owners) = &checks[&ObjectKey::new("t", "peer.eu-west.shop.api")];
        assert_eq!(spec.check_type, CheckType::Peer);
        assert_eq!(owners, &[ka.clone(), kb.clone()]);
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
                        peer_record("there", "eu-west", "shop/api"),
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
        for (local, peer, want, lr) in [
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
            assert_eq!(last_resort(&c, "www"), lr);
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
                    weighted(peer_record("there", "eu-west", "shop/api"), 75),
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
                    peer_record("there", "eu-west", "shop/api"),
                ],
            )),
        );
        set_check(&mut c, "hc-here", false);
        set_peer(&mut c, vec![heard("checker-a", false, &["A 198.51.100.7"])]);
        c.compile(t0());
        assert!(last_resort(&c, "api"));
        assert_eq!(answer(&c, "api"), "192.0.2.1,198.51.100.7");
        set_peer(&mut c, vec![heard("checker-a", false, &[])]);
        c.compile(t0());
        assert!(last_resort(&c, "api"));
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
                vec![peer_record("there", "eu-west", "shop/api")],
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
        assert!(!last_resort(&c, "api"));
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
                        peer_record("there", "eu-west", "shop/api"),
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
}
