//! The resolver in a cluster: the published table as its source, its registration, and its
//! checker writing views and heartbeats.
//!
//! ```text
//!   ConfigMaps (label healthroute.io/table) ──watch──▶ Assembler ──complete, newer set──▶ watch<table>
//!     (manifest, shards, deltas: each event decodes only its own object, P11)      ▲
//!   the leader's pushed deltas (P12) ──push listener, signature verified──────────┘
//!   every second ──▶ SSA Lease healthroute-resolver-<me> (its registration, with or without a
//!                    checker: the generation this resolver serves, where the leader pushes)
//!   HealthChecks ──watch──▶ Checker::sync ──views──▶ SSA HealthCheck/status checkers[<me>]
//!                                          └─heartbeat──▶ SSA Lease healthroute-checker-<me>
//! ```
//!
//! The resolver only reads the table (get/list/watch ConfigMaps) and only writes its own
//! status entries and its own Leases, each under its own field manager (P3). When the API
//! server is unreachable it keeps serving the last table it assembled (P2); when it is back,
//! the watches resume within about a second (bounded backoff). The generation it serves only
//! moves forward (P4), and its registration tells a new operator leader where to continue;
//! the registration's format is the contract's ([`healthroute_table::contract`]).
//!
//! Both Leases live as long as the pod (P9, P13): in a cluster each is owned by the Pod
//! (`POD_NAME`, `POD_UID` from the downward API), so the garbage collector deletes it when the
//! pod is gone, and after the drain the resolver deletes them itself. Without those variables
//! (a resolver outside a pod) a Lease has no owner and only the delete removes it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use healthroute_admin::retry::{Backoff, ErrorLog};
use healthroute_api::CHECKER_LABEL;
use healthroute_api::{GROUP, HealthCheck, HealthCheckSpec, VERSION};
use healthroute_checker::{Checker, CheckerEvent};
use healthroute_compiler::ObjectKey;
use healthroute_table::contract::{self, DATA_KEY, Registration, TABLE_LABEL};
use healthroute_table::published::Assembler;
use healthroute_table::{RoutingTable, Value};
use hyper::body::Bytes;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tokio::sync::{mpsc, watch};

use crate::sources::push::PushMetrics;

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

/// Runs the checker against the cluster's HealthChecks and writes what it sees, and its
/// heartbeat (H7). When `stop` completes (after the drain, P9) the checker writes nothing more
/// and deletes its own Lease, in at most [`LEASE_DELETE_WITHIN`], then returns.
pub async fn run_checker(
    client: Client,
    namespace: String,
    mut checker: Checker,
    mut events: mpsc::Receiver<CheckerEvent>,
    stop: impl Future<Output = ()> + Send,
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
    let lease = CheckerLease::new(client.clone(), &namespace, &name, PodOwner::from_env());
    let mut stop = std::pin::pin!(stop);
    loop {
        tokio::select! {
            // A write under way finishes first: nothing is written after the delete.
            () = &mut stop => break,
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
                CheckerEvent::Heartbeat { at, .. } => {
                    if let Err(e) = lease.renew(at).await {
                        tracing::debug!(error = %e, "heartbeat not written");
                    }
                }
            },
            else => break,
        }
    }
    drop(checker); // its probes and heartbeat stop
    lease.delete(LEASE_DELETE_WITHIN).await;
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

/// How long a checker's Lease lasts without renewal; its checker renews it every second.
pub const CHECKER_LEASE_SECONDS: i32 = 10;

/// How long a stopping resolver tries to delete each of its Leases (P9).
pub const LEASE_DELETE_WITHIN: Duration = Duration::from_secs(2);

/// The Pod a resolver's Leases belong to: the garbage collector deletes them once the Pod is
/// gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodOwner {
    pub name: String,
    pub uid: String,
}

impl PodOwner {
    /// This process's Pod, from the downward API variables `POD_NAME` and `POD_UID` (the
    /// chart sets both); none unless both are set (a resolver outside a pod, tests).
    pub fn from_env() -> Option<PodOwner> {
        Self::from_vars(
            std::env::var("POD_NAME").ok(),
            std::env::var("POD_UID").ok(),
        )
    }

    fn from_vars(name: Option<String>, uid: Option<String>) -> Option<PodOwner> {
        let (name, uid) = (name?.trim().to_owned(), uid?.trim().to_owned());
        (!name.is_empty() && !uid.is_empty()).then_some(PodOwner { name, uid })
    }
}

