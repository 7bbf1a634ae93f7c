//! The resolver in a cluster: the published table as its source, and its checker writing
//! views and heartbeats.
//!
//! ```text
//!   ConfigMaps (label healthroute.io/table) ──watch──▶ Assembler ──complete, newer set──▶ watch<table>
//!     (manifest, shards, deltas: each event decodes only its own object, P11)      ▲
//!   the leader's pushed deltas (P12) ──push listener, signature verified──────────┘
//!   HealthChecks ──watch──▶ Checker::sync ──views──▶ SSA HealthCheck/status checkers[<me>]
//!                                          └─heartbeat──▶ SSA Lease healthroute-checker-<me>
//!                                               (with the generation this resolver serves,
//!                                                and where the leader pushes deltas)
//! ```
//!
//! The resolver only reads the table (get/list/watch ConfigMaps) and only writes its own
//! status entries and its own Lease, each under its own field manager (P3). When the API
//! server is unreachable it keeps serving the last table it assembled (P2); when it is back,
//! the watches resume within about a second (bounded backoff). The generation it serves only
//! moves forward (P4), and its Lease tells a new operator leader where to continue.

use std::sync::Arc;

use futures::StreamExt;
use healthroute_admin::retry::{Backoff, ErrorLog};
use healthroute_api::{CHECKER_LABEL, SERVED_GENERATION_ANNOTATION};
use healthroute_api::{GROUP, HealthCheck, HealthCheckSpec, VERSION};
use healthroute_checker::{Checker, CheckerEvent};
use healthroute_compiler::ObjectKey;
use healthroute_table::published::{Assembler, DATA_KEY, TABLE_LABEL};
use healthroute_table::push::ADDRESS_ANNOTATION;
use healthroute_table::{RoutingTable, Value};
use hyper::body::Bytes;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::push::PushMetrics;

/// Follows the published table; sends every complete, consistent table, and each pushed
/// delta (P12) that follows the table served.
pub async fn follow_table(
    client: Client,
    namespace: String,
    tables: watch::Sender<Option<Arc<RoutingTable<Value>>>>,
    pushes: Option<(mpsc::Receiver<Bytes>, Arc<PushMetrics>)>,
) {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let mut stream = watcher(api, watcher::Config::default().labels(TABLE_LABEL))
        .backoff(Backoff::watch())
        .boxed();
    let mut assembler = Assembler::default();
    let mut errors = ErrorLog::default();
    let (mut pushed, push_metrics) = match pushes {
        Some((rx, metrics)) => (Some(rx), metrics),
        None => (None, Arc::default()),
    };
    loop {
        let event = tokio::select! {
            event = stream.next() => match event {
                Some(event) => event,
                None => return,
            },
            Some(body) = async { pushed.as_mut()?.recv().await } => {
                take_pushed(&mut assembler, &body, &tables, &push_metrics);
                continue;
            }
        };
        let cms = match event {
            Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => vec![cm],
            Ok(_) => Vec::new(),
            Err(e) => {
                let e = e.to_string();
                if errors.should_log(&e) {
                    tracing::warn!(error = %e, "table watch failed; serving the last table while retrying (logged once a minute)");
                }
                continue;
            }
        };
        for cm in cms {
            let Some(data) = cm.data.as_ref().and_then(|d| d.get(DATA_KEY)) else {
                continue;
            };
            let role = cm.labels().get(TABLE_LABEL).map(String::as_str);
            if let Err(e) = assembler.set(role, data.as_bytes()) {
                tracing::error!(configmap = %cm.name_any(), error = %e, "unreadable table object; ignored");
            }
        }
        match assembler.assemble_shared() {
            Ok(Some(table)) => {
                tracing::debug!(
                    generation = table.generation,
                    groups = table.groups.len(),
                    "assembled a published table"
                );
                tables.send_replace(Some(table));
            }
            Ok(None) => {}
            Err(not_newer) => tracing::warn!("{not_newer}"),
        }
    }
}

