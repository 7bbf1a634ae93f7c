//! The Kubernetes boundary, with tower-test scenarios (kube's own approach): each request the
//! operator makes is checked, and answered as an API server would.

use std::sync::Arc;
use std::time::Duration;

use healthroute_api::{HealthCheckStatus, RecordGroup, RecordGroupStatus, ZonalShiftStatus};
use healthroute_compiler::ServedZones;
use healthroute_operator::controller::{Index, Input};
use healthroute_operator::publish::{Publisher, TABLE_NAME};
use healthroute_operator::status::Status;
use healthroute_operator::writes::{self, StatusUpdate, WriteQueue, WriterConfig};
use healthroute_table::published::{Assembler, DATA_KEY};
use healthroute_table::{RoutingTable, Value};
use http::{Request, Response};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::client::Body;
use kube::runtime::watcher;
use kube::{Api, Client};
use serde_json::{Value as Json, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

fn mock() -> (Client, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "healthroute"), handle)
}

async fn body_json(req: Request<Body>) -> Json {
    let bytes = req.into_body().collect_bytes().await.expect("body");
    serde_json::from_slice(&bytes).unwrap_or(Json::Null)
}

fn respond(send: tower_test::mock::SendResponse<Response<Body>>, value: &Json) {
    send.send_response(
        Response::builder()
            .body(Body::from(serde_json::to_vec(value).expect("json")))
            .expect("response"),
    );
}

type Reply = tower_test::mock::SendResponse<Response<Body>>;

/// The next request, in time: asserts its method and path prefix (and, for a write, the
/// operator's field manager); its JSON body and where its answer goes.
async fn next(handle: &mut Handle, method: &str, path_prefix: &str) -> (Json, Reply) {
    let (req, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
        .await
        .expect("a request in time")
        .expect("a request");
    assert_eq!(req.method().as_str(), method, "{}", req.uri());
    let uri = req.uri().to_string();
    assert!(
        uri.starts_with(path_prefix),
        "{uri} does not start with {path_prefix}"
    );
    if method == "PATCH" {
        assert!(
            uri.contains("fieldManager=healthroute-operator") && uri.contains("force=true"),
            "{uri}"
        );
    }
    if method == "PUT" || method == "POST" {
        assert!(uri.contains("fieldManager=healthroute-operator"), "{uri}");
    }
    (body_json(req).await, send)
}

/// Answers one request: asserts its method and path prefix, returns its JSON body.
async fn expect(
    handle: &mut Handle,
    method: &str,
    path_prefix: &str,
    reply: impl FnOnce(&Json) -> Json,
) -> Json {
    let (body, send) = next(handle, method, path_prefix).await;
    respond(send, &reply(&body));
    body
}

fn rg(name: &str, ip: &str) -> RecordGroup {
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": name, "namespace": "shop", "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"name": format!("{name}.example.com."), "type": "A", "routingPolicy": "Simple",
                 "records": [{"setIdentifier": "x", "values": [ip]}]}
    }))
    .expect("valid")
}

fn index_with(groups: &[(&str, &str)]) -> Index {
    let mut index = Index::new(ServedZones::new(["example.com"]).expect("zone"), 60);
    index.apply(Input::Group(watcher::Event::Init));
    for (name, ip) in groups {
        index.apply(Input::Group(watcher::Event::InitApply(rg(name, ip))));
    }
    index.apply(Input::Group(watcher::Event::InitDone));
    index.compiler.compile(jiff::Timestamp::now());
    index
}

