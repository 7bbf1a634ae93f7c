//! `kubectl healthroute` against a `tower-test` stand-in of the API server: each command's
//! requests and what it prints. The user guide's transcript ("kubectl healthroute") is this
//! output: a test fails when they drift apart (`HEALTHROUTE_WRITE_TRANSCRIPT=1` rewrites the
//! block from what the commands print now).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use healthroute_resolver::error::Error;
use healthroute_resolver::tools::plugin::{self, Output, Scope, ShiftTarget};
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value as Json, json};

/// What the stand-in holds and saw.
#[derive(Default)]
struct State {
    shifts: Vec<Json>,
    autoshifts: Vec<Json>,
    writes: Vec<(String, String, Json)>,
}

/// The ZonalAutoshift `frontend` over `target`, with an autoshift away from zone-c in force
/// (its status as the operator writes it).
fn frontend(target: &str) -> Json {
    json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalAutoshift",
           "metadata": {"name": "frontend", "namespace": "shop", "creationTimestamp": "2026-11-01T00:00:00Z"},
           "spec": {"target": {"recordGroup": target}, "autoshift": "Enabled",
                    "practiceRun": {"outcomeAlarms": [{"name": "down"}]}},
           "status": {"autoshift": "Active", "activeZone": "zone-c",
                      "autoshiftStartTime": "2026-12-01T11:30:00Z",
                      "message": "zone-c is impaired: 3 of 4 values unhealthy (75%) in 3 groups",
                      "nextPracticeRun": "2026-12-08T00:00:00Z",
                      "shifts": [{"name": "frontend:autoshift", "awayFrom": "zone-c",
                                  "status": {"type": "Autoshift", "status": "Active",
                                             "startTime": "2026-12-01T11:30:00Z", "appliedGroups": "1/1",
                                             "groups": [{"recordGroup": target, "appliedStatus": "Applied"}]}}]}})
}

/// What the operator answers to a request in the annotations (AS10): a run away from the
/// zone asked (zone-b by default), refused in zone-a (a blocked window); a cancel ends the
/// running run as Interrupted.
fn operator_answer(autoshift: &mut Json) {
    let annotations = autoshift["metadata"]["annotations"].clone();
    let Some(value) = annotations["healthroute.io/practice-run"].as_str() else {
        return;
    };
    let st = &mut autoshift["status"];
    st["lastRequest"] = json!(value);
    if value.starts_with("cancel") {
        if let Some(run) = st.get("practiceRun").cloned().filter(|r| !r.is_null()) {
            st["outcomes"] = json!([{"zone": run["zone"], "startTime": run["startTime"],
                "endTime": "2026-12-01T12:10:00Z", "outcome": "Interrupted",
                "message": format!("cancelled ({value})"), "requested": true}]);
            st["practiceRun"] = Json::Null;
            st["shifts"] = json!([]);
        }
        return;
    }
    let zone = annotations["healthroute.io/practice-run-zone"]
        .as_str()
        .unwrap_or("zone-b");
    if zone == "zone-a" {
        st["notStarted"] = json!({"time": "2026-12-01T12:00:00Z", "reason": "BlockedWindow",
            "message": "the run would overlap blocked window Tue:12:00-Tue:13:30", "request": value});
    } else {
        st["practiceRun"] = json!({"zone": zone, "startTime": "2026-12-01T12:00:00Z",
            "endTime": "2026-12-01T12:30:00Z", "requested": true});
        st["outcomes"] = json!([{"zone": zone, "startTime": "2026-12-01T12:00:00Z",
            "outcome": "Pending", "requested": true}]);
        let target = autoshift["spec"]["target"]["recordGroup"].clone();
        autoshift["status"]["shifts"] = json!([{"name": "frontend:practice-run", "awayFrom": zone,
            "status": {"type": "PracticeRun", "status": "Active", "startTime": "2026-12-01T12:00:00Z",
                       "expiryTime": "2026-12-01T12:30:00Z", "appliedGroups": "1/1",
                       "groups": [{"recordGroup": target, "appliedStatus": "Applied"}]}}]);
    }
}

