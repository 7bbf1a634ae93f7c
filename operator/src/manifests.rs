//! Reading a directory of manifests: the input of standalone mode and of the simulator.
//!
//! The files are what `kubectl apply` takes (multi-document YAML, `kind: List`), and they are
//! checked as the API server would check them: types and enums by the API types, ranges and
//! lengths by the generated OpenAPI schema, and the cross-field rules by the same CEL
//! expressions the CRDs carry. A bad file is reported with the file, the object and the field
//! at fault. Services (for `addresses: ClusterIP`) and `discovery.k8s.io/v1` EndpointSlices
//! (as `kubectl get endpointslices -o yaml` writes them) supply pod readiness. Other kinds are
//! skipped with a warning; `healthroute.yaml` is the standalone configuration, not a manifest.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use crate::api::{HealthCheck, RecordGroup, ZonalShift};
use crate::compiler::{
    CheckInput, Compiler, EndpointInput, GroupInput, ObjectKey, ServiceEndpoints, ShiftInput,
};

/// The file in a manifest directory that configures standalone mode.
pub const CONFIG_FILE: &str = "healthroute.yaml";

/// One problem in one manifest, located as precisely as it can be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    pub file: PathBuf,
    /// 1-based index of the YAML document in the file.
    pub document: usize,
    /// `Kind namespace/name`, once known.
    pub object: Option<String>,
    /// The JSON path of the field at fault, once known.
    pub field: Option<String>,
    pub message: String,
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (document {})", self.file.display(), self.document)?;
        if let Some(o) = &self.object {
            write!(f, ", {o}")?;
        }
        f.write_str(": ")?;
        if let Some(field) = self.field.as_deref().filter(|s| !s.is_empty()) {
            write!(f, "{field}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Every problem found in a directory; nothing is loaded when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ManifestErrors(pub Vec<ManifestError>);

impl fmt::Display for ManifestErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            e.fmt(f)?;
        }
        Ok(())
    }
}

/// The objects of a manifest directory.
#[derive(Debug, Default, Clone)]
pub struct Manifests {
    pub groups: BTreeMap<ObjectKey, RecordGroup>,
    pub checks: BTreeMap<ObjectKey, HealthCheck>,
    pub shifts: BTreeMap<ObjectKey, ZonalShift>,
    pub services: BTreeMap<ObjectKey, ServiceEndpoints>,
    /// Kinds that were skipped, and similar notes worth a log line.
    pub warnings: Vec<String>,
}

impl Manifests {
    /// Reads every `*.yaml` / `*.yml` below `dir` (sorted, recursively), except
    /// [`CONFIG_FILE`].
    pub fn load_dir(dir: &Path) -> Result<Manifests, ManifestErrors> {
        let mut files = Vec::new();
        collect_files(dir, &mut files).map_err(|e| {
            ManifestErrors(vec![ManifestError {
                file: dir.to_path_buf(),
                document: 0,
                object: None,
                field: None,
                message: format!("cannot read the directory: {e}"),
            }])
        })?;
        files.sort();
        let mut loader = Loader::default();
        for file in files {
            match std::fs::read_to_string(&file) {
                Ok(text) => loader.add_file(&file, &text),
                Err(e) => loader.errors.push(ManifestError {
                    file,
                    document: 0,
                    object: None,
                    field: None,
                    message: format!("cannot read: {e}"),
                }),
            }
        }
        loader.finish()
    }

    /// Parses one file's text (for tests and single-file use).
    pub fn load_str(file: &Path, text: &str) -> Result<Manifests, ManifestErrors> {
        let mut loader = Loader::default();
        loader.add_file(file, text);
        loader.finish()
    }

