//! The Prometheus client of Metric checks against loopback stand-ins (SEMANTICS H13, H15):
//! the request it sends (path, encoded query, bearer token), https verified against the
//! check's CA only, the target policy, and timeouts. The real Prometheus is in the e2e suite
//! (tests/e2e/metric.rs).

mod support {
    pub mod http;
    pub mod tls;
}

use support::http::{read_head, silent_server};

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use healthroute_checker::TargetPolicy;
use healthroute_checker::metric::{Credentials, Endpoint, Evaluation, evaluate};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

const EMPTY: &str = r#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
const ONE: &str = r#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job":"api"},"value":[1733000000,"0.083"]}]}}"#;

/// Answers `body` to requests carrying `Authorization: Bearer <token>` (when `token` is set),
/// 401 otherwise; records every request head.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    token: Option<&str>,
    body: &str,
    heads: &Mutex<Vec<String>>,
) {
    let head = read_head(&mut s).await;
    let authorized = token.is_none_or(|t| {
        head.lines()
            .any(|l| l.eq_ignore_ascii_case(&format!("authorization: Bearer {t}")))
    });
    heads.lock().expect("lock").push(head);
    let (code, body) = if authorized {
        ("200 OK", body.to_owned())
    } else {
        (
            "401 Unauthorized",
            r#"{"status":"error","errorType":"unauthorized","error":"bad token"}"#.to_owned(),
        )
    };
    let _ = s
        .write_all(
            format!(
                "HTTP/1.1 {code}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await;
    let _ = s.shutdown().await;
}

async fn fake_prometheus(
    token: Option<&'static str>,
    body: &'static str,
) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let h = h.clone();
            tokio::spawn(async move { serve(s, token, body, &h).await });
        }
    });
    (addr, heads)
}

fn endpoint(url: &str, credentials: Credentials) -> Endpoint {
    Endpoint::parse(url, credentials).expect("a valid URL")
}

async fn eval(e: &Endpoint, policy: &TargetPolicy) -> Evaluation {
    evaluate(
        e,
        r#"rate(errors{job="api"}[1m]) > 0.05"#,
        Duration::from_secs(1),
        Duration::from_secs(1),
        policy,
    )
    .await
}

// SEM-H13 SEM-H15: the query is encoded under the URL's path; the token is sent when set;
// a 401 is insufficient data whose reason does not carry the token.
#[tokio::test]
async fn the_request_carries_the_encoded_query_and_the_token() {
    let (addr, heads) = fake_prometheus(Some("s3cret-token"), ONE).await;
    let policy = TargetPolicy::standalone_default();
    let with = Credentials {
        bearer_token: Some("s3cret-token\n".into()),
        ca_pem: None,
    };
    let got = eval(&endpoint(&format!("http://{addr}/prom/"), with), &policy).await;
    assert_eq!(
        got,
        Evaluation::Alarm {
            samples: 1,
            first: "0.083".into()
        }
    );
    let head = heads.lock().expect("lock")[0].clone();
    assert!(
        head.starts_with(
            "GET /prom/api/v1/query?query=rate%28errors%7Bjob%3D%22api%22%7D%5B1m%5D%29%20%3E%200.05 HTTP/1.1\r\n"
        ),
        "{head}"
    );
    let got = eval(
        &endpoint(&format!("http://{addr}"), Credentials::default()),
        &policy,
    )
    .await;
    match got {
        Evaluation::NoData(why) => {
            assert!(
                why.contains("status 401") && why.contains("unauthorized"),
                "{why}"
            );
            assert!(!why.contains("s3cret"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    let (addr, _) = fake_prometheus(None, EMPTY).await;
    assert_eq!(
        eval(
            &endpoint(&format!("http://{addr}"), Credentials::default()),
            &policy
        )
        .await,
        Evaluation::Ok
    );
}

fn tls_pair() -> (Arc<rustls::ServerConfig>, String) {
    support::tls::self_signed("localhost", false)
}

// SEM-H15: https is verified against the check's CA bundle and nothing else: the right CA
// answers, another CA or none is refused before any request is sent.
#[tokio::test]
async fn https_trusts_the_checks_ca_only() {
    let (config, ca) = tls_pair();
    let (_, other_ca) = tls_pair();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let heads = Arc::new(Mutex::new(Vec::new()));
    let h = heads.clone();
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let (acceptor, h) = (acceptor.clone(), h.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(s).await {
                    serve(tls, None, EMPTY, &h).await;
                }
            });
        }
    });
    let policy = TargetPolicy::standalone_default();
    let url = format!("https://localhost:{port}");
    let with = |pem: Option<&str>| Credentials {
        bearer_token: None,
        ca_pem: pem.map(|p| p.as_bytes().to_vec()),
    };
    assert_eq!(
        eval(&endpoint(&url, with(Some(&ca))), &policy).await,
        Evaluation::Ok
    );
    for (pem, want) in [
        (Some(other_ca.as_str()), "TLS"),
        (None, "needs a CA bundle"),
        (Some("not pem"), "no certificate"),
    ] {
        match eval(&endpoint(&url, with(pem)), &policy).await {
            Evaluation::NoData(why) => assert!(why.contains(want), "{want}: {why}"),
            other => panic!("{want}: {other:?}"),
        }
    }
    assert_eq!(
        heads.lock().expect("lock").len(),
        1,
        "only the trusted exchange got a request"
    );
}

// SEM-H15 SEM-H12: the policy judges the address the host resolves to; a server that never
// answers is insufficient data within the timeout.
#[tokio::test]
async fn the_policy_and_the_timeouts_hold() {
    let (addr, heads) = fake_prometheus(None, EMPTY).await;
    let denied = TargetPolicy::cluster_default();
    match eval(
        &endpoint(
            &format!("http://localhost:{}", addr.port()),
            Credentials::default(),
        ),
        &denied,
    )
    .await
    {
        Evaluation::NoData(why) => assert!(why.contains("denied by checker policy"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(heads.lock().expect("lock").is_empty(), "nothing was sent");

    let addr = silent_server().await;
    let started = Instant::now();
    match eval(
        &endpoint(&format!("http://{addr}"), Credentials::default()),
        &TargetPolicy::standalone_default(),
    )
    .await
    {
        Evaluation::NoData(why) => assert!(why.contains("within 1 s"), "{why}"),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(3));
}
