//! What the API server checks on an object of a CRD: its OpenAPI bounds and its CEL rules.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use kube::CustomResourceExt;
use serde_json::Value as Json;

/// Every problem the API server would report on `defaulted` (the object as typed, defaults
/// filled in), as (field, message).
pub(super) fn problems<K: CustomResourceExt>(defaulted: &Json) -> Vec<(String, String)> {
    let schema = schema_for::<K>();
    let mut problems = Vec::new();
    check_bounds(&schema.json, defaulted, String::new(), &mut problems);
    if let Err(errs) = cel_validator().validate_compiled(&schema.cel, defaulted, None) {
        problems.extend(
            errs.into_vec()
                .into_iter()
                .map(|e| (e.field_path, e.message)),
        );
    }
    problems
}

/// A CRD's OpenAPI schema and its CEL rules (`x-kubernetes-validations`), compiled.
struct KindSchema {
    json: Json,
    cel: kube::core::cel::CompiledSchema,
}

/// The kube CEL validator, with the Kubernetes functions registered once.
fn cel_validator() -> &'static kube::core::cel::Validator {
    static VALIDATOR: OnceLock<kube::core::cel::Validator> = OnceLock::new();
    VALIDATOR.get_or_init(kube::core::cel::Validator::new)
}

/// The schema of a CRD, computed and its rules compiled once per kind: compiling the rules
/// for every object made a directory of 10,000 RecordGroups take 10 s to load.
fn schema_for<K: CustomResourceExt>() -> &'static KindSchema {
    static SCHEMAS: OnceLock<std::sync::Mutex<BTreeMap<String, &'static KindSchema>>> =
        OnceLock::new();
    let kind = K::crd_name().to_owned();
    let mut map = SCHEMAS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    map.entry(kind).or_insert_with(|| {
        let crd = K::crd();
        let schema = crd
            .spec
            .versions
            .first()
            .and_then(|v| v.schema.as_ref())
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or(Json::Null);
        let cel = kube::core::cel::compile_schema(&schema);
        Box::leak(Box::new(KindSchema { json: schema, cel }))
    })
}

/// The OpenAPI bounds the API server enforces: minimum/maximum, lengths, item counts, enums.
fn check_bounds(schema: &Json, value: &Json, path: String, out: &mut Vec<(String, String)>) {
    let num = |k: &str| schema.get(k).and_then(Json::as_f64);
    match value {
        Json::Number(n) => {
            let n = n.as_f64().unwrap_or(0.0);
            if let Some(min) = num("minimum").filter(|m| n < *m) {
                out.push((path.clone(), format!("{n} is less than the minimum {min}")));
            }
            if let Some(max) = num("maximum").filter(|m| n > *m) {
                out.push((path, format!("{n} is more than the maximum {max}")));
            }
        }
        Json::String(s) => {
            let len = s.chars().count() as f64;
            if let Some(min) = num("minLength").filter(|m| len < *m) {
                out.push((path.clone(), format!("must be at least {min} characters")));
            }
            if let Some(max) = num("maxLength").filter(|m| len > *m) {
                out.push((path.clone(), format!("must be at most {max} characters")));
            }
            if let Some(allowed) = schema.get("enum").and_then(Json::as_array)
                && !allowed.iter().any(|a| a.as_str() == Some(s))
            {
                out.push((
                    path,
                    format!("{s:?} is not one of {}", Json::Array(allowed.clone())),
                ));
            }
        }
        Json::Array(items) => {
            let len = items.len() as f64;
            if let Some(min) = num("minItems").filter(|m| len < *m) {
                out.push((path.clone(), format!("needs at least {min} items")));
            }
            if let Some(max) = num("maxItems").filter(|m| len > *m) {
                out.push((path.clone(), format!("has more than {max} items")));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check_bounds(item_schema, item, format!("{path}[{i}]"), out);
                }
            }
        }
        Json::Object(fields) => {
            if let Some(props) = schema.get("properties").and_then(Json::as_object) {
                for (name, v) in fields {
                    if let Some(s) = props.get(name) {
                        let p = if path.is_empty() {
                            name.clone()
                        } else {
                            format!("{path}.{name}")
                        };
                        check_bounds(s, v, p, out);
                    }
                }
            }
        }
        _ => {}
    }
}
