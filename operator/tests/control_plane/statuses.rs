//! Statuses and Events: they never hold back the table, a status another writer changed is
//! written back at the re-check, one Event per fact (SEM-P7, SEM-P5).

use super::*;

// SEM-P7 SEM-P1: with every status write hanging, and then failing, an EndpointSlice change
// still reaches the table at once; statuses wait, the table does not.
#[tokio::test]
async fn status_writes_that_hang_or_fail_never_hold_back_the_table() {
    let n = 300;
    let settings = Settings {
        statuses: Answer::Hang,
        ..Default::default()
    };
    let (api, running, first) = leader_published(settings, n).await;
    assert_eq!(first.manifest_generation(), Some(1));
    // The status writer is stuck on its first patches, which hang.
    api.wait_for("a status write", 0, IN_TIME, |s| s.is_status_write())
        .await;

    let before = api.log().len();
    running.send(Input::Slice(Event::Apply(slice(7, false))));
    let second = api
        .wait_for("the table after a readiness change", before, IN_TIME, |s| {
            s.is_table_commit()
        })
        .await;
    assert_eq!(second.manifest_generation(), Some(2));
    let g7 = served_table(&api);
    let g7 = format!("{:?}", g7.groups["shop/g7"].selection);
    assert!(g7.contains("10.0.7.1") && !g7.contains("10.0.7.2"), "{g7}");
    assert_eq!(
        running.metrics.status.writes.load(Ordering::Relaxed),
        0,
        "no status write has been answered"
    );
    assert!(
        running.metrics.status.backlog.load(Ordering::Relaxed) as usize >= n - 8,
        "the backlog is still there"
    );

    // Now status writes fail instead: the table still goes out at once.
    api.set(|s| s.statuses = Answer::Fail(500));
    let before = api.log().len();
    running.send(Input::Slice(Event::Apply(slice(8, false))));
    let third = api
        .wait_for("the table while statuses fail", before, IN_TIME, |s| {
            s.is_table_commit()
        })
        .await;
    assert_eq!(third.manifest_generation(), Some(3));
    running.stop().await;
}

// SEM-P5: a status that another writer changes is written back within the re-check
// interval, though the object's spec did not change; a status the object shows is not
// written again.
#[tokio::test]
async fn a_status_changed_by_another_writer_is_written_back() {
    let (api, client) = FakeApi::start(Settings::default());
    let mut config = Config::new(
        "healthroute",
        ServedZones::new(["example.com"]).expect("zone"),
    );
    config.shards = 2;
    let recheck = Duration::from_millis(300);
    config.status_recheck = recheck;
    let running = start_with(client, true, config);
    let group = rg("api", "api.example.com.", "192.0.2.1");
    running.list(vec![group.clone()], vec![], vec![]);
    let status = |s: &Seen| s.is_status_write() && s.path.contains("/recordgroups/api/");
    let first = api.wait_for("api's status", 0, IN_TIME, status).await;
    let shown: RecordGroupStatus =
        serde_json::from_value(first.body["status"].clone()).expect("a RecordGroup status");
    assert!(shown.served);

    // The watch brings the write back; from then on the object shows it.
    let mut echoed = group.clone();
    echoed.status = Some(shown.clone());
    running.send(Input::Group(Event::Apply(echoed)));
    tokio::time::sleep(recheck * 2).await;
    let quiet = api.log().len();
    tokio::time::sleep(recheck * 3).await;
    assert!(
        !api.log().iter().skip(quiet).any(status),
        "a status the object shows is not written again: {:#?}",
        &api.log()[quiet..]
    );

    // Another writer says the group is not served.
    let mut overwritten = group.clone();
    overwritten.status = Some(RecordGroupStatus {
        served: false,
        ..shown.clone()
    });
    let before = api.log().len();
    running.send(Input::Group(Event::Apply(overwritten)));
    let repaired = api
        .wait_for(
            "api's status written back",
            before,
            recheck + Duration::from_secs(1),
            status,
        )
        .await;
    assert_eq!(repaired.body["status"]["served"], true);
    assert_eq!(
        repaired.body["status"], first.body["status"],
        "what the leader wrote, transition times included"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !api.log().iter().skip(before).any(|s| s.is_event()),
        "a repair records no Event"
    );
    assert!(running.metrics.status.repairs.load(Ordering::Relaxed) >= 1);
    running.stop().await;
}

