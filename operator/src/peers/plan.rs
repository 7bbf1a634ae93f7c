//! What the leader wants on the server for peer sources, as pure functions over the index:
//! the Peer checks the RecordGroups need ([`Desired`]) and the writes that bring the watched
//! HealthChecks there ([`plan`]), each a typed [`HealthCheck`]. No client, no `.await`: the
//! one writer ([`crate::writes`]) sends the writes.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::writes::PeerWrite;
use healthroute_api::{HealthCheck, HealthCheckSpec, RecordGroup, RecordGroupSpec};
use healthroute_compiler::ObjectKey;
use healthroute_compiler::peer::derived_checks;

/// The label on every HealthCheck the operator creates for a peer source. A check of the
/// same name without it is the user's: the operator neither changes nor deletes it.
pub const PEER_CHECK_LABEL: &str = "healthroute.io/peer-check";

/// A RecordGroup that needs a Peer check: the check's owner, so that garbage collection
/// removes the check with the last group that names it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Owner {
    pub name: String,
    pub uid: String,
}

/// One Peer check as the leader wants it.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredCheck {
    pub spec: HealthCheckSpec,
    /// Sorted by name; groups the API server has not given a uid yet are left out.
    pub owners: Vec<Owner>,
}

/// The Peer checks the groups' records need (SEMANTICS X4), by key, with their owners, kept up
/// to date one group at a time: a group's change derives again only the checks that group
/// needed or needs ([`Desired::group_changed`]), not every group's (at 100,000 groups the
/// whole derivation took 10 ms). The specs are read back from whoever keeps them (the
/// compiler), the uids from the index: this keeps only keys.
#[derive(Debug, Default)]
pub struct Desired {
    /// The checks each group needs; groups that name no peer are absent.
    needs: BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
    /// The groups that need each check (never an empty set).
    needed_by: BTreeMap<ObjectKey, BTreeSet<ObjectKey>>,
    checks: BTreeMap<ObjectKey, DesiredCheck>,
}

impl Desired {
    /// From every group's spec; `uid` finds a group's uid by its key.
    pub fn of<'a>(
        specs: impl IntoIterator<Item = (&'a ObjectKey, &'a RecordGroupSpec)>,
        uid: impl Fn(&ObjectKey) -> Option<String>,
    ) -> Self {
        let mut desired = Desired::default();
        for (check, (spec, needed_by)) in derived_checks(specs) {
            let needed_by: BTreeSet<ObjectKey> = needed_by.into_iter().collect();
            for group in &needed_by {
                desired
                    .needs
                    .entry(group.clone())
                    .or_default()
                    .insert(check.clone());
            }
            let owners = owners(&needed_by, &uid);
            desired
                .checks
                .insert(check.clone(), DesiredCheck { spec, owners });
            desired.needed_by.insert(check, needed_by);
        }
        desired
    }

    pub fn checks(&self) -> &BTreeMap<ObjectKey, DesiredCheck> {
        &self.checks
    }

    /// One group changed (its spec, its uid) or is gone (`spec` finds it no more): the checks
    /// it needed and those it needs now are derived again.
    pub fn group_changed<'s>(
        &mut self,
        group: &ObjectKey,
        spec: impl Fn(&ObjectKey) -> Option<&'s RecordGroupSpec>,
        uid: impl Fn(&ObjectKey) -> Option<String>,
    ) {
        let now: BTreeSet<ObjectKey> = spec(group)
            .map(|s| derived_checks([(group, s)]).into_keys().collect())
            .unwrap_or_default();
        let before = match now.is_empty() {
            true => self.needs.remove(group),
            false => self.needs.insert(group.clone(), now.clone()),
        }
        .unwrap_or_default();
        for check in before.difference(&now) {
            if let Some(by) = self.needed_by.get_mut(check) {
                by.remove(group);
            }
        }
        for check in &now {
            self.needed_by
                .entry(check.clone())
                .or_default()
                .insert(group.clone());
        }
        for check in before.union(&now) {
            self.derive(check.clone(), &spec, &uid);
        }
    }

    /// One check from the groups that need it: the spec of the first (as [`derived_checks`]
    /// takes it), every one with a uid as an owner.
    fn derive<'s>(
        &mut self,
        check: ObjectKey,
        spec: impl Fn(&ObjectKey) -> Option<&'s RecordGroupSpec>,
        uid: impl Fn(&ObjectKey) -> Option<String>,
    ) {
        let Some((groups, first)) = self
            .needed_by
            .get(&check)
            .and_then(|g| Some((g, g.first()?)))
        else {
            self.needed_by.remove(&check);
            self.checks.remove(&check);
            return;
        };
        let Some((check_spec, _)) =
            spec(first).and_then(|s| derived_checks([(first, s)]).remove(&check))
        else {
            // Only when `spec` disagrees with the changes this was told of.
            self.checks.remove(&check);
            return;
        };
        let owners = owners(groups, &uid);
        self.checks.insert(
            check,
            DesiredCheck {
                spec: check_spec,
                owners,
            },
        );
    }
}

