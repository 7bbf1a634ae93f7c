//! What the resolver, the simulator and `kubectl healthroute` refuse or fail at, each in the
//! words printed after `error:`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use healthroute_compiler::manifests::CONFIG_FILE;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    // Starting up and serving.
    #[error("{}: {source}", path.display())]
    ReadConfig {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A mistake in the configuration file (or in a flag that stands for one of its fields):
    /// `FILE:LINE:COLUMN: FIELD: what is wrong`, never a value of the file (SEM-X10: the file
    /// may hold a peer's secret). The YAML parser's own error is not kept: its `Display`
    /// quotes the file.
    #[error("{}: {message}", place(file, *line_column, field))]
    Config {
        file: PathBuf,
        /// 1-based, when known.
        line_column: Option<(u64, u64)>,
        /// `peers[0].keys[0].secret`; empty when the mistake is in no field (a syntax error).
        field: String,
        message: String,
    },
    #[error("no served zone: pass --zone ZONE or list zones in {CONFIG_FILE}")]
    NoZone,
    /// A bad manifest directory at start (the lines name each file and object at fault).
    #[error("{}:\n{source}", dir.display())]
    Manifests {
        dir: PathBuf,
        #[source]
        source: Box<Error>,
    },
    #[error(transparent)]
    Compiler(#[from] healthroute_compiler::Error),
    /// The peers' configuration (X1) when the field at fault is not known (else
    /// [`Error::Config`]).
    #[error("peers: {0}")]
    Peers(#[source] healthroute_checker::Error),
    #[error("exchange.listen is set, but no peer is configured: the listener would accept no key")]
    ExchangeWithoutPeers,
    /// The push listener's flags (P12).
    #[error("{0}")]
    Push(String),
    /// A DNSSEC key file that cannot be used (K1): the file and why, never the key.
    #[error("DNSSEC key {}: {why}", path.display())]
    DnssecKey { path: PathBuf, why: String },
    /// A signed zone's keys that cannot sign it together (K1).
    #[error("DNSSEC keys of {zone}: {why}")]
    DnssecKeys { zone: String, why: String },
    #[error(transparent)]
    Name(#[from] healthroute_table::Error),
    #[error("cannot listen on {what} {addr}: {source}")]
    Listen {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot listen on UDP {addr}: {source} (is another server running?)")]
    PortTaken {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start a UDP thread: {0}")]
    Thread(#[source] std::io::Error),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Json(#[from] serde_json::Error),

    // Forwarding (D5).
    #[error("no answer from {upstream} within {timeout:?}")]
    UpstreamTimeout {
        upstream: SocketAddr,
        timeout: Duration,
    },
    #[error("query too large")]
    QueryTooLarge,
    #[error(transparent)]
    Dns(#[from] hickory_proto::serialize::binary::DecodeError),

    // The simulator's flags.
    #[error("--now {raw:?}: {source} (use RFC 3339, e.g. 2026-01-02T15:04:05Z)")]
    Now {
        raw: String,
        #[source]
        source: jiff::Error,
    },
    #[error("--not-ready {0}: no EndpointSlice in the directory has this address")]
    NoSuchEndpoint(String),
    #[error("{flag} {name}: no HealthCheck of that name in the directory")]
    NoSuchCheck { flag: &'static str, name: String },
    #[error(
        "--unhealthy {0}: a calculated check's status comes from its children; mark those unhealthy"
    )]
    CalculatedUnhealthy(String),
    #[error("--peer {0}: write CLUSTER/NAMESPACE/NAME=VALUE[,VALUE...]")]
    PeerForm(String),
    #[error("--peer {wanted}: {source}")]
    PeerValue {
        wanted: String,
        #[source]
        source: healthroute_table::Error,
    },
    #[error("{flag} {name}: no record in the directory has that peer source")]
    NoSuchPeerSource { flag: &'static str, name: String },
    #[error("--alarm {0}: write NAME=ok, NAME=alarm or NAME=nodata")]
    AlarmForm(String),
    #[error("--alarm {wanted}: {check} is not a Metric check")]
    NotMetric { wanted: String, check: String },
    #[error("--alarm {wanted}: {state:?} is not ok, alarm or nodata")]
    AlarmState { wanted: String, state: String },
    #[error("the table for {0} is inconsistent (alias chain broken)")]
    Inconsistent(String),

    // kubectl healthroute.
    #[error("no Kubernetes client: {0}")]
    NoClient(#[source] kube::Error),
    #[error("no Kubernetes client ({0}); for a directory of manifests, pass --manifests DIR")]
    NoClientForResolver(#[source] kube::Error),
    #[error("{what}: {source}")]
    Kube {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("healthroute tables in several namespaces ({0}): pass --table-namespace")]
    SeveralInstallations(String),
    #[error("cannot build the ZonalShift: {0}")]
    BuildShift(#[source] serde_json::Error),
    #[error("--expires-in {raw}: {source}")]
    ExpiresIn {
        raw: String,
        #[source]
        source: healthroute_api::Error,
    },
    #[error(
        "zonalshift {namespace}/{name} has ended; start a new one (`kubectl healthroute shift start`)"
    )]
    ShiftEnded { namespace: String, name: String },
    #[error(
        "zonalshift {namespace}/{name} shows a shift ZonalAutoshift {config} holds (AS13): it ends with the engine, not by an edit; a practice run: `kubectl healthroute practice cancel -n {namespace} {config}`; an autoshift: when the zone recovers, or with autoshift Disabled"
    )]
    EngineShift {
        namespace: String,
        name: String,
        config: String,
    },
    #[error("shift start needs --group or --selector")]
    NoShiftTarget,
    #[error("--selector {0}: write key=value[,key=value]")]
    Selector(String),
}

/// `FILE:LINE:COLUMN: FIELD`, each part when known.
fn place(file: &Path, line_column: Option<(u64, u64)>, field: &str) -> String {
    let mut place = file.display().to_string();
    if let Some((line, column)) = line_column {
        place.push_str(&format!(":{line}:{column}"));
    }
    if !field.is_empty() {
        place.push_str(": ");
        place.push_str(field);
    }
    place
}