fn rg(name: &str, dns: &str, policy: &str, records: Json, status: Json) -> Json {
    json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
           "metadata": {"name": name, "namespace": "shop"},
           "spec": {"name": dns, "type": "A", "routingPolicy": policy, "records": records},
           "status": status})
}

fn groups() -> Json {
    json!([
        rg(
            "api",
            "api.example.com.",
            "Weighted",
            json!([{"setIdentifier": "blue", "weight": 70, "values": ["192.0.2.10"], "healthCheckRef": {"name": "web-a"}},
                  {"setIdentifier": "green", "weight": 30, "values": ["192.0.2.20"], "healthCheckRef": {"name": "green-errors"}}]),
            json!({"served": true, "servedGeneration": 7, "healthyRecords": "1/2", "lastResort": false})
        ),
        rg(
            "legacy",
            "legacy.example.com.",
            "MultiValue",
            json!([{"setIdentifier": "one", "values": ["192.0.2.41"], "healthCheckRef": {"name": "down"}}]),
            json!({"served": true, "servedGeneration": 6, "healthyRecords": "0/1", "lastResort": true})
        ),
        rg(
            "search",
            "search.example.com.",
            "Simple",
            json!([{"setIdentifier": "x", "values": ["192.0.2.30"]}]),
            json!({"served": true, "servedGeneration": 5, "healthyRecords": "last good version, 1 answering", "lastResort": false})
        ),
    ])
}

fn checks() -> Json {
    json!([
        {"apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
         "metadata": {"name": "web-a", "namespace": "shop"},
         "spec": {"type": "HTTP", "target": {"address": "127.0.0.1", "port": 18080, "path": "/healthz"}},
         "status": {"healthy": true, "checkersHealthy": "1/2", "checkers": [
             {"name": "resolver-7f9c", "zone": "zone-a", "healthy": true, "lastObserved": "2026-12-01T11:00:00Z", "message": "200 OK in 3 ms"},
             {"name": "resolver-k2m4", "zone": "zone-b", "healthy": false, "lastObserved": "2026-12-01T11:00:01Z", "message": "connect refused"}]}},
        {"apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
         "metadata": {"name": "green-errors", "namespace": "shop"},
         "spec": {"type": "Metric", "metric": {"prometheus": {"url": "http://prometheus.monitoring:9090"}, "query": "errors > 0.05"}},
         "status": {"healthy": false, "checkersHealthy": "0/1",
                    "metric": {"state": "ALARM", "value": "1 sample, 0.083", "lastEvaluated": "2026-12-01T11:00:02Z"}}},
        {"apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck",
         "metadata": {"name": "down", "namespace": "shop"},
         "spec": {"type": "TCP", "target": {"address": "127.0.0.1", "port": 15432}},
         "status": {"healthy": false, "checkersHealthy": "0/2"}},
    ])
}

/// Two live resolvers' checker Leases (renewed a second ago) and a gone pod's (renewed an
/// hour ago, not yet collected).
fn leases() -> Json {
    let lease = |checker: &str, generation: u64, ago: i64| {
        let renewed = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(ago);
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": format!("healthroute-checker-{checker}"), "namespace": "healthroute",
                            "labels": {"healthroute.io/checker": checker},
                            "annotations": {"healthroute.io/served-generation": generation.to_string()}},
               "spec": {"holderIdentity": checker, "leaseDurationSeconds": 10,
                        "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()}})
    };
    json!([
        lease("resolver-7f9c", 7, 1),
        lease("resolver-k2m4", 6, 1),
        lease("resolver-gone", 5, 3600)
    ])
}

fn list(kind: &str, items: Json) -> Json {
    json!({"apiVersion": "v1", "kind": format!("{kind}List"), "metadata": {"resourceVersion": "1"}, "items": items})
}

/// The status the operator would write on a new shift: applied to api, not to search
/// (fail open), expiring at a fixed time so that the transcript is stable.
fn operator_status(shift: &mut Json) {
    shift["status"] = json!({"type": "Customer", "status": "Active", "startTime": "2026-12-01T11:00:00Z",
        "expiryTime": "2026-12-01T13:00:00Z", "expiresIn": shift["spec"]["expiresIn"], "appliedGroups": "1/2",
        "groups": [{"recordGroup": "api", "appliedStatus": "Applied"},
                   {"recordGroup": "search", "appliedStatus": "NotApplied", "reason": "NoHealthyCapacityElsewhere"}]});
}

