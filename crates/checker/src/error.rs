//! Why a probe or a Metric evaluation did not get an answer, and what is wrong with a target.
//! A failure's text is what a check's status and views show, so each says what a person
//! looking at the check needs, in a few words.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use healthroute_api::DENIED_BY_POLICY;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A peer cluster's configuration (X1).
    #[error("peer {peer}: {why}")]
    PeerConfig { peer: String, why: String },
    // Reaching the target (probes and Prometheus alike).
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        #[source]
        source: std::io::Error,
    },
    #[error("resolving {host} timed out")]
    ResolveTimeout { host: String },
    #[error("{host} resolves to no address")]
    NoAddress { host: String },
    /// H12: the checker's policy refuses the address; nothing was sent.
    #[error("{what} {ip} rejected: {DENIED_BY_POLICY} ({rule})")]
    Denied {
        what: &'static str,
        ip: IpAddr,
        rule: String,
    },
    /// H12: a user's text would end a request line or a header early.
    #[error("the {what} holds a space or control character at byte {at}: refused, nothing sent")]
    UnsafeInRequest { what: &'static str, at: usize },
    #[error("connect refused")]
    ConnectRefused,
    #[error("connect failed: {0}")]
    Connect(#[source] std::io::Error),
    #[error("connect timeout after {}", secs(*.0))]
    ConnectTimeout(Duration),
    #[error("TLS handshake failed: {0}")]
    Tls(#[source] std::io::Error),
    #[error("TLS is unavailable: {0}")]
    TlsSetup(#[source] rustls::Error),
    #[error("{host}: {source}")]
    ServerName {
        host: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("Prometheus at {addr}: {source}")]
    AtPrometheus {
        addr: SocketAddr,
        #[source]
        source: Box<Error>,
    },

    // The HTTP exchange of a probe.
    #[error("cannot build the request: {0}")]
    BuildRequest(#[source] http::Error),
    #[error("status {0}")]
    Status(u16),
    /// Not within the first `window` body bytes (the probe's search window, H3).
    #[error("search string not found in first {window} bytes")]
    SearchNotFound { window: usize },
    #[error("timeout after {}", secs(*.0))]
    Timeout(Duration),
    #[error("connection reset")]
    ConnectionReset,
    #[error("connection closed in the response")]
    ClosedInResponse,
    #[error("reading the response failed: {0}")]
    ReadResponse(#[source] std::io::Error),
    #[error("connection closed without a complete response")]
    Incomplete,
    #[error("response headers over 16 KiB")]
    HeadersTooLarge,
    #[error("not an HTTP response ({0})")]
    NotHttp(#[source] hyper::Error),
    #[error("the exchange failed: {0}")]
    Exchange(#[source] hyper::Error),

    // A Metric check's Prometheus and its answer.
    #[error("{url:?}{problem}")]
    Url { url: String, problem: UrlProblem },
    #[error(
        "an https Prometheus URL needs a CA bundle (caSecretRef, or caFile in standalone mode)"
    )]
    NeedsCa,
    #[error("the CA bundle is not PEM: {0}")]
    CaNotPem(#[source] rustls::pki_types::pem::Error),
    #[error("the CA bundle holds a bad certificate: {0}")]
    BadCa(#[source] rustls::Error),
    #[error("the CA bundle holds no certificate")]
    EmptyCa,
    #[error("the bearer token is not UTF-8")]
    TokenNotUtf8,
    #[error("the bearer token holds bytes a header cannot carry")]
    TokenNotAHeader,
    #[error("HTTP handshake failed: {0}")]
    Handshake(#[source] hyper::Error),
    #[error("the request failed: {0}")]
    Request(#[source] hyper::Error),
    #[error("reading the answer failed: {0}")]
    ReadAnswer(#[source] BoxError),
    #[error("no answer from Prometheus within {} s", .0.as_secs())]
    PrometheusTimeout(Duration),
    #[error("status {status}: the answer is not Prometheus API JSON")]
    NotPrometheusJson { status: u16 },
    #[error("status {status}: {kind}: {error}")]
    PrometheusError {
        status: u16,
        kind: String,
        error: String,
    },
    #[error("the answer has no {0}")]
    AnswerLacks(&'static str),
    #[error("the query returns a {0}, not an instant vector: write it as an alert expression")]
    NotAVector(String),

    // A Metric check's credentials.
    #[error(
        "bearerTokenSecretRef and caSecretRef need a cluster: use bearerTokenFile and caFile in standalone mode"
    )]
    SecretRefsNeedCluster,
    #[error("cannot read {}: {source}", path.display())]
    ReadFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Where a cluster keeps them (the operator reads Secrets).
    #[error(transparent)]
    Credentials(BoxError),

    // The checker's own configuration.
    #[error("{0:?}: not a CIDR (an address, a slash and a prefix length, as in 10.0.0.0/8)")]
    NotACidr(String),
    #[error("{0:?}: not an IP address")]
    NotAnAddress(String),
}

/// What is wrong with a Prometheus URL (after the URL, quoted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlProblem {
    #[error(" is not an http:// or https:// URL")]
    Scheme,
    #[error(" has no host, or carries credentials")]
    Authority,
    #[error(": the path may not hold a query, a fragment, a space or a control character")]
    Path,
    #[error(": unclosed [ in the host")]
    Unclosed,
    #[error(": bad port {0:?}")]
    Port(String),
    #[error(": junk after the host")]
    Junk,
    #[error(": {0:?} is not a host name or address")]
    Host(String),
}

/// A timeout as people say it: "2 s", "1.5 s".
fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0} s")
    } else {
        format!("{s:.1} s")
    }
}
