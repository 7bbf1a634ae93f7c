//! `healthroute-operator uninstall` at the Kubernetes boundary (SEM-P13), against the API
//! server stand-in keeping every object: the operator is stopped before anything is removed;
//! exactly what healthroute made at runtime goes (the derived Peer checks, the engine-shift
//! mirrors, the table, the leader Lease, gone pods' checker Leases), the users' objects stay,
//! every RecordGroup says that nothing serves it, all checked by listing; a second run finds
//! nothing and writes nothing.

#[allow(dead_code)]
mod support {
    pub mod fake_api;
}

use std::time::Duration;

use healthroute_operator::error::Error;
use healthroute_operator::uninstall::{self, Report, Settings};
use serde_json::{Value as Json, json};
use support::fake_api::{FakeApi, Seen, Settings as ApiSettings};

fn now_micro(offset_s: i64) -> String {
    let t = jiff::Timestamp::now()
        .checked_add(jiff::SignedDuration::from_secs(offset_s))
        .expect("in range");
    t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

fn lease(name: &str, holder: Option<&str>, renewed: &str, seconds: i32, labels: Json) -> Json {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": name, "namespace": "healthroute", "labels": labels},
           "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": seconds}})
}

fn check(ns: &str, name: &str, derived: bool) -> Json {
    let labels = if derived {
        json!({"healthroute.io/peer-check": "true"})
    } else {
        json!({})
    };
    json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
           "metadata": {"name": name, "namespace": ns, "labels": labels},
           "spec": {"type": "Peer", "peer": {"cluster": "west", "recordGroup": "shop/api"}}})
}

fn shift(ns: &str, name: &str, label: bool, controlled: bool) -> Json {
    let mut meta = json!({"name": name, "namespace": ns});
    if label {
        meta["labels"] = json!({"healthroute.io/engine-shift": "cfg"});
    }
    if controlled {
        meta["ownerReferences"] = json!([{"apiVersion": "healthroute.io/v1alpha1",
            "kind": "ZonalAutoshift", "name": "cfg", "uid": "uid-cfg", "controller": true}]);
    }
    json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalShift", "metadata": meta,
           "spec": {"awayFrom": "zone-a", "target": {"recordGroup": "api"}, "expiresIn": "72h"}})
}

fn group(ns: &str, name: &str, served: bool) -> Json {
    let mut g = json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": name, "namespace": ns, "generation": 3},
        "spec": {"name": format!("{name}.example.com."), "type": "A", "routingPolicy": "Simple",
                 "records": [{"setIdentifier": "x", "values": ["192.0.2.1"]}]}});
    if served {
        g["status"] = json!({"served": true, "servedGeneration": 5, "healthyRecords": "1/1",
            "records": [{"setIdentifier": "x", "healthy": true, "values": ["192.0.2.1"]}],
            "lastResort": false, "observedGeneration": 3,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Served",
                            "message": "served by the resolvers (table generation 5)",
                            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 3}]});
    }
    g
}

fn table_cm(name: &str, role: Option<&str>) -> Json {
    let labels = match role {
        Some(r) => json!({"healthroute.io/table": r}),
        None => json!({}),
    };
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "healthroute", "labels": labels},
           "data": {"table.json": "{}"}})
}

