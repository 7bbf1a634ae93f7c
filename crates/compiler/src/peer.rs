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
    use super::*;
    use crate::testing::{mk_group, mk_peer_record};
    use healthroute_api::RoutingPolicy;

    // SEM-X4: one Peer check per peer target and namespace, shared by the groups naming it.
    #[test]
    fn one_check_per_peer_target_and_namespace() {
        let a = mk_group(
            "a",
            RoutingPolicy::Weighted,
            vec![
                mk_peer_record("eu", "eu-west", "shop/api"),
                mk_peer_record("us", "us-east", "shop/api"),
            ],
        );
        let b = mk_group(
            "b",
            RoutingPolicy::Simple,
            vec![mk_peer_record("eu", "eu-west", "shop/api")],
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
}