// SEM-P3: the publisher writes every shard, then the manifest; a resolver can assemble the
// exact table from what was written; an unchanged table is not written again, and one
// changed group rewrites one shard and the manifest.
#[tokio::test]
async fn publisher_writes_shards_then_manifest_and_only_changes() {
    let (client, mut handle) = mock();
    let mut publisher = Publisher::new(Api::<ConfigMap>::namespaced(client, "healthroute"), 4);
    let table = index_with(&[("a", "192.0.2.1"), ("b", "192.0.2.2"), ("c", "192.0.2.3")])
        .compiler
        .table();

    let server = tokio::spawn(async move {
        let mut written = Vec::new();
        expect(
            &mut handle,
            "GET",
            "/api/v1/namespaces/healthroute/configmaps?&labelSelector=healthroute.io%2Ftable",
            |_| json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": []}),
        )
        .await;
        for i in 0..5 {
            // Each object replaced whole (created where the server has none: not here).
            let body = expect(
                &mut handle,
                "PUT",
                "/api/v1/namespaces/healthroute/configmaps/healthroute-table",
                |b| b.clone(),
            )
            .await;
            let name = body["metadata"]["name"].as_str().expect("name").to_owned();
            if i < 4 {
                assert_eq!(body["metadata"]["labels"]["healthroute.io/table"], "shard");
            } else {
                assert_eq!(name, TABLE_NAME, "the manifest comes last");
                assert_eq!(
                    body["metadata"]["labels"]["healthroute.io/table"],
                    "manifest"
                );
            }
            written.push(body);
        }
        (written, handle)
    });
    let report = publisher.publish(&table, || true).await.expect("publishes");
    assert_eq!((report.shards_written, report.manifest_written), (4, true));
    let (written, mut handle) = server.await.expect("server");

    let mut assembler = Assembler::default();
    for body in &written[..4] {
        assembler
            .set_shard(body["data"][DATA_KEY].as_str().expect("data").as_bytes())
            .expect("shard");
    }
    assembler
        .set_manifest(
            written[4]["data"][DATA_KEY]
                .as_str()
                .expect("data")
                .as_bytes(),
        )
        .expect("manifest");
    let assembled = assembler.assemble().expect("newer").expect("complete");
    assert_eq!(assembled.groups, table.groups);
    assert_eq!(assembled.generation, 1, "the publisher's first generation");

    // Unchanged: no request at all.
    let report = publisher.publish(&table, || true).await.expect("publishes");
    assert_eq!((report.shards_written, report.manifest_written), (0, false));

    // SEM-P11: one group changes: one delta, holding that group only, and nothing else.
    let changed = index_with(&[("a", "192.0.2.1"), ("b", "192.0.2.99"), ("c", "192.0.2.3")])
        .compiler
        .table();
    let server = tokio::spawn(async move {
        // A delta is a new object: created.
        expect(
            &mut handle,
            "POST",
            "/api/v1/namespaces/healthroute/configmaps?",
            |b| b.clone(),
        )
        .await
    });
    let report = publisher
        .publish(&changed, || true)
        .await
        .expect("publishes");
    assert_eq!(
        (
            report.shards_written,
            report.manifest_written,
            report.delta_written
        ),
        (0, false, true)
    );
    assert_eq!(report.generation, 2);
    let delta = server.await.expect("server");
    assert_eq!(delta["metadata"]["name"], "healthroute-table-delta-2");
    assert_eq!(delta["metadata"]["labels"]["healthroute.io/table"], "delta");
    assert_eq!(
        delta["metadata"]["labels"]["healthroute.io/table-base"],
        "1"
    );
    let data = delta["data"][DATA_KEY].as_str().expect("data");
    let parsed: healthroute_table::published::Delta = serde_json::from_str(data).expect("delta");
    let keys: Vec<&str> = parsed.groups.keys().map(|k| k.as_ref()).collect();
    assert_eq!(keys, ["shop/b"], "only the group that changed");
    assert_eq!(report.bytes_written, data.len());
    // A resolver that assembled generation 1 serves the change from the delta alone.
    assembler.set_delta(data.as_bytes()).expect("delta");
    let assembled = assembler.assemble().expect("newer").expect("applied");
    assert_eq!(assembled.groups, changed.groups);
    assert_eq!(assembled.generation, 2);
}

/// Answers every request until none comes for a while: written objects echoed (and returned,
/// in order), anything else an empty success.
async fn answer_all(handle: &mut Handle) -> Vec<Json> {
    let mut patched = Vec::new();
    while let Ok(Some((req, send))) =
        tokio::time::timeout(Duration::from_millis(500), handle.next_request()).await
    {
        let method = req.method().as_str().to_owned();
        let body = body_json(req).await;
        if matches!(method.as_str(), "PUT" | "POST") {
            respond(send, &body);
            patched.push(body);
        } else {
            respond(
                send,
                &json!({"apiVersion": "v1", "kind": "Status", "status": "Success"}),
            );
        }
    }
    patched
}

/// A resolver's reading of what was written: each ConfigMap's data into `resolver`.
fn feed(resolver: &mut Assembler, written: &[Json]) {
    for body in written {
        let role = body["metadata"]["labels"]["healthroute.io/table"].as_str();
        let data = body["data"][DATA_KEY].as_str().expect("data");
        resolver.set(role, data.as_bytes()).expect("readable");
    }
}