/// A pushed delta (its signature verified): served when it follows the table served.
fn take_pushed(
    assembler: &mut Assembler,
    body: &[u8],
    tables: &watch::Sender<Option<Arc<RoutingTable<Value>>>>,
    metrics: &PushMetrics,
) {
    match assembler.push_delta(body) {
        Ok(Some(table)) => {
            metrics.count("served");
            tracing::debug!(generation = table.generation, "serving a pushed delta");
            tables.send_replace(Some(table));
        }
        Ok(None) => {
            metrics.count("waited");
            tracing::debug!("a pushed delta does not follow the table served; the watch brings it");
        }
        Err(e) => {
            metrics.count("unreadable");
            tracing::warn!(error = %e, "a pushed delta signed with the push key is unreadable; ignored");
        }
    }
}

/// The field manager of one checker: it owns only its own entries.
pub fn field_manager(checker: &str) -> String {
    format!("healthroute-checker-{checker}")
}

/// Runs the checker against the cluster's HealthChecks and writes what it sees;
/// `served_generation` tells the heartbeat which table generation this resolver serves, and
/// `push_address` where the leader pushes deltas to it (P12).
pub async fn run_checker(
    client: Client,
    namespace: String,
    mut checker: Checker,
    mut events: mpsc::Receiver<CheckerEvent>,
    served_generation: impl Fn() -> Option<u64> + Send + 'static,
    push_address: Option<String>,
) {
    let name = checker.name().to_owned();
    let manager = field_manager(&name);
    let checks: Api<HealthCheck> = Api::all(client.clone());
    let mut stream = watcher(checks, watcher::Config::default())
        .backoff(Backoff::watch())
        .boxed();
    // Each check's spec, all the checker reads: not the object, whose managed fields and
    // status (every checker's view) were 12.5 KB a HealthCheck at 10,000 groups (heaptrack).
    let mut known: std::collections::BTreeMap<ObjectKey, HealthCheckSpec> = Default::default();
    let mut listing: Option<std::collections::BTreeSet<ObjectKey>> = None;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &namespace);
    loop {
        tokio::select! {
            Some(event) = stream.next() => {
                let key = |c: &HealthCheck| ObjectKey::new(c.namespace().unwrap_or_default(), c.name_any());
                match event {
                    Ok(watcher::Event::Apply(c)) => { known.insert(key(&c), c.spec); }
                    Ok(watcher::Event::Delete(c)) => { known.remove(&key(&c)); }
                    Ok(watcher::Event::Init) => listing = Some(Default::default()),
                    Ok(watcher::Event::InitApply(c)) => {
                        if let Some(l) = listing.as_mut() { l.insert(key(&c)); }
                        known.insert(key(&c), c.spec);
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(l) = listing.take() { known.retain(|k, _| l.contains(k)); }
                    }
                    Err(e) => { tracing::warn!(error = %e, "HealthCheck watch failed; retrying"); continue; }
                }
                checker.sync(known.iter());
            }
            Some(event) = events.recv() => match event {
                CheckerEvent::View { check, view } => {
                    if let Err(e) = write_view(&client, &manager, &check, &view).await {
                        tracing::warn!(check = %check, error = %e, "could not write this checker's view");
                    }
                }
                CheckerEvent::Heartbeat { checker: who, at } => {
                    if let Err(e) = write_heartbeat(&leases, &manager, &who, at, served_generation(), push_address.as_deref()).await {
                        tracing::debug!(error = %e, "heartbeat not written");
                    }
                }
            },
            else => return,
        }
    }
}

/// Writes one checker's view into `HealthCheck.status.checkers[]` (its own entry only).
pub async fn write_view(
    client: &Client,
    manager: &str,
    check: &ObjectKey,
    view: &healthroute_compiler::CheckerView,
) -> Result<(), kube::Error> {
    let api: Api<HealthCheck> = Api::namespaced(client.clone(), &check.namespace);
    let patch = json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "HealthCheck",
        "status": {"checkers": [{
            "name": view.checker,
            "zone": view.zone,
            "healthy": view.healthy,
            "lastObserved": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "message": view.message,
            "values": view.values,
        }]},
    });
    api.patch_status(
        &check.name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(patch),
    )
    .await
    .map(|_| ())
}

