//! What the resolver, the simulator and `kubectl healthroute` refuse or fail at, each in the
//! words printed after `error:`.

use std::net::SocketAddr;
use std::path::PathBuf;
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
    #[error("{}: {source}", path.display())]
    ParseConfig {
        path: PathBuf,
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// A mistake in a zone's configuration (D12), with the field it is in.
    #[error("{}: {at}: {message}", file.display())]
    ZoneConfig {
        file: PathBuf,
        at: String,
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
    /// The peers' configuration (X1): a peer's name, addresses or keys.
    #[error("peers: {0}")]
    Peers(#[source] healthroute_checker::Error),
    #[error("exchange.listen is set, but no peer is configured: the listener would accept no key")]
    ExchangeWithoutPeers,
    /// The push listener's flags (P12).
    #[error("{0}")]
    Push(String),
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