/// Answers a term's read-back of the table: nothing published.
async fn list_nothing(handle: &mut Handle) {
    expect(
        handle,
        "GET",
        "/api/v1/namespaces/healthroute/configmaps",
        |_| json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": []}),
    )
    .await;
}

/// A term's first table (groups a and b), published on an empty server and assembled by
/// `resolver` as generation 1; the API server's handle back.
async fn first_table(
    publisher: &mut Publisher,
    mut handle: Handle,
    resolver: &mut Assembler,
) -> Handle {
    let table = index_with(&[("a", "192.0.2.1"), ("b", "192.0.2.2")])
        .compiler
        .table();
    let server = tokio::spawn(async move {
        list_nothing(&mut handle).await;
        let written = answer_all(&mut handle).await;
        (written, handle)
    });
    publisher.publish(&table, || true).await.expect("publishes");
    let (written, handle) = server.await.expect("server");
    feed(resolver, &written);
    assert_eq!(resolver.assemble().expect("ok").expect("t1").generation, 1);
    handle
}

/// Answers one request with an API server's failure `code` (`reason`), after checking its
/// method and path; returns its body.
async fn refuse(
    handle: &mut Handle,
    method: &str,
    path_prefix: &str,
    code: u16,
    reason: &str,
) -> Json {
    let (body, send) = next(handle, method, path_prefix).await;
    fail(send, code, reason);
    body
}

/// An API server's failure: `code`, with a Status of `reason`.
fn fail(send: Reply, code: u16, reason: &str) {
    let status = json!({"apiVersion": "v1", "kind": "Status", "status": "Failure",
                        "reason": reason, "code": code});
    send.send_response(
        Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&status).expect("json")))
            .expect("response"),
    );
}