fn pods_slice(service: &str, ready: bool) -> EndpointSlice {
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-1"), "namespace": "shop", "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [format!("10.9.{}.1", service.len())], "conditions": {"ready": ready}}]
    }))
    .expect("valid")
}

// One Event per fact, as sent to the API server: three records of one group turning unhealthy
// are three Events, each naming its record in its note and in `related` (the aggregation
// key); the last resort is one more; an alias cycle is an Event with its reason.
#[tokio::test]
async fn events_name_each_record_and_each_rejection() {
    let (api, client) = FakeApi::start(Settings::default());
    let group: RecordGroup = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": "web", "namespace": "shop", "generation": 1, "uid": "uid-web"},
        "spec": {"name": "web.example.com.", "type": "A", "routingPolicy": "MultiValue", "records": [
            {"setIdentifier": "a", "service": {"name": "svca"}},
            {"setIdentifier": "b", "service": {"name": "svcbb"}},
            {"setIdentifier": "c", "service": {"name": "svcccc"}}]}
    }))
    .expect("valid");
    let services = ["svca", "svcbb", "svcccc"];
    let running = start(
        client,
        true,
        vec![group],
        services.iter().map(|s| pods_slice(s, true)).collect(),
        vec![],
    );
    api.wait_for("the first status", 0, IN_TIME, |s| {
        s.is_status_write() && s.path.contains("/recordgroups/web/status")
    })
    .await;
    let before = api.log().len();
    for s in services {
        running.send(Input::Slice(Event::Apply(pods_slice(s, false))));
    }
    api.wait_for("the LastResortEntered Event", before, IN_TIME, |s| {
        s.is_event() && s.body["reason"] == "LastResortEntered"
    })
    .await;
    let events: Vec<Json> = api
        .log()
        .iter()
        .skip(before)
        .filter(|s| s.is_event() && s.body["reason"] == "RecordUnhealthy")
        .map(|s| s.body.clone())
        .collect();
    let mut named: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                e["related"]["fieldPath"].as_str().unwrap_or("").to_owned(),
                e["note"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    named.sort();
    assert_eq!(named.len(), 3, "{events:#?}");
    for ((path, note), id) in named.iter().zip(["a", "b", "c"]) {
        assert_eq!(path, &format!("spec.records{{{id}}}"));
        assert!(
            note.starts_with(&format!("record {id} is unhealthy: service ")),
            "{note}"
        );
        assert!(!note.contains("Some("), "{note}");
    }
    for e in &events {
        assert_eq!(e["regarding"]["name"], "web");
        assert_eq!(e["type"], "Warning");
    }

    // A rejection is an Event with its reason.
    let before = api.log().len();
    let cyclic = |name: &str, target: &str| -> RecordGroup {
        serde_json::from_value(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
            "metadata": {"name": name, "namespace": "shop", "generation": 1, "uid": format!("uid-{name}")},
            "spec": {"name": format!("{name}.example.com."), "type": "A", "routingPolicy": "Simple",
                     "records": [{"setIdentifier": "x", "alias": {"recordGroup": target}}]}
        }))
        .expect("valid")
    };
    running.send(Input::Group(Event::Apply(cyclic("ping", "pong"))));
    running.send(Input::Group(Event::Apply(cyclic("pong", "ping"))));
    let event = api
        .wait_for("an AliasCycle Event", before, IN_TIME, |s| {
            s.is_event() && s.body["reason"] == "AliasCycle"
        })
        .await;
    assert_eq!(event.body["type"], "Warning");
    assert!(
        event.body["note"].as_str().is_some_and(
            |n| n.starts_with("this version is rejected: ") && n.contains("leads back")
        ),
        "{}",
        event.body
    );
    running.stop().await;
}