    /// Feeds every object to `compiler`, and deletes what `previous` applied that is gone.
    /// HealthCheck views already in the compiler are kept (they come from the checker).
    /// Returns the keys applied now, all the next call needs: the objects move into the
    /// compiler's inputs, so that a load does not hold every spec twice.
    pub fn apply_to(self, compiler: &mut Compiler, previous: Option<&AppliedKeys>) -> AppliedKeys {
        if let Some(prev) = previous {
            for k in prev.groups.iter().filter(|k| !self.groups.contains_key(*k)) {
                compiler.delete_group(k);
            }
            for k in prev.checks.iter().filter(|k| !self.checks.contains_key(*k)) {
                compiler.delete_check(k);
            }
            for k in prev.shifts.iter().filter(|k| !self.shifts.contains_key(*k)) {
                compiler.delete_shift(k);
            }
            for k in prev
                .services
                .iter()
                .filter(|k| !self.services.contains_key(*k))
            {
                compiler.delete_service(k);
            }
        }
        let applied = AppliedKeys {
            groups: self.groups.keys().cloned().collect(),
            checks: self.checks.keys().cloned().collect(),
            shifts: self.shifts.keys().cloned().collect(),
            services: self.services.keys().cloned().collect(),
        };
        for (k, g) in self.groups {
            let created = g.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let labels = g.metadata.labels.unwrap_or_default();
            compiler.upsert_group(
                k,
                GroupInput {
                    spec: g.spec,
                    labels,
                    created,
                },
            );
        }
        for (k, c) in self.checks {
            let mut input = CheckInput::new(c.spec);
            input.last_healthy = c.status.as_ref().and_then(|s| s.healthy);
            compiler.upsert_check_spec(k, input);
        }
        for (k, s) in self.shifts {
            compiler.upsert_shift(
                k,
                ShiftInput {
                    spec: s.spec,
                    created: s.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    status: s.status,
                },
            );
        }
        for (k, e) in self.services {
            compiler.upsert_service(k, e);
        }
        applied
    }
}

/// The objects a directory's load gave the compiler, by key (for the next load's deletions).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppliedKeys {
    pub groups: Vec<ObjectKey>,
    pub checks: Vec<ObjectKey>,
    pub shifts: Vec<ObjectKey>,
    pub services: Vec<ObjectKey>,
}

/// How manifests are read: as kubectl reads them (YAML 1.1 booleans such as `y`, `yes`, `on`,
/// and octal `0755`), so that a file means the same in standalone mode and to the API server.
/// An unquoted `y` where a string belongs is then an error here too, naming the field.
///
/// The parser's budget is sized for manifest directories of 100,000 groups and more (its
/// defaults stop a file at 1,024 documents and 250,000 nodes); the limits that stop alias
/// and anchor bombs stay as they are.
pub fn yaml_options() -> serde_saphyr::Options {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = false;
    options.legacy_octal_numbers = true;
    let mut budget = serde_saphyr::Budget::default();
    budget.max_documents = 10_000_000;
    budget.max_nodes = 500_000_000;
    budget.max_events = 1_000_000_000;
    budget.max_total_scalar_bytes = 4 * 1024 * 1024 * 1024;
    options.budget = Some(budget);
    options
}

/// Explains an error that YAML 1.1 alone causes: kubectl reads an unquoted `y`, `no`, `on` or
/// `0755` as a boolean or a number, and so do we (see [`yaml_options`]).
fn with_yaml_hint(message: String) -> String {
    if message.contains("invalid type: boolean") {
        format!(
            "{message} (YAML 1.1, as kubectl reads it, takes an unquoted y, yes, on, n, no or off for a boolean: quote the value)"
        )
    } else if message.contains("invalid type: integer")
        || message.contains("invalid type: floating point")
    {
        format!("{message} (an unquoted number is a number in YAML: quote the value)")
    } else {
        message
    }
}

/// The compiler's view of a RecordGroup object.
pub fn group_input(g: &RecordGroup) -> GroupInput {
    GroupInput {
        spec: g.spec.clone(),
        labels: g.labels().clone(),
        created: g.metadata.creation_timestamp.as_ref().map(|t| t.0),
    }
}