/// Answers the writes of `n` table objects as a server that holds none of them: each replace
/// 404, then its create taken. The names created, in order (shards go out several at once).
async fn created_after_replace(handle: &mut Handle, n: usize) -> Vec<String> {
    let (mut refused, mut created) = (Vec::new(), Vec::new());
    while created.len() < n {
        let (req, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
            .await
            .expect("a request in time")
            .expect("a request");
        let method = req.method().as_str().to_owned();
        let uri = req.uri().to_string();
        assert!(uri.contains("fieldManager=healthroute-operator"), "{uri}");
        let body = body_json(req).await;
        let name = body["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match method.as_str() {
            "PUT" => {
                assert!(uri.contains(&format!("/configmaps/{name}?")), "{uri}");
                refused.push(name);
                fail(send, 404, "NotFound");
            }
            "POST" => {
                assert!(refused.contains(&name), "{name} created before its replace");
                created.push(name);
                respond(send, &body);
            }
            other => panic!("{other} {uri}"),
        }
    }
    created
}

// SEM-P11: each table object is written whole, as the server needs it: a shard or the
// manifest the server does not hold yet is created after its replace finds nothing, and a
// delta a failed write left on the server is replaced after its create finds it there.
#[tokio::test]
async fn a_table_object_is_created_or_replaced_as_the_server_needs() {
    let (client, mut handle) = mock();
    let mut publisher = Publisher::new(Api::<ConfigMap>::namespaced(client, "healthroute"), 2);
    let table = index_with(&[("a", "192.0.2.1"), ("b", "192.0.2.2")])
        .compiler
        .table();
    let server = tokio::spawn(async move {
        list_nothing(&mut handle).await;
        let created = created_after_replace(&mut handle, 3).await;
        (created, handle)
    });
    let report = publisher.publish(&table, || true).await.expect("publishes");
    assert!(report.manifest_written);
    let (created, mut handle) = server.await.expect("server");
    assert_eq!(created.len(), 3, "{created:?}");
    assert_eq!(created[2], TABLE_NAME, "the manifest last: {created:?}");

    let changed = index_with(&[("a", "192.0.2.1"), ("b", "192.0.2.99")])
        .compiler
        .table();
    let server = tokio::spawn(async move {
        let post = refuse(
            &mut handle,
            "POST",
            "/api/v1/namespaces/healthroute/configmaps?",
            409,
            "AlreadyExists",
        )
        .await;
        let put = expect(
            &mut handle,
            "PUT",
            "/api/v1/namespaces/healthroute/configmaps/healthroute-table-delta-2?",
            |b| b.clone(),
        )
        .await;
        assert_eq!(post, put, "the same delta, replaced");
    });
    let report = publisher
        .publish(&changed, || true)
        .await
        .expect("publishes");
    assert!(report.delta_written, "{report:?}");
    server.await.expect("server");
}

// SEM-P4: a resolver that reports serving a generation above the leader's (a stale disk
// snapshot) makes the next change a full table numbered above it, not a delta after
// generations no reader has: a resolver on the old manifest assembles it.
#[tokio::test]
async fn a_raised_generation_is_published_as_a_full_table() {
    let (client, handle) = mock();
    let mut publisher = Publisher::new(Api::<ConfigMap>::namespaced(client, "healthroute"), 2);
    let mut resolver = Assembler::default();
    let mut handle = first_table(&mut publisher, handle, &mut resolver).await;

    publisher.raise_generation(40);
    let changed = index_with(&[("a", "192.0.2.1"), ("b", "192.0.2.99")])
        .compiler
        .table();
    let server = tokio::spawn(async move { answer_all(&mut handle).await });
    let report = publisher
        .publish(&changed, || true)
        .await
        .expect("publishes");
    let written = server.await.expect("server");
    assert!(
        report.manifest_written && !report.delta_written,
        "{report:?}"
    );
    assert_eq!(report.generation, 41);
    feed(&mut resolver, &written);
    let served = resolver.assemble().expect("ok").expect("the raised table");
    assert_eq!(served.generation, 41);
    assert_eq!(served.groups, changed.groups);
}

// A new leader reads the content hashes already on the server and rewrites nothing that
// matches.
#[tokio::test]
async fn new_leader_does_not_rewrite_unchanged_shards() {
    let table: Arc<RoutingTable<Value>> = index_with(&[("a", "192.0.2.1")]).compiler.table();
    let encoded = healthroute_table::published::encode(&table, 2).expect("encodes");
    let manifest = serde_json::to_string(&encoded.manifest).expect("json");
    let mut items: Vec<Json> = encoded
        .shards
        .iter()
        .map(|(i, hash, json)| json!({"metadata": {"name": format!("{TABLE_NAME}-{i}"), "labels": {"healthroute.io/table": "shard"}, "annotations": {"healthroute.io/content-hash": hash}},
                                      "data": {DATA_KEY: String::from_utf8_lossy(json)}}))
        .collect();
    items.push(json!({"metadata": {"name": TABLE_NAME, "labels": {"healthroute.io/table": "manifest"}, "annotations": {"healthroute.io/content-hash": healthroute_table::published::content_hash(manifest.as_bytes())}},
                      "data": {DATA_KEY: manifest}}));
    let (client, mut handle) = mock();
    let mut publisher = Publisher::new(Api::<ConfigMap>::namespaced(client, "healthroute"), 2);
    let server = tokio::spawn(async move {
        expect(&mut handle, "GET", "/api/v1/namespaces/healthroute/configmaps", move |_| {
            json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": items})
        })
        .await;
    });
    let report = publisher.publish(&table, || true).await.expect("publishes");
    assert_eq!((report.shards_written, report.manifest_written), (0, false));
    server.await.expect("server");
}

// Watch semantics: objects missing from a re-list are deleted; EndpointSlices feed readiness;
// checker status entries become views and Leases heartbeats.
#[test]
fn index_follows_watch_events() {
    let mut index = index_with(&[("a", "192.0.2.1"), ("b", "192.0.2.2")]);
    assert_eq!(index.compiler.table().groups.len(), 2);
    // The watch restarts and lists only "a": "b" was deleted meanwhile.
    index.apply(Input::Group(watcher::Event::Init));
    index.apply(Input::Group(watcher::Event::InitApply(rg(
        "a",
        "192.0.2.1",
    ))));
    index.apply(Input::Group(watcher::Event::InitDone));
    index.compiler.compile(jiff::Timestamp::now());
    assert_eq!(index.compiler.table().groups.len(), 1);

    // A service-backed group, with its EndpointSlice.
    let web: RecordGroup = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"name": "web.example.com.", "type": "A", "routingPolicy": "Simple",
                 "records": [{"setIdentifier": "pods", "service": {"name": "web"}}]}
    }))
    .expect("valid");
    index.apply(Input::Group(watcher::Event::Apply(web)));
    let slice = |ready: bool| {
        serde_json::from_value::<k8s_openapi::api::discovery::v1::EndpointSlice>(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": true}},
                          {"addresses": ["10.0.0.2"], "conditions": {"ready": ready}}]
        }))
        .expect("valid")
    };
    index.apply(Input::Slice(watcher::Event::Apply(slice(true))));
    index.compiler.compile(jiff::Timestamp::now());
    let status = index
        .compiler
        .group_status(&healthroute_compiler::ObjectKey::new("shop", "web"))
        .expect("status");
    assert_eq!(status.records[0].values, vec!["10.0.0.1", "10.0.0.2"]);
    // SEM-H11: a pod turns unready: its address leaves the answer.
    index.apply(Input::Slice(watcher::Event::Apply(slice(false))));
    let report = index.compiler.compile(jiff::Timestamp::now());
    assert_eq!(report.recompiled, 1);
    let status = index
        .compiler
        .group_status(&healthroute_compiler::ObjectKey::new("shop", "web"))
        .expect("status");
    assert_eq!(status.records[0].values, vec!["10.0.0.1"]);
}

