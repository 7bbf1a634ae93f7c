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

/// A YAML error told without the file's text (SEM-X10): where it is and what is wrong, in
/// words that hold no value of the file. serde_saphyr's `Display` quotes the lines around the
/// error, and its messages quote the scalar at fault (`invalid type: string "..."`); a
/// manifest directory may hold a Secret, and `healthroute.yaml` a TSIG key, so neither is
/// shown: a quoted scalar becomes its kind, and only a quoted name as short as a field's (a
/// misspelt key, say) is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlError {
    /// 1-based line and column, when the parser knows them.
    pub line_column: Option<(u64, u64)>,
    /// The text is not YAML (a syntax error), rather than YAML of another shape.
    pub syntax: bool,
    /// An unknown field: the path to it names it, so the caller may leave it out.
    pub unknown_field: bool,
    /// What is wrong, with the hint a YAML 1.1 surprise needs.
    pub message: String,
}

impl YamlError {
    pub fn new(e: &serde_saphyr::Error) -> YamlError {
        let e = inner(e);
        YamlError {
            line_column: e
                .location()
                .filter(|l| l.line() > 0)
                .map(|l| (l.line(), l.column())),
            syntax: matches!(e, serde_saphyr::Error::ExternalMessage { .. }),
            unknown_field: matches!(e, serde_saphyr::Error::SerdeUnknownField { .. }),
            message: with_yaml_hint(value_free_message(e)),
        }
    }
}

