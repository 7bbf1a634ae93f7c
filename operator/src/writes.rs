//! The leader's object writes beside the control loop, never inside it (SEMANTICS P7), as the
//! status writer does for statuses: the Peer checks peer sources need (the `peers` module) and
//! the ZonalShifts that mirror the autoshift engines' shifts (the `engine_shifts` module).
//!
//! ```text
//!  a plan (control loop) ──watch (newest plan only)──▶ writer task (leader only)
//!      each write with a timeout: ok ──▶ next
//!                                 failed ──▶ tried again after a backoff (200 ms .. 30 s),
//!                                            unless a newer plan came meanwhile
//! ```
//!
//! A plan is level-triggered (what the watched objects still lack), so a write that is lost
//! or undone on the server shows up again in a later plan.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube::Client;
use kube::api::{DeleteParams, Preconditions};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Error;
use healthroute_admin::retry::{Backoff, ErrorLog};
use healthroute_compiler::ObjectKey;

/// How long one write may take before it counts as failed.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// One write of a plan.
pub trait ObjectWrite: Clone + PartialEq + Send + Sync + 'static {
    /// What the logs call the object ("peer check", "engine shift").
    const WHAT: &'static str;
    /// The object written.
    fn key(&self) -> &ObjectKey;
    /// Sends the write (the writer bounds it with [`WRITE_TIMEOUT`]).
    fn send(&self, client: &Client) -> impl Future<Output = Result<(), kube::Error>> + Send;
}

/// The writer's numbers, for the metrics of whoever owns the plan.
#[derive(Debug, Default)]
pub struct WriteCounters {
    pub writes: AtomicU64,
    pub write_errors: AtomicU64,
    /// Writes of the newest plan not yet done (waiting, or waiting out a backoff).
    pub pending: AtomicU64,
}

impl WriteCounters {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// A delete of only the object the plan saw (its uid): one re-made meanwhile is someone else's.
pub fn delete_params(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Sends the writes of the newest plan in `plans` while `leader` is true, until `shutdown`
/// turns true.
pub async fn run<W: ObjectWrite>(
    client: Client,
    mut plans: watch::Receiver<Vec<W>>,
    mut leader: watch::Receiver<bool>,
    counters: Arc<WriteCounters>,
    mut shutdown: watch::Receiver<bool>,
) {
    let counters = &*counters;
    let mut todo: Vec<W> = plans.borrow_and_update().clone();
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    let mut retry_at: Option<Instant> = None;
    let mut errors = ErrorLog::default();
    loop {
        let leading = *leader.borrow_and_update();
        if leading && !todo.is_empty() && retry_at.is_none_or(|t| t <= Instant::now()) {
            let batch = send_all(
                &client,
                std::mem::take(&mut todo),
                &plans,
                counters,
                &mut errors,
            );
            // A write that hangs never holds the process's shutdown back.
            todo = tokio::select! {
                biased;
                _ = shutdown.changed() => return,
                failed = batch => failed,
            };
            retry_at = if todo.is_empty() {
                backoff.reset();
                None
            } else {
                Some(Instant::now() + backoff.next_delay())
            };
        }
        counters.pending.store(todo.len() as u64, Ordering::Relaxed);
        tokio::select! {
            biased;
            _ = shutdown.changed() => return,
            changed = plans.changed() => {
                if changed.is_err() {
                    return; // the control loop is gone
                }
                todo = plans.borrow_and_update().clone();
                retry_at = None;
                backoff.reset();
            }
            Ok(()) = leader.changed() => {}
            _ = async {
                match retry_at {
                    Some(t) if !todo.is_empty() => tokio::time::sleep_until(t).await,
                    _ => std::future::pending().await,
                }
            } => {}
        }
    }
}

/// Sends `writes` in order until a newer plan arrives; returns those to try again.
async fn send_all<W: ObjectWrite>(
    client: &Client,
    writes: Vec<W>,
    plans: &watch::Receiver<Vec<W>>,
    counters: &WriteCounters,
    errors: &mut ErrorLog,
) -> Vec<W> {
    let mut failed = Vec::new();
    for w in writes {
        if plans.has_changed().unwrap_or(false) {
            break; // a newer plan replaces what is left of this one
        }
        match send(client, &w).await {
            Ok(()) => {
                counters.writes.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                counters.write_errors.fetch_add(1, Ordering::Relaxed);
                let retry = worth_retrying(&e);
                if errors.should_log(&format!("{}: {e}", w.key())) {
                    tracing::warn!(object = %w.key(), error = %e, retried = retry,
                        "{} write failed (logged once a minute per error)", W::WHAT);
                }
                if retry {
                    failed.push(w);
                }
            }
        }
    }
    failed
}

/// Whether a failed write is worth trying again: not when the server refuses the body (400,
/// 422: the next plan, after an edit, says more) nor for a delete whose object is gone.
fn worth_retrying(error: &Error) -> bool {
    match error {
        Error::Api(kube::Error::Api(s)) => !matches!(s.code, 400 | 404 | 409 | 422),
        _ => true,
    }
}

/// Sends one write, within [`WRITE_TIMEOUT`].
async fn send<W: ObjectWrite>(client: &Client, write: &W) -> Result<(), Error> {
    tokio::time::timeout(WRITE_TIMEOUT, write.send(client))
        .await
        .map_err(|_| Error::Timeout {
            what: format!("writing {} {}", W::WHAT, write.key()),
            after: WRITE_TIMEOUT,
        })?
        .map_err(Error::Api)
}
