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

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use healthroute_admin::metrics::{Collector, DescriptorEncoder, Exposition};
use healthroute_admin::retry::ErrorLog;
use healthroute_table::push::{PATH, PushKey};
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
            "Deltas pushed to resolvers (P12), by result: sent (taken), refused (the resolver's push key differs), failed (no answer within 1 s, or an error), dropped (64 were waiting).",
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
    key: PushKey,
    /// The resolvers' advertised addresses, in order.
    targets: Arc<[Arc<str>]>,
    /// Each target's queue, once pushed to; its task ends with the sender.
    resolvers: HashMap<Arc<str>, mpsc::Sender<Push>>,
    metrics: Arc<PushMetrics>,
}

impl Pusher {
    pub fn new(key: PushKey, metrics: Arc<PushMetrics>) -> Self {
        Pusher {
            key,
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
        let authorization: Arc<str> = self.key.authorization(&body).into();
        let mut queued = 0;
        for address in self.targets.iter() {
            let queue = self.resolvers.entry(address.clone()).or_insert_with(|| {
                let (tx, rx) = mpsc::channel(QUEUE);
                tokio::spawn(
                    send_in_order(address.clone(), rx, self.metrics.clone())
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
    metrics: Arc<PushMetrics>,
) {
    let mut connection: Option<SendRequest<Full<Bytes>>> = None;
    let mut errors = ErrorLog::default();
    while let Some((body, authorization)) = queue.recv().await {
        let sent = tokio::time::timeout(
            DEADLINE,
            send(&address, &mut connection, body, &authorization),
        )
        .await;
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