/// Merges EndpointSlices into per-Service endpoints (by the `kubernetes.io/service-name`
/// label), with the EndpointSlice rule that an unset `ready` means ready and an unset
/// `serving` means the same as `ready`.
pub fn endpoints_from_slices<'a>(
    slices: impl IntoIterator<Item = &'a EndpointSlice>,
) -> BTreeMap<ObjectKey, ServiceEndpoints> {
    let mut out: BTreeMap<ObjectKey, ServiceEndpoints> = BTreeMap::new();
    for slice in slices {
        let Some(service) = slice.labels().get("kubernetes.io/service-name") else {
            continue;
        };
        if slice.address_type == "FQDN" {
            continue;
        }
        let key = ObjectKey::new(
            slice.namespace().unwrap_or_else(|| "default".into()),
            service,
        );
        let entry = out.entry(key).or_default();
        for ep in &slice.endpoints {
            let cond = ep.conditions.clone().unwrap_or_default();
            let ready = cond.ready.unwrap_or(true);
            let serving = cond.serving.unwrap_or(ready);
            for addr in &ep.addresses {
                if let Ok(address) = addr.parse() {
                    entry.endpoints.push(EndpointInput {
                        address,
                        ready,
                        serving,
                        terminating: cond.terminating.unwrap_or(false),
                        zone: ep.zone.clone(),
                    });
                }
            }
        }
    }
    out
}

/// A Service's cluster IPs (`clusterIPs`, else `clusterIP`), skipping "None" and bad ones.
pub fn cluster_ips(service: &Service) -> Vec<std::net::IpAddr> {
    let Some(spec) = &service.spec else {
        return Vec::new();
    };
    let ips: Vec<&String> = match &spec.cluster_ips {
        Some(ips) => ips.iter().collect(),
        None => spec.cluster_ip.iter().collect(),
    };
    ips.into_iter().filter_map(|ip| ip.parse().ok()).collect()
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect_files(&path, out)?;
        } else if (name.ends_with(".yaml") || name.ends_with(".yml"))
            && name != CONFIG_FILE
            && name != "healthroute.yml"
        {
            out.push(path);
        }
    }
    Ok(())
}

#[derive(Default)]
struct Loader {
    out: Manifests,
    slices: Vec<EndpointSlice>,
    cluster_ips: BTreeMap<ObjectKey, Vec<std::net::IpAddr>>,
    errors: Vec<ManifestError>,
}

struct Doc<'a> {
    file: &'a Path,
    index: usize,
}

impl Doc<'_> {
    fn error(
        &self,
        object: Option<String>,
        field: Option<String>,
        message: impl Into<String>,
    ) -> ManifestError {
        ManifestError {
            file: self.file.to_path_buf(),
            document: self.index,
            object,
            field,
            message: message.into(),
        }
    }
}

impl Loader {
    /// Reads a file's documents one at a time (streamed: a file of 100,000 groups never holds
    /// more than a document's parse at once). Documents are numbered as they come, empty
    /// ones skipped; a syntax error ends the file (the stream cannot resume).
    fn add_file(&mut self, file: &Path, text: &str) {
        let mut reader = std::io::Cursor::new(text.as_bytes());
        let documents = serde_saphyr::read_with_options::<_, Json>(&mut reader, yaml_options());
        for (i, document) in documents.enumerate() {
            let doc = Doc { file, index: i + 1 };
            match document {
                Ok(Json::Null) => {}
                Ok(value) => self.add_object(&doc, value),
                Err(e) => {
                    self.errors
                        .push(doc.error(None, None, format!("not valid YAML: {e}")));
                    break;
                }
            }
        }
    }

