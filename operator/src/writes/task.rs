//! The writer task: while the replica leads, sends what the queue holds, up to N writes at
//! once, each within a timeout, and settles each outcome with the queue and the metrics of
//! what it wrote (statuses, Peer checks, engine shifts).

use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use super::queue::{WriteOutcome, WriteQueue};
use super::{Write, WriteKind, api};
use crate::FIELD_MANAGER;
use crate::error::Error;
use crate::metrics::{StatusMetrics, WriteMetrics};
use healthroute_admin::retry::ErrorLog;

/// How the writer runs.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Writes in flight at once.
    pub concurrency: usize,
    /// The longest one request may take before it counts as failed.
    pub timeout: Duration,
    /// This replica's name, on the Events it records.
    pub identity: String,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            concurrency: 8,
            timeout: Duration::from_secs(10),
            identity: FIELD_MANAGER.into(),
        }
    }
}

/// Writes what `queue` holds while `leader` is true, until `shutdown` turns true.
pub async fn run(
    client: Client,
    queue: WriteQueue,
    mut leader: watch::Receiver<bool>,
    metrics: WriteMetrics,
    config: WriterConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(config.identity.clone()),
        },
    );
    let mut errors = ErrorLog::default();
    let mut in_flight = FuturesUnordered::new();
    loop {
        let is_leader = *leader.borrow_and_update();
        while is_leader && in_flight.len() < config.concurrency.max(1) {
            let Some(write) = queue.take_ready(Instant::now()) else {
                break;
            };
            let (client, recorder) = (client.clone(), recorder.clone());
            let timeout = config.timeout;
            let (kind, key) = write.key();
            let span = tracing::debug_span!("write", kind = %kind_name(kind), object = %key);
            in_flight.push(
                async move {
                    let result = api::send(&client, &recorder, &write, timeout).await;
                    (write, result)
                }
                .instrument(span),
            );
        }
        set_backlogs(&metrics, &queue);
        let retry_at = queue.next_delayed();
        tokio::select! {
            Some((write, result)) = in_flight.next() => {
                let outcome = settle(&write, result, &metrics, &mut errors);
                queue.finish(write, &outcome, Instant::now());
            }
            _ = queue.pushed() => {}
            _ = async { match retry_at { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {}
            Ok(()) = leader.changed() => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// The kind of write, as a log line names it: a status's kind, or the object written.
fn kind_name(kind: WriteKind) -> String {
    match kind {
        WriteKind::Status(kind) => kind.to_string(),
        other => other.name().to_owned(),
    }
}

/// Each kind's backlog, in its component's gauge.
fn set_backlogs(metrics: &WriteMetrics, queue: &WriteQueue) {
    let status = WriteKind::Status(crate::status::StatusKind::RecordGroup);
    metrics.status.set_backlog(queue.backlog_of(status));
    let pending = |kind| queue.backlog_of(kind) as u64;
    StatusMetrics::set(&metrics.peer_checks.pending, pending(WriteKind::PeerCheck));
    StatusMetrics::set(
        &metrics.engine_shifts.pending,
        pending(WriteKind::EngineShift),
    );
}

/// Counts one write's outcome in its kind's metrics, logs a failure (once a minute per
/// error), and says what the queue does with it.
fn settle(
    write: &Write,
    result: Result<u64, Error>,
    metrics: &WriteMetrics,
    errors: &mut ErrorLog,
) -> WriteOutcome {
    let (kind, key) = write.key();
    let (writes, write_errors) = match kind {
        WriteKind::Status(_) => (&metrics.status.writes, &metrics.status.write_errors),
        WriteKind::PeerCheck => (
            &metrics.peer_checks.writes,
            &metrics.peer_checks.write_errors,
        ),
        WriteKind::EngineShift => (
            &metrics.engine_shifts.writes,
            &metrics.engine_shifts.write_errors,
        ),
    };
    match result {
        Ok(events) => {
            StatusMetrics::add(writes, 1);
            StatusMetrics::add(&metrics.status.events_recorded, events);
            WriteOutcome::Written
        }
        Err(e) => {
            StatusMetrics::add(write_errors, 1);
            let retry = worth_retrying(&e);
            let kind = kind_name(kind);
            if errors.should_log(&format!("{kind}: {e}")) {
                tracing::warn!(%kind, object = %key, error = %e, retried = retry,
                    "{} write failed (logged once a minute per error)", write.key().0.name());
            }
            if retry {
                WriteOutcome::Retry
            } else {
                WriteOutcome::Dropped
            }
        }
    }
}

/// Whether a failed write is worth trying again.
fn worth_retrying(error: &Error) -> bool {
    match error {
        // Gone (404), refused as invalid (400, 422), or a delete whose object is another one
        // now (409, its uid): the next write will say more.
        Error::Api(kube::Error::Api(s)) => !matches!(s.code, 400 | 404 | 409 | 422),
        // The same body would fail the same way.
        Error::EncodeStatus(_) => false,
        _ => true,
    }
}
