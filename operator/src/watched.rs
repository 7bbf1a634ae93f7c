//! What the operator keeps of each watched object: the parts something reads, no more.
//!
//! The API server sends whole objects: `metadata.managedFields` (as large as the object's own
//! fields, and held as nested JSON maps), `kubectl.kubernetes.io/last-applied-configuration`
//! (a second copy of the object as text), and, on EndpointSlices and Services, fields nothing
//! here reads. At 10,000 RecordGroups they were most of a standby's memory.
//!
//! Two places cut them. The watches read each kind through [`Lean`], which deserializes only
//! what is kept and skips the rest unread (serde never allocates it), as
//! [`crate::node::WatchedNode`] does for Nodes; the index passes every object it keeps whole
//! through [`lean_metadata`] as well, whatever fed it (tests and benches build whole objects).
//! A RecordGroup is not kept whole: the index keeps a [`WatchedGroup`] (uid, generation,
//! status) and the compiler its spec and labels, once.
//!
//! ```text
//!  metadata kept:  name, namespace, uid, resourceVersion (object references, the watch's
//!                  resumption), generation (observedGeneration), creationTimestamp (S8, Z, AS),
//!                  labels (selectors, the slice's Service, the checker's name),
//!                  ownerReferences (the Peer checks' owners, X4),
//!                  annotations under healthroute.io/ (practice-run requests, served generation)
//!  dropped:        managedFields, every other annotation, finalizers, generateName, ...
//!  EndpointSlice:  its Service's label, addressType, and each endpoint's addresses,
//!                  conditions and zone (no targetRef, nodeName, hints, ports)
//!  Service:        clusterIP and clusterIPs (no labels, ports or status)
//! ```

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ObjectReference, Service, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use kube::runtime::watcher;
use serde::de::{IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use healthroute_api::{
    GROUP, HealthCheck, ObjectKey, RecordGroup, RecordGroupStatus, ZonalAutoshift, ZonalShift,
};

/// The label that names an EndpointSlice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Whether an annotation is one the operator reads: only its own are (`healthroute.io/...`).
pub fn is_own_annotation(key: &str) -> bool {
    key.strip_prefix(GROUP)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// `metadata` cut to what the operator reads (see the module docs).
pub fn lean_metadata(metadata: &mut ObjectMeta) {
    let ObjectMeta {
        annotations,
        creation_timestamp,
        generation,
        labels,
        name,
        namespace,
        owner_references,
        resource_version,
        uid,
        ..
    } = std::mem::take(metadata);
    let annotations = annotations
        .map(|a| {
            a.into_iter()
                .filter(|(k, _)| is_own_annotation(k))
                .collect::<std::collections::BTreeMap<_, _>>()
        })
        .filter(|a| !a.is_empty());
    *metadata = ObjectMeta {
        annotations,
        creation_timestamp,
        generation,
        labels,
        name,
        namespace,
        owner_references,
        resource_version,
        uid,
        ..ObjectMeta::default()
    };
}

/// A kind as the watches read it: cut to what the operator reads while it is deserialized.
pub trait LeanKind: Resource + Clone + fmt::Debug + Send + 'static {
    /// Reads the object's wire form, skipping what is not kept.
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error>;
}

/// An object of kind `K` read through [`LeanKind::read`]: what a watch deserializes, so that
/// the parts nothing reads are never allocated. It is the API kind `K` to the API server.
#[derive(Clone, Debug)]
pub struct Lean<K>(pub K);

impl<K: Resource> Resource for Lean<K> {
    type DynamicType = K::DynamicType;
    type Scope = K::Scope;

    fn kind(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::version(dt)
    }
    fn plural(dt: &Self::DynamicType) -> Cow<'_, str> {
        K::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        self.0.meta()
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        self.0.meta_mut()
    }
}

impl<'de, K: LeanKind> Deserialize<'de> for Lean<K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        K::read(deserializer).map(Lean)
    }
}

/// A watch event of lean objects as an event of their kind.
pub fn unwrap_event<K>(event: watcher::Event<Lean<K>>) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(o.0),
        watcher::Event::Delete(o) => watcher::Event::Delete(o.0),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(o.0),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// The metadata kept (see the module docs), as it is read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    creation_timestamp: Option<Time>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default)]
    owner_references: Option<Vec<OwnerReference>>,
    #[serde(default, deserialize_with = "own_annotations")]
    annotations: Option<BTreeMap<String, String>>,
}

