//! `RecordGroup`: every record that shares one DNS name, one type and one routing policy
//! (SEMANTICS R1-R5, S1-S9).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::PeerTarget;

/// Every record that shares one DNS name, one type and one routing policy.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "healthroute.io",
    version = "v1alpha1",
    kind = "RecordGroup",
    namespaced,
    status = "RecordGroupStatus",
    shortname = "rg",
    doc = "The records of one DNS name and type, answered by a routing policy over their health.",
    printcolumn(name = "Name", type_ = "string", json_path = ".spec.name"),
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Policy", type_ = "string", json_path = ".spec.routingPolicy"),
    printcolumn(
        name = "Healthy",
        type_ = "string",
        json_path = ".status.healthyRecords",
        description = "healthy records / records"
    ),
    printcolumn(
        name = "LastResort",
        type_ = "boolean",
        json_path = ".status.lastResort"
    ),
    printcolumn(name = "Served", type_ = "boolean", json_path = ".status.served"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("self.routingPolicy == 'Weighted' ? self.records.all(r, has(r.weight)) : self.records.all(r, !has(r.weight))").message("weight is required on every record of a Weighted group and allowed only there"),
    validation = Rule::new("self.routingPolicy == 'Failover' ? self.records.all(r, has(r.failover)) : self.records.all(r, !has(r.failover))").message("failover is required on every record of a Failover group and allowed only there"),
    validation = Rule::new("self.routingPolicy != 'Failover' || self.records.exists_one(r, has(r.failover) && r.failover.role == 'Primary')").message("a Failover group has exactly one Primary record"),
    validation = Rule::new("self.routingPolicy != 'Simple' || self.records.size() == 1").message("a Simple group has exactly one record"),
    validation = Rule::new("self.routingPolicy != 'MultiValue' || self.records.all(r, !has(r.alias))").message("MultiValue records cannot be aliases"),
    validation = Rule::new("self.type != 'TXT' && self.type != 'CNAME' || self.records.all(r, !has(r.service))").message("service records answer addresses: only A and AAAA groups can use them"),
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::openapi::kubernetes_formats)]
pub struct RecordGroupSpec {
    /// The fully qualified name served, e.g. `api.shop.example.com.`; it must lie in a zone the
    /// resolvers serve.
    #[schemars(length(min = 1, max = 254))]
    pub name: String,
    /// A, AAAA, CNAME or TXT.
    #[serde(rename = "type")]
    pub record_type: RecordTypeSpec,
    /// How a query chooses among the healthy records.
    pub routing_policy: RoutingPolicy,
    /// TTL of answers in seconds; default: the zone default (60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 604800))]
    pub ttl: Option<u32>,
    /// The records of the group, each named by a unique `setIdentifier`.
    #[schemars(length(min = 1, max = 256))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["setIdentifier"]))]
    pub records: Vec<RecordSpec>,
    /// `PreferSameZone`: a resolver answers from the candidates in its own zone while that
    /// zone has enough of them (SEMANTICS A1-A5). Default `Off`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_affinity: Option<ZoneAffinity>,
    /// With `zoneAffinity`: the share of an even split of the healthy capacity (weight, or
    /// endpoints) below which a zone answers from every zone, in percent. Default 50 (A3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub minimum_zone_capacity_percent: Option<u8>,
}

/// Whether answers prefer the resolver's own zone (SEMANTICS A1).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, schemars::JsonSchema,
)]
pub enum ZoneAffinity {
    #[default]
    Off,
    PreferSameZone,
}

/// The default of `minimumZoneCapacityPercent` (SEMANTICS A3).
pub const DEFAULT_MINIMUM_ZONE_CAPACITY_PERCENT: u8 = 50;

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, schemars::JsonSchema)]
pub enum RecordTypeSpec {
    A,
    #[serde(rename = "AAAA")]
    Aaaa,
    #[serde(rename = "CNAME")]
    Cname,
    #[serde(rename = "TXT")]
    Txt,
}