/// A Lease the resolver keeps for itself: named, labelled and held by it, written under its
/// own field manager, owned by its Pod when it has one, deleted on its way out.
struct OwnLease {
    api: Api<Lease>,
    name: String,
    label: (&'static str, String),
    holder: String,
    manager: String,
    owner: Option<PodOwner>,
    seconds: i32,
}

impl OwnLease {
    /// Renews the Lease (server-side apply) with `annotations`: the ones it had and no longer
    /// has are removed with it.
    async fn renew(
        &self,
        at: jiff::Timestamp,
        annotations: std::collections::BTreeMap<String, String>,
    ) -> Result<(), kube::Error> {
        let (label, value) = &self.label;
        let mut metadata = json!({
            "name": self.name,
            "labels": {(*label): value},
            "annotations": annotations,
        });
        // No blockOwnerDeletion: that would need the right to update the Pod's finalizers,
        // and nothing waits for the Lease to go.
        if let Some(pod) = &self.owner {
            metadata["ownerReferences"] = json!([{
                "apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid,
            }]);
        }
        let patch = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": self.holder,
                "renewTime": at.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string(),
                "leaseDurationSeconds": self.seconds,
            },
        });
        self.api
            .patch(
                &self.name,
                &PatchParams::apply(&self.manager).force(),
                &Patch::Apply(patch),
            )
            .await
            .map(|_| ())
    }

    /// Deletes the Lease, best effort, giving up after `within`: a Lease left behind is
    /// deleted with its Pod by the garbage collector, and counts as gone once it is stale.
    async fn delete(&self, within: Duration) {
        let name = &self.name;
        match tokio::time::timeout(within, self.api.delete(name, &DeleteParams::default())).await {
            Ok(Ok(_)) => tracing::info!(lease = %name, "deleted this resolver's Lease"),
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => {}
            Ok(Err(e)) => {
                tracing::warn!(lease = %name, error = %e, "could not delete this resolver's Lease; its Pod's garbage collection or staleness removes it");
            }
            Err(_) => tracing::warn!(
                lease = %name,
                seconds = within.as_secs_f64(),
                "deleting this resolver's Lease took too long; its Pod's garbage collection or staleness removes it"
            ),
        }
    }
}

/// One checker's heartbeat Lease, `healthroute-checker-<checker>`: renewed by the checker
/// (H7: who is reachable), owned by its Pod when it has one, deleted by the resolver on its
/// way out (P9). What the resolver serves and where it takes pushes are on its registration
/// ([`RegistrationLease`]), not here.
pub struct CheckerLease(OwnLease);

impl CheckerLease {
    pub fn new(client: Client, namespace: &str, checker: &str, owner: Option<PodOwner>) -> Self {
        CheckerLease(OwnLease {
            api: Api::namespaced(client, namespace),
            name: format!("healthroute-checker-{checker}"),
            label: (CHECKER_LABEL, checker.to_owned()),
            holder: checker.to_owned(),
            manager: field_manager(checker),
            owner,
            seconds: CHECKER_LEASE_SECONDS,
        })
    }

    /// The Lease's name.
    pub fn name(&self) -> String {
        self.0.name.clone()
    }

    /// Renews the Lease (server-side apply, under the checker's own field manager).
    pub async fn renew(&self, at: jiff::Timestamp) -> Result<(), kube::Error> {
        self.0.renew(at, Default::default()).await
    }

    /// Deletes the Lease, best effort, giving up after `within` (P9).
    pub async fn delete(&self, within: Duration) {
        self.0.delete(within).await
    }
}

/// A resolver's registration, `healthroute-resolver-<resolver>` (the contract's format):
/// the table generation it serves (P4) and where the leader pushes deltas to it (P12),
/// written whether or not its checker runs, owned by its Pod when it has one (P13).
pub struct RegistrationLease(OwnLease);

impl RegistrationLease {
    pub fn new(client: Client, namespace: &str, resolver: &str, owner: Option<PodOwner>) -> Self {
        let seconds = i32::try_from(contract::REGISTRATION_LASTS.as_secs()).unwrap_or(10);
        RegistrationLease(OwnLease {
            api: Api::namespaced(client, namespace),
            name: contract::registration_lease_name(resolver),
            label: (contract::RESOLVER_LABEL, resolver.to_owned()),
            holder: resolver.to_owned(),
            manager: contract::registration_field_manager(resolver),
            owner,
            seconds,
        })
    }

    /// Renews the registration with what it says now.
    pub async fn renew(
        &self,
        at: jiff::Timestamp,
        registration: &Registration,
    ) -> Result<(), kube::Error> {
        self.0.renew(at, registration.annotations()).await
    }
}

