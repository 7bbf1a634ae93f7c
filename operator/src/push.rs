//! Pushed deltas (P12): the leader sends each delta it publishes straight to the resolvers
//! that advertise a push address on their checker Lease, beside writing its ConfigMap, so
//! that a change reaches them after one API server write instead of two.
//!
//! ```text
//!   Publisher::publish ──delta JSON──▶ Pusher::push ──per resolver, in order──▶ POST /v1/delta
//!        └──▶ the delta's ConfigMap (as before; a resolver that misses a push reads it there)
//! ```
//!
//! A push never waits: each resolver has a task of its own, holding one kept-alive HTTP/1.1
//! connection, that sends its queue in order (a resolver needs each delta to apply the next)
//! with a 1 s deadline per request. A resolver that does not answer in time loses the
//! connection and the push; its watch brings the change.
//!
//! The key comes from a mounted Secret that may change while the operator runs
//! (`key_file::follow` of the admin crate): for `SIGN_PREVIOUS_FOR` after the change pushes
//! are still signed with the key before (kubelet brings the Secret to each resolver at its
//! own moment), then with the new one; a resolver that refuses a push (401) gets it once more
//! signed with the other key while it is in use (`PushKeys::fallback_authorization`).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};
use healthroute_admin::retry::ErrorLog;
use healthroute_table::push::{PATH, PushKeys};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::sync::mpsc;
use tracing::Instrument;

/// How long a connection and a request to one resolver may take.
const DEADLINE: Duration = Duration::from_secs(1);
/// Pushes waiting for one resolver; more are dropped (its watch brings them).
const QUEUE: usize = 64;

/// Pushes by outcome.
#[derive(Debug, Default)]
pub struct PushMetrics {
    sent: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    dropped: AtomicU64,
}

impl PushMetrics {
    /// Pushes a resolver took.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

impl Collector for PushMetrics {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Exposition::new(encoder).counters(
            "healthroute_operator_pushed_deltas_total",
            "Deltas pushed to resolvers (P12), by result: sent (taken), refused (the resolver's push key differs, and so does the other key while a rotation is under way), failed (no answer within 1 s, or an error), dropped (64 were waiting).",
            [
                ([("result", "sent")], g(&self.sent)),
                ([("result", "refused")], g(&self.refused)),
                ([("result", "failed")], g(&self.failed)),
                ([("result", "dropped")], g(&self.dropped)),
            ],
        )
    }
}

/// One push: the body and its `Authorization` header.
type Push = (Bytes, Arc<str>);

/// Sends deltas to the resolvers' push listeners.
#[derive(Debug)]
pub struct Pusher {
    keys: Arc<PushKeys>,
    /// The resolvers' advertised addresses, in order.
    targets: Arc<[Arc<str>]>,
    /// Each target's queue, once pushed to; its task ends with the sender.
    resolvers: HashMap<Arc<str>, mpsc::Sender<Push>>,
    metrics: Arc<PushMetrics>,
}

impl Pusher {
    /// `keys` is a `PushKey` read once, or [`PushKeys`] that a key-file follower keeps
    /// up to date.
    pub fn new(keys: impl Into<Arc<PushKeys>>, metrics: Arc<PushMetrics>) -> Self {
        Pusher {
            keys: keys.into(),
            targets: Arc::new([]),
            resolvers: HashMap::new(),
            metrics,
        }
    }

    /// Pushes go to `targets` from now on; the resolvers no longer in it are forgotten (their
    /// tasks end once their queues are sent).
    pub fn retarget(&mut self, targets: Arc<[Arc<str>]>) {
        if targets != self.targets {
            self.resolvers
                .retain(|address, _| targets.contains(address));
            self.targets = targets;
        }
    }

