//! Metric checks (SEMANTICS H13-H15): one instant query to a Prometheus server per
//! evaluation. Samples in the result are ALARM, an empty vector is OK; anything else (a query
//! error, a timeout, an unreachable server, a result that is not a vector) is insufficient
//! data, with the reason.
//!
//! The request goes through hyper's HTTP/1.1 client connection over a socket this module
//! connects, so that the target policy (H12) judges the address the name resolves to, and
//! the timeouts bound connecting and the whole exchange. The bearer token is sent, never
//! logged or put in a reason.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use healthroute_api::MetricState;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value as Json;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::policy::TargetPolicy;
use crate::error::{Error, UrlProblem};

/// The largest response body read; a query result larger than this is insufficient data.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// One evaluation's outcome (H13).
#[derive(Clone, Debug, PartialEq)]
pub enum Evaluation {
    /// An empty vector.
    Ok,
    /// `samples` samples; `first` is the first one's value.
    Alarm { samples: usize, first: String },
    /// No usable answer, and why.
    NoData(String),
}

impl Evaluation {
    /// What status.metric.state says of it (H14).
    pub fn state(&self) -> MetricState {
        match self {
            Evaluation::Ok => MetricState::Ok,
            Evaluation::Alarm { .. } => MetricState::Alarm,
            Evaluation::NoData(_) => MetricState::InsufficientData,
        }
    }
    /// The samples in words ("no samples", "2 samples, first 0.07"), or the reason.
    pub fn describe(&self) -> String {
        match self {
            Evaluation::Ok => "no samples".into(),
            Evaluation::Alarm { samples: 1, first } => format!("1 sample, {first}"),
            Evaluation::Alarm { samples, first } => format!("{samples} samples, first {first}"),
            Evaluation::NoData(why) => why.clone(),
        }
    }
}

/// A Prometheus server as a check uses it: its URL split up, and what authenticates to it.
#[derive(Clone, Debug)]
pub struct Endpoint {
    pub tls: bool,
    pub host: String,
    pub port: u16,
    /// The path prefix, without a trailing slash ("" or "/prometheus").
    pub prefix: String,
    pub credentials: Credentials,
}

/// What a check's Secrets (or files, in standalone mode) hold.
#[derive(Clone, Default)]
pub struct Credentials {
    pub bearer_token: Option<String>,
    /// PEM: the CA bundle an https server's certificate must chain to.
    pub ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for Credentials {
    // The token never reaches a log line, not even through Debug.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("ca_pem", &self.ca_pem.as_ref().map(|c| c.len()))
            .finish()
    }
}

impl Credentials {
    /// From what a Secret or a file holds: the token is UTF-8, its surrounding whitespace
    /// (a trailing newline, most often) dropped.
    pub fn from_bytes(
        token: Option<Vec<u8>>,
        ca_pem: Option<Vec<u8>>,
    ) -> Result<Credentials, Error> {
        let bearer_token = token
            .map(|bytes| {
                String::from_utf8(bytes)
                    .map(|t| t.trim().to_owned())
                    .map_err(|_| Error::TokenNotUtf8)
            })
            .transpose()?;
        Ok(Credentials {
            bearer_token,
            ca_pem,
        })
    }
}

