//! `HealthCheck`: a probe run by checkers in several zones, a calculation over other checks,
//! or a Prometheus query (SEMANTICS H1-H14).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::{CheckerView, PeerValue};

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
    validation = Rule::new("self.type == 'Calculated' || self.type == 'Metric' || self.type == 'Peer' || has(self.target)").message("target is required for HTTP, HTTPS and TCP checks"),
    validation = Rule::new("(self.type != 'Calculated' && self.type != 'Metric' && self.type != 'Peer') || !has(self.target)").message("target is not allowed for Calculated, Metric and Peer checks"),
    validation = Rule::new("self.type == 'Peer' ? has(self.peer) : !has(self.peer)").message("peer is required for, and only allowed with, type Peer"),
    validation = Rule::new("self.type == 'Metric' ? has(self.metric) : !has(self.metric)").message("metric is required for, and only allowed with, type Metric"),
    validation = Rule::new("self.type == 'Calculated' ? has(self.calculated) : !has(self.calculated)").message("calculated is required for, and only allowed with, type Calculated"),
    validation = Rule::new("!has(self.searchString) || self.type == 'HTTP' || self.type == 'HTTPS'").message("searchString is only allowed with HTTP and HTTPS checks"),
    validation = Rule::new("!has(self.target) || !has(self.target.path) || self.type == 'HTTP' || self.type == 'HTTPS'").message("target.path is only allowed with HTTP and HTTPS checks"),
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::openapi::kubernetes_formats)]
pub struct HealthCheckSpec {
    /// What the check does: HTTP, HTTPS, TCP, Calculated (over other checks), Metric (a
    /// Prometheus query) or Peer (a RecordGroup's health in a peer cluster).
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
    /// Type Peer only: a RecordGroup of a peer cluster, healthy while it answers at least one
    /// healthy value there (SEMANTICS X2-X5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<PeerTarget>,
}

/// A RecordGroup in a peer cluster (SEMANTICS X1, X2).
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, KubeSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct PeerTarget {
    /// The peer cluster's name, as the resolvers' configuration lists it (a DNS label).
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("cluster must be a DNS label (lower case letters, digits and '-')"))]
    pub cluster: String,
    /// `namespace/name` of the RecordGroup in the peer cluster.
    #[schemars(length(min = 3, max = 317))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')").message("recordGroup must be namespace/name"))]
    pub record_group: String,
}

impl PeerTarget {
    /// The peer group's key in the peer cluster (the CRD's rule makes it one), read as a
    /// table's group key is.
    pub fn group(&self) -> Option<crate::ObjectKey> {
        crate::ObjectKey::parse_group_key(&self.record_group)
    }

    /// The name of the HealthCheck that asks this peer for a namespace's records (X4):
    /// `peer.<cluster>.<namespace>.<name>`, a DNS subdomain when the parts are valid.
    pub fn check_name(&self) -> String {
        format!(
            "peer.{}.{}",
            self.cluster,
            self.record_group.replacen('/', ".", 1)
        )
    }
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

pub(crate) fn is_false(b: &bool) -> bool {
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
    /// A RecordGroup's health in a peer cluster, asked over the TSIG-signed exchange (X4).
    Peer,
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
#[schemars(transform = crate::openapi::kubernetes_formats)]
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
    // The schema stays a plain string, as the CRD has always had it.
    #[schemars(with = "String")]
    pub state: MetricState,
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
    /// Type Peer: the values the peer last answered as healthy (`TYPE value`), kept while
    /// it fails so that a last resort has them (X3, X9).
    // Read leniently: an entry that does not parse is left out (the compiler never used one);
    // the schema stays a list of strings, the form the CRD has always had.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "healthroute_table::peer_value::deserialize_lenient"
    )]
    #[schemars(with = "Vec<String>")]
    pub values: Vec<PeerValue>,
}

/// What a Metric check's last evaluation found (H13, H14); its text (`OK`, `ALARM`,
/// `INSUFFICIENT_DATA`) is what `status.metric.state` and the evaluator's view hold.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MetricState {
    /// The query returned an empty vector: healthy.
    #[serde(rename = "OK")]
    Ok,
    /// The query returned samples: unhealthy.
    #[serde(rename = "ALARM")]
    Alarm,
    /// No data (a query error, a timeout, Prometheus unreachable): what
    /// `insufficientDataHealthStatus` says.
    #[serde(rename = "INSUFFICIENT_DATA")]
    InsufficientData,
}

