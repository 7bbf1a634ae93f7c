//! Terms: a new leader continues above what is published and keeps the last good versions it
//! reads back; only the leader writes; watches resume after an outage (SEM-P3, SEM-P4,
//! SEM-P6, SEM-P8).

use super::*;

// SEM-P4 SEM-P11: a new leader whose process counted nothing yet continues above the
// generation it finds published, and above the generation a resolver says it serves. Its
// first table is a new manifest; where the shards on the server are those the published
// manifest names, it names them again and carries what changed in a catch-up delta, without
// rewriting a shard; where they are not (a shard left by a leader that stopped before its
// manifest), the shards are written.
#[tokio::test]
async fn a_new_leader_continues_above_the_published_generation() {
    let old = [rg("api", "api.example.com.", "192.0.2.1")];
    for (lease_generation, expected, stray_shard) in
        [(None, 42, false), (Some(50), 51, false), (None, 42, true)]
    {
        let (api, client) = FakeApi::start(Settings::default());
        put_published(&api, &compiled(41, &old), 2);
        if stray_shard {
            let mut cm = api.configmap("healthroute-table-0").expect("shard 0");
            cm["metadata"]["annotations"]["healthroute.io/content-hash"] = json!("other");
            api.put_configmap(cm);
        }
        let leases = lease_generation.map(lease).into_iter().collect();
        // The group was edited while no leader was running.
        let running = start(
            client,
            true,
            vec![rg("api", "api.example.com.", "192.0.2.2")],
            vec![],
            leases,
        );
        let manifest = api
            .wait_for("a manifest", 0, IN_TIME, |s| s.is_manifest_write())
            .await;
        assert_eq!(manifest.manifest_generation(), Some(expected));
        let shards_written = api.log().iter().filter(|s| s.is_shard_write()).count();
        assert_eq!(shards_written > 0, stray_shard, "{:?}", api.log());
        let table = served_table(&api);
        assert!(format!("{:?}", table.groups["shop/api"]).contains("192.0.2.2"));
        running.stop().await;
    }
}

// SEM-P6 SEM-S8: a group renamed outside every zone under an earlier leader keeps serving its
// last good version under the next one, which reads it back from the published table; its
// status says so.
#[tokio::test]
async fn a_new_leader_keeps_the_last_good_version_of_a_rejected_group() {
    let (api, client) = FakeApi::start(Settings::default());
    let good = rg("api", "api.example.com.", "192.0.2.1");
    put_published(&api, &compiled(7, std::slice::from_ref(&good)), 2);
    let mut renamed = good.clone();
    renamed.spec.name = "api.elsewhere.org.".into();
    renamed.metadata.generation = Some(2);
    // A new group makes the new leader publish; the rejected one must ride along unchanged.
    // The read-back is done before the watches have listed anything (a cold start).
    let running = start_unlisted(client, true);
    api.wait_for("the read-back", 0, IN_TIME, |s| s.method == "GET")
        .await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    running.list(
        vec![renamed, rg("web", "web.example.com.", "192.0.2.9")],
        vec![],
        vec![],
    );
    let manifest = api
        .wait_for("a manifest", 0, IN_TIME, |s| s.is_manifest_write())
        .await;
    assert_eq!(manifest.manifest_generation(), Some(8));
    let table = served_table(&api);
    assert_eq!(
        table.generation, 9,
        "the new manifest, and its catch-up delta"
    );
    let served = format!(
        "{:?}",
        table.groups.get("shop/api").expect("api still served")
    );
    assert!(
        served.contains("192.0.2.1") && served.contains("api.example.com."),
        "{served}"
    );
    assert!(table.groups.contains_key("shop/web"));

    let status = api
        .wait_for("api's status", 0, IN_TIME, |s| {
            s.is_status_write() && s.path.contains("/recordgroups/api/")
        })
        .await
        .body;
    assert_eq!(status["status"]["served"], true);
    assert_eq!(
        status["status"]["servedGeneration"], 7,
        "unchanged since generation 7"
    );
    assert_eq!(condition(&status, "Compiled")["reason"], "ZoneNotServed");
    let ready = condition(&status, "Ready");
    assert_eq!(ready["status"], "True");
    assert!(
        ready["message"]
            .as_str()
            .is_some_and(|m| m.contains("last good version")),
        "{ready}"
    );
    running.stop().await;
}