impl Endpoint {
    /// Parses `http(s)://host[:port][/path]`; the API schema allows nothing else.
    pub fn parse(url: &str, credentials: Credentials) -> Result<Endpoint, Error> {
        let bad = |problem| Error::Url {
            url: url.to_owned(),
            problem,
        };
        let (tls, rest) = if let Some(r) = url.strip_prefix("https://") {
            (true, r)
        } else if let Some(r) = url.strip_prefix("http://") {
            (false, r)
        } else {
            return Err(bad(UrlProblem::Scheme));
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        if authority.is_empty() || authority.contains('@') {
            return Err(bad(UrlProblem::Authority));
        }
        if path.contains(['?', '#']) || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(bad(UrlProblem::Path));
        }
        let default_port = if tls { 443 } else { 80 };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| bad(UrlProblem::Unclosed))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad(UrlProblem::Port(p.to_owned())))?,
                None if after.is_empty() => default_port,
                None => return Err(bad(UrlProblem::Junk)),
            };
            (h.to_owned(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_owned(),
                    p.parse().map_err(|_| bad(UrlProblem::Port(p.to_owned())))?,
                ),
                None => (authority.to_owned(), default_port),
            }
        };
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-_:".contains(&b))
        {
            return Err(bad(UrlProblem::Host(host)));
        }
        Ok(Endpoint {
            tls,
            host,
            port,
            prefix: path.trim_end_matches('/').to_owned(),
            credentials,
        })
    }

    fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == if self.tls { 443 } else { 80 } {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// Percent-encodes a query parameter (RFC 3986: everything but the unreserved characters).
fn encode_component(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Evaluates `query` once: connects within `connect_timeout`, and has the whole answer within
/// `timeout` of connecting. Never panics; every failure is [`Evaluation::NoData`].
pub async fn evaluate(
    endpoint: &Endpoint,
    query: &str,
    connect_timeout: Duration,
    timeout: Duration,
    policy: &TargetPolicy,
) -> Evaluation {
    match try_evaluate(endpoint, query, connect_timeout, timeout, policy).await {
        Ok(e) => e,
        Err(why) => Evaluation::NoData(why.to_string()),
    }
}

async fn try_evaluate(
    endpoint: &Endpoint,
    query: &str,
    connect_timeout: Duration,
    timeout: Duration,
    policy: &TargetPolicy,
) -> Result<Evaluation, Error> {
    let ip: IpAddr = match endpoint.host.parse::<IpAddr>() {
        Ok(ip) => ip,
        Err(_) => {
            let found = tokio::time::timeout(
                connect_timeout,
                tokio::net::lookup_host((endpoint.host.as_str(), endpoint.port)),
            )
            .await
            .map_err(|_| Error::ResolveTimeout {
                host: endpoint.host.clone(),
            })?
            .map_err(|source| Error::Resolve {
                host: endpoint.host.clone(),
                source,
            })?;
            found
                .map(|a| a.ip())
                .next()
                .ok_or_else(|| Error::NoAddress {
                    host: endpoint.host.clone(),
                })?
        }
    };
    if let Some(rule) = policy.denies(ip) {
        return Err(Error::Denied {
            what: "Prometheus at",
            ip,
            rule: rule.to_string(),
        });
    }
    let addr = SocketAddr::new(ip, endpoint.port);
    let at = |e: Error| Error::AtPrometheus {
        addr,
        source: Box::new(e),
    };
    let tcp = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return Err(at(Error::ConnectRefused));
        }
        Ok(Err(e)) => return Err(at(Error::Connect(e))),
        Err(_) => return Err(at(Error::ConnectTimeout(connect_timeout))),
    };
    let _ = tcp.set_nodelay(true);
    let path = format!(
        "{}/api/v1/query?query={}",
        endpoint.prefix,
        encode_component(query)
    );
    let exchange = async {
        if endpoint.tls {
            let config = tls_config(&endpoint.credentials)?;
            let name = ServerName::try_from(endpoint.host.clone()).map_err(|source| {
                Error::ServerName {
                    host: endpoint.host.clone(),
                    source,
                }
            })?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await
                .map_err(|e| at(Error::Tls(e)))?;
            get(tls, endpoint, &path).await
        } else {
            get(tcp, endpoint, &path).await
        }
    };
    let (status, body) = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| Error::PrometheusTimeout(timeout))??;
    interpret(status, &body)
}

/// The client side of TLS: the check's CA bundle and nothing else; no CA, no https.
fn tls_config(credentials: &Credentials) -> Result<Arc<rustls::ClientConfig>, Error> {
    let pem = credentials.ca_pem.as_deref().ok_or(Error::NeedsCa)?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(Error::CaNotPem)?;
        roots.add(cert).map_err(Error::BadCa)?;
    }
    if roots.is_empty() {
        return Err(Error::EmptyCa);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::TlsSetup)?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

async fn get<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    endpoint: &Endpoint,
    path: &str,
) -> Result<(u16, Bytes), Error> {
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(Error::Handshake)?;
    let connection = tokio::spawn(connection);
    let mut request = http::Request::get(path)
        .header(http::header::HOST, endpoint.authority())
        .header(http::header::ACCEPT, "application/json")
        .header(http::header::USER_AGENT, "healthroute-metric-check");
    if let Some(token) = &endpoint.credentials.bearer_token {
        let mut value = http::HeaderValue::from_str(&format!("Bearer {}", token.trim()))
            .map_err(|_| Error::TokenNotAHeader)?;
        value.set_sensitive(true);
        request = request.header(http::header::AUTHORIZATION, value);
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(Error::BuildRequest)?;
    let result = async {
        let response = sender.send_request(request).await.map_err(Error::Request)?;
        let status = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_BODY_BYTES)
            .collect()
            .await
            .map_err(Error::ReadAnswer)?
            .to_bytes();
        Ok((status, body))
    }
    .await;
    connection.abort();
    result
}

