//! One observation of one target (SEMANTICS H2, H3, H4).
//!
//! The probe connects the socket itself (the connect timeout, the target policy on the
//! resolved address) and speaks HTTP/1.1 over it with hyper's client connection: the status
//! line, and the search string within the first 5,120 body bytes, within the response timeout
//! after connecting; it reads no more than that prefix, follows no redirect, and does not
//! validate certificates (HTTPS health checks pass on self-signed and expired certificates,
//! as Route 53's do).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use healthroute_api::{CheckType, HealthCheckSpec};

use super::policy::TargetPolicy;
use crate::error::Error;

/// How many body bytes a search string may be found in (H3).
pub const SEARCH_WINDOW: usize = 5120;
/// Response headers larger than this are a failure, not a reason to read on.
const MAX_HEADER_BYTES: usize = 16 * 1024;

/// What a probe does, derived from a HealthCheck spec.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    pub kind: ProbeKind,
    pub address: String,
    pub port: u16,
    pub path: String,
    pub host: Option<String>,
    pub search: Option<Vec<u8>>,
    pub connect_timeout: Duration,
    pub response_timeout: Duration,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeKind {
    Http,
    Https,
    Tcp,
}

impl ProbeSpec {
    /// The probe of a check; `None` for calculated checks (and checks without a target).
    pub fn from_check(spec: &HealthCheckSpec) -> Option<ProbeSpec> {
        let kind = match spec.check_type {
            CheckType::Http => ProbeKind::Http,
            CheckType::Https => ProbeKind::Https,
            CheckType::Tcp => ProbeKind::Tcp,
            CheckType::Calculated | CheckType::Metric | CheckType::Peer => return None,
        };
        let target = spec.target.as_ref()?;
        Some(ProbeSpec {
            kind,
            address: target.address.clone(),
            port: target.port,
            path: target.path.clone().unwrap_or_else(|| "/".into()),
            host: target.host.clone(),
            search: spec.search_string.as_ref().map(|s| s.as_bytes().to_vec()),
            connect_timeout: Duration::from_secs(u64::from(spec.connect_timeout_seconds())),
            response_timeout: Duration::from_secs(u64::from(spec.response_timeout_seconds)),
        })
    }
}

/// One observation: healthy or not, how long it took, and why, in a few words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub healthy: bool,
    pub latency: Duration,
    pub reason: String,
    /// The target was denied by the checker's policy and not probed.
    pub rejected: bool,
}

fn fail(start: Instant, why: Error) -> Observation {
    Observation {
        healthy: false,
        latency: start.elapsed(),
        reason: why.to_string(),
        rejected: false,
    }
}

pub use healthroute_api::DENIED_BY_POLICY;

/// Why `text`, written by a user into a request line or a header, cannot be sent: a control
/// character or a space would end the line early and let the rest become headers or a second
/// request (H12).
pub fn unsafe_in_request(what: &'static str, text: &str) -> Option<Error> {
    text.bytes()
        .position(|b| b <= b' ' || b == 0x7f)
        .map(|at| Error::UnsafeInRequest { what, at })
}

/// Probes once. Never panics; every failure is an unhealthy observation with a reason.
pub async fn probe(spec: &ProbeSpec, policy: &TargetPolicy) -> Observation {
    let start = Instant::now();
    if spec.kind != ProbeKind::Tcp {
        let host = spec.host.as_deref().unwrap_or(&spec.address);
        if let Some(why) =
            unsafe_in_request("path", &spec.path).or_else(|| unsafe_in_request("host", host))
        {
            return Observation {
                healthy: false,
                latency: Duration::ZERO,
                reason: format!("{why} ({DENIED_BY_POLICY})"),
                rejected: true,
            };
        }
    }
    // Resolve names here, and check the policy on what they resolve to, so that a name cannot
    // lead a checker somewhere its policy denies.
    let addrs: Vec<IpAddr> = match spec.address.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => match tokio::time::timeout(
            spec.connect_timeout,
            tokio::net::lookup_host((spec.address.as_str(), spec.port)),
        )
        .await
        {
            Ok(Ok(found)) => found.map(|a| a.ip()).collect(),
            Ok(Err(source)) => {
                let host = spec.address.clone();
                return fail(start, Error::Resolve { host, source });
            }
            Err(_) => {
                let host = spec.address.clone();
                return fail(start, Error::ResolveTimeout { host });
            }
        },
    };
    let Some(ip) = addrs.first().copied() else {
        let host = spec.address.clone();
        return fail(start, Error::NoAddress { host });
    };
    if let Some(rule) = policy.denies(ip) {
        return Observation {
            healthy: false,
            latency: Duration::ZERO,
            reason: Error::Denied {
                what: "target",
                ip,
                rule: rule.to_string(),
            }
            .to_string(),
            rejected: true,
        };
    }
    let addr = SocketAddr::new(ip, spec.port);
    let tcp = match tokio::time::timeout(spec.connect_timeout, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return fail(start, Error::ConnectRefused);
        }
        Ok(Err(e)) => return fail(start, Error::Connect(e)),
        Err(_) => return fail(start, Error::ConnectTimeout(spec.connect_timeout)),
    };
    if spec.kind == ProbeKind::Tcp {
        return Observation {
            healthy: true,
            latency: start.elapsed(),
            reason: format!("connected in {} ms", start.elapsed().as_millis()),
            rejected: false,
        };
    }
    let _ = tcp.set_nodelay(true);
    let exchange = async {
        match spec.kind {
            ProbeKind::Https => {
                let server_name = spec
                    .host
                    .clone()
                    .and_then(|h| ServerName::try_from(h).ok())
                    .unwrap_or_else(|| ServerName::IpAddress(ip.into()));
                let tls = tokio_rustls::TlsConnector::from(insecure_tls_config()?)
                    .connect(server_name, tcp)
                    .await
                    .map_err(Error::Tls)?;
                http_exchange(tls, spec).await
            }
            _ => http_exchange(tcp, spec).await,
        }
    };
    match tokio::time::timeout(spec.response_timeout, exchange).await {
        Ok(Ok(status)) => Observation {
            healthy: true,
            latency: start.elapsed(),
            reason: format!("{status} in {} ms", start.elapsed().as_millis()),
            rejected: false,
        },
        Ok(Err(why)) => fail(start, why),
        Err(_) => fail(start, Error::Timeout(spec.response_timeout)),
    }
}