/// `line 3, column 7: message`.
impl std::fmt::Display for YamlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some((line, column)) = self.line_column {
            write!(f, "line {line}, column {column}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// The error itself, without the snippet or alias around it.
fn inner(mut e: &serde_saphyr::Error) -> &serde_saphyr::Error {
    while let serde_saphyr::Error::WithSnippet { error, .. }
    | serde_saphyr::Error::AliasError { error, .. } = e
    {
        e = error;
    }
    e
}

/// serde_saphyr's message for `e`, without any value of the file.
fn value_free_message(e: &serde_saphyr::Error) -> String {
    use serde_saphyr::Error as E;
    use serde_saphyr::MessageFormatter;
    let one_of = |expected: &[&str]| match expected {
        [] => "there are none".to_owned(),
        names => format!("expected one of {}", names.join(", ")),
    };
    match e {
        E::SerdeInvalidType {
            unexpected,
            expected,
            ..
        } => format!("invalid type: {}, expected {expected}", kind_of(unexpected)),
        E::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => format!(
            "invalid value: {}, expected {expected}",
            kind_of(unexpected)
        ),
        E::SerdeUnknownField {
            field, expected, ..
        } => format!("unknown field {}, {}", name_or_not(field), one_of(expected)),
        E::SerdeUnknownVariant {
            variant, expected, ..
        } => format!(
            "unknown variant {}, {}",
            name_or_not(variant),
            one_of(expected)
        ),
        E::SerdeMissingField { field, .. } => format!("missing field `{field}`"),
        E::DuplicateMappingKey { key, .. } => match key {
            Some(key) => format!("the key {} is written twice", name_or_not(key)),
            None => "a key is written twice".to_owned(),
        },
        E::NonFiniteFloat { .. } => "not a finite number".to_owned(),
        E::QuotingRequired { .. } => "the value must be quoted".to_owned(),
        other => without_quoted(&serde_saphyr::UserMessageFormatter.format_message(other)),
    }
}

/// The kind of serde's unexpected value (`string "abc"` is a string), without the value.
fn kind_of(unexpected: &str) -> &str {
    unexpected
        .split(['"', '`', '\''])
        .next()
        .unwrap_or("")
        .trim()
}

/// The longest quoted name kept in a message: no TSIG secret (16 bytes or more, so 22 base64
/// characters or more) nor push key (32 bytes or more) is this short.
const MAX_SHOWN_NAME: usize = 20;

/// A name written in the file (a key, an enum's variant), in backquotes when it looks like a
/// field's name, else only said to be there.
fn name_or_not(name: &str) -> String {
    if is_name(name) {
        format!("`{name}`")
    } else {
        "(not shown)".to_owned()
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_SHOWN_NAME
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// `text` with every double-quoted run hidden, and every backquoted one that is not a name
/// (an unclosed quote hides the rest).
fn without_quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(['"', '`']) {
        let quote = &rest[start..start + 1];
        out.push_str(&rest[..=start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find(quote) else {
            out.push('…');
            return out;
        };
        let quoted = &after[..end];
        out.push_str(if quote == "`" && is_name(quoted) {
            quoted
        } else {
            "…"
        });
        out.push_str(quote);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    out
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
                    // Never `{e}`: it quotes the file around the error (SEM-X10).
                    self.errors.push(doc.error(
                        None,
                        None,
                        format!("not valid YAML: {}", YamlError::new(&e)),
                    ));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// base64 of "healthroute-test-secret-do-not-print".
    const SECRET: &str = "aGVhbHRocm91dGUtdGVzdC1zZWNyZXQtZG8tbm90LXByaW50";
    const DECODED: &str = "healthroute-test-secret-do-not-print";

    fn shown(e: &serde_saphyr::Error) -> String {
        YamlError::new(e).to_string()
    }

    // SEM-X10: a YAML error says where and what, never the file's text: no snippet, no
    // quoted scalar, whichever way the secret is wrong.
    #[test]
    fn yaml_errors_hold_no_value_of_the_file() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Key {
            name: String,
            secret: String,
        }
        let cases = [
            (
                format!("name: k\nsecret: [{SECRET}]\n"),
                "expected string scalar",
            ),
            (format!("name: k\nsecret: \"{SECRET}\n"), ""),
            (format!("name: k\nsecret: {SECRET}\n  : x\n"), ""),
            (
                format!("name: k\nsecret: {SECRET}\n{SECRET}: x\n"),
                "unknown field (not shown)",
            ),
            (
                format!("name: k\nsecret: {SECRET}\nsecret: {DECODED}\n"),
                "",
            ),
            (
                format!("name: {{{SECRET}: 1}}\nsecret: x\n"),
                "expected string scalar",
            ),
            (format!("name: !!binary {SECRET}x\nsecret: x\n"), ""),
            (format!("- {DECODED}\n"), "expected mapping start"),
        ];
        for (text, expected) in cases {
            let e =
                serde_saphyr::from_str_with_options::<Key>(&text, yaml_options()).expect_err(&text);
            let shown = shown(&e);
            assert!(
                !shown.contains(SECRET) && !shown.contains(DECODED),
                "{text}\n{shown}"
            );
            assert!(!shown.contains('\n'), "one line: {shown}");
            assert!(shown.starts_with("line "), "{text}\n{shown}");
            assert!(shown.contains(expected), "{text}\n{shown}");
        }
        let e = serde_saphyr::from_str_with_options::<Key>("name: k\nsecrets: x\n", yaml_options())
            .expect_err("unknown");
        assert!(
            shown(&e).contains("unknown field `secrets`, expected one of name, secret"),
            "{}",
            shown(&e)
        );
    }

    // SEM-X10: a Secret in a manifest directory that is not valid YAML is reported by file,
    // document and line, without its data.
    #[test]
    fn a_broken_secret_manifest_is_not_quoted() {
        let text = format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: tsig}}\ndata:\n  secret: {SECRET}\n   bad: [\n"
        );
        let errs = Manifests::load_str(Path::new("secret.yaml"), &text)
            .expect_err("rejected")
            .to_string();
        assert!(
            errs.contains("secret.yaml (document 1): not valid YAML: line "),
            "{errs}"
        );
        assert!(!errs.contains(SECRET) && !errs.contains(DECODED), "{errs}");
    }

    #[test]
    fn quoted_runs_are_hidden_unless_names() {
        assert_eq!(
            without_quoted("duplicate field `zones` near \"x y\" and `a b`"),
            "duplicate field `zones` near \"…\" and `…`"
        );
        assert_eq!(without_quoted("open \"abc"), "open \"…");
        assert_eq!(kind_of("string \"abc\""), "string");
        assert_eq!(kind_of("integer `5`"), "integer");
        assert_eq!(kind_of("sequence"), "sequence");
    }
}