fn stand_in() -> (Client, Arc<Mutex<State>>) {
    stand_in_with("search")
}

/// The stand-in, with the ZonalAutoshift `frontend` over the group `autoshifted`.
fn stand_in_with(autoshifted: &str) -> (Client, Arc<Mutex<State>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let state = Arc::new(Mutex::new(State {
        autoshifts: vec![frontend(autoshifted)],
        ..State::default()
    }));
    let s = state.clone();
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().as_str().to_owned();
            let path = req.uri().path().to_owned();
            let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
            let body: Json = serde_json::from_slice(&bytes).unwrap_or(Json::Null);
            let mut st = s.lock().expect("state");
            if method != "GET" {
                st.writes.push((method.clone(), path.clone(), body.clone()));
            }
            let base = "/apis/healthroute.io/v1alpha1/namespaces/shop/zonalshifts";
            let autoshifts = "/apis/healthroute.io/v1alpha1/namespaces/shop/zonalautoshifts";
            let not_found = |what: &str| {
                (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": format!("{what} not found")}),
                )
            };
            let (code, reply) = match (method.as_str(), path.as_str()) {
                ("GET", p) if p == autoshifts => (
                    200,
                    list("ZonalAutoshift", Json::Array(st.autoshifts.clone())),
                ),
                ("GET", "/api/v1/nodes") => (200, list("Node", json!([]))),
                (m, p) if p.starts_with(&format!("{autoshifts}/")) => {
                    let name = p.rsplit('/').next().unwrap_or_default();
                    match st
                        .autoshifts
                        .iter_mut()
                        .find(|x| x["metadata"]["name"] == name)
                    {
                        Some(a) => {
                            if m == "PATCH" {
                                let asked = body["metadata"]["annotations"].clone();
                                for (k, v) in asked.as_object().cloned().unwrap_or_default() {
                                    if v.is_null() {
                                        if let Some(o) =
                                            a["metadata"]["annotations"].as_object_mut()
                                        {
                                            o.remove(&k);
                                        }
                                    } else {
                                        a["metadata"]["annotations"][k] = v;
                                    }
                                }
                                operator_answer(a);
                            }
                            (200, a.clone())
                        }
                        None => not_found(&format!("zonalautoshifts \"{name}\"")),
                    }
                }
                ("GET", "/apis/healthroute.io/v1alpha1/namespaces/shop/recordgroups") => {
                    (200, list("RecordGroup", groups()))
                }
                ("GET", "/apis/healthroute.io/v1alpha1/namespaces/shop/healthchecks") => {
                    (200, list("HealthCheck", checks()))
                }
                ("GET", p) if p == base => {
                    (200, list("ZonalShift", Json::Array(st.shifts.clone())))
                }
                ("GET", "/apis/coordination.k8s.io/v1/namespaces/healthroute/leases") => {
                    (200, list("Lease", leases()))
                }
                ("GET", "/apis/discovery.k8s.io/v1/namespaces/shop/endpointslices") => {
                    (200, list("EndpointSlice", json!([])))
                }
                ("GET", "/api/v1/namespaces/shop/services") => (200, list("Service", json!([]))),
                ("POST", p) if p == base => {
                    let mut shift = body.clone();
                    operator_status(&mut shift);
                    st.shifts.push(shift);
                    (201, body)
                }
                (m, p) if p.starts_with(&format!("{base}/")) => {
                    let name = p.rsplit('/').next().unwrap_or_default();
                    match st.shifts.iter_mut().find(|x| x["metadata"]["name"] == name) {
                        Some(shift) => {
                            if m == "PATCH" {
                                for (k, v) in body["spec"].as_object().cloned().unwrap_or_default()
                                {
                                    shift["spec"][k] = v;
                                }
                                if shift["spec"]["cancel"] == true {
                                    shift["status"]["status"] = json!("Canceled");
                                }
                            }
                            (200, shift.clone())
                        }
                        None => (
                            404,
                            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": format!("zonalshifts \"{name}\" not found")}),
                        ),
                    }
                }
                _ => (
                    404,
                    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404}),
                ),
            };
            drop(st);
            let mut response =
                Response::new(Body::from(serde_json::to_vec(&reply).unwrap_or_default()));
            *response.status_mut() = http::StatusCode::from_u16(code).expect("status");
            send.send_response(response);
        }
    });
    (Client::new(service, "shop"), state)
}