/// The owners of a check needed by `groups`: each with a uid, sorted.
fn owners(groups: &BTreeSet<ObjectKey>, uid: impl Fn(&ObjectKey) -> Option<String>) -> Vec<Owner> {
    let mut owners: Vec<Owner> = groups
        .iter()
        .filter_map(|g| {
            Some(Owner {
                name: g.name.to_string(),
                uid: uid(g)?,
            })
        })
        .collect();
    owners.sort();
    owners
}

/// Whether the operator created this check (and so may change or delete it).
pub fn is_operators(check: &HealthCheck) -> bool {
    check
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(PEER_CHECK_LABEL))
        .is_some_and(|v| v == "true")
}

/// The writes that bring the watched checks to `desired`: a missing check, or one of the
/// operator's that differs (spec, owners; compared typed), is applied; one of the operator's
/// that no group needs is deleted; a check of that name the user made (no label) is used as it
/// is.
pub fn plan(
    desired: &BTreeMap<ObjectKey, DesiredCheck>,
    checks: &BTreeMap<ObjectKey, HealthCheck>,
) -> Vec<PeerWrite> {
    let mut writes = Vec::new();
    for (key, want) in desired {
        let up_to_date = match checks.get(key) {
            None => false,
            Some(seen) if !is_operators(seen) => true, // the user's: left alone
            Some(seen) => seen.spec == want.spec && owners_of(seen) == want.owners,
        };
        if !up_to_date {
            writes.push(PeerWrite::Apply {
                key: key.clone(),
                check: Box::new(desired_check(key, want)),
            });
        }
    }
    for (key, seen) in checks {
        if is_operators(seen) && !desired.contains_key(key) {
            writes.push(PeerWrite::Delete {
                key: key.clone(),
                uid: seen.metadata.uid.clone(),
            });
        }
    }
    writes
}

/// The RecordGroup owners a watched check names, sorted as [`Desired`] sorts them.
fn owners_of(check: &HealthCheck) -> Vec<Owner> {
    let kind = RecordGroup::kind(&());
    let mut owners: Vec<Owner> = check
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.kind == kind)
        .map(|o| Owner {
            name: o.name.clone(),
            uid: o.uid.clone(),
        })
        .collect();
    owners.sort();
    owners
}

/// The check as the leader wants it: its label, its owners and its spec. `blockOwnerDeletion`
/// is not set: it would need rights on the groups' finalizers, and a group's deletion has
/// nothing to wait for.
fn desired_check(key: &ObjectKey, want: &DesiredCheck) -> HealthCheck {
    let mut check = HealthCheck::new(&key.name, want.spec.clone());
    check.metadata.namespace = Some(key.namespace.to_string());
    check
        .labels_mut()
        .insert(PEER_CHECK_LABEL.into(), "true".into());
    check.metadata.owner_references = Some(
        want.owners
            .iter()
            .map(|o| OwnerReference {
                api_version: RecordGroup::api_version(&()).into_owned(),
                kind: RecordGroup::kind(&()).into_owned(),
                name: o.name.clone(),
                uid: o.uid.clone(),
                ..OwnerReference::default()
            })
            .collect(),
    );
    check
}

#[cfg(test)]
mod tests {
    use serde_json::{Value as Json, json};

    use super::*;

