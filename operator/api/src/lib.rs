//! healthroute's API: the custom resources of `healthroute.io/v1alpha1` (`HealthCheck`,
//! `RecordGroup`, `ZonalShift`, with the field names of `docs/api.md`), the names both planes
//! agree on, and ([`crd`]) the CRDs generated from them.
//!
//! Validation lives in the schema so that `kubectl apply` of a bad object fails before any
//! controller sees it: ranges, enums and defaults through schemars, and the rules that span
//! fields as CEL (`x-kubernetes-validations`). The same rules run client-side on manifest files
//! (see `healthroute_compiler::manifests`), so standalone mode and the simulator reject exactly what the API server
//! would.

// kube-derive's repeated `printcolumn(..)` arguments look like duplicated attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

pub mod crd;

pub const GROUP: &str = "healthroute.io";
pub const VERSION: &str = "v1alpha1";

/// The label of every checker's heartbeat Lease (its value: the checker's name).
pub const CHECKER_LABEL: &str = "healthroute.io/checker";
/// On a checker's Lease: the table generation its resolver serves (P4: a new leader continues
/// above it).
pub const SERVED_GENERATION_ANNOTATION: &str = "healthroute.io/served-generation";
/// The checker name of the operator leader's Metric-check evaluator (H14).
pub const METRIC_EVALUATOR: &str = "metric-evaluator";

// ---------------------------------------------------------------------------------------------
// HealthCheck
// ---------------------------------------------------------------------------------------------

/// A periodic probe of an endpoint (HTTP, HTTPS, TCP) or a calculation over other checks.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "healthroute.io",
    version = "v1alpha1",
    kind = "HealthCheck",
    namespaced,
    status = "HealthCheckStatus",
    shortname = "hc",
    doc = "A health check: an HTTP, HTTPS or TCP probe run by checkers in several zones, a calculation over other checks, or a Prometheus query.",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Target", type_ = "string", json_path = ".spec.target.address"),
    printcolumn(name = "Port", type_ = "integer", json_path = ".spec.target.port"),
    printcolumn(name = "Healthy", type_ = "boolean", json_path = ".status.healthy"),
    printcolumn(
        name = "Alarm",
        type_ = "string",
        json_path = ".status.metric.state",
        description = "Metric checks: OK, ALARM or INSUFFICIENT_DATA at the last evaluation"
    ),
    printcolumn(
        name = "Checkers",
        type_ = "string",
        json_path = ".status.checkersHealthy",
        description = "checkers whose own view is healthy / reachable checkers"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("self.type == 'Calculated' || self.type == 'Metric' || has(self.target)").message("target is required for HTTP, HTTPS and TCP checks"),
    validation = Rule::new("(self.type != 'Calculated' && self.type != 'Metric') || !has(self.target)").message("target is not allowed for Calculated and Metric checks"),
    validation = Rule::new("self.type == 'Metric' ? has(self.metric) : !has(self.metric)").message("metric is required for, and only allowed with, type Metric"),
    validation = Rule::new("self.type == 'Calculated' ? has(self.calculated) : !has(self.calculated)").message("calculated is required for, and only allowed with, type Calculated"),
    validation = Rule::new("!has(self.searchString) || self.type == 'HTTP' || self.type == 'HTTPS'").message("searchString is only allowed with HTTP and HTTPS checks"),
    validation = Rule::new("!has(self.target) || !has(self.target.path) || self.type == 'HTTP' || self.type == 'HTTPS'").message("target.path is only allowed with HTTP and HTTPS checks"),
)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckSpec {
    /// What the check does: HTTP, HTTPS, TCP, or Calculated (over other checks).
    #[serde(rename = "type")]
    pub check_type: CheckType,
    /// Where HTTP, HTTPS and TCP probes go. Required for those types, absent for Calculated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<ProbeTarget>,
    /// HTTP(S) only: the check passes only when this string (1 to 255 bytes, case-sensitive)
    /// appears within the first 5,120 bytes of the response body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    #[x_kube(validation = Rule::new("bytes(self).size() <= 255").message("searchString is at most 255 bytes"))]
    pub search_string: Option<String>,
    /// Seconds between two probes from one checker (1 to 300).
    #[serde(default = "default_request_interval")]
    #[schemars(range(min = 1, max = 300))]
    pub request_interval_seconds: u32,
    /// Consecutive failures (or successes) that flip a checker's view (1 to 10).
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = 1, max = 10))]
    pub failure_threshold: u32,
    /// Seconds to establish the connection. Default 4 for HTTP and HTTPS, 10 for TCP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 60))]
    pub connect_timeout_seconds: Option<u32>,
    /// HTTP(S): seconds from connecting to the status line (and the search string). Default 2.
    #[serde(default = "default_response_timeout")]
    #[schemars(range(min = 1, max = 60))]
    pub response_timeout_seconds: u32,
    /// The check is healthy when more than this percentage of reachable checkers see it
    /// healthy (0 to 100, default 18).
    #[serde(default = "default_healthy_checker_percent")]
    #[schemars(range(min = 0, max = 100))]
    pub healthy_checker_percent: u32,
    /// Negates the final status.
    #[serde(default, skip_serializing_if = "is_false")]
    pub inverted: bool,
    /// Always healthy, whatever `inverted` says.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disabled: bool,
    /// Type Calculated only: healthy when at least `healthThreshold` children are healthy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calculated: Option<CalculatedCheck>,
    /// Type Metric only: a Prometheus query, in ALARM (unhealthy) while it returns samples
    /// (SEMANTICS H13-H15).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<MetricCheck>,
}