/// Keeps this resolver registered: renews its registration every
/// [`contract::RENEW_EVERY`] with the generation `served_generation` says it serves and its
/// `push_address`. When `stop` completes (after the drain, P9) it deletes the registration, in
/// at most [`LEASE_DELETE_WITHIN`], then returns.
pub async fn run_registration(
    lease: RegistrationLease,
    served_generation: impl Fn() -> Option<u64> + Send + 'static,
    push_address: Option<String>,
    stop: impl Future<Output = ()> + Send,
) {
    let mut stop = std::pin::pin!(stop);
    let mut every = tokio::time::interval(contract::RENEW_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            // A write under way finishes first: nothing is written after the delete.
            () = &mut stop => break,
            _ = every.tick() => {
                let registration = Registration {
                    served_generation: served_generation(),
                    push_address: push_address.clone(),
                };
                if let Err(e) = lease.renew(jiff::Timestamp::now(), &registration).await {
                    tracing::debug!(error = %e, "registration not written");
                }
            }
        }
    }
    lease.0.delete(LEASE_DELETE_WITHIN).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{Request, Response};
    use kube::client::Body;

    // SEM-P3: a checker writes only its own status entry and its own Lease, and the resolver
    // its own registration, each under its own field manager.
    #[tokio::test]
    async fn checker_writes_its_own_entry_and_lease() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = Client::new(service, "healthroute");
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..3 {
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
        CheckerLease::new(client.clone(), "healthroute", "resolver-a", None)
            .renew(jiff::Timestamp::now())
            .await
            .expect("lease");
        let registration = Registration {
            served_generation: Some(41),
            push_address: Some("10.1.2.3:8055".into()),
        };
        RegistrationLease::new(client, "healthroute", "resolver-a", None)
            .renew(jiff::Timestamp::now(), &registration)
            .await
            .expect("registration");
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
        assert_eq!(
            seen[1].1["metadata"]["annotations"],
            json!({}),
            "a heartbeat only (H7): the registration tells the rest"
        );
        assert_eq!(
            seen[1].1["spec"]["leaseDurationSeconds"],
            CHECKER_LEASE_SECONDS
        );
        // SEM-P9: outside a pod, no owner.
        assert!(seen[1].1["metadata"].get("ownerReferences").is_none());
        assert!(seen[2].0.starts_with("/apis/coordination.k8s.io/v1/namespaces/healthroute/leases/healthroute-resolver-resolver-a?"), "{}", seen[2].0);
        assert!(
            seen[2]
                .0
                .contains("fieldManager=healthroute-resolver-resolver-a")
        );
        assert_eq!(
            seen[2].1["metadata"]["labels"][contract::RESOLVER_LABEL],
            "resolver-a"
        );
        // SEM-P4: the registration says which generation this resolver serves; SEM-P12: and
        // where the leader pushes deltas to it, in the contract's form.
        let annotations: std::collections::BTreeMap<String, String> =
            serde_json::from_value(seen[2].1["metadata"]["annotations"].clone())
                .expect("annotations");
        assert_eq!(Registration::from_annotations(&annotations), registration);
        assert_eq!(seen[2].1["spec"]["leaseDurationSeconds"], 10);
    }

    /// Every request a stand-in saw, in order: method, URI and body.
    type Seen = Arc<std::sync::Mutex<Vec<(String, String, serde_json::Value)>>>;

    /// A stand-in API server for the checker's loop: an empty HealthCheck list, a watch that
    /// never answers, Lease writes and deletes echoed.
    fn checker_api() -> (Client, Seen) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = seen.clone();
        tokio::spawn(async move {
            let mut watches = Vec::new();
            while let Some((req, send)) = handle.next_request().await {
                let method = req.method().to_string();
                let uri = req.uri().to_string();
                let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
                let body: serde_json::Value =
                    serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
                log.lock()
                    .expect("log")
                    .push((method.clone(), uri.clone(), body.clone()));
                let reply = if uri.contains("watch=true") {
                    watches.push(send);
                    continue;
                } else if method == "GET" {
                    json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheckList",
                           "metadata": {"resourceVersion": "1"}, "items": []})
                } else if method == "DELETE" {
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})
                } else {
                    body
                };
                send.send_response(
                    Response::builder()
                        .body(Body::from(serde_json::to_vec(&reply).expect("json")))
                        .expect("response"),
                );
            }
        });
        (Client::new(service, "healthroute"), seen)
    }

    // SEM-P9 SEM-H7: in a pod, the checker's Lease is owned by it (the garbage collector
    // deletes it with the pod); after the drain the checker stops, deletes its Lease, and
    // writes nothing after that.
    #[tokio::test]
    async fn a_stopped_checker_deletes_its_pod_owned_lease_and_writes_no_more() {
        let (client, seen) = checker_api();
        let pod = PodOwner::from_vars(Some("resolver-7f9c".into()), Some("0c1d-uid".into()));
        let lease = CheckerLease::new(client.clone(), "healthroute", "resolver-7f9c", pod);
        lease.renew(jiff::Timestamp::now()).await.expect("renewed");
        let (_, _, body) = seen.lock().expect("log")[0].clone();
        assert_eq!(
            body["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "resolver-7f9c", "uid": "0c1d-uid"}])
        );

        let (events_tx, events_rx) = mpsc::channel(16);
        let checker = Checker::new(
            "resolver-a",
            None,
            healthroute_checker::TargetPolicy::cluster_default(),
            events_tx.clone(),
        );
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run_checker(
            client,
            "healthroute".into(),
            checker,
            events_rx,
            async {
                let _ = stop_rx.await;
            },
        ));
        let heartbeat = || CheckerEvent::Heartbeat {
            checker: "resolver-a".into(),
            at: jiff::Timestamp::now(),
        };
        let lease_path = "/apis/coordination.k8s.io/v1/namespaces/healthroute/leases/healthroute-checker-resolver-a";
        let lease_requests = || -> Vec<String> {
            seen.lock()
                .expect("log")
                .iter()
                .filter(|(_, uri, _)| uri.starts_with(lease_path))
                .map(|(method, _, _)| method.clone())
                .collect()
        };
        events_tx.send(heartbeat()).await.expect("heartbeat");
        for _ in 0..200 {
            if !lease_requests().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(lease_requests(), ["PATCH"]);
        stop_tx.send(()).expect("stop");
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("the checker returns after its delete")
            .expect("no panic");
        // A heartbeat after the stop finds no one to write it.
        assert!(events_tx.send(heartbeat()).await.is_err());
        assert_eq!(lease_requests(), ["PATCH", "DELETE"]);
    }

    // SEM-P12 SEM-P13: a resolver registers with no checker at all: its registration, owned
    // by its Pod, says where it takes pushes and which generation it serves, is renewed, and
    // is deleted after the drain; nothing is written after that.
    #[tokio::test]
    async fn a_resolver_without_a_checker_registers_and_deregisters() {
        let (client, seen) = checker_api();
        let pod = PodOwner::from_vars(Some("resolver-7f9c".into()), Some("0c1d-uid".into()));
        let lease = RegistrationLease::new(client, "healthroute", "resolver-7f9c", pod);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(run_registration(
            lease,
            || Some(9),
            Some("10.1.2.3:8055".into()),
            async {
                let _ = stop_rx.await;
            },
        ));
        let path = "/apis/coordination.k8s.io/v1/namespaces/healthroute/leases/healthroute-resolver-resolver-7f9c";
        let requests = || -> Vec<(String, serde_json::Value)> {
            seen.lock()
                .expect("log")
                .iter()
                .filter(|(_, uri, _)| uri.starts_with(path))
                .map(|(method, _, body)| (method.clone(), body.clone()))
                .collect()
        };
        for _ in 0..300 {
            if requests().len() >= 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let renewed = requests();
        assert!(renewed.len() >= 2, "renewed every second: {renewed:?}");
        let (method, body) = &renewed[0];
        assert_eq!(method, "PATCH");
        assert_eq!(
            body["metadata"]["ownerReferences"],
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "resolver-7f9c", "uid": "0c1d-uid"}])
        );
        assert_eq!(
            body["metadata"]["annotations"],
            json!({contract::SERVED_GENERATION_ANNOTATION: "9",
                   contract::PUSH_ADDRESS_ANNOTATION: "10.1.2.3:8055"})
        );
        stop_tx.send(()).expect("stop");
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("returns after its delete")
            .expect("no panic");
        let after = requests();
        assert_eq!(after.last().map(|(m, _)| m.as_str()), Some("DELETE"));
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(requests().len(), after.len(), "nothing after the delete");
    }

    // SEM-P9: the owner comes from the downward API's POD_NAME and POD_UID, both or none.
    #[test]
    fn the_pod_owner_needs_both_name_and_uid() {
        let some = |s: &str| Some(s.to_owned());
        assert_eq!(
            PodOwner::from_vars(some("resolver-1"), some("u-1")),
            Some(PodOwner {
                name: "resolver-1".into(),
                uid: "u-1".into()
            })
        );
        assert_eq!(PodOwner::from_vars(some("resolver-1"), None), None);
        assert_eq!(PodOwner::from_vars(None, some("u-1")), None);
        assert_eq!(PodOwner::from_vars(some("resolver-1"), some(" ")), None);
    }
}