// SEM-P3: every status is one server-side apply under the operator's field manager, to the
// status subresource of its kind (group, version and plural from the API type), with the
// type's apiVersion and kind; a HealthCheck's body leaves the checkers' entries alone.
#[tokio::test]
async fn each_status_is_applied_to_its_kinds_resource() {
    let (client, mut handle) = mock();
    let queue = WriteQueue::default();
    let key = healthroute_compiler::ObjectKey::new("shop", "x");
    for status in [
        Status::HealthCheck(HealthCheckStatus {
            healthy: Some(true),
            ..Default::default()
        }),
        Status::RecordGroup(RecordGroupStatus {
            served: true,
            served_generation: Some(3),
            ..Default::default()
        }),
        Status::ZonalShift(ZonalShiftStatus {
            applied_groups: Some("1/1".into()),
            ..Default::default()
        }),
        // SEM-AS11: the autoshift engine's memory, on its own kind's resource.
        Status::ZonalAutoshift(Box::new(healthroute_api::ZonalAutoshiftStatus {
            last_request: Some("start:1".into()),
            ..Default::default()
        })),
    ] {
        queue.push(StatusUpdate::quiet(key.clone(), status));
    }
    let (_leader_tx, leader) = tokio::sync::watch::channel(true);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let config = WriterConfig {
        concurrency: 1,
        ..WriterConfig::default()
    };
    let writer = tokio::spawn(writes::run(
        client,
        queue,
        leader,
        writes::TableWrites::default(),
        Default::default(),
        config,
        stop,
    ));
    for (plural, kind, field, value) in [
        ("healthchecks", "HealthCheck", "healthy", json!(true)),
        ("recordgroups", "RecordGroup", "servedGeneration", json!(3)),
        ("zonalshifts", "ZonalShift", "appliedGroups", json!("1/1")),
        (
            "zonalautoshifts",
            "ZonalAutoshift",
            "lastRequest",
            json!("start:1"),
        ),
    ] {
        let body = expect(
            &mut handle,
            "PATCH",
            &format!("/apis/healthroute.io/v1alpha1/namespaces/shop/{plural}/x/status?"),
            |b| {
                let mut object = b.clone();
                object["metadata"] = json!({"name": "x", "namespace": "shop"});
                object
            },
        )
        .await;
        assert_eq!(body["apiVersion"], "healthroute.io/v1alpha1");
        assert_eq!(body["kind"], kind);
        assert_eq!(body["status"][field], value, "{body}");
        assert!(body["status"].get("checkers").is_none(), "{body}");
    }
    let _ = stop_tx.send(true);
    writer.await.expect("the writer stops");
}

/// A resolver's push listener stand-in on loopback: every request's `Authorization` and
/// body, answered 202 as a resolver takes a delta.
async fn push_receiver() -> (
    std::net::SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<(String, Vec<u8>)>,
) {
    use http_body_util::BodyExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("binds");
    let addr = listener.local_addr().expect("addr");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let tx = tx.clone();
                        async move {
                            let auth = req
                                .headers()
                                .get("authorization")
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or_default()
                                .to_owned();
                            let body = req.into_body().collect().await.expect("body").to_bytes();
                            let _ = tx.send((auth, body.to_vec()));
                            let mut response = Response::new(http_body_util::Full::new(
                                hyper::body::Bytes::from_static(b"taken\n"),
                            ));
                            *response.status_mut() = http::StatusCode::ACCEPTED;
                            Ok::<_, std::convert::Infallible>(response)
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, rx)
}

