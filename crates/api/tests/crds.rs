//! The committed CRDs are exactly what the API types generate, and their schemas hold the
//! validation that docs/api.md promises (checked client-side with kube's CEL evaluator).

use healthroute_api::{HealthCheck, RecordGroup, ZonalAutoshift, ZonalShift};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use serde_json::{Value, json};

#[test]
fn committed_crds_match_generated() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../crds");
    for (file, yaml) in healthroute_api::crd::rendered().expect("renders") {
        let committed = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        assert!(
            committed == yaml,
            "crds/{file} differs from the API types: run `cargo run -p healthroute-api --bin crdgen`"
        );
    }
}

fn schema_of(crd: CustomResourceDefinition) -> Value {
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("schema"),
    )
    .expect("json")
}

fn errors(schema: &Value, object: Value) -> Vec<String> {
    match kube::core::cel::Validator::new().validate(schema, &object, None) {
        Ok(()) => Vec::new(),
        Err(e) => e
            .into_vec()
            .into_iter()
            .map(|e| format!("{}: {}", e.field_path, e.message))
            .collect(),
    }
}

fn rg(spec: Value) -> Value {
    json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "metadata": {"name": "x"}, "spec": spec})
}

#[test]
fn record_group_cel_rules() {
    let schema = schema_of(RecordGroup::crd());
    let ok = rg(
        json!({"name": "api.example.com.", "type": "A", "routingPolicy": "Weighted",
        "records": [{"setIdentifier": "a", "weight": 1, "values": ["192.0.2.1"]}]}),
    );
    assert_eq!(errors(&schema, ok), Vec::<String>::new());
    let cases = [
        (
            json!({"name": "a.example.com.", "type": "A", "routingPolicy": "Weighted",
            "records": [{"setIdentifier": "a", "values": ["192.0.2.1"]}]}),
            "weight is required",
        ),
        (
            json!({"name": "a.example.com.", "type": "A", "routingPolicy": "Simple",
            "records": [{"setIdentifier": "a", "weight": 3, "values": ["192.0.2.1"]}]}),
            "allowed only there",
        ),
        (
            json!({"name": "a.example.com.", "type": "A", "routingPolicy": "Simple",
            "records": [{"setIdentifier": "a", "values": ["192.0.2.1"], "service": {"name": "s"}}]}),
            "exactly one of values, service, alias",
        ),
        (
            json!({"name": "a.example.com.", "type": "A", "routingPolicy": "Failover",
            "records": [{"setIdentifier": "a", "values": ["192.0.2.1"], "failover": {"role": "Secondary"}}]}),
            "exactly one Primary",
        ),
        (
            json!({"name": "a.example.com.", "type": "A", "routingPolicy": "Simple",
            "records": [{"setIdentifier": "a", "values": ["192.0.2.1"], "failover": {"role": "Primary"}}]}),
            "failover is required",
        ),
        (
            json!({"name": "a.example.com.", "type": "A", "routingPolicy": "Simple",
            "records": [{"setIdentifier": "a", "values": ["1.2.3.4"]}, {"setIdentifier": "b", "values": ["1.2.3.5"]}]}),
            "exactly one record",
        ),
    ];
    for (spec, want) in cases {
        let errs = errors(&schema, rg(spec.clone()));
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{spec}: want {want:?}, got {errs:?}"
        );
    }
}

