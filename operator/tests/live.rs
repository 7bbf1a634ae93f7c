//! Against a real API server: runs when HEALTHROUTE_TEST_KUBECONFIG names a kubeconfig, and
//! is skipped with a printed reason otherwise. Run before a release:
//!
//!   HEALTHROUTE_TEST_KUBECONFIG=~/.kube/config cargo test -p healthroute-operator --test live -- --nocapture

use std::time::Duration;

use healthroute_operator::api::{HealthCheck, RecordGroup, ZonalShift};
use healthroute_operator::compiler::ServedZones;
use healthroute_operator::controller::{self, Config};
use healthroute_table::published::{Assembler, DATA_KEY, MANIFEST, TABLE_LABEL};
use healthroute_table::{RoutingTable, Value};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::json;

async fn client() -> Option<Client> {
    let Ok(path) = std::env::var("HEALTHROUTE_TEST_KUBECONFIG") else {
        eprintln!(
            "skipped: HEALTHROUTE_TEST_KUBECONFIG is not set (these tests need a live API server)"
        );
        return None;
    };
    let kubeconfig = Kubeconfig::read_from(&path).expect("readable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("usable kubeconfig");
    Some(Client::try_from(config).expect("client"))
}

fn apply() -> PatchParams {
    PatchParams::apply("healthroute-live-test").force()
}

async fn published(client: &Client, ns: &str) -> Option<RoutingTable<Value>> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let list = cms
        .list(&ListParams::default().labels(TABLE_LABEL))
        .await
        .ok()?;
    let mut a = Assembler::default();
    for cm in list.items {
        let data = cm.data.as_ref()?.get(DATA_KEY)?.clone();
        if cm.labels().get(TABLE_LABEL).map(String::as_str) == Some(MANIFEST) {
            a.set_manifest(data.as_bytes()).ok()?;
        } else {
            a.set_shard(data.as_bytes()).ok()?;
        }
    }
    a.assemble().ok().flatten()
}

async fn wait_for<F: std::future::Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
    for _ in 0..100 {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("timed out waiting for {what}");
}

// SEM-P1 SEM-H11 SEM-Z4: CRDs apply; a RecordGroup over a Service is published; a pod's
// readiness flip and a zonal shift (start, cancel) reach the table and the statuses.
#[tokio::test]
async fn live_cluster_round_trip() {
    let Some(client) = client().await else { return };
    let ns = format!("healthroute-live-{}", std::process::id());
    for crd in [HealthCheck::crd(), RecordGroup::crd(), ZonalShift::crd()] {
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(&crd.name_any(), &apply(), &Patch::Apply(&crd))
            .await
            .expect("CRD applies");
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // let the CRDs become established
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns,
            &apply(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ),
        )
        .await
        .expect("namespace");

    // Held until the end: this process is the leader throughout.
    let (_leader_tx, leader) = tokio::sync::watch::channel(true);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut config = Config::new(
        ns.clone(),
        ServedZones::new(["live.example."]).expect("zone"),
    );
    config.shards = 2;
    config.default_ttl = 30;
    let control = tokio::spawn(controller::run(
        client.clone(),
        config,
        leader,
        Default::default(),
        stop,
    ));

    let rgs: Api<RecordGroup> = Api::namespaced(client.clone(), &ns);
    rgs.patch("web", &apply(), &Patch::Apply(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "metadata": {"name": "web"},
        "spec": {"name": "web.live.example.", "type": "A", "routingPolicy": "Simple",
                 "records": [{"setIdentifier": "pods", "service": {"name": "web"}}]}
    }))).await.expect("RecordGroup");
    let slice = |ready_b: bool| {
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [
                {"addresses": ["10.9.0.1"], "conditions": {"ready": true}, "zone": "zone-a"},
                {"addresses": ["10.9.0.2"], "conditions": {"ready": ready_b}, "zone": "zone-b"}
            ]
        })
    };
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), &ns);
    slices
        .patch("web-1", &apply(), &Patch::Apply(slice(true)))
        .await
        .expect("slice");
    let key = format!("{ns}/web");
    let values = |t: &RoutingTable<Value>| {
        t.groups
            .get(key.as_str())
            .map(|g| format!("{:?}", g.selection))
            .unwrap_or_default()
    };
    wait_for("both endpoints published", || async {
        published(&client, &ns)
            .await
            .is_some_and(|t| values(&t).contains("10.9.0.1") && values(&t).contains("10.9.0.2"))
    })
    .await;
    slices
        .patch("web-1", &apply(), &Patch::Apply(slice(false)))
        .await
        .expect("slice");
    wait_for("the unready endpoint to leave", || async {
        published(&client, &ns)
            .await
            .is_some_and(|t| !values(&t).contains("10.9.0.2"))
    })
    .await;
    wait_for("the RecordGroup status", || async {
        rgs.get_status("web")
            .await
            .ok()
            .and_then(|g| g.status)
            .is_some_and(|s| s.served)
    })
    .await;

    let shifts: Api<ZonalShift> = Api::namespaced(client.clone(), &ns);
    slices
        .patch("web-1", &apply(), &Patch::Apply(slice(true)))
        .await
        .expect("slice");
    shifts.patch("drain-a", &apply(), &Patch::Apply(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalShift", "metadata": {"name": "drain-a"},
        "spec": {"awayFrom": "zone-a", "target": {"recordGroup": "web"}, "expiresIn": "1h"}
    }))).await.expect("shift");
    wait_for("the shift to apply", || async {
        published(&client, &ns)
            .await
            .is_some_and(|t| !values(&t).contains("10.9.0.1") && values(&t).contains("10.9.0.2"))
    })
    .await;
    shifts.patch("drain-a", &apply(), &Patch::Apply(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalShift", "metadata": {"name": "drain-a"},
        "spec": {"awayFrom": "zone-a", "target": {"recordGroup": "web"}, "expiresIn": "1h", "cancel": true}
    }))).await.expect("cancel");
    wait_for("the cancelled shift to end", || async {
        shifts
            .get_status("drain-a")
            .await
            .ok()
            .and_then(|s| s.status)
            .and_then(|s| s.status)
            == Some(healthroute_operator::api::ShiftState::Canceled)
    })
    .await;

    let _ = stop_tx.send(true);
    let _ = control.await;
    let _ = Api::<Namespace>::all(client)
        .delete(&ns, &DeleteParams::default())
        .await;
}