// SEM-P12: the leader pushes each delta, signed, to the resolvers that advertise a push
// address, before its ConfigMap is written (the push does not wait for the write); a
// resolver serves it at once. When that write then fails, the next change is a full table
// numbered above the pushed generation, which the resolver that served the push assembles.
#[tokio::test]
async fn a_pushed_delta_comes_before_its_write_and_a_failed_write_goes_above_it() {
    let key = healthroute_table::push::PushKey::new(b"a push key of at least thirty-two bytes")
        .expect("key");
    let (addr, mut pushes) = push_receiver().await;
    let (client, handle) = mock();
    let metrics = Arc::new(healthroute_operator::push::PushMetrics::default());
    let mut publisher =
        Publisher::new(Api::<ConfigMap>::namespaced(client, "healthroute"), 2).with_pusher(
            healthroute_operator::push::Pusher::new(key.clone(), metrics.clone()),
        );
    publisher.push_to(Arc::from(vec![Arc::<str>::from(addr.to_string())]));
    let mut resolver = Assembler::default();
    let mut handle = first_table(&mut publisher, handle, &mut resolver).await;
    assert!(pushes.try_recv().is_err(), "a full table is not pushed");

    // A change: its delta reaches the resolver while its write waits, and the write fails.
    let changed = index_with(&[("a", "192.0.2.1"), ("b", "192.0.2.99")])
        .compiler
        .table();
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("the delta's write");
        assert_eq!(req.method(), "POST", "a delta is created");
        let body = body_json(req).await;
        let (auth, pushed) = tokio::time::timeout(Duration::from_secs(5), pushes.recv())
            .await
            .expect("pushed while the write waits")
            .expect("a push");
        assert!(key.verify(&pushed, &auth), "signed with the push key");
        assert_eq!(
            body["data"][DATA_KEY].as_str().map(str::as_bytes),
            Some(&pushed[..]),
            "the push carries the ConfigMap's delta"
        );
        send.send_response(
            Response::builder()
                .status(500)
                .body(Body::from(
                    serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "Status", "status": "Failure", "code": 500, "message": "etcd timed out"}))
                        .expect("json"),
                ))
                .expect("response"),
        );
        (pushed, handle)
    });
    publisher
        .publish(&changed, || true)
        .await
        .expect_err("the write failed");
    let (pushed, mut handle) = server.await.expect("server");
    let served = resolver
        .push_delta(&pushed)
        .expect("readable")
        .expect("follows the table served");
    assert_eq!(served.generation, 2);
    assert_eq!(served.groups, changed.groups);
    assert_eq!(metrics_sent(&metrics).await, 1);

    // The next change is a full table above the pushed generation (2), served by it.
    let again = index_with(&[("a", "192.0.2.7"), ("b", "192.0.2.99")])
        .compiler
        .table();
    let server = tokio::spawn(async move { answer_all(&mut handle).await });
    let report = publisher.publish(&again, || true).await.expect("publishes");
    let written = server.await.expect("server");
    assert!(
        report.manifest_written && !report.delta_written,
        "{report:?}"
    );
    assert_eq!(report.generation, 3);
    feed(&mut resolver, &written);
    let served = resolver.assemble().expect("ok").expect("the full table");
    assert_eq!(served.generation, 3);
    assert_eq!(served.groups, again.groups);
}

/// The pushes the receiver answered, once the pusher's task has counted them.
async fn metrics_sent(metrics: &healthroute_operator::push::PushMetrics) -> u64 {
    for _ in 0..500 {
        if metrics.sent() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    metrics.sent()
}

/// An API server stand-in that takes everything: an empty list for a GET, the object back
/// for a write, success for the rest. Runs until the client is dropped.
fn take_everything(mut handle: Handle) {
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().as_str().to_owned();
            let body = body_json(req).await;
            let reply = match method.as_str() {
                "GET" => {
                    json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": []})
                }
                "PATCH" | "PUT" | "POST" => body,
                _ => json!({"apiVersion": "v1", "kind": "Status", "status": "Success"}),
            };
            respond(send, &reply);
        }
    });
}

