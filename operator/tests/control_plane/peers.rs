//! The Peer checks the leader writes for peer sources, and a user's check of that name
//! (SEM-X4).

use super::*;

/// A group whose secondary answers what `shop/api` answers in the peer cluster `west`.
fn peer_group(name: &str) -> RecordGroup {
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": name, "namespace": "shop", "generation": 1, "uid": format!("uid-{name}")},
        "spec": {"name": format!("{name}.example.com."), "type": "A", "routingPolicy": "Failover",
                 "records": [
                     {"setIdentifier": "here", "failover": {"role": "Primary"}, "values": ["192.0.2.1"]},
                     {"setIdentifier": "west", "failover": {"role": "Secondary"},
                      "peer": {"cluster": "west", "recordGroup": "shop/api"}}]}
    }))
    .expect("valid")
}

const PEER_CHECK_PATH: &str =
    "/apis/healthroute.io/v1alpha1/namespaces/shop/healthchecks/peer.west.shop.api?";

// SEM-X4: the leader applies the Peer check a group's peer source needs, labelled and owned
// by every group that names it, under its own field manager; when the last group is gone,
// it deletes the check (only the object it saw, by uid).
#[tokio::test]
async fn the_leader_creates_the_peer_check_and_deletes_it_with_the_last_group() {
    let (api, client) = FakeApi::start(Settings::default());
    let running = start(
        client,
        true,
        vec![peer_group("www"), peer_group("shop")],
        vec![],
        vec![],
    );
    let applied = api
        .wait_for("the Peer check's apply", 0, IN_TIME, |s| {
            s.method == "PATCH" && s.path.starts_with(PEER_CHECK_PATH)
        })
        .await;
    assert!(
        applied
            .path
            .contains("fieldManager=healthroute-operator%2Fpeers")
            && applied.path.contains("force=true"),
        "{}",
        applied.path
    );
    let body = &applied.body;
    assert_eq!(body["kind"], "HealthCheck");
    assert_eq!(
        body["metadata"]["labels"]["healthroute.io/peer-check"],
        "true"
    );
    assert_eq!(body["spec"]["type"], "Peer");
    assert_eq!(
        body["spec"]["peer"],
        json!({"cluster": "west", "recordGroup": "shop/api"})
    );
    assert_eq!(
        body["metadata"]["ownerReferences"],
        json!([
            {"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "name": "shop", "uid": "uid-shop"},
            {"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "name": "www", "uid": "uid-www"},
        ])
    );
    let checks = api.log().iter().filter(|s| s.is_check_write()).count();
    assert_eq!(checks, 1, "one check for both groups");

    // The watch sees the check as applied; nothing more is written for it.
    let mut seen = body.clone();
    seen["metadata"]["uid"] = json!("uid-check");
    let check: HealthCheck = serde_json::from_value(seen).expect("a HealthCheck");
    running.send(Input::Check(Event::Apply(check.clone())));
    running.send(Input::Group(Event::Delete(peer_group("shop"))));
    let shrunk = api
        .wait_for("the apply without the deleted owner", 0, IN_TIME, |s| {
            s.method == "PATCH"
                && s.path.starts_with(PEER_CHECK_PATH)
                && s.body["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|o| o.len() == 1)
        })
        .await;
    assert_eq!(shrunk.body["metadata"]["ownerReferences"][0]["name"], "www");
    let mut seen = shrunk.body.clone();
    seen["metadata"]["uid"] = json!("uid-check");
    running.send(Input::Check(Event::Apply(
        serde_json::from_value(seen).expect("a HealthCheck"),
    )));

    let before = api.log().len();
    running.send(Input::Group(Event::Delete(peer_group("www"))));
    let deleted = api
        .wait_for("the Peer check's delete", before, IN_TIME, |s| {
            s.method == "DELETE"
        })
        .await;
    assert!(
        deleted
            .path
            .starts_with(PEER_CHECK_PATH.trim_end_matches('?')),
        "{}",
        deleted.path
    );
    assert_eq!(deleted.body["preconditions"]["uid"], "uid-check");
    running.stop().await;
}

// SEM-X4: a HealthCheck of that name without the operator's label is the user's: the leader
// neither applies over it nor deletes it.
#[tokio::test]
async fn a_users_peer_check_is_used_as_it_is() {
    let (api, client) = FakeApi::start(Settings::default());
    let running = start_unlisted(client, true);
    let users: HealthCheck = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
        "metadata": {"name": "peer.west.shop.api", "namespace": "shop", "uid": "uid-users"},
        "spec": {"type": "Peer", "peer": {"cluster": "west", "recordGroup": "shop/api"},
                 "requestIntervalSeconds": 30, "failureThreshold": 5}
    }))
    .expect("valid");
    // The check is in the first list: the first plan already sees it.
    running.send(Input::Check(Event::Init));
    running.send(Input::Check(Event::InitApply(users)));
    running.send(Input::Check(Event::InitDone));
    running.list_but_checks(vec![peer_group("www")]);
    api.wait_for("the first manifest", 0, IN_TIME, |s| s.is_manifest_write())
        .await;
    running.send(Input::Group(Event::Delete(peer_group("www"))));
    let before = api.log().len();
    api.wait_for("the table without www", before, IN_TIME, |s| {
        s.is_table_commit()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writes: Vec<String> = api
        .log()
        .iter()
        .filter(|s| s.is_check_write())
        .map(|s| format!("{} {}", s.method, s.path))
        .collect();
    assert!(writes.is_empty(), "{writes:#?}");
    running.stop().await;
}

// SEM-P7 SEM-X4: with every Peer-check write hanging, a readiness change still reaches the
// table at once.
#[tokio::test]
async fn peer_check_writes_that_hang_never_hold_back_the_table() {
    let (api, client) = FakeApi::start(Settings {
        checks: Answer::Hang,
        ..Default::default()
    });
    let mut groups: Vec<RecordGroup> = (0..20).map(service_group).collect();
    groups.push(peer_group("www"));
    let running = start(
        client,
        true,
        groups,
        (0..20).map(|i| slice(i, true)).collect(),
        vec![],
    );
    api.wait_for("the Peer check's apply", 0, IN_TIME, |s| s.is_check_write())
        .await;
    api.wait_for("the first manifest", 0, IN_TIME, |s| s.is_manifest_write())
        .await;
    let before = api.log().len();
    running.send(Input::Slice(Event::Apply(slice(7, false))));
    api.wait_for("the table after a readiness change", before, IN_TIME, |s| {
        s.is_table_commit()
    })
    .await;
    assert_eq!(
        running.metrics.peers.writer.writes.load(Ordering::Relaxed),
        0
    );
    running.stop().await;
}
