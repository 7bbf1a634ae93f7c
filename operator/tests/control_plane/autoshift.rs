//! Zonal autoshift: the engine's status written by the leader and resumed by the next one
//! (SEM-AS4, SEM-AS10, SEM-AS11).

use super::*;

// Zonal autoshift (SEMANTICS AS): three frontend groups, each a Service with one endpoint in
// each of three zones, and a ZonalAutoshift `frontend` over them.

const FRONTEND: [&str; 3] = ["api", "web", "search"];
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

fn frontend_group(i: usize) -> RecordGroup {
    let name = FRONTEND[i];
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
        "metadata": {"name": name, "namespace": "shop", "generation": 1, "uid": format!("uid-{name}"),
                     "labels": {"tier": "frontend"}},
        "spec": {"name": format!("{name}.example.com."), "type": "A", "routingPolicy": "MultiValue",
                 "records": [{"setIdentifier": "pods", "service": {"name": format!("svc-{name}")}}]}
    }))
    .expect("valid")
}

/// The address of group `i`'s endpoint in zone `z`.
fn zonal_ip(i: usize, z: usize) -> String {
    format!("10.7.{i}.{}", z + 1)
}

/// Group `i`'s endpoints, one per zone; zone-a's ready or not.
fn zonal_slice(i: usize, zone_a_ready: bool) -> EndpointSlice {
    let name = FRONTEND[i];
    let endpoints: Vec<Json> = ZONES
        .iter()
        .enumerate()
        .map(|(z, zone)| {
            json!({"addresses": [zonal_ip(i, z)], "zone": zone,
                   "conditions": {"ready": z != 0 || zone_a_ready}})
        })
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("svc-{name}-1"), "namespace": "shop",
                     "labels": {"kubernetes.io/service-name": format!("svc-{name}")}},
        "addressType": "IPv4",
        "endpoints": endpoints
    }))
    .expect("valid")
}

/// The practice runs' outcome alarm: healthy (not in ALARM), as its last status says.
fn outcome_alarm() -> HealthCheck {
    serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
        "metadata": {"name": "outcome", "namespace": "shop", "generation": 1},
        "spec": {"type": "TCP", "target": {"address": "127.0.0.1", "port": 9}},
        "status": {"healthy": true}
    }))
    .expect("valid")
}

/// The ZonalAutoshift over the frontend groups, with a practice run request and a status.
fn frontend_autoshift(
    request: Option<&str>,
    status: Option<Json>,
) -> healthroute_api::ZonalAutoshift {
    let annotations = match request {
        Some(r) => json!({"healthroute.io/practice-run": r}),
        None => json!({}),
    };
    // Made a minute ago: its first scheduled run is a cadence away (AS6).
    let created = jiff::Timestamp::now()
        .checked_sub(jiff::SignedDuration::from_secs(60))
        .expect("in range")
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let mut object = json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalAutoshift",
        "metadata": {"name": "frontend", "namespace": "shop", "generation": 1, "uid": "uid-frontend",
                     "creationTimestamp": created, "annotations": annotations},
        "spec": {"target": {"selector": {"matchLabels": {"tier": "frontend"}}}, "autoshift": "Enabled",
                 "detection": {"holdTime": "1h"},
                 "practiceRun": {"outcomeAlarms": [{"name": "outcome"}], "cadence": "168h"}}
    });
    if let Some(status) = status {
        object["status"] = status;
    }
    serde_json::from_value(object).expect("valid")
}

impl Running {
    /// The first lists of every watch: the frontend groups and their slices (zone-a ready or
    /// not), the outcome alarm and the ZonalAutoshift.
    fn list_frontend(&self, zone_a_ready: bool, autoshift: healthroute_api::ZonalAutoshift) {
        self.send(Input::Group(Event::Init));
        for i in 0..FRONTEND.len() {
            self.send(Input::Group(Event::InitApply(frontend_group(i))));
        }
        self.send(Input::Group(Event::InitDone));
        self.send(Input::Slice(Event::Init));
        for i in 0..FRONTEND.len() {
            self.send(Input::Slice(Event::InitApply(zonal_slice(i, zone_a_ready))));
        }
        self.send(Input::Slice(Event::InitDone));
        self.send(Input::Check(Event::Init));
        self.send(Input::Check(Event::InitApply(outcome_alarm())));
        self.send(Input::Check(Event::InitDone));
        self.send(Input::Autoshift(Event::Init));
        self.send(Input::Autoshift(Event::InitApply(autoshift)));
        self.send(Input::Autoshift(Event::InitDone));
        for input in [
            Input::Lease(Event::Init),
            Input::Lease(Event::InitDone),
            Input::Shift(Event::Init),
            Input::Shift(Event::InitDone),
            Input::Service(Event::<Service>::Init),
            Input::Service(Event::<Service>::InitDone),
            Input::Node(Event::Init),
            Input::Node(Event::InitDone),
        ] {
            self.send(input);
        }
    }
}

fn is_autoshift_status(s: &support::fake_api::Seen) -> bool {
    s.is_status_write() && s.path.contains("/zonalautoshifts/frontend/status")
}

/// Whether the published table answers `group`'s endpoint in zone-a.
fn answers_zone_a(api: &FakeApi, i: usize) -> bool {
    let table = served_table(api);
    let key = format!("shop/{}", FRONTEND[i]);
    format!("{:?}", table.groups[key.as_str()].selection).contains(&zonal_ip(i, 0))
}

