//! `kubectl healthroute` against a real API server (the CRDs are applied, a namespace is made
//! and removed). Reported as ignored by a plain `cargo test`; run it, daily and before a
//! release, with a kubeconfig:
//!
//!   HEALTHROUTE_TEST_KUBECONFIG=~/.kube/config cargo test -p healthroute-resolver --test plugin_live -- --include-ignored
//!
//! No operator runs here: the commands read and write the objects, and `shift start` says
//! that nobody reported on the shift yet.

use std::time::Duration;

use healthroute_api::{HealthCheck, RecordGroup, ZonalShift};
use healthroute_resolver::tools::plugin::{self, Output, Scope, ShiftTarget};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::json;

async fn client() -> Client {
    let path = std::env::var("HEALTHROUTE_TEST_KUBECONFIG")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            panic!("HEALTHROUTE_TEST_KUBECONFIG is not set: this test needs a live API server")
        });
    let kubeconfig = Kubeconfig::read_from(&path).expect("readable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("usable kubeconfig");
    Client::try_from(config).expect("client")
}

#[tokio::test]
#[ignore = "needs a live API server (HEALTHROUTE_TEST_KUBECONFIG), run with --include-ignored"]
async fn live_plugin_commands() {
    let client = client().await;
    let apply = PatchParams::apply("healthroute-plugin-live").force();
    for crd in [HealthCheck::crd(), RecordGroup::crd(), ZonalShift::crd()] {
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(&crd.name_any(), &apply, &Patch::Apply(&crd))
            .await
            .expect("CRD applies");
    }
    let ns = format!("healthroute-plugin-live-{}", std::process::id());
    let namespaces = Api::<Namespace>::all(client.clone());
    namespaces
        .patch(
            &ns,
            &apply,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ),
        )
        .await
        .expect("namespace");
    // The CRDs may take a moment to be served.
    let groups = Api::<RecordGroup>::namespaced(client.clone(), &ns);
    let group = json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": "api", "namespace": ns},
        "spec": {"name": "api.live.example.", "type": "A", "routingPolicy": "Simple",
                 "records": [{"setIdentifier": "x", "values": ["192.0.2.1"]}]}});
    let mut applied = false;
    for _ in 0..50 {
        if groups
            .patch("api", &apply, &Patch::Apply(&group))
            .await
            .is_ok()
        {
            applied = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(applied, "the RecordGroup applies");

    let scope = Scope::Namespace(ns.clone());
    let status = plugin::status(&client, &scope, &ns, Output::Table)
        .await
        .expect("status");
    assert!(
        status.contains(&format!("{ns}/api")) && status.contains("api.live.example."),
        "{status}"
    );
    let checks = plugin::checks(&client, &scope, Output::Json)
        .await
        .expect("checks");
    assert_eq!(checks.trim(), "[]");
    let explain = plugin::explain(
        &client,
        &ns,
        "api.live.example",
        "A",
        &["live.example".into()],
        None,
        None,
    )
    .await
    .expect("explain");
    assert!(explain.contains("100.00%  192.0.2.1"), "{explain}");

    let started = plugin::shift_start(
        &client,
        &ns,
        "zone-b",
        ShiftTarget::Group("api".into()),
        "30m",
        None,
        Duration::from_secs(1),
    )
    .await
    .expect("start");
    assert!(
        started.contains("created") && started.contains("has not reported"),
        "{started}"
    );
    let list = plugin::shift_list(&client, &scope, Output::Table)
        .await
        .expect("list");
    assert!(list.contains("zone-b"), "{list}");
    let name = Api::<ZonalShift>::namespaced(client.clone(), &ns)
        .list(&Default::default())
        .await
        .expect("shifts")
        .items[0]
        .name_any();
    let too_long = plugin::shift_extend(&client, &ns, &name, "100h", Duration::ZERO).await;
    assert!(too_long.is_err());
    let cancelled = plugin::shift_cancel(&client, &ns, &name)
        .await
        .expect("cancel");
    assert!(cancelled.contains("cancelled"));

    namespaces
        .delete(&ns, &DeleteParams::default())
        .await
        .expect("namespace deleted");
}
