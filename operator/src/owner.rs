//! What owns the objects the operator makes at runtime in the release namespace (SEMANTICS
//! P13): the operator's ServiceAccount, an object the chart makes. The table's ConfigMaps and
//! the leader Lease name it in their `ownerReferences`, so that the garbage collector removes
//! them with the release, whether or not its hooks run (`helm template`, GitOps).
//!
//! ```text
//!  --owner-service-account (the chart: the pod's own, by the downward API)
//!      ──GET at each term's start──▶ OwnerReference (uid) ──▶ each table ConfigMap's apply
//!                                                        └──▶ the leader Lease (its owner only)
//! ```
//!
//! A ServiceAccount rather than the Deployment: it is never recreated by an upgrade, and the
//! pods cannot run without it. No `controller` (the account controls nothing) and no
//! `blockOwnerDeletion` (that would need rights on the account's finalizers, and nothing
//! waits for these objects to go).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};

/// The field manager of the leader Lease's `ownerReferences` (the election owns its spec).
pub const OWNER_FIELD_MANAGER: &str = "healthroute-operator/owner";

/// The owner reference to `account`; `None` before the API server gave it a uid.
pub fn reference(account: &ServiceAccount) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: ServiceAccount::api_version(&()).into_owned(),
        kind: ServiceAccount::kind(&()).into_owned(),
        name: account.name_any(),
        uid: account.metadata.uid.clone()?,
        controller: None,
        block_owner_deletion: None,
    })
}

/// Whether `meta` names `owner` (by uid) among its owners.
pub fn owned_by(meta: &ObjectMeta, owner: &OwnerReference) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == owner.uid)
}

/// The ServiceAccount `name` in `namespace` as an owner: `Ok(None)` when it does not exist or
/// may not be read (the caller writes without an owner and says so); other errors as they are.
pub async fn resolve(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<OwnerReference>, kube::Error> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    match api.get(name).await {
        Ok(account) => Ok(reference(&account)),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 403 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Gives the Lease `name` the owner `owner`: a server-side apply of its `ownerReferences`
/// alone, under [`OWNER_FIELD_MANAGER`], so that the election's fields are not touched.
pub async fn adopt_lease(
    client: &Client,
    namespace: &str,
    name: &str,
    owner: &OwnerReference,
) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), namespace);
    api.patch(
        name,
        &PatchParams::apply(OWNER_FIELD_MANAGER).force(),
        &Patch::Apply(owner_only(name, owner)),
    )
    .await
    .map(|_| ())
}

/// The Lease `name` with `owner` and nothing else (no spec): the body of [`adopt_lease`].
fn owner_only(name: &str, owner: &OwnerReference) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        spec: None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // SEM-P13: the Lease's adoption claims its owner and nothing of the election's.
    #[test]
    fn a_lease_is_adopted_by_its_owner_alone() {
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "ServiceAccount".into(),
            name: "hr-operator".into(),
            uid: "uid-sa".into(),
            ..OwnerReference::default()
        };
        assert_eq!(
            serde_json::to_value(owner_only("healthroute-operator", &owner)).expect("json"),
            json!({
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": "healthroute-operator", "ownerReferences": [owner]},
            })
        );
    }

    // SEM-P13: the reference names the account by its uid, as a plain owner: not a controller,
    // and blocking nothing.
    #[test]
    fn the_reference_is_the_accounts_uid_and_nothing_more() {
        let mut account: ServiceAccount = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": {"name": "hr-operator", "namespace": "healthroute"}
        }))
        .expect("valid");
        assert_eq!(reference(&account), None, "no uid yet: no owner");
        account.metadata.uid = Some("uid-sa".into());
        let owner = reference(&account).expect("an owner");
        assert_eq!(
            serde_json::to_value(&owner).expect("json"),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "name": "hr-operator", "uid": "uid-sa"})
        );
        let mut meta = ObjectMeta::default();
        assert!(!owned_by(&meta, &owner));
        meta.owner_references = Some(vec![OwnerReference {
            uid: "uid-old".into(),
            ..owner.clone()
        }]);
        assert!(
            !owned_by(&meta, &owner),
            "an account made again is another owner"
        );
        meta.owner_references = Some(vec![owner.clone()]);
        assert!(owned_by(&meta, &owner));
    }
}