impl MetricState {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricState::Ok => "OK",
            MetricState::Alarm => "ALARM",
            MetricState::InsufficientData => "INSUFFICIENT_DATA",
        }
    }

    /// The health this evaluation says by itself: `None` without data.
    pub fn healthy(self) -> Option<bool> {
        match self {
            MetricState::Ok => Some(true),
            MetricState::Alarm => Some(false),
            MetricState::InsufficientData => None,
        }
    }

    /// What an evaluation in this state counts as (H13): healthy, unhealthy, or, without
    /// data, what `insufficient` says (`None`: no observation, the view stays as it was).
    pub fn observation(self, insufficient: InsufficientDataHealthStatus) -> Option<bool> {
        self.healthy().or(match insufficient {
            InsufficientDataHealthStatus::Healthy => Some(true),
            InsufficientDataHealthStatus::Unhealthy => Some(false),
            InsufficientDataHealthStatus::LastKnownStatus => None,
        })
    }
}

impl std::fmt::Display for MetricState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for MetricState {
    type Err = crate::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            MetricState::Ok,
            MetricState::Alarm,
            MetricState::InsufficientData,
        ]
        .into_iter()
        .find(|state| state.as_str() == s)
        .ok_or_else(|| crate::Error::NotAMetricState(s.to_owned()))
    }
}

impl From<&CheckerStatus> for CheckerView {
    fn from(status: &CheckerStatus) -> Self {
        CheckerView {
            checker: status.name.clone(),
            zone: status.zone.clone(),
            healthy: status.healthy,
            message: status.message.clone(),
            values: status.values.clone(),
        }
    }
}

impl HealthCheckStatus {
    /// Each checker's view as the status holds it: what the compiler reads of a check that
    /// the operator (at start, or on a status change) or the plugin finds in the cluster.
    pub fn checker_views(&self) -> impl Iterator<Item = CheckerView> + '_ {
        self.checkers.iter().map(CheckerView::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-H14: a Metric check's state reads back as it is written, and text that is no state
    // is refused, naming the states.
    #[test]
    fn metric_states_round_trip_and_others_are_refused() {
        for state in [
            MetricState::Ok,
            MetricState::Alarm,
            MetricState::InsufficientData,
        ] {
            assert_eq!(state.as_str().parse::<MetricState>(), Ok(state));
            let json = serde_json::to_value(state).ok();
            assert_eq!(json, Some(serde_json::Value::from(state.as_str())));
        }
        // H13: without data, the check's insufficient-data setting decides.
        use InsufficientDataHealthStatus as Nodata;
        for (state, nodata, counts) in [
            (MetricState::Ok, Nodata::Unhealthy, Some(true)),
            (MetricState::Alarm, Nodata::Healthy, Some(false)),
            (MetricState::InsufficientData, Nodata::Healthy, Some(true)),
            (
                MetricState::InsufficientData,
                Nodata::Unhealthy,
                Some(false),
            ),
            (MetricState::InsufficientData, Nodata::LastKnownStatus, None),
        ] {
            assert_eq!(state.observation(nodata), counts, "{state} {nodata:?}");
        }
        let err = "Alarm".parse::<MetricState>().err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("\"Alarm\" is not a Metric state (OK, ALARM, INSUFFICIENT_DATA)")
        );
    }

    // SEM-X9: a checker's status entry reads back into its view, values typed; an entry an
    // older or broken writer left unreadable is skipped, the others kept.
    #[test]
    fn a_status_reads_back_into_checker_views() -> Result<(), serde_json::Error> {
        let status: HealthCheckStatus = serde_json::from_value(serde_json::json!({
            "checkers": [{
                "name": "zone-a",
                "zone": "a",
                "healthy": true,
                "message": "1 healthy value from 127.0.0.1:5454",
                "values": ["A 192.0.2.1", "garbage", "TXT \"v=spf1 -all\""]
            }],
            "metric": {"state": "ALARM", "value": "1 sample, 1"}
        }))?;
        let views: Vec<CheckerView> = status.checker_views().collect();
        assert_eq!(views.len(), 1);
        assert_eq!(views[0].checker, "zone-a");
        let values: Vec<String> = views[0].values.iter().map(|v| v.to_string()).collect();
        assert_eq!(values, ["A 192.0.2.1", "TXT \"v=spf1 -all\""]);
        assert_eq!(status.metric.map(|m| m.state), Some(MetricState::Alarm));
        // Written back, the values are the same strings.
        let written = serde_json::to_value(&status.checkers[0])?;
        assert_eq!(
            written["values"],
            serde_json::json!(["A 192.0.2.1", "TXT \"v=spf1 -all\""])
        );
        Ok(())
    }
}