/// The time the transcript's `explain` asks at: inside the fixture shift's window.
const AT: &str = "2026-12-01T12:00:00Z";

fn shop() -> Scope {
    Scope::Namespace("shop".into())
}

/// Every command's output, as the user guide shows it.
async fn transcript(client: &Client) -> String {
    let mut out = String::new();
    let mut run = |cmd: &str, text: Result<String, Error>| {
        out.push_str(&format!("$ kubectl healthroute {cmd}\n"));
        out.push_str(&text.unwrap_or_else(|e| format!("error: {e}\n")));
    };
    run(
        "status -n shop",
        plugin::status(client, &shop(), "healthroute", Output::Table).await,
    );
    run(
        "checks -n shop",
        plugin::checks(client, &shop(), Output::Table).await,
    );
    run(
        &format!("explain -n shop api.example.com --at {AT}"),
        plugin::explain(
            client,
            "shop",
            "api.example.com",
            "A",
            &["example.com".into()],
            None,
            Some(AT.into()),
        )
        .await,
    );
    run(
        "shift list -n shop",
        plugin::shift_list(client, &shop(), Output::Table).await,
    );
    out
}

// The commands against the stand-in: what each prints (the user guide's transcript), the
// write each makes, and -o json for scripts.
#[tokio::test]
async fn every_command_reads_right_and_the_guide_shows_it() {
    let (client, state) = stand_in();
    let status = plugin::status(&client, &shop(), "healthroute", Output::Table)
        .await
        .expect("status");
    assert!(
        status.contains("shop/legacy") && status.contains("yes"),
        "{status}"
    );
    // SEM-P5: the live resolvers only; the gone pod's Lease is counted, not shown.
    assert!(
        status.contains("resolvers: 2, serving different table generations:"),
        "{status}"
    );
    assert!(!status.contains("resolver-gone"), "{status}");
    assert!(
        status.contains("1 stale checker Lease (a gone pod) not shown"),
        "{status}"
    );
    let json: Json = serde_json::from_str(
        &plugin::status(&client, &shop(), "healthroute", Output::Json)
            .await
            .expect("json"),
    )
    .expect("valid JSON");
    assert_eq!(json["recordGroups"][1]["lastResort"], true);
    assert_eq!(json["resolvers"][1]["servedGeneration"], 6);
    assert_eq!(json["resolvers"].as_array().map(Vec::len), Some(2));
    assert_eq!(json["staleCheckerLeases"], 1);

    let checks = plugin::checks(&client, &shop(), Output::Table)
        .await
        .expect("checks");
    assert!(
        checks.contains("quorum: 1/2 checkers see it healthy (more than 18% needed)"),
        "{checks}"
    );
    assert!(
        checks.contains("last evaluation: ALARM (1 sample, 0.083)"),
        "{checks}"
    );

    let explain = plugin::explain(
        &client,
        "shop",
        "api.example.com",
        "A",
        &["example.com".into()],
        None,
        Some(AT.into()),
    )
    .await
    .expect("explain");
    assert!(
        explain.contains("100.00%  192.0.2.10"),
        "the green record's check is in ALARM:\n{explain}"
    );

    // shift start: created with the checked expiry, then the operator's report in words.
    let started = plugin::shift_start(
        &client,
        "shop",
        "zone-b",
        ShiftTarget::Group("api".into()),
        "2h",
        Some("maintenance".into()),
        Duration::from_secs(2),
    )
    .await
    .expect("start");
    assert!(started.contains("api: applied"), "{started}");
    assert!(
        started.contains(
            "search: NOT applied: no healthy endpoint outside zone-b; traffic stays (fail open, Z6)"
        ),
        "{started}"
    );
    let created = state.lock().expect("state").writes[0].2.clone();
    assert_eq!(created["spec"]["awayFrom"], "zone-b");
    assert_eq!(created["spec"]["expiresIn"], "2h");
    let bad = plugin::shift_start(
        &client,
        "shop",
        "zone-b",
        ShiftTarget::Group("api".into()),
        "5d",
        None,
        Duration::ZERO,
    )
    .await
    .expect_err("5d is refused before anything is sent");
    assert!(bad.to_string().contains("5d"), "{bad}");
    assert_eq!(state.lock().expect("state").writes.len(), 1);

    let name = created["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_owned();
    let extended = plugin::shift_extend(&client, "shop", &name, "4h", Duration::from_secs(1))
        .await
        .expect("extend");
    assert!(extended.contains("now expires 4h from now"), "{extended}");
    let cancelled = plugin::shift_cancel(&client, "shop", &name)
        .await
        .expect("cancel");
    assert!(cancelled.contains("cancelled"), "{cancelled}");
    let writes = state.lock().expect("state").writes.clone();
    assert_eq!(writes[1].2, json!({"spec": {"expiresIn": "4h"}}));
    assert_eq!(writes[2].2, json!({"spec": {"cancel": true}}));
    let ended = plugin::shift_extend(&client, "shop", &name, "1h", Duration::ZERO)
        .await
        .expect_err("ended");
    assert!(ended.to_string().contains("has ended"), "{ended}");

    // The user guide's transcript is what the commands print.
    let (client, _) = stand_in();
    let _ = plugin::shift_start(
        &client,
        "shop",
        "zone-b",
        ShiftTarget::Group("api".into()),
        "2h",
        Some("maintenance".into()),
        Duration::from_secs(2),
    )
    .await;
    let text = transcript(&client).await;
    // The created shift's name carries the time it was made: stable in the guide.
    let text = regex_lite_replace(&text);
    check_transcript("", &text);
}

/// Checks the transcript block `<!-- transcript: resolver/tests/plugin.rs{suffix} -->` of
/// docs/user-guide.md against `text` (or rewrites it, with HEALTHROUTE_WRITE_TRANSCRIPT).
fn check_transcript(suffix: &str, text: &str) {
    let guide_path =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/user-guide.md");
    let guide = std::fs::read_to_string(&guide_path).expect("guide");
    let begin = format!("<!-- transcript: resolver/tests/plugin.rs{suffix} -->\n```console\n");
    let end = "```\n<!-- end transcript -->";
    let Some(a) = guide.find(&begin) else {
        panic!("docs/user-guide.md has no transcript block {begin:?}");
    };
    let Some(b) = guide[a..].find(end).map(|b| a + b) else {
        panic!("docs/user-guide.md: the transcript block {begin:?} has no end");
    };
    let shown = &guide[a + begin.len()..b];
    if std::env::var_os("HEALTHROUTE_WRITE_TRANSCRIPT").is_some() {
        let updated = format!("{}{text}{}", &guide[..a + begin.len()], &guide[b..]);
        std::fs::write(&guide_path, updated).expect("write the guide");
    } else {
        assert_eq!(
            shown, text,
            "the transcript in docs/user-guide.md is out of date: HEALTHROUTE_WRITE_TRANSCRIPT=1 cargo test -p healthroute-resolver --test plugin"
        );
    }
}

// SEM-AS10 SEM-AS5: `practice start` and `practice cancel` write the annotations the engine
// reads (a new id each time; the zone asked, or none) and report the operator's answer: the
// run started and until when, why it did not start, the run ended; `shift list` shows the
// run's shift with its type; the runbook's transcript is this output.
#[tokio::test]
async fn practice_runs_are_asked_for_and_answered() {
    let (client, state) = stand_in();
    // No autoshift in force: a run may start.
    state.lock().expect("state").autoshifts[0]["status"] = json!({"autoshift": "Inactive",
        "message": "no zone is impaired", "nextPracticeRun": "2026-12-08T00:00:00Z"});
    let mut out = String::new();
    let mut run = |cmd: &str, text: Result<String, Error>| {
        out.push_str(&format!("$ kubectl healthroute {cmd}\n"));
        out.push_str(&text.unwrap_or_else(|e| format!("error: {e}\n")));
    };
    let wait = Duration::from_secs(2);
    let refused = plugin::practice_start(
        &client,
        "shop",
        "frontend",
        Some("zone-a".into()),
        Some("7".into()),
        wait,
    )
    .await;
    assert!(
        refused.as_ref().is_ok_and(|t| t.contains(
            "not started (BlockedWindow): the run would overlap blocked window Tue:12:00-Tue:13:30"
        )),
        "{refused:?}"
    );
    run(
        "practice start frontend -n shop --zone zone-a --id 7",
        refused,
    );
    let started =
        plugin::practice_start(&client, "shop", "frontend", None, Some("8".into()), wait).await;
    assert!(
        started
            .as_ref()
            .is_ok_and(|t| t
                .contains("started: traffic moves away from zone-b until 2026-12-01T12:30:00Z")),
        "{started:?}"
    );
    run("practice start frontend -n shop --id 8", started);
    let writes = state.lock().expect("state").writes.clone();
    assert_eq!(writes[0].0, "PATCH");
    assert!(
        writes[0].1.ends_with("/zonalautoshifts/frontend"),
        "{}",
        writes[0].1
    );
    assert_eq!(
        writes[1].2,
        json!({"metadata": {"annotations": {"healthroute.io/practice-run": "start:8",
                                            "healthroute.io/practice-run-zone": null}}}),
        "no zone asked: an earlier request's zone is removed"
    );
    run(
        "shift list -n shop",
        plugin::shift_list(&client, &shop(), Output::Table).await,
    );
    let cancelled =
        plugin::practice_cancel(&client, "shop", "frontend", Some("9".into()), wait).await;
    assert!(
        cancelled
            .as_ref()
            .is_ok_and(|t| t.contains("ended (Interrupted): traffic is back in zone-b")),
        "{cancelled:?}"
    );
    run("practice cancel frontend -n shop --id 9", cancelled);
    let nothing = plugin::practice_cancel(&client, "shop", "frontend", Some("10".into()), wait)
        .await
        .expect("answered");
    assert!(nothing.contains("no practice run was running"), "{nothing}");
    let writes = state.lock().expect("state").writes.clone();
    assert_eq!(
        writes
            .iter()
            .map(|w| w.2["metadata"]["annotations"]["healthroute.io/practice-run"].clone())
            .collect::<Vec<_>>(),
        [
            json!("start:7"),
            json!("start:8"),
            json!("cancel:9"),
            json!("cancel:10")
        ]
    );
    assert_eq!(
        writes[0].2["metadata"]["annotations"]["healthroute.io/practice-run-zone"],
        "zone-a"
    );
    let missing = plugin::practice_start(&client, "shop", "nope", None, None, wait)
        .await
        .expect_err("no such ZonalAutoshift");
    assert!(missing.to_string().contains("not found"), "{missing}");
    check_transcript(" practice", &out);
}

// SEM-AS11: `explain` hands the cluster's ZonalAutoshifts to the simulator with their status,
// so the autoshift the operator holds on the asked group is shown, as a new leader resumes it.
#[tokio::test]
async fn explain_shows_the_autoshift_in_force() {
    let (client, _) = stand_in_with("api");
    let explain = plugin::explain(
        &client,
        "shop",
        "api.example.com",
        "A",
        &["example.com".into()],
        None,
        Some(AT.into()),
    )
    .await
    .expect("explain");
    assert!(
        explain.contains("zonal autoshift shop/frontend: autoshift Active away from zone-c: "),
        "{explain}"
    );
    assert!(
        explain.contains("autoshift shop/frontend:autoshift (away from zone-c)"),
        "{explain}"
    );
    assert!(!explain.contains("note: Nodes"), "{explain}");
}

/// `away-from-zone-b-1764586800` -> `away-from-zone-b-<time>`.
fn regex_lite_replace(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut l = line.to_owned();
        if let Some(at) = l.find("away-from-zone-b-") {
            let start = at + "away-from-zone-b-".len();
            let digits = l[start..].chars().take_while(char::is_ascii_digit).count();
            l.replace_range(start..start + digits, "1764586800");
        }
        out.push_str(&l);
        out.push('\n');
    }
    out
}