// SEM-AS4 SEM-AS10 SEM-AS11: the leader writes what the engine decided (an autoshift away
// from zone-a, the request answered) with its Events, and a new leader resumes from that
// status: while it was a follower its own engine started the asked-for run on a healthy
// zone-a, but once leading it keeps the last leader's autoshift (same start, zone-a now in
// its hold time, still shifted away from in the table it publishes), answers no request
// again and records no Event of its own.
#[tokio::test]
async fn a_new_leader_resumes_the_autoshift_from_its_status() {
    // The first leader: zone-a's endpoints are down in every group.
    let (api_a, client_a) = FakeApi::start(Settings::default());
    let first = start_unlisted(client_a, true);
    first.list_frontend(false, frontend_autoshift(Some("start:1"), None));
    let written = api_a
        .wait_for(
            "the ZonalAutoshift's status",
            0,
            IN_TIME,
            is_autoshift_status,
        )
        .await;
    let status = written.body["status"].clone();
    assert_eq!(status["autoshift"], "Active", "{status:#}");
    assert_eq!(status["activeZone"], "zone-a");
    assert_eq!(status["lastRequest"], "start:1");
    assert_eq!(status["notStarted"]["reason"], "AutoshiftActive");
    assert_eq!(status["shifts"][0]["status"]["type"], "Autoshift");
    assert_eq!(status["shifts"][0]["status"]["appliedGroups"], "3/3");
    assert_eq!(condition(&written.body, "Ready")["reason"], "Configured");
    let autoshift = condition(&written.body, "Autoshift");
    assert_eq!(
        (&autoshift["status"], &autoshift["reason"]),
        (&json!("True"), &json!("ZoneImpaired"))
    );
    assert!(
        autoshift["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("traffic moves away from zone-a since ")),
        "{autoshift}"
    );
    let rejected = api_a
        .wait_for("the refused request's Event", 0, IN_TIME, |s| {
            s.is_event() && s.body["reason"] == "PracticeRunNotStarted"
        })
        .await;
    assert_eq!(rejected.body["type"], "Warning");
    assert_eq!(rejected.body["regarding"]["kind"], "ZonalAutoshift");
    let started = api_a
        .wait_for("the AutoshiftStarted Event", 0, IN_TIME, |s| {
            s.is_event() && s.body["reason"] == "AutoshiftStarted"
        })
        .await;
    assert_eq!(started.body["type"], "Normal");
    assert_eq!(started.body["related"]["fieldPath"], "status.zones{zone-a}");
    assert!(
        started.body["note"].as_str().is_some_and(
            |n| n.starts_with("autoshift away from zone-a started: zone-a is impaired")
        ),
        "{}",
        started.body
    );
    let autoshift_metrics = |r: &Running| {
        let mut registry = healthroute_admin::metrics::Registry::default();
        r.metrics.register(&mut registry);
        healthroute_admin::metrics::encode(&registry)
    };
    let shown = autoshift_metrics(&first);
    for line in [
        r#"healthroute_autoshift_active{zone="zone-a"} 1"#,
        r#"healthroute_practice_runs_not_started_total{reason="AutoshiftActive"} 1"#,
    ] {
        assert!(shown.lines().any(|l| l == line), "{line} in\n{shown}");
    }
    first.stop().await;

    // The next leader, a follower first: it lists the object before that status arrives, with
    // zone-a healthy again, so its own engine starts the asked-for run instead.
    let (api_b, client_b) = FakeApi::start(Settings::default());
    let next = start_unlisted(client_b, false);
    next.list_frontend(true, frontend_autoshift(Some("start:1"), None));
    for _ in 0..100 {
        if next.metrics.control.compiles.load(Ordering::Relaxed) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        !autoshift_metrics(&next).contains("healthroute_autoshift_active{"),
        "a follower exports no autoshifted zone"
    );
    next.send(Input::Autoshift(Event::Apply(frontend_autoshift(
        Some("start:1"),
        Some(status.clone()),
    ))));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(api_b.log().is_empty(), "a follower writes nothing");
    next.leader.send(true).expect("leader");
    let resumed = api_b
        .wait_for("the new leader's status", 0, IN_TIME, is_autoshift_status)
        .await;
    let now = &resumed.body["status"];
    assert_eq!(now["activeZone"], "zone-a", "{now:#}");
    assert_eq!(
        now["autoshiftStartTime"], status["autoshiftStartTime"],
        "the same autoshift"
    );
    assert!(
        now["healthySince"].is_string(),
        "zone-a is in its hold time"
    );
    assert!(now["practiceRun"].is_null(), "no run of the follower's");
    assert_eq!(
        now["shifts"][0]["status"]["appliedGroups"], "3/3",
        "{now:#}"
    );
    assert_eq!(now["lastRequest"], "start:1");
    assert_eq!(
        condition(&resumed.body, "Autoshift")["reason"],
        "ZoneRecovering"
    );
    api_b
        .wait_for("the new leader's table", 0, IN_TIME, |s| {
            s.is_manifest_write()
        })
        .await;
    for (i, group) in FRONTEND.iter().enumerate() {
        assert!(
            !answers_zone_a(&api_b, i),
            "{group} still shifted away from zone-a"
        );
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let events: Vec<String> = api_b
        .log()
        .iter()
        .filter(|s| s.is_event())
        .map(|s| s.body["reason"].to_string())
        .collect();
    assert!(events.is_empty(), "the new leader only resumed: {events:?}");
    assert!(
        autoshift_metrics(&next)
            .lines()
            .any(|l| l == r#"healthroute_autoshift_active{zone="zone-a"} 1"#)
    );
    next.stop().await;
}
