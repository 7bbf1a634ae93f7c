//! Probes against real servers on loopback (SEMANTICS H2, H3, H4): every server here is
//! started by the test and misbehaves in one precise way.

mod support {
    pub mod http;
    pub mod tls;
}

use support::http::{read_head, silent_server};

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use healthroute_checker::probe::{ProbeKind, ProbeSpec, SEARCH_WINDOW};
use healthroute_checker::{TargetPolicy, probe};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

fn spec(kind: ProbeKind, addr: SocketAddr) -> ProbeSpec {
    ProbeSpec {
        kind,
        address: addr.ip().to_string(),
        port: addr.port(),
        path: "/healthz".into(),
        host: None,
        search: None,
        connect_timeout: Duration::from_secs(1),
        response_timeout: Duration::from_secs(1),
    }
}

fn policy() -> TargetPolicy {
    TargetPolicy::standalone_default()
}

/// An HTTP server that answers every request with `response`; records the request heads.
async fn http_server(response: Vec<u8>) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let response = response.clone();
            let record = record.clone();
            tokio::spawn(async move {
                let head = read_head(&mut s).await;
                record.lock().expect("lock").push(head);
                let _ = s.write_all(&response).await;
            });
        }
    });
    (addr, seen)
}

fn status(code: u16, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} Whatever\r\ncontent-length: {}\r\nlocation: http://elsewhere.invalid/\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

// SEM-H2: 2xx and 3xx are healthy (a redirect is not followed); 4xx and 5xx are not.
#[tokio::test]
async fn http_status_codes() {
    for (code, healthy) in [
        (200, true),
        (204, true),
        (301, true),
        (404, false),
        (503, false),
    ] {
        let (addr, seen) = http_server(status(code, "ok")).await;
        let obs = probe(&spec(ProbeKind::Http, addr), &policy()).await;
        assert_eq!(obs.healthy, healthy, "{code}: {obs:?}");
        if !healthy {
            assert_eq!(obs.reason, format!("status {code}"));
        }
        assert_eq!(
            seen.lock().expect("lock").len(),
            1,
            "one request, no redirect followed"
        );
    }
}

// SEM-H2: the Host header carries `host` when set, else the address.
#[tokio::test]
async fn host_header() {
    let (addr, seen) = http_server(status(200, "")).await;
    let mut s = spec(ProbeKind::Http, addr);
    s.host = Some("web.example.com".into());
    assert!(probe(&s, &policy()).await.healthy);
    let head = seen.lock().expect("lock")[0].clone();
    assert!(head.starts_with("GET /healthz HTTP/1.1\r\n"), "{head}");
    assert!(
        head.contains(&format!("Host: web.example.com:{}\r\n", addr.port())),
        "{head}"
    );
}

// SEM-H3: the string must be whole within the first 5,120 body bytes.
#[tokio::test]
async fn search_string_window() {
    for (at, healthy) in [(5_100usize, true), (5_200, false), (0, true)] {
        let mut body = "x".repeat(at);
        body.push_str("READY");
        body.push_str(&"y".repeat(200));
        let (addr, _) = http_server(status(200, &body)).await;
        let mut s = spec(ProbeKind::Http, addr);
        s.search = Some(b"READY".to_vec());
        let obs = probe(&s, &policy()).await;
        assert_eq!(obs.healthy, healthy, "at {at}: {obs:?}");
        if !healthy {
            assert_eq!(
                obs.reason,
                format!("search string not found in first {SEARCH_WINDOW} bytes")
            );
        }
    }
    // Straddling the boundary: starts inside, ends outside the window.
    let body = format!("{}READY", "x".repeat(SEARCH_WINDOW - 2));
    let (addr, _) = http_server(status(200, &body)).await;
    let mut s = spec(ProbeKind::Http, addr);
    s.search = Some(b"READY".to_vec());
    assert!(!probe(&s, &policy()).await.healthy);
    // Case-sensitive.
    let (addr, _) = http_server(status(200, "ready")).await;
    assert!(
        !probe(&s.clone().with_port(addr.port()), &policy())
            .await
            .healthy
    );
}

