//! The push listener (P12): the operator leader POSTs each delta it publishes here, signed
//! with the push key, beside writing its ConfigMap; the table follower serves it at once
//! when it follows the table served (`Assembler::push_delta`), else the watch brings it.
//!
//! ```text
//!   leader ──POST /v1/delta (HMAC-SHA256)──▶ listen ──verified body──▶ follow_table
//!                                            (401 / 400 / 413 / 503, counted)
//! ```
//!
//! Only a body whose signature verifies reaches the follower, and the follower decodes it
//! as it decodes a delta from the watch: nothing else here reads it.
//!
//! The key comes from a mounted Secret that may change while the resolver runs
//! (`key_file::follow` of the admin crate): a push signed with the key held before the change
//! is still taken for `PREVIOUS_KEY_GRACE` (the leader signs with it until every pod has the
//! new key), so that a rotation refuses no push.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use healthroute_admin::metrics::{Collector, CountsByResult, DescriptorEncoder, Exposition};
use healthroute_table::published::MAX_DELTA_BYTES;
use healthroute_table::push::{PATH, PushKeys};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tracing::Instrument;

/// Pushed deltas waiting for the follower; a leader sends one at a time per change.
const QUEUE: usize = 64;

/// Pushes by result.
pub type PushMetrics = CountsByResult;

/// The push listener's metrics in the admin registry.
#[derive(Debug, Clone)]
pub struct PushCollector(pub Arc<PushMetrics>);

impl Collector for PushCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        self.0.encode(
            &mut Exposition::new(encoder),
            "healthroute_resolver_pushed_deltas_total",
            "Deltas the operator leader pushed (P12), by result: served (it followed the table served), waited (left to the watch), or why refused (bad_signature, too_large, not_found, busy, unreadable).",
            &["served", "waited"],
        )
    }
}

/// Binds `addr` and serves pushes until the task is aborted: each verified body goes to the
/// returned receiver. `keys` is a `PushKey` read once, or [`PushKeys`] that a
/// `healthroute_admin::key_file::follow` task keeps up to date.
pub async fn listen(
    addr: SocketAddr,
    keys: impl Into<Arc<PushKeys>>,
    metrics: Arc<PushMetrics>,
) -> std::io::Result<(
    SocketAddr,
    mpsc::Receiver<Bytes>,
    tokio::task::JoinHandle<()>,
)> {
    let listener = TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let (tx, rx) = mpsc::channel(QUEUE);
    let task = tokio::spawn(
        serve(listener, keys.into(), tx, metrics)
            .instrument(tracing::info_span!("push_listener", addr = %local)),
    );
    Ok((local, rx, task))
}

async fn serve(
    listener: TcpListener,
    key: Arc<PushKeys>,
    deltas: mpsc::Sender<Bytes>,
    metrics: Arc<PushMetrics>,
) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (key, deltas, metrics) = (key.clone(), deltas.clone(), metrics.clone());
        let connection = async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let (key, deltas, metrics) = (key.clone(), deltas.clone(), metrics.clone());
                async move {
                    let (status, text) = take(request, &key, &deltas, &metrics).await;
                    let mut response = Response::new(Full::new(Bytes::from(text)));
                    *response.status_mut() = status;
                    Ok::<_, Infallible>(response)
                }
            });
            // Kept alive: the leader sends each change on the connection it opened.
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        };
        tokio::spawn(connection.in_current_span());
    }
}