/// Renews the checker's heartbeat Lease (H7: who is reachable), with the table generation
/// its resolver serves (P4: a new operator leader continues above it).
pub async fn write_heartbeat(
    leases: &Api<Lease>,
    manager: &str,
    checker: &str,
    at: jiff::Timestamp,
    served_generation: Option<u64>,
    push_address: Option<&str>,
) -> Result<(), kube::Error> {
    let lease_name = format!("healthroute-checker-{checker}");
    let mut annotations = serde_json::Map::new();
    if let Some(g) = served_generation {
        annotations.insert(SERVED_GENERATION_ANNOTATION.into(), g.to_string().into());
    }
    if let Some(address) = push_address {
        annotations.insert(ADDRESS_ANNOTATION.into(), address.into());
    }
    let patch = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": lease_name, "labels": {CHECKER_LABEL: checker}, "annotations": annotations},
        "spec": {
            "holderIdentity": checker,
            "renewTime": at.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
            "leaseDurationSeconds": 10,
        },
    });
    leases
        .patch(
            &lease_name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(patch),
        )
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;

    // SEM-P3: a checker writes only its own status entry and its own Lease, under its own
    // field manager.
    #[tokio::test]
    async fn checker_writes_its_own_entry_and_lease() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "healthroute");
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..2 {
                let (req, send) = handle.next_request().await.expect("request");
                let uri = req.uri().to_string();
                let body: serde_json::Value =
                    serde_json::from_slice(&req.into_body().collect_bytes().await.expect("body"))
                        .expect("json");
                let mut reply = body.clone();
                reply["metadata"]["name"] = json!("x");
                if body["kind"] == "HealthCheck" {
                    reply["spec"] =
                        json!({"type": "TCP", "target": {"address": "192.0.2.1", "port": 1}});
                }
                send.send_response(
                    Response::builder()
                        .body(Body::from(serde_json::to_vec(&reply).expect("json")))
                        .expect("response"),
                );
                seen.push((uri, body));
            }
            seen
        });
        let view = healthroute_compiler::CheckerView {
            checker: "resolver-a".into(),
            zone: Some("zone-a".into()),
            healthy: false,
            message: Some("connect refused".into()),
            values: Vec::new(),
        };
        let manager = field_manager("resolver-a");
        write_view(&client, &manager, &ObjectKey::new("shop", "web"), &view)
            .await
            .expect("view");
        let leases: Api<Lease> = Api::namespaced(client, "healthroute");
        write_heartbeat(
            &leases,
            &manager,
            "resolver-a",
            jiff::Timestamp::now(),
            Some(41),
            Some("10.1.2.3:8055"),
        )
        .await
        .expect("lease");
        let seen = server.await.expect("server");
        assert!(
            seen[0].0.starts_with(
                "/apis/healthroute.io/v1alpha1/namespaces/shop/healthchecks/web/status?"
            ),
            "{}",
            seen[0].0
        );
        assert!(
            seen[0]
                .0
                .contains("fieldManager=healthroute-checker-resolver-a")
        );
        let entries = seen[0].1["status"]["checkers"].as_array().expect("entries");
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["name"], "resolver-a");
        assert_eq!(entries[0]["healthy"], false);
        assert!(
            seen[0].1["status"].get("healthy").is_none(),
            "the overall status is the operator's"
        );
        assert!(seen[1].0.starts_with("/apis/coordination.k8s.io/v1/namespaces/healthroute/leases/healthroute-checker-resolver-a?"));
        assert_eq!(seen[1].1["metadata"]["labels"][CHECKER_LABEL], "resolver-a");
        // SEM-P4: the Lease says which generation this resolver serves.
        assert_eq!(
            seen[1].1["metadata"]["annotations"][SERVED_GENERATION_ANNOTATION],
            "41"
        );
        // SEM-P12: and where the leader pushes deltas to it.
        assert_eq!(
            seen[1].1["metadata"]["annotations"][ADDRESS_ANNOTATION],
            "10.1.2.3:8055"
        );
    }
}