trait WithPort {
    fn with_port(self, port: u16) -> Self;
}
impl WithPort for ProbeSpec {
    fn with_port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }
}

// SEM-H3: a chunked body is searched after decoding (the chunk framing never hides a match).
#[tokio::test]
async fn search_string_in_chunked_body() {
    let response =
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nREA\r\n2\r\nDY\r\n0\r\n\r\n"
            .to_vec();
    let (addr, _) = http_server(response).await;
    let mut s = spec(ProbeKind::Http, addr);
    s.search = Some(b"READY".to_vec());
    let obs = probe(&s, &policy()).await;
    assert!(obs.healthy, "{obs:?}");
}

// SEM-H2 SEM-H3: a body that trickles in slower than the response timeout fails.
#[tokio::test]
async fn trickling_body_times_out() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        read_head(&mut s).await;
        let _ = s
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 10000\r\n\r\n")
            .await;
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if s.write_all(b"..........").await.is_err() {
                return;
            }
        }
    });
    let mut s = spec(ProbeKind::Http, addr);
    s.search = Some(b"READY".to_vec());
    let started = Instant::now();
    let obs = probe(&s, &policy()).await;
    assert!(!obs.healthy);
    assert_eq!(obs.reason, "timeout after 1 s");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "bounded by the response timeout"
    );
}

// SEM-H2: a server that accepts and never answers fails after the response timeout.
#[tokio::test]
async fn silent_server_times_out() {
    let addr = silent_server().await;
    let obs = probe(&spec(ProbeKind::Http, addr), &policy()).await;
    assert!(!obs.healthy);
    assert_eq!(obs.reason, "timeout after 1 s");
    // TCP only needs the connection: healthy (SEM-H4).
    assert!(probe(&spec(ProbeKind::Tcp, addr), &policy()).await.healthy);
}

// SEM-H2: a reset connection and a closed port are failures with their reasons.
#[tokio::test]
async fn reset_and_closed_port() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            // Zero linger makes the close a reset (and cannot block: nothing is left to send).
            #[allow(deprecated)]
            let _ = s.set_linger(Some(Duration::ZERO));
            let mut s = s;
            read_head(&mut s).await;
            drop(s); // linger 0: RST
        }
    });
    let obs = probe(&spec(ProbeKind::Http, addr), &policy()).await;
    assert!(!obs.healthy);
    assert!(
        obs.reason == "connection reset" || obs.reason.contains("closed"),
        "{obs:?}"
    );

    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    for kind in [ProbeKind::Http, ProbeKind::Tcp] {
        let obs = probe(&spec(kind, closed), &policy()).await;
        assert!(!obs.healthy);
        assert_eq!(obs.reason, "connect refused");
    }
}