// SEM-P3: a replica that is not the leader writes nothing and compiles nothing, and one that
// becomes leader starts by reading back what is published; one that steps down forgets its
// outputs and compiles again only when it leads again.
#[tokio::test]
async fn only_the_leader_writes_and_a_term_starts_with_a_read_back() {
    let (api, client) = FakeApi::start(Settings::default());
    let running = start(
        client,
        false,
        vec![rg("api", "api.example.com.", "192.0.2.1")],
        vec![],
        vec![],
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(api.log().is_empty(), "a follower sent {:?}", api.log());
    let compiles = || running.metrics.control.compiles.load(Ordering::Relaxed);
    assert_eq!(compiles(), 0, "a follower compiled");
    running.leader.send(true).expect("leader");
    api.wait_for("a manifest", 0, IN_TIME, |s| s.is_manifest_write())
        .await;
    let log = api.log();
    assert_eq!(log[0].method, "GET", "the term starts by reading back");
    assert!(log[0].path.contains("configmaps"), "{}", log[0].path);
    assert!(compiles() > 0);
    // Stepping down: no compile until the next term, which publishes the edit made meanwhile.
    running.leader.send(false).expect("follower");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let after_term = compiles();
    running.send(Input::Group(Event::Apply(rg(
        "api",
        "api.example.com.",
        "192.0.2.7",
    ))));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(compiles(), after_term, "a follower compiled");
    let before = api.log().len();
    running.leader.send(true).expect("leader");
    api.wait_for("the next term's table", before, IN_TIME, |s| {
        s.is_table_commit()
    })
    .await;
    let table = served_table(&api);
    assert!(format!("{:?}", table.groups["shop/api"]).contains("192.0.2.7"));
    running.stop().await;
}

fn is_init_done(input: &Input) -> bool {
    matches!(
        input,
        Input::Group(Event::InitDone)
            | Input::Check(Event::InitDone)
            | Input::Shift(Event::InitDone)
            | Input::Slice(Event::InitDone)
            | Input::Service(Event::InitDone)
            | Input::Autoshift(Event::InitDone)
            | Input::Node(Event::InitDone)
            | Input::Lease(Event::InitDone)
    )
}

/// How many watches `controller::inputs` runs (ZonalAutoshifts and Nodes made 6 into 8).
const WATCHES: usize = 8;

// SEM-P8: after an outage, every watch lists again within a second of the API server
// answering (bounded backoff), however long the outage lasted. Virtual time: the check is
// exact, not a race against the machine's load.
#[tokio::test(start_paused = true)]
async fn watches_resume_within_a_second_of_the_api_server_returning() {
    use futures::StreamExt;
    use http::{Request, Response};
    use kube::client::Body;
    use tokio::time::Instant;

    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "healthroute");
    let outage = Duration::from_secs(77);
    let back_at = Instant::now() + outage;
    let firsts = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<
        String,
        Duration,
    >::new()));
    let seen = firsts.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Some((req, send)) = handle.next_request().await {
            let path = req.uri().path().to_owned();
            let query = req.uri().query().unwrap_or_default().to_owned();
            let watching = query.contains("watch=true");
            // A streaming list: the initial events (none here), then the bookmark that ends them.
            let initial = query.contains("sendInitialEvents=true");
            if Instant::now() < back_at {
                let mut r = Response::new(Body::from(
                    serde_json::to_vec(&json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 503, "reason": "ServiceUnavailable", "message": "apiserver is restarting"}))
                        .expect("json"),
                ));
                *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
                send.send_response(r);
            } else if initial {
                seen.lock()
                    .expect("lock")
                    .entry(path)
                    .or_insert_with(|| Instant::now() - back_at);
                let end = json!({"type": "BOOKMARK", "object": {"kind": "Status", "apiVersion": "v1",
                    "metadata": {"resourceVersion": "1", "annotations": {"k8s.io/initial-events-end": "true"}}}});
                send.send_response(Response::new(Body::from(format!("{end}\n").into_bytes())));
            } else if watching {
                held.push(send); // a watch that stays open
            } else {
                seen.lock()
                    .expect("lock")
                    .entry(path)
                    .or_insert_with(|| Instant::now() - back_at);
                send.send_response(Response::new(Body::from(
                    serde_json::to_vec(&json!({"metadata": {"resourceVersion": "1"}, "items": []}))
                        .expect("json"),
                )));
            }
        }
    });
    let mut inputs = controller::inputs(&client, "healthroute");
    let mut listed = 0;
    let deadline = Instant::now() + outage + Duration::from_secs(30);
    while listed < WATCHES && Instant::now() < deadline {
        match tokio::time::timeout_at(deadline, inputs.next()).await {
            Ok(Some(input)) => listed += usize::from(is_init_done(&input)),
            _ => break,
        }
    }
    let firsts = firsts.lock().expect("lock").clone();
    assert_eq!(
        firsts.len(),
        WATCHES,
        "every watch listed again: {firsts:?}"
    );
    for (path, after) in firsts {
        assert!(
            after <= Duration::from_secs(1),
            "{path} listed {after:?} after the API server was back"
        );
    }
}
