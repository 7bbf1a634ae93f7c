//! Reading the manifests of a directory (which the resolver walks): the input of standalone
//! mode and of the simulator.
//!
//! The files are what `kubectl apply` takes (multi-document YAML, `kind: List`), and they are
//! checked as the API server would check them: types and enums by the API types, ranges and
//! lengths by the generated OpenAPI schema, and the cross-field rules by the same CEL
//! expressions the CRDs carry. A bad file is reported with the file, the object and the field
//! at fault. Services (for `addresses: ClusterIP`) and `discovery.k8s.io/v1` EndpointSlices
//! (as `kubectl get endpointslices -o yaml` writes them) supply pod readiness, and Nodes (as
//! `kubectl get nodes -o yaml` writes them) their zone and readiness (AS3). Other kinds are
//! skipped with a warning; `healthroute.yaml` is the standalone configuration, not a manifest.
//!
//! ```text
//!   files.rs     the directory, its files, the YAML stream as kubectl reads it, each object typed
//!   validate.rs  the CRD's OpenAPI bounds and CEL rules, as the API server checks them
//!   convert.rs   objects to the compiler's inputs (groups, Services' endpoints, Nodes)
//! ```

mod convert;
mod files;
mod validate;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::Compiler;
use crate::autoshift::{AutoshiftInput, NodeInput};
use crate::error::Error;
use crate::health::CheckInput;
use crate::inputs::{GroupInput, ServiceEndpoints};
use crate::shift::ShiftInput;
use healthroute_api::{HealthCheck, ObjectKey, RecordGroup, ZonalAutoshift, ZonalShift};

pub use crate::error::ManifestError;
pub use convert::{ZONE_LABEL, cluster_ips, endpoints_from_slices, group_input, node_input};
use files::Loader;
pub use files::{YamlError, yaml_options};

/// The file in a manifest directory that configures standalone mode (not a manifest; nor is
/// `healthroute.yml`).
pub const CONFIG_FILE: &str = "healthroute.yaml";

/// Whether a file of a manifest directory holds manifests: `*.yaml` or `*.yml`, not hidden,
/// not the configuration.
pub fn is_manifest_file(name: &str) -> bool {
    !name.starts_with('.')
        && (name.ends_with(".yaml") || name.ends_with(".yml"))
        && name != CONFIG_FILE
        && name != "healthroute.yml"
}

/// The objects of a manifest directory.
#[derive(Debug, Default, Clone)]
pub struct Manifests {
    pub groups: BTreeMap<ObjectKey, RecordGroup>,
    pub checks: BTreeMap<ObjectKey, HealthCheck>,
    pub shifts: BTreeMap<ObjectKey, ZonalShift>,
    pub autoshifts: BTreeMap<ObjectKey, ZonalAutoshift>,
    pub services: BTreeMap<ObjectKey, ServiceEndpoints>,
    /// Nodes by name (cluster-scoped).
    pub nodes: BTreeMap<String, NodeInput>,
    /// Kinds that were skipped, and similar notes worth a log line.
    pub warnings: Vec<String>,
}

