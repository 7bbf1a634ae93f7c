//! Objects to the compiler's inputs.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::ResourceExt;

use crate::autoshift::NodeInput;
use crate::inputs::{EndpointInput, GroupInput, ServiceEndpoints};
use healthroute_api::{ObjectKey, RecordGroup};

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

/// The label that names a Node's zone.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The compiler's view of a Node (SEMANTICS AS3 c): its zone label, and whether its `Ready`
/// condition is True (a Node without one is not Ready, as the node controller reads it).
pub fn node_input(node: &Node) -> NodeInput {
    NodeInput {
        zone: node.labels().get(ZONE_LABEL).cloned(),
        ready: node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True"),
    }
}