/// A Prometheus alert expression as a health check (H13).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricCheck {
    pub prometheus: PrometheusSource,
    /// An instant query (PromQL). Samples in the result: ALARM; an empty vector: OK.
    #[schemars(length(min = 1, max = 4096))]
    pub query: String,
    /// What an evaluation without data (a query error, a timeout, Prometheus unreachable)
    /// counts as: `Healthy`, `Unhealthy`, or `LastKnownStatus` (the default: no observation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insufficient_data_health_status: Option<InsufficientDataHealthStatus>,
}

/// Where the Prometheus HTTP API is, and how to authenticate to it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrometheusSource {
    /// Base URL of the Prometheus server, `http://` or `https://` (`/api/v1/query` is added).
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("self.matches('^https?://[^/?#@ ]+(/[^?# ]*)?$')").message("url must be http:// or https://, a host and an optional path, without credentials, query or fragment"))]
    pub url: String,
    /// A Secret in the check's namespace whose key holds the bearer token (cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_secret_ref: Option<SecretKeyRef>,
    /// A Secret in the check's namespace whose key holds the CA bundle (PEM) that signs the
    /// server's certificate (cluster). Without one, an https URL is verified against nothing
    /// and refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret_ref: Option<SecretKeyRef>,
    /// Standalone mode: a file holding the bearer token (relative to the manifest directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bearer_token_file: Option<String>,
    /// Standalone mode: a PEM file of the CA bundle (relative to the manifest directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<String>,
}

/// A key of a Secret in the object's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

/// What a Metric check's evaluation without data counts as (H13).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum InsufficientDataHealthStatus {
    Healthy,
    Unhealthy,
    #[default]
    LastKnownStatus,
}

fn is_false(b: &bool) -> bool {
    !*b
}
fn default_request_interval() -> u32 {
    30
}
fn default_failure_threshold() -> u32 {
    3
}
fn default_response_timeout() -> u32 {
    2
}
fn default_healthy_checker_percent() -> u32 {
    18
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum CheckType {
    #[serde(rename = "HTTP")]
    Http,
    #[serde(rename = "HTTPS")]
    Https,
    #[serde(rename = "TCP")]
    Tcp,
    Calculated,
    /// A Prometheus query (H13).
    Metric,
}

impl HealthCheckSpec {
    /// The connect timeout in force: the configured one, else 4 s (HTTP/S) or 10 s (TCP).
    pub fn connect_timeout_seconds(&self) -> u32 {
        self.connect_timeout_seconds
            .unwrap_or(match self.check_type {
                CheckType::Tcp => 10,
                _ => 4,
            })
    }
}

/// Where a probe connects.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeTarget {
    /// An IP address or a DNS name.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9._:-]+$')").message("address must be an IP address or a DNS name"))]
    pub address: String,
    /// TCP port, 1 to 65535.
    #[schemars(range(min = 1, max = 65535))]
    pub port: u16,
    /// HTTP(S) only: the request path, default "/".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 1024))]
    #[x_kube(validation = Rule::new("self.startsWith('/')").message("path must start with /"))]
    #[x_kube(validation = Rule::new("!self.matches('[\\x00-\\x20\\x7f]')").message("path must not hold spaces or control characters (they would end the request line)"))]
    pub path: Option<String>,
    /// HTTP(S) only: the Host header and the TLS server name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("!self.matches('[\\x00-\\x20\\x7f]')").message("host must not hold spaces or control characters"))]
    pub host: Option<String>,
}