    fn add_object(&mut self, doc: &Doc<'_>, value: Json) {
        let api_version = value
            .get("apiVersion")
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_owned();
        let kind = value
            .get("kind")
            .and_then(Json::as_str)
            .unwrap_or("")
            .to_owned();
        match (api_version.as_str(), kind.as_str()) {
            ("v1", "List") => {
                if let Some(items) = value.get("items").and_then(Json::as_array) {
                    for item in items.clone() {
                        self.add_object(doc, item);
                    }
                }
            }
            ("healthroute.io/v1alpha1", "RecordGroup") => {
                if let Some((k, obj)) = self.typed::<RecordGroup>(doc, &value) {
                    insert_unique(&mut self.out.groups, k, obj, doc, &mut self.errors);
                }
            }
            ("healthroute.io/v1alpha1", "HealthCheck") => {
                if let Some((k, obj)) = self.typed::<HealthCheck>(doc, &value) {
                    insert_unique(&mut self.out.checks, k, obj, doc, &mut self.errors);
                }
            }
            ("healthroute.io/v1alpha1", "ZonalShift") => {
                if let Some((k, obj)) = self.typed::<ZonalShift>(doc, &value) {
                    insert_unique(&mut self.out.shifts, k, obj, doc, &mut self.errors);
                }
            }
            (v, "RecordGroup" | "HealthCheck" | "ZonalShift")
                if v.starts_with("healthroute.io/") =>
            {
                self.errors.push(doc.error(
                    Some(kind.clone()),
                    Some("apiVersion".into()),
                    format!("{v} is not served; use healthroute.io/v1alpha1"),
                ));
            }
            ("discovery.k8s.io/v1", "EndpointSlice") => {
                if let Some(slice) = self.plain::<EndpointSlice>(doc, &kind, value) {
                    self.slices.push(slice);
                }
            }
            ("v1", "Service") => {
                if let Some(svc) = self.plain::<Service>(doc, &kind, value) {
                    let key = ObjectKey::new(
                        svc.namespace().unwrap_or_else(|| "default".into()),
                        svc.name_any(),
                    );
                    self.cluster_ips.insert(key, cluster_ips(&svc));
                }
            }
            ("", _) | (_, "") => self.errors.push(doc.error(
                None,
                None,
                "not a Kubernetes object: apiVersion and kind are required",
            )),
            _ => self.out.warnings.push(format!(
                "{} (document {}): skipped {kind} ({api_version}): not read by healthroute",
                doc.file.display(),
                doc.index
            )),
        }
    }

