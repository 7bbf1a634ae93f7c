//! The Peer-check writer: sends the newest plan's writes beside the control loop, never
//! inside it (SEMANTICS P7), as the status writer does for statuses.
//!
//! ```text
//!  PeerChecks (control loop) ──watch (newest plan only)──▶ writer task (leader only)
//!      each write with a timeout: ok ──▶ next
//!                                 failed ──▶ tried again after a backoff (200 ms .. 30 s),
//!                                            unless a newer plan came meanwhile
//! ```
//!
//! A plan is level-triggered (what the watched checks still lack), so a write that is lost
//! or undone on the server shows up again in a later plan.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::time::Instant;

use super::plan::{PEER_FIELD_MANAGER, PeerWrite};
use crate::error::Error;
use crate::metrics::PeerMetrics;
use healthroute_admin::retry::{Backoff, ErrorLog};
use healthroute_api::HealthCheck;

/// How long one write may take before it counts as failed.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Sends the writes of the newest plan in `plans` while `leader` is true, until `shutdown`
/// turns true.
pub async fn run(
    client: Client,
    mut plans: watch::Receiver<Vec<PeerWrite>>,
    mut leader: watch::Receiver<bool>,
    metrics: Arc<PeerMetrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut todo: Vec<PeerWrite> = plans.borrow_and_update().clone();
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
                &metrics,
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
        metrics.set_pending(todo.len());
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
async fn send_all(
    client: &Client,
    writes: Vec<PeerWrite>,
    plans: &watch::Receiver<Vec<PeerWrite>>,
    metrics: &PeerMetrics,
    errors: &mut ErrorLog,
) -> Vec<PeerWrite> {
    let mut failed = Vec::new();
    for w in writes {
        if plans.has_changed().unwrap_or(false) {
            break; // a newer plan replaces what is left of this one
        }
        match send(client, &w).await {
            Ok(()) => PeerMetrics::add(&metrics.writes, 1),
            Err(e) => {
                PeerMetrics::add(&metrics.write_errors, 1);
                let retry = worth_retrying(&e);
                if errors.should_log(&format!("{}: {e}", w.key())) {
                    tracing::warn!(check = %w.key(), error = %e, retried = retry,
                        "peer check write failed (logged once a minute per error)");
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
async fn send(client: &Client, write: &PeerWrite) -> Result<(), Error> {
    let key = write.key();
    let api: Api<HealthCheck> = Api::namespaced(client.clone(), &key.namespace);
    let request = async {
        match write {
            PeerWrite::Apply { body, .. } => api
                .patch(
                    &key.name,
                    &PatchParams::apply(PEER_FIELD_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await
                .map(|_| ()),
            PeerWrite::Delete { uid, .. } => {
                let params = DeleteParams {
                    // Only the object the plan saw: a check re-made meanwhile is someone else's.
                    preconditions: uid.clone().map(|uid| Preconditions {
                        uid: Some(uid),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                api.delete(&key.name, &params).await.map(|_| ())
            }
        }
    };
    tokio::time::timeout(WRITE_TIMEOUT, request)
        .await
        .map_err(|_| Error::Timeout {
            what: format!("writing HealthCheck {key}"),
            after: WRITE_TIMEOUT,
        })?
        .map_err(Error::Api)
}