    /// The Peer checks of `groups`, derived from all of them.
    fn desired(groups: &BTreeMap<ObjectKey, RecordGroup>) -> BTreeMap<ObjectKey, DesiredCheck> {
        Desired::of(groups.iter().map(|(k, g)| (k, &g.spec)), |key| {
            groups.get(key)?.metadata.uid.clone()
        })
        .checks
    }

    fn group(name: &str, uid: Option<&str>, peers: &[(&str, &str)]) -> RecordGroup {
        let records: Vec<Json> = peers
            .iter()
            .enumerate()
            .map(|(i, (cluster, rg))| {
                json!({"setIdentifier": format!("p{i}"), "peer": {"cluster": cluster, "recordGroup": rg}})
            })
            .chain(std::iter::once(
                json!({"setIdentifier": "own", "values": ["192.0.2.1"]}),
            ))
            .collect();
        serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
            "metadata": {"name": name, "namespace": "shop", "uid": uid},
            "spec": {"name": format!("{name}.example.com."), "type": "A", "routingPolicy": "Weighted",
                     "records": records}
        }))
        .expect("valid group")
    }

    fn groups(list: Vec<RecordGroup>) -> BTreeMap<ObjectKey, RecordGroup> {
        list.into_iter()
            .map(|g| {
                (
                    ObjectKey::new("shop", g.metadata.name.clone().unwrap_or_default()),
                    g,
                )
            })
            .collect()
    }

    /// The check as the API server would hold it after `write` was applied.
    fn applied(write: &PeerWrite, uid: &str) -> (ObjectKey, HealthCheck) {
        let PeerWrite::Apply { key, check } = write else {
            panic!("not an apply: {write:?}");
        };
        let mut check = check.as_ref().clone();
        check.metadata.uid = Some(uid.into());
        (key.clone(), check)
    }

    /// The body of an apply as the writer sends it: the typed check, encoded.
    fn sent_body(write: &PeerWrite) -> Json {
        let PeerWrite::Apply { check, .. } = write else {
            panic!("an apply: {write:?}");
        };
        serde_json::to_value(check.as_ref()).expect("encodes")
    }

    const CHECK: &str = "peer.west.shop.api";

    // SEM-X4: one check per peer target and namespace, owned by every group that names it;
    // once applied nothing is written again; a group that stops naming it leaves the owners,
    // and the last one's going deletes it (by uid).
    #[test]
    fn each_needed_check_is_applied_with_its_owners_and_deleted_when_unneeded() {
        let mut gs = groups(vec![
            group("a", Some("uid-a"), &[("west", "shop/api")]),
            group("b", Some("uid-b"), &[("west", "shop/api")]),
        ]);
        let want = desired(&gs);
        let key = ObjectKey::new("shop", CHECK);
        assert_eq!(want.keys().collect::<Vec<_>>(), [&key]);
        let writes = plan(&want, &BTreeMap::new());
        assert_eq!(writes.len(), 1);
        let body = sent_body(&writes[0]);
        assert_eq!(body["metadata"]["labels"][PEER_CHECK_LABEL], "true");
        assert_eq!(body["spec"]["type"], "Peer");
        assert_eq!(
            body["spec"]["peer"],
            json!({"cluster": "west", "recordGroup": "shop/api"})
        );
        let owners = &body["metadata"]["ownerReferences"];
        assert_eq!(
            owners,
            &json!([
                {"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "name": "a", "uid": "uid-a"},
                {"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "name": "b", "uid": "uid-b"},
            ])
        );
        // The body the JSON-built writer sent, field for field (the same fields owned).
        assert_eq!(
            body,
            json!({
                "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
                "metadata": {"name": CHECK, "namespace": "shop",
                             "labels": {PEER_CHECK_LABEL: "true"}, "ownerReferences": owners},
                "spec": want[&key].spec,
            })
        );

        let mut checks: BTreeMap<_, _> = [applied(&writes[0], "uid-check")].into();
        assert_eq!(plan(&want, &checks), [], "applied as wanted: nothing to do");

        gs.insert(ObjectKey::new("shop", "b"), group("b", Some("uid-b"), &[]));
        let want = desired(&gs);
        let writes = plan(&want, &checks);
        assert_eq!(writes.len(), 1);
        let body = sent_body(&writes[0]);
        assert_eq!(body["metadata"]["ownerReferences"][0]["name"], "a");
        assert_eq!(
            body["metadata"]["ownerReferences"].as_array().map(Vec::len),
            Some(1)
        );
        checks = [applied(&writes[0], "uid-check")].into();

        gs.remove(&ObjectKey::new("shop", "a"));
        assert_eq!(
            plan(&desired(&gs), &checks),
            [PeerWrite::Delete {
                key,
                uid: Some("uid-check".into())
            }]
        );
    }

    // SEM-X4: a check of that name the user made (no label) is used as it is: never applied
    // over, never deleted; other checks are none of the planner's business.
    #[test]
    fn a_users_check_of_that_name_is_left_alone() {
        let gs = groups(vec![group("a", Some("uid-a"), &[("west", "shop/api")])]);
        let user: HealthCheck = serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
            "metadata": {"name": CHECK, "namespace": "shop", "uid": "u1"},
            "spec": {"type": "Peer", "peer": {"cluster": "west", "recordGroup": "shop/api"},
                     "requestIntervalSeconds": 30, "failureThreshold": 5}
        }))
        .expect("valid");
        let other: HealthCheck = serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
            "metadata": {"name": "web", "namespace": "shop", "uid": "u2"},
            "spec": {"type": "TCP", "target": {"address": "192.0.2.1", "port": 80}}
        }))
        .expect("valid");
        let checks: BTreeMap<_, _> = [
            (ObjectKey::new("shop", CHECK), user.clone()),
            (ObjectKey::new("shop", "web"), other),
        ]
        .into();
        assert_eq!(plan(&desired(&gs), &checks), []);
        assert_eq!(
            plan(&BTreeMap::new(), &checks),
            [],
            "nor deleted when unneeded"
        );
    }

    // SEM-X4: kept one group at a time, the checks are those derived from every group, after
    // each of: a group that names peers, another that shares one, a target changed, a group
    // deleted and created again (a new uid: a new owner), a group that names none, and the
    // last owner gone.
    #[test]
    fn checks_kept_one_group_at_a_time_are_those_derived_from_every_group() {
        type Step = (
            &'static str,
            Option<(&'static str, &'static [(&'static str, &'static str)])>,
        );
        let steps: [Step; 8] = [
            (
                "a",
                Some(("uid-a", &[("west", "shop/api"), ("east", "shop/api")])),
            ),
            ("b", Some(("uid-b", &[("west", "shop/api")]))),
            ("c", Some(("uid-c", &[]))),
            ("a", Some(("uid-a", &[("east", "shop/web")]))),
            ("b", Some(("uid-b2", &[("west", "shop/api")]))),
            ("b", None),
            ("a", Some(("uid-a", &[]))),
            (
                "c",
                Some(("uid-c", &[("west", "shop/api"), ("west", "shop/api")])),
            ),
        ];
        let mut gs = BTreeMap::new();
        let mut kept = Desired::default();
        for (at, (name, change)) in steps.into_iter().enumerate() {
            let key = ObjectKey::new("shop", name);
            match change {
                Some((uid, peers)) => gs.insert(key.clone(), group(name, Some(uid), peers)),
                None => gs.remove(&key),
            };
            kept.group_changed(
                &key,
                |k| gs.get(k).map(|g: &RecordGroup| &g.spec),
                |k| gs.get(k)?.metadata.uid.clone(),
            );
            assert_eq!(kept.checks(), &desired(&gs), "after step {at}");
        }
        let check = &kept.checks()[&ObjectKey::new("shop", CHECK)];
        assert_eq!(
            check.owners,
            [Owner {
                name: "c".into(),
                uid: "uid-c".into()
            }]
        );
        assert_eq!(kept.checks().len(), 1, "shop/web's check went with a");
        assert!(kept.needs.keys().eq([&ObjectKey::new("shop", "c")]));
    }

    // A group the API server has not given a uid yet (only in tests and in-memory inputs)
    // cannot be an owner; the check is still wanted.
    #[test]
    fn owners_without_a_uid_are_left_out() {
        let gs = groups(vec![group("a", None, &[("west", "shop/api")])]);
        let want = desired(&gs);
        assert_eq!(want.values().next().map(|c| c.owners.len()), Some(0));
    }
}
