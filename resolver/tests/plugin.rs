//! `kubectl healthroute` against a `tower-test` stand-in of the API server: each command's
//! requests and what it prints. The user guide's transcript ("kubectl healthroute") is this
//! output: a test fails when they drift apart (`HEALTHROUTE_WRITE_TRANSCRIPT=1` rewrites the
//! block from what the commands print now).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use healthroute_resolver::error::Error;
use healthroute_resolver::plugin::{self, Output, Scope, ShiftTarget};
use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value as Json, json};

/// What the stand-in holds and saw.
#[derive(Default)]
struct State {
    shifts: Vec<Json>,
    writes: Vec<(String, String, Json)>,
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

fn leases() -> Json {
    let lease = |checker: &str, generation: u64| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": format!("healthroute-checker-{checker}"), "namespace": "healthroute",
                            "labels": {"healthroute.io/checker": checker},
                            "annotations": {"healthroute.io/served-generation": generation.to_string()}},
               "spec": {}})
    };
    json!([lease("resolver-7f9c", 7), lease("resolver-k2m4", 6)])
}

fn list(kind: &str, items: Json) -> Json {
    json!({"apiVersion": "v1", "kind": format!("{kind}List"), "metadata": {"resourceVersion": "1"}, "items": items})
}

/// The status the operator would write on a new shift: applied to api, not to search
/// (fail open), expiring at a fixed time so that the transcript is stable.
fn operator_status(shift: &mut Json) {
    shift["status"] = json!({"status": "Active", "startTime": "2026-12-01T11:00:00Z",
        "expiryTime": "2026-12-01T13:00:00Z", "expiresIn": shift["spec"]["expiresIn"], "appliedGroups": "1/2",
        "groups": [{"recordGroup": "api", "appliedStatus": "Applied"},
                   {"recordGroup": "search", "appliedStatus": "NotApplied", "reason": "NoHealthyCapacityElsewhere"}]});
}

fn stand_in() -> (Client, Arc<Mutex<State>>) {
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let state = Arc::new(Mutex::new(State::default()));
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
            let (code, reply) = match (method.as_str(), path.as_str()) {
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
    assert!(
        status.contains("resolvers: 2, serving different table generations:"),
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
    let guide_path =
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/user-guide.md");
    let guide = std::fs::read_to_string(&guide_path).expect("guide");
    let begin = "<!-- transcript: resolver/tests/plugin.rs -->\n```console\n";
    let end = "```\n<!-- end transcript -->";
    let (Some(a), Some(b)) = (guide.find(begin), guide.find(end)) else {
        panic!("docs/user-guide.md has no transcript block");
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
