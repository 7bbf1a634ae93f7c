//! The leader election against an in-process stand-in of the API server that keeps one
//! Lease (get, create, patch, list and watch, the calls kube-lease-manager and the release
//! watch make): a released lease is taken by the standby within a second, and a stopping
//! leader releases only once its writers have ended (P3).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use healthroute_operator::leader::{self, Election};
use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::{Value as Json, json};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

const NAMESPACE: &str = "healthroute";
const LEASE: &str = "healthroute-operator";

/// The one Lease the stand-in holds, and its resourceVersion (bumped by every write).
#[derive(Default)]
struct Store {
    lease: Option<Json>,
    version: u64,
}

#[derive(Clone, Default)]
struct LeaseServer {
    store: Arc<Mutex<Store>>,
    changed: Arc<Notify>,
}

impl LeaseServer {
    fn start() -> (LeaseServer, Client) {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let server = LeaseServer::default();
        let s = server.clone();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                let s = s.clone();
                tokio::spawn(async move {
                    let (code, body) = s.answer(req).await;
                    let mut response = Response::new(Body::from(body));
                    *response.status_mut() = StatusCode::from_u16(code).expect("status");
                    send.send_response(response);
                });
            }
        });
        (server, Client::new(service, NAMESPACE))
    }

    /// The holder the stand-in's Lease names now.
    fn holder(&self) -> Option<String> {
        let store = self.store.lock().expect("store");
        store.lease.as_ref()?["spec"]["holderIdentity"]
            .as_str()
            .map(str::to_owned)
    }

    fn with_version(store: &Store) -> Option<Json> {
        let mut lease = store.lease.clone()?;
        lease["metadata"]["resourceVersion"] = json!(store.version.to_string());
        Some(lease)
    }

    async fn answer(&self, req: Request<Body>) -> (u16, Vec<u8>) {
        let method = req.method().as_str().to_owned();
        let uri = req.uri().clone();
        let path = uri.path().to_owned();
        let query = uri.query().unwrap_or_default().to_owned();
        let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
        let body: Json = serde_json::from_slice(&bytes).unwrap_or(Json::Null);
        let collection = format!("/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases");
        let one = format!("{collection}/{LEASE}");
        let not_found = || {
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                "reason": "NotFound", "code": 404});
            (404, serde_json::to_vec(&status).expect("json"))
        };
        let ok = |v: &Json| (200, serde_json::to_vec(v).expect("json"));
        if method == "GET" && path == collection && query.contains("watch=true") {
            return self.watch(&query).await;
        }
        let mut store = self.store.lock().expect("store");
        match (method.as_str(), path.as_str()) {
            ("GET", p) if p == collection => {
                let items: Vec<Json> = Self::with_version(&store).into_iter().collect();
                ok(
                    &json!({"apiVersion": "coordination.k8s.io/v1", "kind": "LeaseList",
                           "metadata": {"resourceVersion": store.version.to_string()}, "items": items}),
                )
            }
            ("GET", p) if p == one => match Self::with_version(&store) {
                Some(lease) => ok(&lease),
                None => not_found(),
            },
            ("POST", p) if p == collection => {
                let mut lease = body;
                lease["metadata"]["namespace"] = json!(NAMESPACE);
                store.lease = Some(lease);
                store.version += 1;
                self.changed.notify_waiters();
                ok(&Self::with_version(&store).expect("created"))
            }
            // Server-side apply and strategic merge alike: the spec's fields are set, and a
            // null removes one (the release).
            ("PATCH", p) if p == one => {
                let Some(lease) = store.lease.as_mut() else {
                    return not_found();
                };
                for (k, v) in body["spec"].as_object().cloned().unwrap_or_default() {
                    match (v.is_null(), lease["spec"].as_object_mut()) {
                        (true, Some(spec)) => {
                            spec.remove(&k);
                        }
                        _ => lease["spec"][k] = v,
                    }
                }
                store.version += 1;
                self.changed.notify_waiters();
                ok(&Self::with_version(&store).expect("patched"))
            }
            _ => not_found(),
        }
    }

    /// A watch from `resourceVersion`: the Lease as it is now when it changed since, else
    /// after its next change (or nothing within 2 s: the watcher watches again).
    async fn watch(&self, query: &str) -> (u16, Vec<u8>) {
        let from: u64 = query
            .split('&')
            .find_map(|kv| kv.strip_prefix("resourceVersion="))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let notified = self.changed.notified();
            {
                let store = self.store.lock().expect("store");
                if store.version > from {
                    let Some(lease) = Self::with_version(&store) else {
                        return (200, Vec::new());
                    };
                    let mut line =
                        serde_json::to_vec(&json!({"type": "MODIFIED", "object": lease}))
                            .expect("json");
                    line.push(b'\n');
                    return (200, line);
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return (200, Vec::new());
            }
        }
    }
}

fn election(identity: &str) -> Election {
    Election {
        lease: LEASE.into(),
        namespace: NAMESPACE.into(),
        identity: identity.into(),
        // The chart's default: a standby left to the lease's expiry would wait 5 to 15 s.
        duration: 15,
        grace: Election::grace_of(15),
    }
}

async fn wait_until(what: &str, within: Duration, f: impl Fn() -> bool) -> Duration {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < within, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    start.elapsed()
}

// SEM-P3: a leader that stops keeps its lease until its writers have ended (the receivers of
// its `leader` channel dropped), then releases it, and the standby, which had read the lease
// held until its expiry up to 15 s away, takes it within a second (issue #42: the standby
// waited for the old expiry).
#[tokio::test]
async fn a_released_lease_is_taken_by_the_standby_within_a_second() {
    let (server, client) = LeaseServer::start();
    let (a_stop, a_stop_rx) = watch::channel(false);
    let (a_tx, a) = watch::channel(false);
    let a_task = tokio::spawn(leader::run(client.clone(), election("a"), a_tx, a_stop_rx));
    wait_until("a leads", Duration::from_secs(5), || *a.borrow()).await;
    assert_eq!(server.holder().as_deref(), Some("a"));

    let (_b_stop, b_stop_rx) = watch::channel(false);
    let (b_tx, b) = watch::channel(false);
    let b_task = tokio::spawn(leader::run(client.clone(), election("b"), b_tx, b_stop_rx));
    // b reads the lease held by a, and would sleep until its expiry.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!*b.borrow(), "b leads beside a");

    // a stops; its writers (the holder of `a`) are still finishing: it leads no more, but
    // the lease stays a's, so b cannot start writing beside them.
    a_stop.send(true).expect("stop a");
    wait_until("a to step down", Duration::from_secs(1), || !*a.borrow()).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(
        server.holder().as_deref(),
        Some("a"),
        "released before a's writers ended"
    );
    assert!(!*b.borrow(), "b leads while a's writers run");

    // The writers end: a releases, and b takes the lease within a second.
    drop(a);
    let took = wait_until(
        "b to take the released lease",
        Duration::from_secs(1),
        || *b.borrow(),
    )
    .await;
    println!("handover after the release (stand-in API): {took:?}");
    assert_eq!(server.holder().as_deref(), Some("b"));
    tokio::time::timeout(Duration::from_secs(5), a_task)
        .await
        .expect("a's election ends after its release")
        .expect("no panic");
    b_task.abort();
}