impl Manifests {
    /// Reads a manifest directory's files, given in the order they are read, each with its
    /// text or the error reading it; the caller walks the directory (standalone mode and the
    /// simulator: `healthroute_resolver::manifest_dir`). Each file is parsed as it comes, so
    /// no more than one file's text is held at a time.
    pub fn load_files(
        files: impl IntoIterator<Item = (PathBuf, std::io::Result<String>)>,
    ) -> Result<Manifests, Error> {
        let mut loader = Loader::default();
        for (file, text) in files {
            match text {
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
    pub fn load_str(file: &Path, text: &str) -> Result<Manifests, Error> {
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
                .autoshifts
                .iter()
                .filter(|k| !self.autoshifts.contains_key(*k))
            {
                compiler.delete_autoshift(k);
            }
            for n in prev.nodes.iter().filter(|n| !self.nodes.contains_key(*n)) {
                compiler.delete_node(n);
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
            autoshifts: self.autoshifts.keys().cloned().collect(),
            services: self.services.keys().cloned().collect(),
            nodes: self.nodes.keys().cloned().collect(),
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
        for (k, a) in self.autoshifts {
            compiler.upsert_autoshift(k, AutoshiftInput::from_object(&a));
        }
        for (name, node) in self.nodes {
            compiler.upsert_node(name, node);
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
    pub autoshifts: Vec<ObjectKey>,
    pub services: Vec<ObjectKey>,
    pub nodes: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Result<Manifests, Error> {
        Manifests::load_str(Path::new("test.yaml"), text)
    }

    /// The problems a rejected load lists.
    fn problems(err: &Error) -> &[ManifestError] {
        match err {
            Error::Manifests(problems) => problems,
            other => panic!("not a manifest error: {other}"),
        }
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
        let err = load(bad).expect_err("rejected");
        let errs = problems(&err);
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
        let err = load(&text).expect_err("rejected");
        let errs = problems(&err);
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

    // SEM-AS1 SEM-AS3 SEM-AS10: a ZonalAutoshift is checked like the API server would check
    // it, its request read from the annotation; Nodes give their zone and readiness.
    #[test]
    fn autoshifts_and_nodes_are_read() {
        let text = r#"
apiVersion: healthroute.io/v1alpha1
kind: ZonalAutoshift
metadata:
  name: fleet
  namespace: shop
  annotations: {healthroute.io/practice-run: "start:1", healthroute.io/practice-run-zone: zone-b}
spec:
  target: {selector: {matchLabels: {tier: frontend}}}
  autoshift: Enabled
  practiceRun:
    outcomeAlarms: [{name: errors}]
    blockedWindows: ["Mon:10:00-Mon:10:30"]
---
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {topology.kubernetes.io/zone: zone-a}}
status:
  conditions: [{type: Ready, status: "True"}, {type: DiskPressure, status: "False"}]
---
apiVersion: v1
kind: Node
metadata: {name: n2, labels: {topology.kubernetes.io/zone: zone-a}}
status:
  conditions: [{type: Ready, status: Unknown}]
"#;
        let m = load(text).expect("loads");
        let a = &m.autoshifts[&ObjectKey::new("shop", "fleet")];
        let input = AutoshiftInput::from_object(a);
        let request = input.request.expect("reads").expect("a request");
        assert_eq!(
            (request.value.as_str(), request.zone.as_deref()),
            ("start:1", Some("zone-b"))
        );
        assert!(m.nodes["n1"].ready && !m.nodes["n2"].ready);
        assert_eq!(m.nodes["n2"].zone.as_deref(), Some("zone-a"));

        let bad = text.replace("Mon:10:00-Mon:10:30", "Monday 10:00");
        let errs = load(&bad).expect_err("rejected").to_string();
        assert!(
            errs.contains("ZonalAutoshift shop/fleet") && errs.contains("blockedWindows"),
            "{errs}"
        );
        let enabled_alone = "apiVersion: healthroute.io/v1alpha1\nkind: ZonalAutoshift\nmetadata: {name: x, namespace: shop}\nspec: {target: {recordGroup: api}, autoshift: Enabled}\n";
        let errs = load(enabled_alone).expect_err("rejected").to_string();
        assert!(errs.contains("requires a practiceRun"), "{errs}");
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

    // SEM-AS13: a ZonalShift that mirrors an engine's shift (as `kubectl get zs -o yaml`
    // copies it from a cluster) is a record: not loaded as a shift to apply. The label alone,
    // without a ZonalAutoshift as controller, is a customer's shift like any other.
    #[test]
    fn an_engine_shift_mirror_is_not_an_input() {
        let text = r#"
apiVersion: healthroute.io/v1alpha1
kind: ZonalShift
metadata:
  name: app-autoshift
  namespace: shop
  labels: {healthroute.io/engine-shift: app}
  ownerReferences:
    - {apiVersion: healthroute.io/v1alpha1, kind: ZonalAutoshift, name: app, uid: u-1, controller: true}
spec: {awayFrom: zone-a, target: {recordGroup: api}, expiresIn: 72h}
---
apiVersion: healthroute.io/v1alpha1
kind: ZonalShift
metadata:
  name: copied-label
  namespace: shop
  labels: {healthroute.io/engine-shift: app}
spec: {awayFrom: zone-b, target: {recordGroup: api}, expiresIn: 1h}
"#;
        let m = load(text).expect("loads");
        let names: Vec<&str> = m.shifts.keys().map(|k| k.name.as_ref()).collect();
        assert_eq!(names, ["copied-label"]);
    }
}
