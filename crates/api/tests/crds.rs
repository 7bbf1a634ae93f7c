//! The committed CRDs are exactly what the API types generate, and their schemas hold the
//! validation that docs/api.md promises (checked client-side with kube's CEL evaluator).

use healthroute_api::{HealthCheck, RecordGroup, ZonalShift};
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