/// An installation as issue #42 found it: a running operator (two replicas, one leading),
/// its table, a live resolver's Lease and a gone one's, what it derived, and the users' own.
fn installed(api: &FakeApi) {
    api.put_object(
        "deployments",
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "hr-operator", "namespace": "healthroute", "generation": 1},
               "spec": {"replicas": 2, "selector": {}, "template": {}},
               "status": {"observedGeneration": 1, "replicas": 2}}),
    );
    api.put_object(
        "leases",
        lease(
            "healthroute-operator",
            Some("hr-operator-abc"),
            &now_micro(0),
            15,
            json!({}),
        ),
    );
    let checker = json!({"healthroute.io/checker": "r1"});
    api.put_object(
        "leases",
        lease(
            "healthroute-checker-r1",
            Some("r1"),
            &now_micro(3600),
            10,
            checker,
        ),
    );
    let gone = json!({"healthroute.io/checker": "r0"});
    api.put_object(
        "leases",
        lease(
            "healthroute-checker-r0",
            Some("r0"),
            "2026-01-01T00:00:00.000000Z",
            10,
            gone,
        ),
    );
    for (name, role) in [
        ("healthroute-table", Some("manifest")),
        ("healthroute-table-0", Some("shard")),
        ("healthroute-table-delta-3", Some("delta")),
        ("shop-settings", None),
    ] {
        api.put_configmap(table_cm(name, role));
    }
    api.put_object("healthchecks", check("shop", "peer.west.shop.api", true));
    api.put_object("healthchecks", check("other", "peer.west.other.api", true));
    // The user's own check of a derived name, and another of theirs.
    api.put_object("healthchecks", check("shop", "peer.west.shop.web", false));
    api.put_object("healthchecks", check("shop", "web", false));
    api.put_object("zonalshifts", shift("shop", "cfg-autoshift", true, true));
    // A customer's shift that carries the label without a ZonalAutoshift controlling it
    // (AS13), and a plain one.
    api.put_object("zonalshifts", shift("shop", "labelled", true, false));
    api.put_object("zonalshifts", shift("shop", "maintenance", false, false));
    api.put_object("recordgroups", group("shop", "api", true));
    api.put_object("recordgroups", group("other", "new", false));
}