/// A check computed from other checks (SEMANTICS H10).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CalculatedCheck {
    /// Names of HealthChecks in the same namespace (not Calculated ones), at most 256.
    #[schemars(length(max = 256))]
    pub children: Vec<String>,
    /// Healthy when at least this many children are healthy. 0: always healthy.
    #[schemars(range(min = 0, max = 256))]
    pub health_threshold: u32,
}

/// What the checkers and the operator report about a HealthCheck.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheckStatus {
    /// The final status, after quorum, inversion and disabling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    /// "healthy/reachable" checkers, for `kubectl get hc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkers_healthy: Option<String>,
    /// One entry per checker: its own thresholded view and when it last reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub checkers: Vec<CheckerStatus>,
    /// Type Metric: the last evaluation (H14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<MetricStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The last evaluation of a Metric check (H14).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetricStatus {
    /// `OK`, `ALARM` or `INSUFFICIENT_DATA`.
    pub state: String,
    /// The samples, in words: "no samples", "2 samples, first 0.07".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    /// Why there was no data, when there was none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_evaluated: Option<Time>,
}

/// One checker's view of a check (SEMANTICS H5, already thresholded).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CheckerStatus {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    pub healthy: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observed: Option<Time>,
    /// The last observation: "200 OK in 3 ms", "connect refused", ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// RecordGroup
// ---------------------------------------------------------------------------------------------

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
    pub fn as_str(self) -> &'static str {
        healthroute_table::RecordType::from(self).as_str()
    }
}