#[test]
fn health_check_cel_rules() {
    let schema = schema_of(HealthCheck::crd());
    let hc = |spec: Value| json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck", "metadata": {"name": "x"}, "spec": spec});
    assert_eq!(
        errors(
            &schema,
            hc(json!({"type": "HTTP", "target": {"address": "127.0.0.1", "port": 80}}))
        ),
        Vec::<String>::new()
    );
    let cases = [
        (json!({"type": "HTTP"}), "target is required"),
        (
            json!({"type": "Calculated", "target": {"address": "a", "port": 1}, "calculated": {"children": [], "healthThreshold": 0}}),
            "not allowed for Calculated",
        ),
        (
            json!({"type": "TCP", "target": {"address": "a", "port": 1}, "calculated": {"children": [], "healthThreshold": 0}}),
            "only allowed with, type Calculated",
        ),
        (
            json!({"type": "TCP", "target": {"address": "a", "port": 1}, "searchString": "ok"}),
            "searchString is only allowed",
        ),
        (
            json!({"type": "HTTP", "target": {"address": "a", "port": 1}, "searchString": "é".repeat(200)}),
            "at most 255 bytes",
        ),
        // SEM-H12: nothing that would end the request line or a header is admitted.
        (
            json!({"type": "HTTP", "target": {"address": "a", "port": 1, "path": "/x HTTP/1.1\r\nX-Evil: 1"}}),
            "path must not hold spaces or control characters",
        ),
        (
            json!({"type": "HTTP", "target": {"address": "a", "port": 1, "path": "/x\nGET /admin"}}),
            "path must not hold spaces or control characters",
        ),
        (
            json!({"type": "HTTP", "target": {"address": "a", "port": 1, "host": "a.example\r\nX-Evil: 1"}}),
            "host must not hold spaces or control characters",
        ),
        (
            json!({"type": "TCP", "target": {"address": "a.example\r\nX: 1", "port": 1}}),
            "address must be an IP address or a DNS name",
        ),
    ];
    for (spec, want) in cases {
        let errs = errors(&schema, hc(spec.clone()));
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{spec}: want {want:?}, got {errs:?}"
        );
    }
}

#[test]
fn zonal_shift_cel_rules() {
    let schema = schema_of(ZonalShift::crd());
    let zs = |expires: &str| {
        json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalShift", "metadata": {"name": "x"},
        "spec": {"awayFrom": "zone-b", "target": {"recordGroup": "api"}, "expiresIn": expires}})
    };
    for good in ["1m", "2h", "72h", "1h30m"] {
        assert_eq!(errors(&schema, zs(good)), Vec::<String>::new(), "{good}");
    }
    for bad in ["30s", "73h", "2d", "soon"] {
        let errs = errors(&schema, zs(bad));
        assert!(
            errs.iter().any(|e| e.contains("from 1m to 72h")),
            "{bad}: {errs:?}"
        );
    }
}

// SEM-AS1: a ZonalAutoshift names one target, needs a practice run configuration to enable
// autoshift, and writes its durations, dates and windows as the contract says.
#[test]
fn zonal_autoshift_cel_rules() {
    let schema = schema_of(ZonalAutoshift::crd());
    let zas = |spec: Value| json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalAutoshift", "metadata": {"name": "x"}, "spec": spec});
    let practice = json!({"outcomeAlarms": [{"name": "errors"}],
        "blockedDates": ["2026-12-24"], "blockedWindows": ["Mon:10:00-Mon:10:30"],
        "allowedWindows": ["Sun:22:00-Mon:02:00"], "duration": "30m", "cadence": "168h"});
    assert_eq!(
        errors(
            &schema,
            zas(
                json!({"target": {"recordGroup": "api"}, "autoshift": "Enabled",
                "detection": {"holdTime": "5s", "zoneAlarms": [{"zone": "zone-a", "healthCheck": "net-a"}]},
                "practiceRun": practice})
            )
        ),
        Vec::<String>::new()
    );
    let with = |field: &str, value: Value| {
        let mut p = practice.clone();
        p[field] = value;
        json!({"target": {"recordGroup": "api"}, "autoshift": "Disabled", "practiceRun": p})
    };
    let cases = [
        (
            json!({"target": {"recordGroup": "api"}, "autoshift": "Enabled"}),
            "requires a practiceRun",
        ),
        (
            json!({"target": {}, "autoshift": "Disabled"}),
            "exactly one of recordGroup, selector",
        ),
        (
            with("blockedWindows", json!(["Mon 10:00-10:30"])),
            "blockedWindows are written",
        ),
        (
            with("allowedWindows", json!(["Mon:25:00-Mon:26:00"])),
            "allowedWindows are written",
        ),
        (with("blockedDates", json!(["24/12/2026"])), "YYYY-MM-DD"),
        (with("duration", json!("25h")), "from 1s to 24h"),
        (with("cadence", json!("30m")), "from 1h to 2160h"),
        (
            json!({"target": {"recordGroup": "api"}, "autoshift": "Disabled", "detection": {"holdTime": "2d"}}),
            "holdTime must be a duration",
        ),
    ];
    for (spec, want) in cases {
        let errs = errors(&schema, zas(spec.clone()));
        assert!(
            errs.iter().any(|e| e.contains(want)),
            "{spec}: want {want:?}, got {errs:?}"
        );
    }
}