impl From<WireMeta> for ObjectMeta {
    fn from(m: WireMeta) -> Self {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            generation: m.generation,
            creation_timestamp: m.creation_timestamp,
            labels: m.labels,
            owner_references: m.owner_references,
            annotations: m.annotations,
            ..ObjectMeta::default()
        }
    }
}

/// Reads the annotations the operator reads, skipping the others' values unread (a
/// last-applied configuration is the whole object again).
fn own_annotations<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct Own;
    impl<'de> Visitor<'de> for Own {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a map of annotations")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut own = BTreeMap::new();
            while let Some(key) = map.next_key::<Cow<'de, str>>()? {
                if is_own_annotation(&key) {
                    let value = map.next_value::<String>()?;
                    own.insert(key.into_owned(), value);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok((!own.is_empty()).then_some(own))
        }
    }
    deserializer.deserialize_option(Own)
}

/// A custom resource's wire form: metadata as kept, its spec and status whole.
#[derive(Deserialize)]
struct Parts<S, T> {
    metadata: WireMeta,
    spec: S,
    #[serde(default)]
    status: Option<T>,
}

/// The operator's own kinds: every field of their spec and status is read.
macro_rules! lean_custom_kind {
    ($($kind:ident),*) => {$(
        impl LeanKind for $kind {
            fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let parts = Parts::<_, _>::deserialize(deserializer)?;
                Ok($kind {
                    metadata: parts.metadata.into(),
                    spec: parts.spec,
                    status: parts.status,
                })
            }
        }
    )*};
}

lean_custom_kind!(RecordGroup, HealthCheck, ZonalShift, ZonalAutoshift);

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSlice {
    metadata: WireMeta,
    address_type: String,
    #[serde(default)]
    endpoints: Option<Vec<WireEndpoint>>,
}

#[derive(Deserialize)]
struct WireEndpoint {
    #[serde(default)]
    addresses: Vec<String>,
    #[serde(default)]
    conditions: Option<EndpointConditions>,
    #[serde(default)]
    zone: Option<String>,
}

/// Name, namespace, uid and resource version: what identifies an object and resumes its watch.
fn identity(m: WireMeta) -> ObjectMeta {
    ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        ..ObjectMeta::default()
    }
}

/// What `healthroute_compiler::manifests::endpoints_from_slices` reads: the Service's label,
/// the address type, each endpoint's addresses, conditions and zone.
impl LeanKind for EndpointSlice {
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = WireSlice::deserialize(deserializer)?;
        let service = wire
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .cloned();
        let mut metadata = identity(wire.metadata);
        metadata.labels = service.map(|s| [(SERVICE_NAME_LABEL.to_owned(), s)].into());
        Ok(EndpointSlice {
            metadata,
            address_type: wire.address_type,
            endpoints: wire
                .endpoints
                .into_iter()
                .flatten()
                .map(|e| Endpoint {
                    addresses: e.addresses,
                    conditions: e.conditions,
                    zone: e.zone,
                    ..Endpoint::default()
                })
                .collect(),
            ports: None,
        })
    }
}

#[derive(Deserialize)]
struct WireService {
    metadata: WireMeta,
    #[serde(default)]
    spec: Option<WireServiceSpec>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireServiceSpec {
    #[serde(default, rename = "clusterIP")]
    cluster_ip: Option<String>,
    #[serde(default, rename = "clusterIPs")]
    cluster_ips: Option<Vec<String>>,
}

/// What `healthroute_compiler::manifests::cluster_ips` reads: `clusterIP` and `clusterIPs`.
impl LeanKind for Service {
    fn read<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = WireService::deserialize(deserializer)?;
        Ok(Service {
            metadata: identity(wire.metadata),
            spec: wire.spec.map(|s| ServiceSpec {
                cluster_ip: s.cluster_ip,
                cluster_ips: s.cluster_ips,
                ..ServiceSpec::default()
            }),
            status: None,
        })
    }
}