impl RecordTypeSpec {
    /// The type's name as DNS writes it ("AAAA").
    pub fn as_str(self) -> &'static str {
        match self {
            RecordTypeSpec::A => "A",
            RecordTypeSpec::Aaaa => "AAAA",
            RecordTypeSpec::Cname => "CNAME",
            RecordTypeSpec::Txt => "TXT",
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum RoutingPolicy {
    Simple,
    Weighted,
    Failover,
    MultiValue,
}

/// One member of a group. Exactly one of `values`, `service`, `alias`, `peer`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("[has(self.values), has(self.service), has(self.alias), has(self.peer)].filter(x, x).size() == 1").message("exactly one of values, service, alias, peer"),
    validation = Rule::new("!has(self.zone) || has(self.values)").message("zone applies to static values only (Service endpoints carry their zone)"),
)]
#[serde(rename_all = "camelCase")]
pub struct RecordSpec {
    /// Names the record within its group.
    #[schemars(length(min = 1, max = 128))]
    pub set_identifier: String,
    /// Weighted groups only: 0 to 255. Weight 0 is used only when no other record is healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 255))]
    pub weight: Option<u32>,
    /// Failover groups only: the record's role and tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<FailoverSpec>,
    /// Static values: IP addresses (A, AAAA), a target name (CNAME) or strings (TXT).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 64))]
    pub values: Option<Vec<String>>,
    /// The zone (`topology.kubernetes.io/zone`) of the static values, for zonal shifts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub zone: Option<String>,
    /// The endpoints of a Service in the same namespace, healthy by pod readiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceRef>,
    /// What another RecordGroup of the same namespace and type answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alias: Option<AliasTarget>,
    /// What a RecordGroup of a peer cluster answers as healthy there (SEMANTICS X2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerTarget>,
    /// A HealthCheck in the same namespace that decides this record's health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check_ref: Option<HealthCheckRef>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[x_kube(
    validation = Rule::new("self.role == 'Primary' ? !has(self.priority) || self.priority == 0 : !has(self.priority) || self.priority >= 1").message("a Primary record is tier 0; a Secondary record's priority is 1 or more"),
)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    pub role: FailoverRole,
    /// Beyond Route 53: ordered tiers. Primary is tier 0; a Secondary defaults to tier 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub priority: Option<u32>,
}

impl FailoverSpec {
    /// The record's tier: 0 for the primary, `priority` (default 1) for a secondary.
    pub fn tier(&self) -> u32 {
        match self.role {
            FailoverRole::Primary => 0,
            FailoverRole::Secondary => self.priority.unwrap_or(1).max(1),
        }
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum FailoverRole {
    Primary,
    Secondary,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServiceRef {
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    /// Endpoints (default): the ready pod IPs. ClusterIP: the Service IP, healthy while the
    /// Service has a ready endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<ServiceAddresses>,
}

#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, schemars::JsonSchema,
)]
pub enum ServiceAddresses {
    #[default]
    Endpoints,
    #[serde(rename = "ClusterIP")]
    ClusterIp,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AliasTarget {
    /// A RecordGroup in the same namespace, of the same type.
    #[schemars(length(min = 1, max = 253))]
    pub record_group: String,
    /// Healthy only while the target has a healthy record by its own policy.
    #[serde(default)]
    pub evaluate_target_health: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub struct HealthCheckRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// What the operator reports about a RecordGroup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::openapi::kubernetes_formats)]
pub struct RecordGroupStatus {
    /// False while the group is rejected (SEMANTICS S8) and never compiled.
    #[serde(default)]
    pub served: bool,
    /// The generation of the published table that first carried the version the resolvers
    /// serve now (SEMANTICS P5); absent while nothing is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_generation: Option<u64>,
    /// "healthy/total" records, for `kubectl get rg`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_records: Option<String>,
    /// Per record: healthy or not, the values it answers now, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["setIdentifier"]))]
    pub records: Vec<RecordStatus>,
    /// True while no record is healthy and every record is answered as if it were (S6).
    #[serde(default)]
    pub last_resort: bool,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecordStatus {
    pub set_identifier: String,
    pub healthy: bool,
    /// The values this record answers now (its healthy endpoints; all under last resort).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
    /// Why the record is unhealthy, or why it is not a candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
