//! Leader election (P3: one writer), on kube-lease-manager's `Lease` lock.
//!
//! ```text
//!   LeaseManager::changed() ──Ok(holder?)──▶ watch<bool> (the control loop's `leader`)
//!          └──Err (API server unreachable) ──▶ retry after 0.2-2 s; failing past the grace
//!             period while leader ──▶ step down (false), start over with a fresh manager
//!   watch on the Lease ──released (no holder) or deleted, while standby──▶ start over with a
//!             fresh manager, which reads the Lease at once and takes it
//!   shutdown while leader ──▶ false; keep renewing until the writers end (`leader`'s
//!             receivers dropped, at most 10 s) ──▶ release
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
//!
//! A standby's manager sleeps until the expiry it last read, and reads the Lease again only
//! once that has passed (the crate's `sync(Soft)`): a lease released early (a leader shutting
//! down, the leader's pod removed by a scale-down) stayed free for up to a lease duration
//! (5.35 s without a leader on a 2 → 1 scale-down, issue #42). So a watch on the Lease runs
//! beside the manager; when it sees the lease released or deleted, a standby drops its
//! manager for a fresh one, whose first read finds the lease free and takes it: a handover
//! within a second. Each released version of the Lease is acted on once. A fast handover
//! must not mean two writers (client-go's warning on `ReleaseOnCancel`): a stopping leader
//! first says it leads no more, then keeps its lease until the writers it guards have ended
//! (the control loop drops its `leader` receiver after its last write), and only then
//! releases it.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
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

/// How long a stopping leader waits for the writers it guards to end before it releases
/// its lease anyway. Its lease stays renewed meanwhile.
pub const WRITERS_END_WITHIN: Duration = Duration::from_secs(10);

/// Runs the election until `shutdown` turns true; a leader then releases the lease once the
/// receivers of `leader` are all dropped (its writers have ended) or after
/// [`WRITERS_END_WITHIN`], for a fast handover.
pub async fn run(
    client: Client,
    election: Election,
    leader: watch::Sender<bool>,
    shutdown: watch::Receiver<bool>,
) {
    let (released_tx, released) = watch::channel(None);
    let api = Api::<Lease>::namespaced(client.clone(), &election.namespace);
    // On the election's own task: it lives exactly as long as the election.
    tokio::select! {
        () = elect(client, election.clone(), leader, shutdown, released) => {}
        () = watch_releases(api, election.lease, released_tx) => {}
    }
}

async fn elect(
    client: Client,
    election: Election,
    leader: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
    mut released: watch::Receiver<Option<String>>,
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
        // A release seen so far is no news to this manager: its first `changed()` reads the
        // Lease as it is now.
        released.borrow_and_update();
        let mut failing_since: Option<Instant> = None;
        loop {
            let changed = tokio::select! {
                c = manager.changed() => c,
                Ok(()) = released.changed(), if !*leader.borrow() => {
                    tracing::debug!("the lease was released: taking it now, not at its old expiry");
                    break; // a fresh manager reads the free lease at once
                }
                _ = shutdown.changed() => {
                    if *leader.borrow() {
                        hand_over(&manager, &leader).await;
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

/// A stopping leader's last duty: it says it leads no more, keeps its lease renewed until
/// the writers it guards have ended (every receiver of `leader` dropped), at most
/// [`WRITERS_END_WITHIN`], and then releases the lease, which a standby takes at once.
async fn hand_over(manager: &LeaseManager, leader: &watch::Sender<bool>) {
    leader.send_replace(false);
    let started = Instant::now();
    let waited = tokio::time::timeout(WRITERS_END_WITHIN, async {
        tokio::select! {
            () = leader.closed() => true,
            () = keep_renewing(manager) => false,
        }
    })
    .await;
    match waited {
        Ok(true) => {}
        // Another replica holds it now (it expired while renewals failed): nothing to release.
        Ok(false) => return,
        Err(_) => tracing::warn!(
            seconds = WRITERS_END_WITHIN.as_secs(),
            "the leader's writers have not ended: releasing the lease anyway"
        ),
    }
    match tokio::time::timeout(Duration::from_secs(5), manager.release()).await {
        Ok(Ok(())) => tracing::info!(
            waited_for_writers = started.elapsed().as_secs_f64(),
            "released the leader lease"
        ),
        Ok(Err(e)) => tracing::warn!(error = %e, "could not release the leader lease; it expires"),
        Err(_) => tracing::warn!("releasing the leader lease took too long; it expires"),
    }
}

/// Renews the lease for as long as it is ours; returns once it is not.
async fn keep_renewing(manager: &LeaseManager) {
    loop {
        match manager.changed().await {
            Ok(false) => return,
            Ok(true) => {}
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Whether the Lease is free: no holder, as kube-lease-manager's `release()` leaves it (and
/// client-go's, which writes an empty holder).
fn is_free(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}

/// Watches the election's Lease and sends a key of each version of it seen free or deleted
/// (its resourceVersion), so that a standby acts on each release once. Never returns: when
/// the watch fails, it retries (within 1 s) and the managers go on by expiry meanwhile.
async fn watch_releases(api: Api<Lease>, lease: String, released: watch::Sender<Option<String>>) {
    let config = watcher::Config::default().fields(&format!("metadata.name={lease}"));
    let mut events = watcher(api, config).backoff(Backoff::watch()).boxed();
    let mut errors = ErrorLog::default();
    while let Some(event) = events.next().await {
        let free = match event {
            Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) if is_free(&l) => {
                format!("free@{}", l.resource_version().unwrap_or_default())
            }
            Ok(watcher::Event::Delete(l)) => {
                format!("deleted@{}", l.resource_version().unwrap_or_default())
            }
            Ok(_) => continue,
            Err(e) => {
                if errors.should_log(&e.to_string()) {
                    tracing::warn!(error = %e, "watch on the leader lease failed; a release is seen at its expiry meanwhile (logged once a minute)");
                }
                continue;
            }
        };
        released.send_if_modified(|seen| {
            let news = seen.as_deref() != Some(free.as_str());
            *seen = Some(free);
            news
        });
    }
    std::future::pending().await
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