/// Reads the Prometheus API's answer (its JSON envelope): a vector's samples, or why not.
fn interpret(status: u16, body: &[u8]) -> Result<Evaluation, Error> {
    let json: Json =
        serde_json::from_slice(body).map_err(|_| Error::NotPrometheusJson { status })?;
    if json.get("status").and_then(Json::as_str) != Some("success") {
        let kind = json
            .get("errorType")
            .and_then(Json::as_str)
            .unwrap_or("error");
        let error = json
            .get("error")
            .and_then(Json::as_str)
            .unwrap_or("no error given");
        return Err(Error::PrometheusError {
            status,
            kind: kind.to_owned(),
            error: truncate(error, 200),
        });
    }
    let data = json.get("data").ok_or(Error::AnswerLacks("data"))?;
    match data.get("resultType").and_then(Json::as_str) {
        Some("vector") => {}
        Some(other) => {
            return Err(Error::NotAVector(other.to_owned()));
        }
        None => return Err(Error::AnswerLacks("resultType")),
    }
    let result = data
        .get("result")
        .and_then(Json::as_array)
        .ok_or(Error::AnswerLacks("result"))?;
    match result.first() {
        None => Ok(Evaluation::Ok),
        Some(first) => Ok(Evaluation::Alarm {
            samples: result.len(),
            first: first
                .pointer("/value/1")
                .and_then(Json::as_str)
                .map(|v| truncate(v, 40))
                .unwrap_or_else(|| "?".into()),
        }),
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        let mut t: String = s.chars().take(n).collect();
        t.push('…');
        t
    }
}

/// Credentials from files (standalone mode): `bearerTokenFile` and `caFile`, relative to
/// `base` (the manifest directory). Read at every evaluation; Secret references need a cluster.
pub fn file_credentials(base: std::path::PathBuf) -> super::CredentialSource {
    Arc::new(move |_key, source| {
        let base = base.clone();
        let source = source.clone();
        Box::pin(async move {
            if source.bearer_token_secret_ref.is_some() || source.ca_secret_ref.is_some() {
                return Err(Error::SecretRefsNeedCluster);
            }
            let read = |name: Option<String>| {
                let base = base.clone();
                async move {
                    match name {
                        None => Ok(None),
                        Some(name) => {
                            let path = base.join(&name);
                            tokio::fs::read(&path)
                                .await
                                .map(Some)
                                .map_err(|source| Error::ReadFile { path, source })
                        }
                    }
                }
            };
            let token = read(source.bearer_token_file.clone()).await?;
            let ca_pem = read(source.ca_file.clone()).await?;
            Credentials::from_bytes(token, ca_pem)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(url: &str) -> Result<Endpoint, Error> {
        Endpoint::parse(url, Credentials::default())
    }

    #[test]
    fn urls_split_into_host_port_and_prefix() {
        let e = ep("http://prometheus.monitoring:9090").expect("parses");
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.prefix.as_str()),
            (false, "prometheus.monitoring", 9090, "")
        );
        let e = ep("https://[::1]/prom/").expect("parses");
        assert_eq!(
            (e.tls, e.host.as_str(), e.port, e.prefix.as_str()),
            (true, "::1", 443, "/prom")
        );
        assert_eq!(e.authority(), "[::1]");
        for bad in [
            "ftp://x",
            "http://",
            "http://u:p@x",
            "http://x/?q=1",
            "http://x:port",
            "http://x y/",
        ] {
            assert!(ep(bad).is_err(), "{bad} was accepted");
        }
    }

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            encode_component(r#"sum(rate(x{code=~"5.."}[1m])) > 0.05"#),
            "sum%28rate%28x%7Bcode%3D~%225..%22%7D%5B1m%5D%29%29%20%3E%200.05"
        );
    }

    // SEM-H13: samples are ALARM, an empty vector OK, an error or another result type no data.
    #[test]
    fn answers_are_read_as_alarm_ok_or_no_data() {
        let vector = |result: &str| {
            format!(r#"{{"status":"success","data":{{"resultType":"vector","result":{result}}}}}"#)
        };
        assert_eq!(
            interpret(200, vector("[]").as_bytes()).ok(),
            Some(Evaluation::Ok)
        );
        assert_eq!(
            interpret(
                200,
                vector(r#"[{"metric":{},"value":[1,"0.07"]},{"metric":{},"value":[1,"1"]}]"#)
                    .as_bytes()
            )
            .ok(),
            Some(Evaluation::Alarm {
                samples: 2,
                first: "0.07".into()
            })
        );
        let err = interpret(
            400,
            br#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
        )
        .expect_err("an error");
        assert!(err.to_string().contains("bad_data: parse error"), "{err}");
        let err = interpret(
            200,
            br#"{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}"#,
        )
        .expect_err("a scalar");
        assert!(err.to_string().contains("not an instant vector"), "{err}");
        assert!(interpret(502, b"<html>bad gateway</html>").is_err());
    }

    #[test]
    fn the_token_is_not_in_debug_output() {
        let c = Credentials {
            bearer_token: Some("s3cret".into()),
            ca_pem: None,
        };
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