// SEM-P11: a fold's encode of the whole table runs beside the publisher: a change that
// arrives while it runs is published at once (the step gives up without waiting), and the
// fold goes on afterwards to its manifest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_does_not_wait_for_a_folds_encode() {
    let (client, handle) = mock();
    take_everything(handle);
    let mut publisher = Publisher::new(Api::<ConfigMap>::namespaced(client, "healthroute"), 2);
    let names: Vec<String> = (0..1000).map(|i| format!("g{i}")).collect();
    let table = |changed: usize| {
        let groups: Vec<(&str, &str)> = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                (
                    n.as_str(),
                    if i < changed {
                        "198.51.100.1"
                    } else {
                        "192.0.2.1"
                    },
                )
            })
            .collect();
        index_with(&groups).compiler.table()
    };
    publisher
        .publish(&table(0), || true)
        .await
        .expect("the full table");
    let deltas = healthroute_operator::publish::FOLD_AFTER_DELTAS;
    for c in 1..=deltas {
        let report = publisher
            .publish(&table(c), || true)
            .await
            .expect("a delta");
        assert!(report.delta_written, "change {c}: {report:?}");
    }
    assert!(publisher.folding(), "due after {deltas} deltas");
    // A newer table is already waiting: the step starts the encode and gives up at once.
    let step = publisher
        .fold_step_until(|| true, std::future::ready(()))
        .await
        .expect("a step");
    assert!(step.given_up && step.shards_written == 0, "{step:?}");
    let report = publisher
        .publish(&table(deltas + 1), || true)
        .await
        .expect("the change");
    assert!(
        report.delta_written,
        "published at once, as a delta: {report:?}"
    );
    let mut steps = 0;
    while !publisher.fold_step(|| true).await.expect("a step").done {
        steps += 1;
        assert!(steps < 100, "the fold ends");
    }
    assert!(!publisher.folding());
}

/// The ServiceAccount that owns the table, as the API server answers it.
fn service_account() -> Json {
    json!({"apiVersion": "v1", "kind": "ServiceAccount",
           "metadata": {"name": "hr-operator", "namespace": "healthroute", "uid": "uid-sa"}})
}

/// A term's start with an owner: the account is read, the leader Lease given it (its
/// ownerReferences alone), then the table listed with `listed`.
async fn owner_then_list(handle: &mut Handle, listed: Vec<Json>) {
    expect(
        handle,
        "GET",
        "/api/v1/namespaces/healthroute/serviceaccounts/hr-operator",
        |_| service_account(),
    )
    .await;
    let lease = expect(
        handle,
        "PATCH",
        "/apis/coordination.k8s.io/v1/namespaces/healthroute/leases/healthroute-operator?",
        |b| b.clone(),
    )
    .await;
    assert_eq!(
        lease["metadata"],
        json!({"name": "healthroute-operator", "ownerReferences": [
            {"apiVersion": "v1", "kind": "ServiceAccount", "name": "hr-operator", "uid": "uid-sa"}]}),
        "the Lease's owner and nothing else: its spec is the election's"
    );
    assert!(lease.get("spec").is_none());
    expect(
        handle,
        "GET",
        "/api/v1/namespaces/healthroute/configmaps?&labelSelector=healthroute.io%2Ftable",
        move |_| json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": listed}),
    )
    .await;
}