    /// A healthroute object: typed, then checked against its CRD schema and CEL rules.
    fn typed<K>(&mut self, doc: &Doc<'_>, value: &Json) -> Option<(ObjectKey, K)>
    where
        K: Resource<DynamicType = ()> + CustomResourceExt + DeserializeOwned + serde::Serialize,
    {
        let name = value.pointer("/metadata/name").and_then(Json::as_str);
        let namespace = value
            .pointer("/metadata/namespace")
            .and_then(Json::as_str)
            .unwrap_or("default");
        let label = format!(
            "{} {namespace}/{}",
            K::kind(&()),
            name.unwrap_or("<no name>")
        );
        if name.is_none_or(str::is_empty) {
            self.errors
                .push(doc.error(Some(label), Some("metadata.name".into()), "is required"));
            return None;
        }
        let mut obj: K = match serde_path_to_error::deserialize(value.clone()) {
            Ok(o) => o,
            Err(e) => {
                self.errors.push(doc.error(
                    Some(label),
                    Some(e.path().to_string()),
                    with_yaml_hint(e.inner().to_string()),
                ));
                return None;
            }
        };
        if obj.meta().namespace.is_none() {
            obj.meta_mut().namespace = Some(namespace.to_owned());
        }
        let defaulted = serde_json::to_value(&obj).unwrap_or(Json::Null);
        let schema = schema_for::<K>();
        let mut problems = Vec::new();
        check_bounds(&schema.json, &defaulted, String::new(), &mut problems);
        if let Err(errs) = cel_validator().validate_compiled(&schema.cel, &defaulted, None) {
            problems.extend(
                errs.into_vec()
                    .into_iter()
                    .map(|e| (e.field_path, e.message)),
            );
        }
        if !problems.is_empty() {
            for (field, message) in problems {
                self.errors
                    .push(doc.error(Some(label.clone()), Some(field), message));
            }
            return None;
        }
        Some((ObjectKey::new(namespace, obj.name_any()), obj))
    }

    fn plain<K: DeserializeOwned>(&mut self, doc: &Doc<'_>, kind: &str, value: Json) -> Option<K> {
        let name = value
            .pointer("/metadata/name")
            .and_then(Json::as_str)
            .unwrap_or("<no name>");
        let label = format!("{kind} {name}");
        match serde_path_to_error::deserialize(value.clone()) {
            Ok(o) => Some(o),
            Err(e) => {
                self.errors.push(doc.error(
                    Some(label),
                    Some(e.path().to_string()),
                    e.inner().to_string(),
                ));
                None
            }
        }
    }

    fn finish(mut self) -> Result<Manifests, ManifestErrors> {
        if !self.errors.is_empty() {
            return Err(ManifestErrors(self.errors));
        }
        let mut services = endpoints_from_slices(&self.slices);
        for (key, ips) in self.cluster_ips {
            services.entry(key).or_default().cluster_ips = ips;
        }
        self.out.services = services;
        Ok(self.out)
    }
}

fn insert_unique<T>(
    map: &mut BTreeMap<ObjectKey, T>,
    key: ObjectKey,
    obj: T,
    doc: &Doc<'_>,
    errors: &mut Vec<ManifestError>,
) {
    match map.entry(key) {
        std::collections::btree_map::Entry::Occupied(e) => errors.push(doc.error(
            Some(e.key().to_string()),
            None,
            "defined twice in the directory",
        )),
        std::collections::btree_map::Entry::Vacant(v) => {
            v.insert(obj);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Manifests, ManifestErrors> {
        Manifests::load_str(Path::new("test.yaml"), text)
    }

    const GOOD: &str = r#"
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: api, namespace: shop}
spec:
  name: api.shop.example.com.
  type: A
  routingPolicy: Weighted
  records:
    - {setIdentifier: blue, weight: 90, values: ["192.0.2.10"]}
    - {setIdentifier: green, weight: 10, service: {name: web}}
---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {name: web-a, namespace: shop}
spec:
  type: HTTP
  target: {address: 192.0.2.10, port: 80}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
endpoints:
  - addresses: ["10.0.0.1"]
    conditions: {ready: true}
    zone: zone-a
  - addresses: ["10.0.0.2"]
    conditions: {ready: false, serving: true, terminating: true}
    zone: zone-b
  - addresses: ["10.0.0.3"]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
"#;

    #[test]
    fn reads_objects_endpoints_and_defaults() {
        let m = load(GOOD).expect("loads");
        assert_eq!(m.groups.len(), 1);
        let hc = &m.checks[&ObjectKey::new("shop", "web-a")];
        assert_eq!(
            hc.spec.request_interval_seconds, 30,
            "schema default applied"
        );
        let eps = &m.services[&ObjectKey::new("shop", "web")].endpoints;
        assert_eq!(eps.len(), 3);
        assert!(eps[0].ready && !eps[1].ready && eps[1].serving && eps[1].terminating);
        assert!(eps[2].ready, "unset ready means ready");
        assert_eq!(m.warnings.len(), 1, "{:?}", m.warnings);
    }

    #[test]
    fn errors_name_file_object_and_field() {
        let bad = r#"
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: api, namespace: shop}
spec:
  name: api.shop.example.com.
  type: A
  routingPolicy: Weighted
  records:
    - {setIdentifier: blue, weight: 300, values: ["192.0.2.10"]}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: typo, namespace: shop}
spec:
  name: x.shop.example.com.
  type: MX
  routingPolicy: Simple
  records: [{setIdentifier: a, values: ["x"]}]
---
apiVersion: healthroute.io/v1alpha1
kind: ZonalShift
metadata: {name: long}
spec: {awayFrom: zone-b, target: {recordGroup: api}, expiresIn: 100h}
"#;
        let errs = load(bad).expect_err("rejected").0;
        let text: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|e| e.contains("(document 1), RecordGroup shop/api")
                    && e.contains("spec.records[0].weight")
                    && e.contains("maximum 255")),
            "{text:#?}"
        );
        assert!(
            text.iter()
                .any(|e| e.contains("RecordGroup shop/typo") && e.contains("spec.type")),
            "{text:#?}"
        );
        assert!(
            text.iter()
                .any(|e| e.contains("ZonalShift default/long") && e.contains("1m to 72h")),
            "{text:#?}"
        );
    }

    // The CEL rules are compiled once per kind and still judge every object: the second and
    // third HealthCheck are held to the same rule as the first.
    #[test]
    fn cel_rules_judge_every_object_of_a_kind() {
        let text: String = ["a", "b", "c"]
            .iter()
            .map(|n| {
                format!(
                    "---\napiVersion: healthroute.io/v1alpha1\nkind: HealthCheck\nmetadata: {{name: {n}, namespace: shop}}\n\
                     spec: {{type: HTTP, target: {{address: 192.0.2.10, port: 80, path: healthz}}}}\n"
                )
            })
            .collect();
        let errs = load(&text).expect_err("rejected").0;
        for n in ["a", "b", "c"] {
            assert!(
                errs.iter().any(|e| {
                    let e = e.to_string();
                    e.contains(&format!("HealthCheck shop/{n}"))
                        && e.contains("path must start with /")
                }),
                "{errs:#?}"
            );
        }
    }

    // SEM-H13 SEM-H15: a Metric check needs `metric` and no target; its URL is http(s) with a
    // host and no credentials, query or fragment.
    #[test]
    fn metric_checks_are_validated_like_the_api_server_would() {
        let check = |spec: &str| {
            format!(
                "apiVersion: healthroute.io/v1alpha1\nkind: HealthCheck\nmetadata: {{name: m, namespace: shop}}\nspec: {spec}\n"
            )
        };
        let good = check(
            "{type: Metric, metric: {prometheus: {url: 'http://prometheus.monitoring:9090/prom'}, query: 'up == 0'}}",
        );
        let m = load(&good).expect("a good Metric check");
        let spec = &m.checks[&ObjectKey::new("shop", "m")].spec;
        assert_eq!(
            spec.metric.as_ref().map(|x| x.query.as_str()),
            Some("up == 0")
        );
        for (spec, want) in [
            ("{type: Metric}", "metric is required"),
            (
                "{type: Metric, target: {address: 192.0.2.1, port: 80}, metric: {prometheus: {url: 'http://p:9090'}, query: up}}",
                "target is not allowed",
            ),
            (
                "{type: HTTP, target: {address: 192.0.2.1, port: 80}, metric: {prometheus: {url: 'http://p:9090'}, query: up}}",
                "only allowed with, type Metric",
            ),
            (
                "{type: Metric, metric: {prometheus: {url: 'http://user:pw@p:9090'}, query: up}}",
                "url must be http",
            ),
            (
                "{type: Metric, metric: {prometheus: {url: 'ftp://p'}, query: up}}",
                "url must be http",
            ),
        ] {
            let errs = load(&check(spec)).expect_err(spec).to_string();
            assert!(errs.contains(want), "{spec}: {errs}");
        }
    }

    // A directory of many groups: one file of 5,000 documents loads (the YAML parser's
    // default budget stopped at 1,024).
    #[test]
    fn large_files_load() {
        let text: String = (0..5_000)
            .map(|i| {
                format!(
                    "---\napiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: n{i}, namespace: shop}}\n\
                     spec: {{name: n{i}.example.com., type: A, routingPolicy: Simple, records: [{{setIdentifier: x, values: [192.0.2.1]}}]}}\n"
                )
            })
            .collect();
        assert_eq!(load(&text).expect("loads").groups.len(), 5_000);
    }

    // As kubectl reads YAML (1.1): an unquoted `y` is a boolean, so where a string belongs it
    // is an error that names the file, the object and the field, and says what to do; quoted
    // it is the string it looks like.
    #[test]
    fn yaml_is_read_as_kubectl_reads_it() {
        let group = |id: &str| {
            format!(
                "apiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: g, namespace: shop}}\n\
                 spec: {{name: g.example.com., type: A, routingPolicy: Weighted, records: [{{setIdentifier: x, weight: 1, values: [192.0.2.1]}}, {{setIdentifier: {id}, weight: 1, values: [192.0.2.2]}}]}}\n"
            )
        };
        for unquoted in ["y", "yes", "on", "No", "off"] {
            let errs = load(&group(unquoted)).expect_err(unquoted).to_string();
            assert!(
                errs.contains(
                    "test.yaml (document 1), RecordGroup shop/g: spec.records[1].setIdentifier"
                ) && errs.contains("quote the value"),
                "{unquoted}: {errs}"
            );
        }
        let m = load(&group("'y'")).expect("quoted");
        assert_eq!(
            m.groups[&ObjectKey::new("shop", "g")].spec.records[1].set_identifier,
            "y"
        );
    }

    #[test]
    fn duplicates_and_garbage_are_errors() {
        let twice = format!("{GOOD}\n---\n{}", GOOD.split("---").next().unwrap_or(""));
        let errs = load(&twice).expect_err("rejected");
        assert!(errs.to_string().contains("defined twice"), "{errs}");
        let errs = load("key: [unclosed").expect_err("rejected");
        assert!(errs.to_string().contains("not valid YAML"), "{errs}");
        let errs = load("just: a map").expect_err("rejected");
        assert!(
            errs.to_string()
                .contains("apiVersion and kind are required"),
            "{errs}"
        );
    }
}