// SEM-H4: a TCP connect that gets no answer at all (a black-holed address) fails after the
// connect timeout. 192.0.2.1 (TEST-NET-1) is unroutable here; if the host answers it at once
// (no route), the probe still fails, with another reason.
#[tokio::test]
async fn tcp_connect_timeout() {
    let mut s = spec(ProbeKind::Tcp, "192.0.2.1:9".parse().expect("addr"));
    s.connect_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let obs = probe(&s, &policy()).await;
    assert!(!obs.healthy, "{obs:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
}

fn tls_server_config(expired: bool) -> Arc<rustls::ServerConfig> {
    support::tls::self_signed("web.example.com", expired).0
}

/// An HTTPS server answering 200; records the SNI it was asked for.
async fn https_server(expired: bool) -> (SocketAddr, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let acceptor = tokio_rustls::TlsAcceptor::from(tls_server_config(expired));
    let sni = Arc::new(Mutex::new(Vec::new()));
    let record = sni.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let record = record.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(s).await else {
                    return;
                };
                record
                    .lock()
                    .expect("lock")
                    .push(tls.get_ref().1.server_name().map(str::to_owned));
                read_head(&mut tls).await;
                let _ = tls.write_all(&status(200, "ok")).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (addr, sni)
}

// SEM-H2: HTTPS does not validate the certificate (self-signed, expired); SNI carries `host`.
#[tokio::test]
async fn https_self_signed_and_expired() {
    for expired in [false, true] {
        let (addr, sni) = https_server(expired).await;
        let mut s = spec(ProbeKind::Https, addr);
        s.host = Some("web.example.com".into());
        let obs = probe(&s, &policy()).await;
        assert!(obs.healthy, "expired={expired}: {obs:?}");
        assert_eq!(
            sni.lock().expect("lock")[0].as_deref(),
            Some("web.example.com")
        );
    }
    // Plain HTTP to an HTTPS port fails cleanly.
    let (addr, _) = https_server(false).await;
    assert!(!probe(&spec(ProbeKind::Http, addr), &policy()).await.healthy);
}

// Denied targets are reported as rejected and never probed.
#[tokio::test]
async fn denied_target_is_rejected_not_probed() {
    let (addr, seen) = http_server(status(200, "")).await;
    let obs = probe(
        &spec(ProbeKind::Http, addr),
        &TargetPolicy::cluster_default(),
    )
    .await;
    assert!(!obs.healthy && obs.rejected, "{obs:?}");
    assert!(obs.reason.contains("denied by checker policy"), "{obs:?}");
    assert!(seen.lock().expect("lock").is_empty());
    let obs = probe(
        &spec(ProbeKind::Tcp, "169.254.169.254:80".parse().expect("addr")),
        &policy(),
    )
    .await;
    assert!(obs.rejected);
}

// SEM-H12: a path or host with CR/LF (or a space) is never sent: the probe refuses it before
// connecting, and the server sees no request at all.
#[tokio::test]
async fn request_bytes_a_user_wrote_are_checked_before_sending() {
    let (addr, seen) = http_server(status(200, "ok")).await;
    for (path, host) in [
        ("/healthz HTTP/1.1\r\nX-Injected: 1\r\n\r\nGET /admin", None),
        ("/healthz", Some("web.example\r\nX-Injected: 1")),
        ("/a b", None),
    ] {
        let mut s = spec(ProbeKind::Http, addr);
        s.path = path.into();
        s.host = host.map(Into::into);
        let obs = probe(&s, &policy()).await;
        assert!(!obs.healthy && obs.rejected, "{obs:?}");
        assert!(
            obs.reason.contains("refused, nothing sent"),
            "{}",
            obs.reason
        );
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        seen.lock().expect("lock").is_empty(),
        "the server saw a request"
    );
    // The same server, asked properly, is healthy.
    assert!(probe(&spec(ProbeKind::Http, addr), &policy()).await.healthy);
}

// SEM-H12: 0.0.0.0 and :: reach the local host on Linux: denied by default everywhere; in a
// cluster loopback too, unless an allowed range inside it admits it on purpose.
#[tokio::test]
async fn the_local_host_is_denied_unless_admitted() {
    let (addr, seen) = http_server(status(200, "ok")).await;
    let mut unspecified = spec(ProbeKind::Http, addr);
    unspecified.address = "0.0.0.0".into();
    let obs = probe(&unspecified, &policy()).await;
    assert!(obs.rejected && obs.reason.contains("0.0.0.0/8"), "{obs:?}");
    let cluster = TargetPolicy::cluster_default();
    let obs = probe(&spec(ProbeKind::Http, addr), &cluster).await;
    assert!(obs.rejected, "loopback in a cluster: {obs:?}");
    let mut admitted = TargetPolicy::cluster_default();
    admitted.allow = vec!["127.0.0.0/8".parse().expect("cidr")];
    let obs = probe(&spec(ProbeKind::Http, addr), &admitted).await;
    assert!(obs.healthy && !obs.rejected, "admitted on purpose: {obs:?}");
    assert_eq!(
        seen.lock().expect("lock").len(),
        1,
        "only the admitted probe reached it"
    );
}