/// A RecordGroup as the index keeps it: what the status writer and a new leader's read-back
/// read (its uid, its generation, its status as watched). Its spec and labels are the
/// compiler's ([`healthroute_compiler::Compiler::group_specs`]), kept once; the key holds
/// its name and namespace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatchedGroup {
    pub uid: Option<String>,
    /// `metadata.generation`: what the status's `observedGeneration` says.
    pub generation: Option<i64>,
    /// Shared: the leader's record of what it sent is this very value once the object shows
    /// it (`status::Ledger`), not a second copy.
    pub status: Option<Arc<RecordGroupStatus>>,
}

impl WatchedGroup {
    /// What the index keeps of `group` (its spec and labels go to the compiler).
    pub fn of(group: RecordGroup) -> Self {
        WatchedGroup {
            uid: group.metadata.uid,
            generation: group.metadata.generation,
            status: group.status.map(Arc::new),
        }
    }

    /// The group as the object of an Event (what `Resource::object_ref` gives for it).
    pub fn object_ref(&self, key: &ObjectKey) -> ObjectReference {
        ObjectReference {
            api_version: Some(RecordGroup::api_version(&()).into_owned()),
            kind: Some(RecordGroup::kind(&()).into_owned()),
            name: Some(key.name.to_string()),
            namespace: (!key.namespace.is_empty()).then(|| key.namespace.to_string()),
            uid: self.uid.clone(),
            ..ObjectReference::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Reads `K` from JSON as the watches do.
    fn lean<K: LeanKind>(value: serde_json::Value) -> K {
        serde_json::from_value::<Lean<K>>(value).expect("reads").0
    }

    // The metadata the operator reads survives; managed fields and others' annotations do not.
    #[test]
    fn metadata_keeps_what_is_read() {
        let mut meta: ObjectMeta = serde_json::from_value(json!({
            "name": "api", "namespace": "shop", "uid": "u1", "resourceVersion": "7",
            "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"team": "a"},
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "{\"spec\":{}}",
                "healthroute.io/practice-run": "start",
                "healthroute.iox/other": "x"
            },
            "ownerReferences": [{"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
                                 "name": "api", "uid": "u0"}],
            "finalizers": ["x"],
            "managedFields": [{"manager": "kubectl", "operation": "Apply",
                               "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}]
        }))
        .expect("valid");
        let before = meta.clone();
        lean_metadata(&mut meta);
        assert_eq!(meta.managed_fields, None);
        assert_eq!(meta.finalizers, None);
        assert_eq!(
            meta.annotations,
            Some([("healthroute.io/practice-run".to_owned(), "start".to_owned())].into())
        );
        assert_eq!(
            (
                &meta.name,
                &meta.namespace,
                &meta.uid,
                &meta.resource_version
            ),
            (
                &before.name,
                &before.namespace,
                &before.uid,
                &before.resource_version
            )
        );
        assert_eq!(meta.generation, Some(3));
        assert_eq!(meta.creation_timestamp, before.creation_timestamp);
        assert_eq!(meta.labels, before.labels);
        assert_eq!(meta.owner_references, before.owner_references);

        let mut bare = ObjectMeta {
            annotations: Some([("other/x".to_owned(), String::new())].into()),
            ..ObjectMeta::default()
        };
        lean_metadata(&mut bare);
        assert_eq!(bare, ObjectMeta::default(), "no empty annotation map kept");
    }

    fn managed_fields() -> serde_json::Value {
        json!([{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
                "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}, "f:spec": {"f:x": {}}}}])
    }

    // A RecordGroup read by its watch is the object with its metadata cut: the same spec and
    // status, no managed fields, no last-applied configuration.
    #[test]
    fn a_custom_resource_is_read_with_lean_metadata() {
        let wire = json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
            "metadata": {"name": "api", "namespace": "shop", "uid": "u1", "generation": 2,
                         "resourceVersion": "9", "labels": {"app": "api"},
                         "annotations": {
                             "kubectl.kubernetes.io/last-applied-configuration": "{}",
                             "healthroute.io/note": "kept"},
                         "managedFields": managed_fields()},
            "spec": {"name": "api.example.com.", "type": "A", "routingPolicy": "Simple",
                     "records": [{"setIdentifier": "x", "values": ["192.0.2.1"]}]},
            "status": {"served": true, "servedGeneration": 4}
        });
        let read: RecordGroup = lean(wire.clone());
        let mut whole: RecordGroup = serde_json::from_value(wire).expect("valid");
        assert!(whole.metadata.managed_fields.is_some());
        lean_metadata(&mut whole.metadata);
        assert_eq!(
            (&read.metadata, &read.spec, &read.status),
            (&whole.metadata, &whole.spec, &whole.status)
        );
        assert_eq!(read.metadata.generation, Some(2));
        assert_eq!(
            read.metadata.annotations,
            Some([("healthroute.io/note".to_owned(), "kept".to_owned())].into())
        );
        let bare: HealthCheck = lean(json!({
            "metadata": {"name": "c", "annotations": null},
            "spec": {"type": "TCP", "target": {"address": "192.0.2.1", "port": 80}}
        }));
        assert_eq!(bare.status, None);
        assert_eq!(bare.metadata.annotations, None);
    }

    // SEM-H11: an EndpointSlice as the EndpointSlice controller writes it gives the compiler
    // the same endpoints read lean as read whole; a Service the same cluster IPs.
    #[test]
    fn slices_and_services_are_read_down_to_what_the_compiler_reads() {
        use healthroute_compiler::manifests::{cluster_ips, endpoints_from_slices};
        let endpoint = |ip: &str, ready: bool, zone: &str| {
            json!({"addresses": [ip], "conditions": {"ready": ready, "serving": ready,
                                                     "terminating": false},
                   "nodeName": "node-1", "zone": zone,
                   "targetRef": {"kind": "Pod", "name": "api-1", "namespace": "shop",
                                 "uid": "p1"}})
        };
        let wire = json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "api-x1", "namespace": "shop", "uid": "s1",
                         "resourceVersion": "5", "generateName": "api-",
                         "labels": {SERVICE_NAME_LABEL: "api", "app": "api",
                                    "endpointslice.kubernetes.io/managed-by": "c"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Service",
                                              "name": "api", "uid": "v1"}],
                         "managedFields": managed_fields()},
            "addressType": "IPv4",
            "endpoints": [endpoint("192.0.2.1", true, "zone-a"),
                          endpoint("192.0.2.2", false, "zone-b"),
                          {"addresses": ["192.0.2.3"]}],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]
        });
        let read: EndpointSlice = lean(wire.clone());
        let whole: EndpointSlice = serde_json::from_value(wire).expect("valid");
        assert_eq!(
            endpoints_from_slices([&read]),
            endpoints_from_slices([&whole])
        );
        assert_eq!(
            endpoints_from_slices([&read])
                .values()
                .next()
                .map(|s| s.endpoints.len()),
            Some(3)
        );
        assert_eq!(read.metadata.managed_fields, None);
        assert_eq!(read.metadata.owner_references, None);
        assert_eq!(read.metadata.labels.as_ref().map(BTreeMap::len), Some(1));
        assert!(
            read.endpoints
                .iter()
                .all(|e| e.target_ref.is_none() && e.node_name.is_none())
        );
        assert_eq!(read.ports, None);
        assert_eq!(read.metadata.resource_version.as_deref(), Some("5"));

        let empty: EndpointSlice = lean(json!({
            "metadata": {"name": "e", "namespace": "shop"}, "addressType": "IPv4",
            "endpoints": null
        }));
        assert!(empty.endpoints.is_empty() && empty.metadata.labels.is_none());

        for spec in [
            json!({"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00::10"],
                   "ports": [{"port": 80}], "selector": {"app": "api"}}),
            json!({"clusterIP": "10.96.0.11"}),
            json!({"clusterIP": "None", "clusterIPs": ["None"]}),
        ] {
            let wire = json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "api", "namespace": "shop", "resourceVersion": "3",
                             "managedFields": managed_fields()},
                "spec": spec, "status": {"loadBalancer": {}}
            });
            let read: Service = lean(wire.clone());
            let whole: Service = serde_json::from_value(wire).expect("valid");
            assert_eq!(cluster_ips(&read), cluster_ips(&whole));
            assert_eq!(read.metadata.managed_fields, None);
        }
    }
}