    /// Queues `body` (a delta's JSON, as its ConfigMap holds it) for every target. Returns how
    /// many it was queued for.
    pub fn push(&mut self, body: &str) -> usize {
        if self.targets.is_empty() {
            return 0;
        }
        let body = Bytes::copy_from_slice(body.as_bytes());
        let authorization: Arc<str> = self.keys.authorization(&body, Instant::now()).into();
        let mut queued = 0;
        for address in self.targets.iter() {
            let queue = self.resolvers.entry(address.clone()).or_insert_with(|| {
                let (tx, rx) = mpsc::channel(QUEUE);
                tokio::spawn(
                    send_in_order(address.clone(), rx, self.keys.clone(), self.metrics.clone())
                        .instrument(tracing::info_span!("push", resolver = %address)),
                );
                tx
            });
            match queue.try_send((body.clone(), authorization.clone())) {
                Ok(()) => queued += 1,
                Err(_) => {
                    self.metrics.dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        queued
    }
}

/// Sends one resolver's pushes in order, on one kept-alive connection.
async fn send_in_order(
    address: Arc<str>,
    mut queue: mpsc::Receiver<Push>,
    keys: Arc<PushKeys>,
    metrics: Arc<PushMetrics>,
) {
    let mut connection: Option<SendRequest<Full<Bytes>>> = None;
    let mut errors = ErrorLog::default();
    while let Some((body, authorization)) = queue.recv().await {
        let mut sent = tokio::time::timeout(
            DEADLINE,
            send(&address, &mut connection, body.clone(), &authorization),
        )
        .await;
        // Refused while the key file changed not long ago: the resolver's copy of the Secret
        // changed at another moment than this one's, so once more with the other key.
        if let Ok(Ok(StatusCode::UNAUTHORIZED)) = sent
            && let Some(other) = keys.fallback_authorization(&body, Instant::now())
        {
            sent =
                tokio::time::timeout(DEADLINE, send(&address, &mut connection, body, &other)).await;
        }
        let outcome = match sent {
            Ok(Ok(status)) if status == StatusCode::ACCEPTED => {
                metrics.sent.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Ok(Ok(StatusCode::UNAUTHORIZED)) => {
                metrics.refused.fetch_add(1, Ordering::Relaxed);
                "refused: its push key is not this operator's".to_owned()
            }
            Ok(Ok(status)) => {
                metrics.failed.fetch_add(1, Ordering::Relaxed);
                format!("answered {status}")
            }
            Ok(Err(e)) => {
                metrics.failed.fetch_add(1, Ordering::Relaxed);
                connection = None;
                e
            }
            Err(_) => {
                metrics.failed.fetch_add(1, Ordering::Relaxed);
                connection = None;
                format!("no answer within {DEADLINE:?}")
            }
        };
        if errors.should_log(&outcome) {
            tracing::warn!(resolver = %address, error = %outcome, "a pushed delta was not taken; the resolver's watch brings it (logged once a minute per error)");
        }
    }
}

/// One request on the connection, opening it first when there is none (or it closed).
async fn send(
    address: &str,
    connection: &mut Option<SendRequest<Full<Bytes>>>,
    body: Bytes,
    authorization: &str,
) -> Result<StatusCode, String> {
    if connection.as_ref().is_none_or(|c| c.is_closed()) {
        let stream = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| format!("HTTP handshake: {e}"))?;
        tokio::spawn(conn.in_current_span());
        *connection = Some(sender);
    }
    let Some(sender) = connection.as_mut() else {
        return Err("no connection".into());
    };
    sender
        .ready()
        .await
        .map_err(|e| format!("connection lost: {e}"))?;
    let request = Request::post(PATH)
        .header(hyper::header::HOST, address)
        .header(hyper::header::AUTHORIZATION, authorization)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .map_err(|e| e.to_string())?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = response.status();
    // Read to its end (a line), so that the connection takes the next request.
    response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("response: {e}"))?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    use super::*;
    use healthroute_table::push::PushKey;

    const OLD: &[u8] = b"the push key before the rotation, 32+ bytes";
    const NEW: &[u8] = b"the push key after the rotation, 32+ bytes";

    /// A resolver whose push key is `key`: answers 202 to a push it verifies, else 401, on
    /// kept-alive connections; sends each verified body on.
    async fn resolver(key: PushKey) -> (String, mpsc::UnboundedReceiver<Vec<u8>>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("addr").to_string();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (key, tx) = (key.clone(), tx.clone());
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    loop {
                        let (mut length, mut authorization) = (0, String::new());
                        loop {
                            let mut line = String::new();
                            if stream.read_line(&mut line).await.unwrap_or(0) == 0 {
                                return;
                            }
                            let line = line.trim_end();
                            if line.is_empty() {
                                break;
                            }
                            if let Some((name, value)) = line.split_once(": ") {
                                match name.to_ascii_lowercase().as_str() {
                                    "content-length" => length = value.parse().unwrap_or(0),
                                    "authorization" => authorization = value.to_owned(),
                                    _ => {}
                                }
                            }
                        }
                        let mut body = vec![0; length];
                        if stream.read_exact(&mut body).await.is_err() {
                            return;
                        }
                        let status = if key.verify(&body, &authorization) {
                            let _ = tx.send(body);
                            "202 Accepted"
                        } else {
                            "401 Unauthorized"
                        };
                        let response = format!("HTTP/1.1 {status}\r\ncontent-length: 0\r\n\r\n");
                        if stream
                            .get_mut()
                            .write_all(response.as_bytes())
                            .await
                            .is_err()
                        {
                            return;
                        }
                    }
                });
            }
        });
        (address, rx)
    }

    async fn settled(metrics: &PushMetrics) -> (u64, u64) {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        for _ in 0..500 {
            if g(&metrics.sent) + g(&metrics.refused) + g(&metrics.failed) > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (g(&metrics.sent), g(&metrics.refused))
    }

    // SEM-P12: after the operator's key file changed, a resolver whose copy of the Secret
    // has not changed yet takes the push (signed with the key before), and so does one that
    // holds only the new key (started since: it gets a second try with it); a resolver
    // with neither key refuses it after both tries.
    #[tokio::test]
    async fn a_rotation_refuses_no_push() {
        let keys: Arc<PushKeys> = PushKey::new(OLD).expect("key").into();
        assert!(matches!(
            keys.offer(NEW, Instant::now()),
            healthroute_table::push::Reload::Changed
        ));
        for (resolver_key, outcome) in [
            (OLD, (1, 0)),
            (NEW, (1, 0)),
            (&b"a key neither side holds, 32 bytes"[..], (0, 1)),
        ] {
            let (address, mut taken) = resolver(PushKey::new(resolver_key).expect("key")).await;
            let metrics = Arc::new(PushMetrics::default());
            let mut pusher = Pusher::new(keys.clone(), metrics.clone());
            pusher.retarget(Arc::from(vec![Arc::<str>::from(address.as_str())]));
            assert_eq!(pusher.push(r#"{"generation":2}"#), 1);
            assert_eq!(settled(&metrics).await, outcome);
            if outcome.0 == 1 {
                assert_eq!(
                    taken.recv().await.as_deref(),
                    Some(&br#"{"generation":2}"#[..])
                );
            }
        }
    }

    // SEM-P12: the operator reads its key file again and takes the new key without a
    // restart; a file that holds no key keeps the one held.
    #[tokio::test]
    async fn a_changed_key_file_is_taken() {
        let dir = std::env::temp_dir().join(format!("hr-operator-push-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("push.key");
        std::fs::write(&file, OLD).expect("write");
        let keys: Arc<PushKeys> = PushKey::new(OLD).expect("key").into();
        let every = Duration::from_millis(20);
        let follower = tokio::spawn({
            let keys = keys.clone();
            healthroute_admin::key_file::follow(file.clone(), every, "push key", move |read| {
                keys.take_file(read)
            })
        });
        let new = PushKey::new(NEW).expect("key");
        std::fs::write(&file, "").expect("write");
        tokio::time::sleep(every * 5).await;
        assert!(
            keys.fallback_authorization(b"x", Instant::now()).is_none(),
            "kept"
        );
        std::fs::write(&file, NEW).expect("write");
        let deadline = Instant::now() + Duration::from_secs(10);
        // Taken: the new key is the second try now, the first once every pod has it.
        while keys.fallback_authorization(b"x", Instant::now()) != Some(new.authorization(b"x")) {
            assert!(Instant::now() < deadline, "the new key was never read");
            tokio::time::sleep(every).await;
        }
        follower.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