// SEM-P13: with an owner, every table object names the operator's ServiceAccount (by uid) in
// its ownerReferences, so that the garbage collector removes the table with the release; a
// table found without it (written before) is written again with it, unchanged otherwise, in
// the term's first table; one found with it is left alone.
#[tokio::test]
async fn the_table_is_owned_by_the_operators_service_account() {
    let (client, mut handle) = mock();
    let table = index_with(&[("a", "192.0.2.1"), ("b", "192.0.2.2")])
        .compiler
        .table();
    let owner = json!([{"apiVersion": "v1", "kind": "ServiceAccount", "name": "hr-operator", "uid": "uid-sa"}]);

    // The table as an operator without an owner wrote it.
    let mut unowned = Publisher::new(
        Api::<ConfigMap>::namespaced(client.clone(), "healthroute"),
        2,
    );
    let server = tokio::spawn(async move {
        list_nothing(&mut handle).await;
        let written = answer_all(&mut handle).await;
        (written, handle)
    });
    unowned.publish(&table, || true).await.expect("publishes");
    let (before, mut handle) = server.await.expect("server");
    assert_eq!(before.len(), 3, "two shards and the manifest");
    assert!(
        before
            .iter()
            .all(|b| b["metadata"].get("ownerReferences").is_none())
    );

    // A term with the owner: every object is written again, with it.
    let mut publisher = Publisher::new(Api::<ConfigMap>::namespaced(client, "healthroute"), 2)
        .with_owner("hr-operator", "healthroute-operator");
    let listed = before.clone();
    let server = tokio::spawn(async move {
        owner_then_list(&mut handle, listed).await;
        let written = answer_all(&mut handle).await;
        (written, handle)
    });
    let report = publisher.publish(&table, || true).await.expect("publishes");
    let (after, mut handle) = server.await.expect("server");
    assert_eq!((report.shards_written, report.manifest_written), (2, true));
    assert_eq!(report.generation, 2, "a new manifest above the one found");
    let names = |w: &[Json]| -> Vec<String> {
        w.iter()
            .map(|b| {
                b["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(names(&after), names(&before));
    for (a, b) in after.iter().zip(&before) {
        assert_eq!(
            a["metadata"]["ownerReferences"], owner,
            "{}",
            a["metadata"]["name"]
        );
        if a["metadata"]["labels"]["healthroute.io/table"] == "shard" {
            assert_eq!(a["data"], b["data"], "the same shard, now owned");
        }
    }

    // The next term finds it owned: nothing to write.
    publisher.reset();
    let listed = after.clone();
    let server = tokio::spawn(async move {
        owner_then_list(&mut handle, listed).await;
        answer_all(&mut handle).await
    });
    let report = publisher.publish(&table, || true).await.expect("publishes");
    assert_eq!(
        server.await.expect("server"),
        Vec::<Json>::new(),
        "no write"
    );
    assert_eq!((report.shards_written, report.manifest_written), (0, false));

    // A delta of a later change names the owner too.
    let (client, mut handle) = mock();
    let mut publisher = Publisher::new(Api::<ConfigMap>::namespaced(client, "healthroute"), 2)
        .with_owner("hr-operator", "healthroute-operator");
    let server = tokio::spawn(async move {
        owner_then_list(&mut handle, after).await;
        answer_all(&mut handle).await
    });
    publisher.publish(&table, || true).await.expect("publishes");
    let changed = index_with(&[("a", "192.0.2.1"), ("b", "192.0.2.99")])
        .compiler
        .table();
    let report = publisher
        .publish(&changed, || true)
        .await
        .expect("publishes");
    assert!(report.delta_written);
    let written = server.await.expect("server");
    assert_eq!(written.len(), 1, "{written:?}");
    assert_eq!(
        written[0]["metadata"]["labels"]["healthroute.io/table"],
        "delta"
    );
    assert_eq!(written[0]["metadata"]["ownerReferences"], owner);
}

// SEM-P13: an account that cannot be read (gone, or not readable) never holds the table back:
// it is written without an owner, as before.
#[tokio::test]
async fn a_missing_owner_never_holds_the_table_back() {
    let (client, mut handle) = mock();
    let table = index_with(&[("a", "192.0.2.1")]).compiler.table();
    let mut publisher = Publisher::new(Api::<ConfigMap>::namespaced(client, "healthroute"), 2)
        .with_owner("hr-operator", "healthroute-operator");
    let server = tokio::spawn(async move {
        let (req, send) = handle.next_request().await.expect("a request");
        assert!(
            req.uri()
                .to_string()
                .contains("/serviceaccounts/hr-operator")
        );
        send.send_response(
            Response::builder()
                .status(404)
                .body(Body::from(
                    serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}))
                        .expect("json"),
                ))
                .expect("response"),
        );
        expect(
            &mut handle,
            "GET",
            "/api/v1/namespaces/healthroute/configmaps",
            |_| json!({"apiVersion": "v1", "kind": "ConfigMapList", "metadata": {}, "items": []}),
        )
        .await;
        answer_all(&mut handle).await
    });
    let report = publisher.publish(&table, || true).await.expect("publishes");
    assert!(report.manifest_written);
    let written = server.await.expect("server");
    assert!(!written.is_empty());
    assert!(
        written
            .iter()
            .all(|b| b["metadata"].get("ownerReferences").is_none())
    );
}
