//! Uninstalling on a real API server (SEMANTICS P13), whose kube-controller-manager runs the
//! garbage collector and the Deployment controller (no kubelet: pods never start).
//!
//!   HEALTHROUTE_TEST_KUBECONFIG=~/.kube/config cargo test -p healthroute-operator --test live_uninstall -- --include-ignored --nocapture
//!
//! The operator runs in this process (as the kubeconfig's user), with the owner ServiceAccount
//! of the chart; `uninstall` runs as that ServiceAccount (impersonated), with exactly the
//! rights `rbac::OPERATOR` lists (the chart's Roles are tested against the same list), so a
//! call it makes without a right fails here.

use std::time::{Duration, Instant};

use healthroute_api::{HealthCheck, RecordGroup, ZonalAutoshift, ZonalShift};
use healthroute_compiler::ServedZones;
use healthroute_operator::controller::{self, Config};
use healthroute_operator::uninstall::{self, Settings};
use healthroute_table::published::TABLE_LABEL;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::{Value as Json, json};

const LIVE: &str =
    "needs a live API server (HEALTHROUTE_TEST_KUBECONFIG), run with --include-ignored";
const ACCOUNT: &str = "hr-operator";

async fn config() -> kube::Config {
    let path = std::env::var("HEALTHROUTE_TEST_KUBECONFIG")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| panic!("HEALTHROUTE_TEST_KUBECONFIG is not set: {LIVE}"));
    let kubeconfig = Kubeconfig::read_from(&path).expect("readable kubeconfig");
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("usable kubeconfig")
}

fn apply() -> PatchParams {
    PatchParams::apply("healthroute-live-test").force()
}

async fn put<K>(api: &Api<K>, name: &str, body: Json)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(name, &apply(), &Patch::Apply(body))
        .await
        .unwrap_or_else(|e| panic!("{name}: {e}"));
}

async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> F,
) -> Duration {
    let started = Instant::now();
    while started.elapsed() < within {
        if f().await {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn names<K>(api: &Api<K>, selector: &str) -> Vec<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut names: Vec<String> = api
        .list(&ListParams::default().labels(selector))
        .await
        .expect("list")
        .items
        .iter()
        .map(|o| o.name_any())
        .collect();
    names.sort();
    names
}

/// The operator of the chart in `ns`, in this process: the leader (by a channel), the table
/// owned by `ACCOUNT`; stopped by the returned sender.
fn operator(
    client: &Client,
    ns: &str,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<()>,
) {
    let (leader_tx, leader) = tokio::sync::watch::channel(true);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut config = Config::new(ns, ServedZones::new(["live.example."]).expect("zone"));
    config.shards = 2;
    config.watch_namespace = Some(ns.to_owned());
    config.owner_service_account = Some(ACCOUNT.into());
    let client = client.clone();
    let task = tokio::spawn(async move {
        controller::run(
            client,
            config,
            leader,
            Default::default(),
            Default::default(),
            stop,
        )
        .await;
        drop(leader_tx);
    });
    (stop_tx, task)
}

/// The rights of `rbac::OPERATOR` for `ACCOUNT` of `ns`: a ClusterRole and a Role, bound.
async fn grant_operator_rights(client: &Client, ns: &str) -> String {
    let name = format!("healthroute-live-uninstall-{}", std::process::id());
    let rules = |cluster: bool| -> Vec<Json> {
        healthroute_operator::rbac::OPERATOR
            .iter()
            .filter(|a| a.cluster == cluster)
            .map(|a| json!({"apiGroups": [a.api_group], "resources": [a.resource], "verbs": a.verbs}))
            .collect()
    };
    let subject = json!([{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": ns}]);
    put(
        &Api::<ClusterRole>::all(client.clone()),
        &name,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name}, "rules": rules(true)}),
    )
    .await;
    put(
        &Api::<ClusterRoleBinding>::all(client.clone()),
        &name,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name}, "subjects": subject,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name}}),
    )
    .await;
    put(
        &Api::<Role>::namespaced(client.clone(), ns),
        "operator",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": "operator"}, "rules": rules(false)}),
    )
    .await;
    put(
        &Api::<RoleBinding>::namespaced(client.clone(), ns),
        "operator",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "operator"}, "subjects": subject,
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "operator"}}),
    )
    .await;
    name
}

