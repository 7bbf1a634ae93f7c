//! Nodes as the operator watches them: only what zonal autoshift's detection reads (SEMANTICS
//! AS3 c), the zone label and the `Ready` condition.
//!
//! A Node object is large (images, addresses, capacity, managed fields) and a cluster has
//! many; its status changes every few minutes. [`WatchedNode`] is a `v1` Node cut down while
//! it is deserialized (serde skips the rest unread), so the watch never holds it, and
//! [`WatchedNode::input`] is what the compiler takes, read by
//! `healthroute_compiler::manifests::node_input` as standalone mode reads a Node manifest.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Deserializer};

use healthroute_compiler::NodeInput;
use healthroute_compiler::manifests::{ZONE_LABEL, node_input};

/// A `v1` Node as detection reads it: its name and resource version, its zone and whether it
/// is Ready.
#[derive(Clone, Debug, PartialEq)]
pub struct WatchedNode {
    metadata: ObjectMeta,
    input: NodeInput,
}

impl WatchedNode {
    /// What detection reads of it.
    pub fn input(&self) -> NodeInput {
        self.input.clone()
    }
}

impl Resource for WatchedNode {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Node::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Node::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Node::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Node::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// The parts of a Node on the wire that are kept; serde skips the rest unread.
#[derive(Deserialize)]
struct Wire {
    metadata: WireMeta,
    #[serde(default)]
    status: Option<WireStatus>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    /// The watch resumes from it.
    #[serde(default)]
    resource_version: Option<String>,
    #[serde(default)]
    labels: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
struct WireStatus {
    #[serde(default)]
    conditions: Option<Vec<WireCondition>>,
}

#[derive(Deserialize)]
struct WireCondition {
    #[serde(rename = "type")]
    type_: String,
    status: String,
}

impl<'de> Deserialize<'de> for WatchedNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        let labels: BTreeMap<String, String> = wire
            .metadata
            .labels
            .into_iter()
            .flatten()
            .filter(|(k, _)| k == ZONE_LABEL)
            .collect();
        let conditions: Vec<NodeCondition> = wire
            .status
            .and_then(|s| s.conditions)
            .into_iter()
            .flatten()
            .filter(|c| c.type_ == "Ready")
            .map(|c| NodeCondition {
                type_: c.type_,
                status: c.status,
                ..NodeCondition::default()
            })
            .collect();
        // Read as standalone mode reads a Node manifest.
        let input = node_input(&Node {
            metadata: ObjectMeta {
                labels: (!labels.is_empty()).then_some(labels),
                ..ObjectMeta::default()
            },
            spec: None,
            status: (!conditions.is_empty()).then(|| NodeStatus {
                conditions: Some(conditions),
                ..NodeStatus::default()
            }),
        });
        Ok(WatchedNode {
            metadata: ObjectMeta {
                name: wire.metadata.name,
                uid: wire.metadata.uid,
                resource_version: wire.metadata.resource_version,
                ..ObjectMeta::default()
            },
            input,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    // SEM-AS3: a Node as `kubectl get node -o json` shows it keeps its zone and readiness, and
    // nothing else (its images, addresses and managed fields are dropped while it is read).
    #[test]
    fn a_node_is_cut_down_to_its_zone_and_readiness() {
        let node: WatchedNode = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "42",
                         "labels": {ZONE_LABEL: "zone-a", "kubernetes.io/hostname": "n1"},
                         "managedFields": [{"manager": "kubelet", "operation": "Update"}]},
            "spec": {"podCIDR": "10.244.0.0/24"},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "lastHeartbeatTime": "2026-01-01T00:00:00Z"}],
                "images": [{"names": ["registry/app:1"], "sizeBytes": 1}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}
        }))
        .expect("a Node reads");
        assert_eq!(
            node.input(),
            NodeInput {
                zone: Some("zone-a".into()),
                ready: true
            }
        );
        assert_eq!(
            kube::ResourceExt::resource_version(&node).as_deref(),
            Some("42")
        );
        assert_eq!(kube::ResourceExt::name_any(&node), "n1");
        assert!(node.metadata.managed_fields.is_none() && node.metadata.labels.is_none());

        let unready: WatchedNode = serde_json::from_value(json!({
            "metadata": {"name": "n2"},
            "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}
        }))
        .expect("reads");
        assert_eq!(
            unready.input(),
            NodeInput {
                zone: None,
                ready: false
            }
        );
        let bare: WatchedNode =
            serde_json::from_value(json!({"metadata": {"name": "n3"}})).expect("reads");
        assert!(!bare.input().ready, "no Ready condition: not Ready");
    }
}
