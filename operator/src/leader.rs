//! Leader election (P3: one writer), on kube-lease-manager's `Lease` lock.
//!
//! ```text
//!   LeaseManager::changed() ──Ok(holder?)──▶ watch<bool> (the control loop's `leader`)
//!          └──Err (API server unreachable) ──▶ retry after 0.2-2 s; failing past the grace
//!             period while leader ──▶ step down (false), start over with a fresh manager
//! ```
//!
//! The crate's own `watch()` backs off up to 30 s after an error and keeps saying "leader"
//! meanwhile: after an API server outage the old leader could renew late while another
//! replica took the expired lease, and a new leader would wait as long to take over. Here
//! retries stay within 2 s, and a leader that cannot renew steps down before its lease can
//! expire on the server, so two replicas never both believe they lead.
//!
//! A renewal must also never wait for the rest of the process: at 100,000 groups a term's
//! first compile and publish keep both runtime threads busy for seconds, and a renewal due
//! then went out late, after the lease had expired on the server and the standby had taken
//! it (two leaders for 3.4 s, `bench/scale.py`). So the election runs on a thread of its own,
//! with its own single-threaded runtime and its own client ([`spawn`]), and the holder renews
//! once a third of the lease has passed (`grace` is two thirds of it, as client-go renews
//! long before expiry), not in its last third.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use healthroute_admin::retry::{Backoff, ErrorLog};

/// The lease's name, namespace and timing.
#[derive(Debug, Clone)]
pub struct Election {
    pub lease: String,
    pub namespace: String,
    pub identity: String,
    /// Seconds a lease lasts without renewal.
    pub duration: u64,
    /// Seconds before expiry at which the holder renews.
    pub grace: u64,
}

impl Election {
    /// Seconds before expiry at which a holder renews: two thirds of `duration`.
    pub fn grace_of(duration: u64) -> u64 {
        duration * 2 / 3
    }
}

/// Runs [`run`] on a thread of its own, with a single-threaded runtime and a client of its
/// own made from `config`, so that nothing else the process does can delay a renewal. The
/// returned receiver is told when the election has ended (the lease released after
/// `shutdown`).
pub fn spawn(
    config: kube::Config,
    election: Election,
    leader: watch::Sender<bool>,
    shutdown: watch::Receiver<bool>,
) -> Result<tokio::sync::oneshot::Receiver<()>, crate::error::Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(crate::error::Error::ElectionThread)?;
    // Made on the election's runtime: the client's buffer and connections live there.
    let client = {
        let _on = runtime.enter();
        Client::try_from(config).map_err(crate::error::Error::NoClient)?
    };
    let (done, ended) = tokio::sync::oneshot::channel();
    let span = tracing::info_span!("leader_election", identity = %election.identity);
    std::thread::Builder::new()
        .name("leader-election".into())
        .spawn(move || {
            runtime.block_on(run(client, election, leader, shutdown).instrument(span));
            let _ = done.send(());
        })
        .map_err(crate::error::Error::ElectionThread)?;
    Ok(ended)
}

/// Runs the election until `shutdown` turns true, then releases the lease (fast handover).
pub async fn run(
    client: Client,
    election: Election,
    leader: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(2));
    let mut errors = ErrorLog::default();
    // A renewal is attempted `grace` seconds before expiry: failing that long means the lease
    // may be gone on the server. Step down a second earlier.
    let step_down_after = Duration::from_secs(election.grace.saturating_sub(1).max(1));
    loop {
        let manager = tokio::select! {
            m = build(&client, &election) => m,
            _ = shutdown.changed() => return,
        };
        let manager = match manager {
            Ok(m) => m,
            Err(e) => {
                if errors.should_log(&e.to_string()) {
                    tracing::warn!(error = %e, "leader election cannot start; retrying");
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff.next_delay()) => continue,
                    _ = shutdown.changed() => return,
                }
            }
        };
        let mut failing_since: Option<Instant> = None;
        loop {
            let changed = tokio::select! {
                c = manager.changed() => c,
                _ = shutdown.changed() => {
                    if *leader.borrow() {
                        leader.send_replace(false);
                        let _ = tokio::time::timeout(Duration::from_secs(5), manager.release()).await;
                    }
                    return;
                }
            };
            match changed {
                Ok(is_leader) => {
                    failing_since = None;
                    backoff.reset();
                    leader.send_if_modified(|l| std::mem::replace(l, is_leader) != is_leader);
                }
                Err(e) => {
                    if errors.should_log(&e.to_string()) {
                        tracing::warn!(error = %e, "leader lease not confirmed; retrying (logged once a minute)");
                    }
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if *leader.borrow() && since.elapsed() >= step_down_after {
                        tracing::warn!(
                            seconds = since.elapsed().as_secs_f64(),
                            "cannot renew the leader lease: stepping down before it can expire"
                        );
                        leader.send_replace(false);
                        break; // a fresh manager takes the lease again if it is still ours
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff.next_delay()) => {}
                        _ = shutdown.changed() => return,
                    }
                }
            }
        }
    }
}

async fn build(
    client: &Client,
    e: &Election,
) -> Result<LeaseManager, kube_lease_manager::LeaseManagerError> {
    LeaseManagerBuilder::new(client.clone(), &e.lease)
        .with_namespace(&e.namespace)
        .with_identity(&e.identity)
        .with_duration(e.duration)
        .with_grace(e.grace)
        .build()
        .await
}