// SEM-P13 SEM-X4 SEM-AS13: on a real API server: the table the operator publishes, and the
// leader Lease, are owned by its ServiceAccount; `uninstall`, as that account with the
// operator's rights, stops the operator (its Deployment scaled to 0; nothing removed before
// the leader released its Lease), deletes the derived Peer check, the engine-shift mirror,
// the table, the leader Lease and a gone pod's checker Lease, keeps the users' check and
// shift, and marks the group not served, all checked by listing; a second run writes nothing.
// Then, published again, the table and the leader Lease go with the ServiceAccount alone (the
// garbage collector: an uninstall without hooks).
#[tokio::test]
#[ignore = "needs a live API server (HEALTHROUTE_TEST_KUBECONFIG), run with --include-ignored"]
async fn live_uninstall_removes_what_healthroute_made() {
    let config = config().await;
    let client = Client::try_from(config.clone()).expect("client");
    let ns = format!("healthroute-live-uninstall-{}", std::process::id());
    for crd in [
        HealthCheck::crd(),
        RecordGroup::crd(),
        ZonalShift::crd(),
        ZonalAutoshift::crd(),
    ] {
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(&crd.name_any(), &apply(), &Patch::Apply(&crd))
            .await
            .expect("CRD applies");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    put(
        &Api::<Namespace>::all(client.clone()),
        &ns,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
    )
    .await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &ns);
    put(
        &accounts,
        ACCOUNT,
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}}),
    )
    .await;
    let account_uid = accounts
        .get(ACCOUNT)
        .await
        .expect("account")
        .uid()
        .expect("uid");
    let cluster_rbac = grant_operator_rights(&client, &ns).await;
    // The chart's operator Deployment (its pods never run here: no kubelet).
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    put(&deployments, ACCOUNT, json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": ACCOUNT},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "hr-operator"}},
                 "template": {"metadata": {"labels": {"app": "hr-operator"}},
                              "spec": {"serviceAccountName": ACCOUNT,
                                       "containers": [{"name": "operator", "image": "healthroute:live"}]}}}
    })).await;

    // What the users made: a group that names a peer (the operator derives its Peer check), a
    // check of their own, a ZonalAutoshift and a shift of their own.
    let groups: Api<RecordGroup> = Api::namespaced(client.clone(), &ns);
    put(&groups, "api", json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "metadata": {"name": "api"},
        "spec": {"name": "api.live.example.", "type": "A", "routingPolicy": "Weighted",
                 "records": [{"setIdentifier": "own", "weight": 1, "values": ["192.0.2.1"]},
                             {"setIdentifier": "west", "weight": 1,
                              "peer": {"cluster": "west", "recordGroup": format!("{ns}/api")}}]}
    })).await;
    let checks: Api<HealthCheck> = Api::namespaced(client.clone(), &ns);
    // The user's own check, which uninstall must leave: its target is a loopback listener of
    // this test (no checker runs here, so nothing probes it).
    let target = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    let port = target.local_addr().expect("its address").port();
    put(&checks, "web", json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck", "metadata": {"name": "web"},
        "spec": {"type": "TCP", "target": {"address": "127.0.0.1", "port": port}}
    })).await;
    let autoshifts: Api<ZonalAutoshift> = Api::namespaced(client.clone(), &ns);
    put(&autoshifts, "cfg", json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalAutoshift", "metadata": {"name": "cfg"},
        "spec": {"target": {"recordGroup": "api"}, "autoshift": "Disabled"}
    })).await;
    let autoshift_uid = autoshifts
        .get("cfg")
        .await
        .expect("cfg")
        .uid()
        .expect("uid");
    let shifts: Api<ZonalShift> = Api::namespaced(client.clone(), &ns);
    put(&shifts, "maintenance", json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalShift", "metadata": {"name": "maintenance"},
        "spec": {"awayFrom": "zone-a", "target": {"recordGroup": "api"}, "expiresIn": "1h"}
    })).await;
    // A checker Lease a gone pod left behind (before checker Leases were owned by their Pod).
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    put(&leases, "healthroute-checker-gone", json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "healthroute-checker-gone", "labels": {"healthroute.io/checker": "gone"}},
        "spec": {"holderIdentity": "gone", "renewTime": "2026-01-01T00:00:00.000000Z", "leaseDurationSeconds": 10}
    })).await;

    // The operator publishes, derives the Peer check, serves the group.
    let (stop, task) = operator(&client, &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    wait_until("the table published", Duration::from_secs(20), || async {
        names(&cms, TABLE_LABEL)
            .await
            .contains(&"healthroute-table".to_owned())
    })
    .await;
    wait_until(
        "the Peer check derived",
        Duration::from_secs(20),
        || async {
            names(&checks, "healthroute.io/peer-check=true").await
                == [format!("peer.west.{ns}.api")]
        },
    )
    .await;
    wait_until("the group served", Duration::from_secs(20), || async {
        groups
            .get_status("api")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.served)
    })
    .await;
    for cm in cms
        .list(&ListParams::default().labels(TABLE_LABEL))
        .await
        .expect("list")
        .items
    {
        let owners = cm.owner_references();
        assert!(
            owners.len() == 1 && owners[0].uid == account_uid && owners[0].kind == "ServiceAccount",
            "{}: {owners:?}",
            cm.name_any()
        );
    }
    let leader = leases
        .get(healthroute_operator::LEADER_LEASE)
        .await
        .expect("the leader Lease");
    assert_eq!(leader.owner_references()[0].uid, account_uid);
    println!(
        "published: {} table ConfigMaps, each owned by ServiceAccount {ACCOUNT} ({account_uid}); the leader Lease too",
        names(&cms, TABLE_LABEL).await.len()
    );
    // The leader's hold on its Lease, as kube-lease-manager writes it.
    leases
        .patch(
            healthroute_operator::LEADER_LEASE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": "in-process", "leaseDurationSeconds": 15,
                "renewTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})),
        )
        .await
        .expect("held");

    // An engine's shift as the leader mirrors it (AS13).
    let mirror = json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalShift",
        "metadata": {"name": "cfg-autoshift", "labels": {"healthroute.io/engine-shift": "cfg"},
                     "ownerReferences": [{"apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalAutoshift",
                                          "name": "cfg", "uid": autoshift_uid, "controller": true}]},
        "spec": {"awayFrom": "zone-a", "target": {"recordGroup": "api"}, "expiresIn": "72h"}
    });

    // The operator stops when scaled to 0: its writes end, then it releases the Lease. Until
    // then it runs (and would delete the mirror it does not hold: made here after it stops).
    let stopper = {
        let (deployments, leases, shifts) = (deployments.clone(), leases.clone(), shifts.clone());
        tokio::spawn(async move {
            wait_until("the scale-down", Duration::from_secs(30), || async {
                deployments
                    .get(ACCOUNT)
                    .await
                    .ok()
                    .and_then(|d| d.spec?.replicas)
                    == Some(0)
            })
            .await;
            let _ = stop.send(true);
            let _ = task.await;
            put(&shifts, "cfg-autoshift", mirror).await;
            leases
                .patch(
                    healthroute_operator::LEADER_LEASE,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"holderIdentity": null, "renewTime": null}})),
                )
                .await
                .expect("released");
            Instant::now()
        })
    };

    let mut as_operator = config.clone();
    as_operator.auth_info.impersonate = Some(format!("system:serviceaccount:{ns}:{ACCOUNT}"));
    let operator_client = Client::try_from(as_operator).expect("client");
    let refused = Api::<Namespace>::all(operator_client.clone())
        .list(&ListParams::default())
        .await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403),
        "runs with the operator's rights only: {refused:?}"
    );
    let settings = Settings {
        watch_namespace: Some(ns.clone()),
        operator_deployment: Some(ACCOUNT.into()),
        timeout: 90,
        ..Settings::new(&ns)
    };
    let started = Instant::now();
    let report = uninstall::run(operator_client.clone(), &settings)
        .await
        .expect("uninstalls");
    let took = started.elapsed();
    let released = stopper.await.expect("stopped");
    println!(
        "uninstall: {report} in {} passes, {took:?} (the operator released its Lease {:?} after the start)",
        report.passes,
        released - started
    );
    assert_eq!(report.operator_replicas, 2);
    assert_eq!(
        (
            report.peer_checks,
            report.engine_shifts,
            report.groups_marked
        ),
        (1, 1, 1)
    );
    assert!(report.table_configmaps >= 3, "{report:?}");
    assert_eq!(report.leases, 2, "the leader's and the gone checker's");

    // Checked by listing.
    assert_eq!(names(&checks, "").await, ["web"]);
    assert_eq!(names(&shifts, "").await, ["maintenance"]);
    assert_eq!(names(&cms, TABLE_LABEL).await, Vec::<String>::new());
    assert_eq!(names(&leases, "").await, Vec::<String>::new());
    let status = groups
        .get_status("api")
        .await
        .expect("group")
        .status
        .expect("status");
    assert!(!status.served && status.served_generation.is_none() && status.records.is_empty());
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .expect("Ready");
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "NotServed")
    );
    assert_eq!(
        ready.message,
        "healthroute was uninstalled: no resolver serves this group"
    );
    assert_eq!(status.conditions.len(), 1, "{:?}", status.conditions);
    assert_eq!(
        deployments
            .get(ACCOUNT)
            .await
            .expect("deployment")
            .spec
            .and_then(|s| s.replicas),
        Some(0)
    );
    let again = uninstall::run(operator_client, &settings)
        .await
        .expect("again");
    assert_eq!(
        (
            again.passes,
            again.peer_checks,
            again.groups_marked,
            again.leases
        ),
        (1, 0, 0, 0)
    );
    println!("second run: {again}");

    // Without hooks: the table and the leader Lease go with the ServiceAccount.
    let (stop, task) = operator(&client, &ns);
    wait_until(
        "the table published again",
        Duration::from_secs(20),
        || async {
            names(&cms, TABLE_LABEL)
                .await
                .contains(&"healthroute-table".to_owned())
        },
    )
    .await;
    wait_until(
        "the leader Lease owned",
        Duration::from_secs(20),
        || async {
            leases
                .get_opt(healthroute_operator::LEADER_LEASE)
                .await
                .ok()
                .flatten()
                .is_some_and(|l| !l.owner_references().is_empty())
        },
    )
    .await;
    let _ = stop.send(true);
    let _ = task.await;
    let published = names(&cms, TABLE_LABEL).await.len();
    accounts
        .delete(ACCOUNT, &DeleteParams::default())
        .await
        .expect("account deleted");
    let gc = wait_until("the garbage collector", Duration::from_secs(60), || async {
        names(&cms, TABLE_LABEL).await.is_empty()
            && leases
                .get_opt(healthroute_operator::LEADER_LEASE)
                .await
                .ok()
                .flatten()
                .is_none()
    })
    .await;
    println!(
        "garbage collector: {published} table ConfigMaps and the leader Lease gone {gc:?} after their ServiceAccount"
    );

    let _ = Api::<ClusterRoleBinding>::all(client.clone())
        .delete(&cluster_rbac, &DeleteParams::default())
        .await;
    let _ = Api::<ClusterRole>::all(client.clone())
        .delete(&cluster_rbac, &DeleteParams::default())
        .await;
    let _ = Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await;
}
