//! A manifest directory's files, read as kubectl reads them, each object typed and checked.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::{CustomResourceExt, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use super::convert::{cluster_ips, endpoints_from_slices, node_input};
use super::{ManifestError, Manifests};
use crate::error::Error;
use healthroute_api::{HealthCheck, ObjectKey, RecordGroup, ZonalAutoshift, ZonalShift};

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

#[derive(Default)]
pub(super) struct Loader {
    out: Manifests,
    slices: Vec<EndpointSlice>,
    cluster_ips: BTreeMap<ObjectKey, Vec<std::net::IpAddr>>,
    pub(super) errors: Vec<ManifestError>,
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
    pub(super) fn add_file(&mut self, file: &Path, text: &str) {
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
                // A mirror of an engine's shift (copied from a cluster with `kubectl get zs
                // -o yaml`) is a record, not a shift to apply: its ZonalAutoshift holds it (AS13).
                if let Some((k, obj)) = self.typed::<ZonalShift>(doc, &value)
                    && !healthroute_api::is_engine_shift(&obj)
                {
                    insert_unique(&mut self.out.shifts, k, obj, doc, &mut self.errors);
                }
            }
            ("healthroute.io/v1alpha1", "ZonalAutoshift") => {
                if let Some((k, obj)) = self.typed::<ZonalAutoshift>(doc, &value) {
                    insert_unique(&mut self.out.autoshifts, k, obj, doc, &mut self.errors);
                }
            }
            (v, "RecordGroup" | "HealthCheck" | "ZonalShift" | "ZonalAutoshift")
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
            ("v1", "Node") => {
                if let Some(node) = self.plain::<Node>(doc, &kind, value) {
                    let name = node.name_any();
                    let input = node_input(&node);
                    insert_unique(&mut self.out.nodes, name, input, doc, &mut self.errors);
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
        let problems = super::validate::problems::<K>(&defaulted);
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

    pub(super) fn finish(mut self) -> Result<Manifests, Error> {
        if !self.errors.is_empty() {
            return Err(Error::Manifests(self.errors));
        }
        let mut services = endpoints_from_slices(&self.slices);
        for (key, ips) in self.cluster_ips {
            services.entry(key).or_default().cluster_ips = ips;
        }
        self.out.services = services;
        // X4: the Peer checks the groups' peer sources read, unless the directory defines
        // one of that name itself.
        let derived =
            crate::peer::derived_checks(self.out.groups.iter().map(|(k, g)| (k, &g.spec)));
        for (key, (spec, _)) in derived {
            self.out.checks.entry(key.clone()).or_insert_with(|| {
                let mut check = HealthCheck::new(&key.name, spec);
                check.metadata.namespace = Some(key.namespace.to_string());
                check
            });
        }
        Ok(self.out)
    }
}

fn insert_unique<K: Ord + std::fmt::Display, T>(
    map: &mut BTreeMap<K, T>,
    key: K,
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