/// What one request gets: the status, and a line saying why.
async fn take(
    request: Request<Incoming>,
    key: &PushKeys,
    deltas: &mpsc::Sender<Bytes>,
    metrics: &PushMetrics,
) -> (StatusCode, &'static str) {
    if request.uri().path() != PATH {
        metrics.count("not_found");
        return (StatusCode::NOT_FOUND, "not found\n");
    }
    if request.method() != Method::POST {
        metrics.count("not_found");
        return (StatusCode::METHOD_NOT_ALLOWED, "POST a delta\n");
    }
    let authorization = request
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = match Limited::new(request.into_body(), MAX_DELTA_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => {
            metrics.count("too_large");
            return (StatusCode::PAYLOAD_TOO_LARGE, "over the largest delta\n");
        }
        Err(_) => {
            metrics.count("unreadable");
            return (StatusCode::BAD_REQUEST, "the body could not be read\n");
        }
    };
    // A push signed with the key held before the key file changed is taken within the grace:
    // the leader signs with it until every pod has the new key.
    if key.verify(&body, &authorization, Instant::now()).is_none() {
        metrics.count("bad_signature");
        return (StatusCode::UNAUTHORIZED, "not signed with the push key\n");
    }
    match deltas.try_send(body) {
        Ok(()) => (StatusCode::ACCEPTED, "taken\n"),
        Err(_) => {
            metrics.count("busy");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "busy: the watch brings it\n",
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use healthroute_table::push::PushKey;

    const SECRET: &[u8] = b"a push key of at least thirty-two bytes";

    /// One HTTP/1.1 request over a new connection; the response's status.
    async fn post(addr: SocketAddr, path: &str, authorization: &str, body: &[u8]) -> u16 {
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: resolver\r\nauthorization: {authorization}\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).await.expect("head");
        // A body over the limit is refused before it is read whole: the write may fail.
        let _ = stream.write_all(body).await;
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        let text = String::from_utf8_lossy(&response);
        text.split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    // SEM-P12: only a body signed with the push key reaches the table follower; a wrong
    // signature, a body over the largest delta and another path are refused and counted.
    #[tokio::test]
    async fn only_a_signed_delta_is_taken() {
        let key = PushKey::new(SECRET).expect("key");
        let metrics = Arc::new(PushMetrics::default());
        let (addr, mut deltas, task) = listen(
            "127.0.0.1:0".parse().expect("addr"),
            key.clone(),
            metrics.clone(),
        )
        .await
        .expect("listens");
        let body = br#"{"base":1,"baseHash":"0","previous":1,"generation":2}"#;

        assert_eq!(post(addr, PATH, &key.authorization(body), body).await, 202);
        assert_eq!(deltas.recv().await.as_deref(), Some(&body[..]));

        let other = PushKey::new(b"another key, also thirty-two bytes long").expect("key");
        assert_eq!(
            post(addr, PATH, &other.authorization(body), body).await,
            401
        );
        assert_eq!(post(addr, PATH, "", body).await, 401);
        assert_eq!(metrics.get("bad_signature"), 2);

        let large = vec![b' '; MAX_DELTA_BYTES + 1];
        assert_eq!(
            post(addr, PATH, &key.authorization(&large), &large).await,
            413
        );
        assert_eq!(metrics.get("too_large"), 1);

        assert_eq!(
            post(addr, "/metrics", &key.authorization(body), body).await,
            404
        );
        assert!(
            deltas.try_recv().is_err(),
            "nothing else reached the follower"
        );
        task.abort();
    }

    // SEM-P12: when the key file changes (kubelet writes a changed Secret into the volume),
    // the listener takes pushes signed with the new key without a restart, and still those
    // signed with the key before it (the leader's copy may not have changed yet); a file
    // that holds no key meanwhile keeps the keys held.
    #[tokio::test]
    async fn a_changed_key_file_is_taken_and_the_previous_key_still_is() {
        let dir = std::env::temp_dir().join(format!("hr-push-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("push.key");
        std::fs::write(&file, SECRET).expect("write");
        let old = PushKey::new(SECRET).expect("key");
        let keys: Arc<PushKeys> = old.clone().into();
        let every = Duration::from_millis(20);
        let follower = tokio::spawn({
            let keys = keys.clone();
            healthroute_admin::key_file::follow(file.clone(), every, "push key", move |read| {
                keys.take_file(read)
            })
        });
        let metrics = Arc::new(PushMetrics::default());
        let (addr, mut deltas, task) = listen(
            "127.0.0.1:0".parse().expect("addr"),
            keys.clone(),
            metrics.clone(),
        )
        .await
        .expect("listens");
        let body = br#"{"base":1,"baseHash":"0","previous":1,"generation":2}"#;
        let new_secret = b"the rotated push key, thirty-two bytes or more";
        let new = PushKey::new(new_secret).expect("key");
        assert_eq!(post(addr, PATH, &new.authorization(body), body).await, 401);

        std::fs::write(&file, b"short").expect("write");
        tokio::time::sleep(every * 5).await;
        assert_eq!(
            post(addr, PATH, &old.authorization(body), body).await,
            202,
            "kept"
        );
        std::fs::write(&file, new_secret).expect("write");
        let deadline = Instant::now() + Duration::from_secs(10);
        while keys
            .verify(body, &new.authorization(body), Instant::now())
            .is_none()
        {
            assert!(Instant::now() < deadline, "the new key was never read");
            tokio::time::sleep(every).await;
        }
        assert_eq!(post(addr, PATH, &new.authorization(body), body).await, 202);
        assert_eq!(post(addr, PATH, &old.authorization(body), body).await, 202);
        for _ in 0..3 {
            assert_eq!(deltas.recv().await.as_deref(), Some(&body[..]));
        }
        assert_eq!(metrics.get("bad_signature"), 1);
        follower.abort();
        task.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
