//! What fails in the operator: publishing the table, writing a status, reading a Secret,
//! starting up.

use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("encoding the table: {0}")]
    EncodeTable(#[from] healthroute_table::Error),
    #[error("encoding the table: {0}")]
    EncodeManifest(#[source] serde_json::Error),
    /// The fold's encode, on a blocking thread, did not finish (it panicked or was cancelled).
    #[error("encoding the table for a fold: {0}")]
    FoldEncode(String),
    #[error("writing ConfigMap {name}: {source}")]
    WriteTable {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("encoding a status: {0}")]
    EncodeStatus(#[source] serde_json::Error),
    #[error("listing the table ConfigMaps: {0}")]
    ListTable(#[source] kube::Error),
    /// A request to the API server that took longer than it may.
    #[error("{what}: no answer within {after:?}")]
    Timeout { what: String, after: Duration },
    #[error("leadership ended while publishing")]
    NotLeader,
    #[error("cannot read Secret {namespace}/{name}: {source}")]
    ReadSecret {
        namespace: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("Secret {namespace}/{name} does not exist")]
    NoSecret { namespace: String, name: String },
    #[error("Secret {namespace}/{name} has no key {key:?}")]
    NoSecretKey {
        namespace: String,
        name: String,
        key: String,
    },
    #[error(
        "bearerTokenFile and caFile are for standalone mode: use bearerTokenSecretRef and caSecretRef in a cluster"
    )]
    FilesInCluster,
    #[error(transparent)]
    Api(#[from] kube::Error),
    #[error(transparent)]
    Config(#[from] healthroute_compiler::Error),
    #[error("no Kubernetes client: {0}")]
    NoClient(#[source] kube::Error),
    #[error("no Kubernetes client configuration: {0}")]
    NoClientConfig(#[source] kube::config::InferConfigError),
    #[error("admin {addr}: {source}")]
    Admin {
        addr: std::net::SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("--lease-duration must be at least 3 seconds")]
    LeaseTooShort,
    #[error("--status-qps {0}: a number of writes a second, 0 or more (0: no limit)")]
    BadStatusPace(String),
    #[error("--push-key-file {path}: {reason}")]
    PushKey { path: String, reason: String },
    #[error("cannot start the leader election's thread: {0}")]
    ElectionThread(#[source] std::io::Error),
    #[error("reading ServiceAccount {account}, the owner of the table: {source}")]
    ReadOwner {
        account: String,
        #[source]
        source: kube::Error,
    },
    /// `healthroute-operator uninstall`: one of its requests failed.
    #[error("uninstall: {what}: {source}")]
    Uninstall {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// `healthroute-operator uninstall` ran out of time with something still to do.
    #[error(
        "uninstall incomplete: {left}; run it again (`helm uninstall --no-hooks` skips it, leaving what healthroute made)"
    )]
    UninstallIncomplete { left: String },
}