/// One HTTP request and its response over `stream` (H2, H3), through hyper's HTTP/1.1 client
/// connection: the status, or why not. Redirects are not followed (a 3xx is a success, as
/// for Route 53); with a search string, at most the first [`SEARCH_WINDOW`] body bytes are
/// read (decoded when chunked). The caller bounds the whole exchange by the response timeout.
pub async fn http_exchange<S: AsyncRead + AsyncWrite + Unpin + Send>(
    stream: S,
    spec: &ProbeSpec,
) -> Result<String, Error> {
    let host = spec
        .host
        .clone()
        .unwrap_or_else(|| match spec.address.parse::<IpAddr>() {
            Ok(IpAddr::V6(v6)) => format!("[{v6}]"),
            _ => spec.address.clone(),
        });
    let default_port = if spec.kind == ProbeKind::Https {
        443
    } else {
        80
    };
    let host_header = if spec.port == default_port {
        host
    } else {
        format!("{host}:{}", spec.port)
    };
    let request = http::Request::get(spec.path.as_str())
        .header(http::header::HOST, host_header)
        .header(http::header::USER_AGENT, "healthroute-checker")
        .header(http::header::ACCEPT, "*/*")
        .header(http::header::CONNECTION, "close")
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
        .map_err(Error::BuildRequest)?;
    let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
        .title_case_headers(true)
        .max_buf_size(MAX_HEADER_BYTES)
        .handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(reason)?;
    let search = spec.search.clone();
    let exchange = async move {
        let response = sender.send_request(request).await.map_err(reason)?;
        let code = response.status().as_u16();
        let status = format!(
            "{code} {}",
            response.status().canonical_reason().unwrap_or("")
        );
        if !(200..400).contains(&code) {
            return Err(Error::Status(code));
        }
        let Some(search) = search else {
            return Ok(status.trim_end().to_owned());
        };
        // H3: the search string within the first 5,120 body bytes.
        let mut body = response.into_body();
        let mut window = Vec::with_capacity(SEARCH_WINDOW);
        while window.len() < SEARCH_WINDOW {
            match http_body_util::BodyExt::frame(&mut body).await {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        let room = SEARCH_WINDOW - window.len();
                        window.extend_from_slice(&data[..data.len().min(room)]);
                        if find(&window, &search).is_some() {
                            return Ok(status.trim_end().to_owned());
                        }
                    }
                }
                Some(Err(e)) => return Err(reason(e)),
                None => break,
            }
        }
        if find(&window, &search).is_some() {
            return Ok(status.trim_end().to_owned());
        }
        Err(Error::SearchNotFound {
            window: SEARCH_WINDOW,
        })
    };
    // The connection is driven alongside the exchange; once it ends, what it delivered is
    // still read.
    tokio::pin!(exchange, connection);
    let mut connection_done = false;
    loop {
        tokio::select! {
            result = &mut exchange => return result,
            done = &mut connection, if !connection_done => {
                connection_done = true;
                if let Err(e) = done {
                    return Err(reason(e));
                }
            }
        }
    }
}

/// A hyper error as a probe reason: what a person reading the check's status needs.
fn reason(e: hyper::Error) -> Error {
    use std::error::Error as _;
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionReset => Error::ConnectionReset,
                std::io::ErrorKind::UnexpectedEof => Error::ClosedInResponse,
                kind => Error::ReadResponse(std::io::Error::new(kind, io.to_string())),
            };
        }
        source = s.source();
    }
    if e.is_incomplete_message() {
        Error::Incomplete
    } else if e.is_parse() {
        if e.is_parse_too_large() {
            Error::HeadersTooLarge
        } else {
            Error::NotHttp(e)
        }
    } else {
        Error::Exchange(e)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn insecure_tls_config() -> Result<Arc<rustls::ClientConfig>, Error> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, rustls::Error>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()
                .map(|b| {
                    Arc::new(
                        b.dangerous()
                            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(
                                provider,
                            )))
                            .with_no_client_auth(),
                    )
                })
        })
        .clone()
        .map_err(Error::TlsSetup)
}

/// Health checks probe endpoints, they do not authenticate them: every certificate passes
/// (self-signed, expired, wrong name), while the handshake signatures are still checked.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