/// The leader, told to stop (its Deployment scaled to 0), releases its Lease a second later,
/// once its writes have ended (as `leader::hand_over` does); returns when it did.
fn leader_stops_when_scaled_down(api: &FakeApi) -> tokio::task::JoinHandle<tokio::time::Instant> {
    let api = api.clone();
    tokio::spawn(async move {
        api.wait_for("the scale-down", 0, Duration::from_secs(10), |s| {
            s.method == "PATCH" && s.path.contains("/deployments/hr-operator/scale")
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let mut released = api
            .object("leases", "healthroute", "healthroute-operator")
            .expect("the leader Lease");
        released["spec"] = json!({});
        api.put_object("leases", released);
        tokio::time::Instant::now()
    })
}

fn settings() -> Settings {
    Settings {
        operator_deployment: Some("hr-operator".into()),
        timeout: 30,
        ..Settings::new("healthroute")
    }
}

fn ready(group: &Json) -> (String, String, String) {
    let c = &group["status"]["conditions"][0];
    let s = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    (s(&c["status"]), s(&c["reason"]), s(&c["message"]))
}

fn writes(log: &[Seen]) -> Vec<String> {
    log.iter()
        .filter(|s| s.method != "GET")
        .map(|s| format!("{} {}", s.method, s.path))
        .collect()
}

// SEM-P13: the operator is stopped first (scaled to 0; nothing is removed or marked before
// its leader released the Lease); then exactly healthroute's runtime objects go, the users'
// stay, every RecordGroup says that nothing serves it, and the last pass lists nothing left.
#[tokio::test]
async fn uninstall_removes_exactly_what_healthroute_made_and_marks_every_group() {
    let (api, client) = FakeApi::start(ApiSettings {
        objects: true,
        ..ApiSettings::default()
    });
    installed(&api);
    let released = leader_stops_when_scaled_down(&api);

    let report = uninstall::run(client.clone(), &settings())
        .await
        .expect("uninstalls");
    let released_at = released.await.expect("the leader released");
    assert_eq!(
        report,
        Report {
            operator_replicas: 2,
            peer_checks: 2,
            engine_shifts: 1,
            groups_marked: 2,
            table_configmaps: 3,
            leases: 2,
            live_checker_leases: 1,
            passes: 2,
        }
    );
    let log = api.log();
    let scaled = log
        .iter()
        .position(|s| s.path.contains("/scale"))
        .expect("scaled");
    assert_eq!(
        log[scaled].body,
        json!({"spec": {"replicas": 0}}),
        "the operator scaled to 0"
    );
    let first_removal = log
        .iter()
        .find(|s| s.method == "DELETE" || s.is_status_write())
        .expect("removals");
    assert!(
        first_removal.at >= released_at,
        "nothing removed or marked while a leader could still write: {} {}",
        first_removal.method,
        first_removal.path
    );

    // Checked by listing: only the users' objects, and the running resolver's Lease.
    assert_eq!(
        api.object_names("healthchecks"),
        ["shop/peer.west.shop.web", "shop/web"]
    );
    assert_eq!(
        api.object_names("zonalshifts"),
        ["shop/labelled", "shop/maintenance"]
    );
    assert_eq!(api.configmap_names(), ["shop-settings"]);
    assert_eq!(
        api.object_names("leases"),
        ["healthroute/healthroute-checker-r1"]
    );
    let deployment = api
        .object("deployments", "healthroute", "hr-operator")
        .expect("the Deployment stays: helm deletes it");
    assert_eq!(deployment["spec"]["replicas"], 0);
    for (ns, name) in [("shop", "api"), ("other", "new")] {
        let g = api
            .object("recordgroups", ns, name)
            .expect("the group stays");
        let st = &g["status"];
        assert_eq!(st["served"], false, "{ns}/{name}: {st}");
        assert!(
            st.get("servedGeneration").is_none()
                && st.get("records").is_none()
                && st.get("healthyRecords").is_none(),
            "{ns}/{name}: {st}"
        );
        assert_eq!(
            ready(&g),
            (
                "False".into(),
                "NotServed".into(),
                "healthroute was uninstalled: no resolver serves this group".into()
            )
        );
        assert_eq!(st["observedGeneration"], 3);
        assert_eq!(g["spec"]["name"], format!("{name}.example.com."));
    }

    // A second run: nothing to do, nothing written.
    let before = api.log().len();
    let again = uninstall::run(client, &settings())
        .await
        .expect("uninstalls again");
    assert_eq!(
        again,
        Report {
            live_checker_leases: 1,
            passes: 1,
            ..Report::default()
        }
    );
    assert_eq!(writes(&api.log()[before..]), Vec::<String>::new());
}

// SEM-P13: with the operator's --watch-namespace, only that namespace's checks, mirrors and
// groups are touched: another installation's stay.
#[tokio::test]
async fn uninstall_keeps_to_the_watched_namespace() {
    let (api, client) = FakeApi::start(ApiSettings {
        objects: true,
        ..ApiSettings::default()
    });
    installed(&api);
    let released = leader_stops_when_scaled_down(&api);
    let report = uninstall::run(
        client,
        &Settings {
            watch_namespace: Some("shop".into()),
            ..settings()
        },
    )
    .await
    .expect("uninstalls");
    released.await.expect("released");
    assert_eq!((report.peer_checks, report.groups_marked), (1, 1));
    assert!(
        api.object_names("healthchecks")
            .contains(&"other/peer.west.other.api".to_owned())
    );
    let other = api
        .object("recordgroups", "other", "new")
        .expect("the group");
    assert!(other.get("status").is_none(), "{other}");
}

// SEM-P13: without the operator's Deployment to stop, a leader still holding its Lease makes
// the run fail at once, having changed nothing.
#[tokio::test]
async fn uninstall_refuses_while_a_leader_runs_that_it_cannot_stop() {
    let (api, client) = FakeApi::start(ApiSettings {
        objects: true,
        ..ApiSettings::default()
    });
    installed(&api);
    let started = std::time::Instant::now();
    let e = uninstall::run(client, &Settings::new("healthroute"))
        .await
        .expect_err("a leader runs");
    assert!(matches!(e, Error::UninstallIncomplete { .. }), "{e}");
    assert!(e.to_string().contains("--operator-deployment"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(writes(&api.log()), Vec::<String>::new());
}