impl From<RecordTypeSpec> for healthroute_table::RecordType {
    fn from(t: RecordTypeSpec) -> Self {
        match t {
            RecordTypeSpec::A => Self::A,
            RecordTypeSpec::Aaaa => Self::Aaaa,
            RecordTypeSpec::Cname => Self::Cname,
            RecordTypeSpec::Txt => Self::Txt,
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

/// One member of a group. Exactly one of `values`, `service`, `alias`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[x_kube(
    validation = Rule::new("[has(self.values), has(self.service), has(self.alias)].filter(x, x).size() == 1").message("exactly one of values, service, alias"),
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

// ---------------------------------------------------------------------------------------------
// ZonalShift
// ---------------------------------------------------------------------------------------------

/// Moves traffic away from one zone for a bounded time.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "healthroute.io",
    version = "v1alpha1",
    kind = "ZonalShift",
    namespaced,
    status = "ZonalShiftStatus",
    shortname = "zs",
    doc = "Treats the endpoints of one zone as unhealthy in the targeted RecordGroups until it expires or is cancelled.",
    printcolumn(name = "Away From", type_ = "string", json_path = ".spec.awayFrom"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.status"),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = ".status.appliedGroups",
        description = "groups the shift applies to / targeted groups"
    ),
    // A string, not a date: kubectl prints a future date as <invalid>.
    printcolumn(name = "Expires", type_ = "string", json_path = ".status.expiryTime"),
    printcolumn(
        name = "Comment",
        type_ = "string",
        json_path = ".spec.comment",
        priority = 1
    )
)]
#[x_kube(
    validation = Rule::new("has(self.target.recordGroup) != has(self.target.selector)").message("target has exactly one of recordGroup, selector"),
)]
#[serde(rename_all = "camelCase")]
pub struct ZonalShiftSpec {
    /// The zone (`topology.kubernetes.io/zone`) to move traffic away from.
    #[schemars(length(min = 1, max = 63))]
    pub away_from: String,
    /// The RecordGroups the shift applies to.
    pub target: ShiftTarget,
    /// How long the shift lasts, from its start or from the latest change of this field:
    /// a duration such as 30m or 2h, from 1m to 72h.
    #[schemars(length(min = 2, max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+h)?([0-9]+m)?([0-9]+s)?$') && duration(self) >= duration('1m') && duration(self) <= duration('72h')").message("expiresIn must be a duration such as 30m or 2h, from 1m to 72h"))]
    pub expires_in: String,
    /// Why the shift exists; only the latest is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub comment: Option<String>,
    /// Ends the shift; the object stays as a record.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancel: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShiftTarget {
    /// One RecordGroup in the same namespace, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_group: Option<String>,
    /// RecordGroups in the same namespace, by label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZonalShiftStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ShiftState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_time: Option<Time>,
    /// The `expiresIn` that `expiryTime` was computed from; a different spec value restarts
    /// the clock from the change (SEMANTICS Z4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<String>,
    /// "applied/targeted" groups, for `kubectl get zs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_groups: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["recordGroup"]))]
    pub groups: Vec<ShiftGroupStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ShiftState {
    Active,
    Expired,
    Canceled,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShiftGroupStatus {
    pub record_group: String,
    pub applied_status: AppliedStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<NotAppliedReason>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum AppliedStatus {
    Applied,
    NotApplied,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum NotAppliedReason {
    /// An older active shift applies to the group (SEMANTICS Z5).
    Conflict,
    /// Applying would leave no healthy endpoint outside the zone (SEMANTICS Z6).
    NoHealthyCapacityElsewhere,
}

/// What is wrong with a value of this API that its schema alone does not catch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error(
        "{0:?}: write a duration as hours, minutes and seconds in that order, as in 2h, 30m or 1h30m"
    )]
    DurationForm(String),
    #[error("{raw:?}: not a duration: {reason}")]
    NotADuration { raw: String, reason: String },
    #[error("{0:?}: expiresIn is from 1m to 72h")]
    ExpiresInRange(String),
}

/// Parses `expiresIn` ("90s", "30m", "2h", "1h30m") into seconds.
pub fn parse_expires_in(raw: &str) -> Result<u64, Error> {
    // The CRD's rule (`^([0-9]+h)?([0-9]+m)?([0-9]+s)?$`, units once each, largest first),
    // then jiff reads the span: "30m2h" or "1h1h" are refused here as by the API server.
    let well_formed = !raw.is_empty()
        && raw
            .split_inclusive(['h', 'm', 's'])
            .try_fold(None::<char>, |last, part| {
                let unit = part.chars().last()?;
                let digits = &part[..part.len() - 1];
                let rank = |u: char| "hms".find(u);
                let ok = !digits.is_empty()
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && last.is_none_or(|l| rank(l) < rank(unit));
                ok.then_some(Some(unit))
            })
            .is_some();
    if !well_formed {
        return Err(Error::DurationForm(raw.to_owned()));
    }
    let not_a_duration = |e: jiff::Error| Error::NotADuration {
        raw: raw.to_owned(),
        reason: e.to_string(),
    };
    let span: jiff::Span = raw.parse().map_err(not_a_duration)?;
    let total = span.total(jiff::Unit::Second).map_err(not_a_duration)?;
    if !(60.0..=f64::from(72 * 3600)).contains(&total) {
        return Err(Error::ExpiresInRange(raw.to_owned()));
    }
    Ok(total as u64)
}

/// Labels of an object, as the selector code reads them.
pub type Labels = BTreeMap<String, String>;

#[cfg(test)]
mod duration_tests {
    use super::parse_expires_in;

    // SEM-Z4: expiresIn from 1m to 72h, written as the CRD's rule allows it and nothing else.
    #[test]
    fn expires_in_reads_as_the_api_server_does() {
        for (raw, secs) in [
            ("1m", 60),
            ("90s", 90),
            ("2h", 7200),
            ("1h30m", 5400),
            ("72h", 259200),
            ("1h0m30s", 3630),
        ] {
            assert_eq!(parse_expires_in(raw), Ok(secs), "{raw}");
        }
        for bad in [
            "30m2h", "1h1h", "2", "h", "", "59s", "73h", "1.5h", "2d", "1h 30m", "-1h", "PT2H",
        ] {
            assert!(parse_expires_in(bad).is_err(), "{bad} was accepted");
        }
    }
}
