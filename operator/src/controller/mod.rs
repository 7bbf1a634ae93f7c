//! The operator's control loop: watches feed a synchronous index (the compiler); a compile
//! follows every burst of changes; the table and the statuses leave through two separate
//! leader-gated writers, so neither ever waits on the other (SEMANTICS P7).
//!
//! ```text
//!  watches ──▶ Index::apply (no client, no await) ──▶ compile(now): at once after a quiet
//!                                                      spell, else at most every debounce
//!                                                      (autoshift engines step in it, AS)
//!      compiled table ──watch (newest only)──▶ publisher task ──▶ table ConfigMaps
//!                      ◀── ReadBack / Published / Failed ───┘
//!      status of each changed object, judged against what is *published* (P5), in
//!      steps of 500 groups between the other inputs (a term's first table: all of them)
//!                 ──▶ status::Ledger ─────────────┐
//!      Peer checks the groups need (X4) vs the watched HealthChecks
//!                 ──▶ PeerChecks ─────────────────┼─▶ WriteQueue ──▶ the one writer task
//!      the engines' shifts (AS13) vs the watched mirrors                (leader only) ──▶
//!                 ──▶ EngineShifts ───────────────┘     SSA of /status and objects, DELETE,
//!                                                       Events
//!      every status_recheck: each object's watched status, then the Peer checks and the
//!      mirrors, against what would be written, in steps of 500 objects between the other
//!      inputs
//! ```
//!
//! A new leadership term starts with the publisher reading back the published table: the
//! compiler takes in the last good version of every rejected group from it (P6), and the next
//! generation continues above it and above every resolver's (P4). Only then is a table sent.
//! Every ZonalAutoshift's engine starts again from its object's status, the last leader's
//! decisions (AS11); what the engines report from then on is logged, counted and recorded
//! as Events by the leader only.
//!
//! ```text
//!   mod.rs       the loop: its Config, run, run_with (the tasks beside it), drive
//!   watches.rs   every watch the operator needs, merged into one stream of inputs
//!   control.rs   the loop's state and what each input does to it (terms, feedback, compiles)
//! ```
//!
//! Beside it: the index ([`crate::index`]), the table publisher ([`crate::publish`]), the
//! statuses ([`crate::status`]), the Peer checks ([`crate::peers`]), the mirrors
//! ([`crate::engine_shifts`]), the one writer of all three ([`crate::writes`]), the metrics
//! ([`crate::metrics`]) and the readiness ([`crate::readiness`]).

mod control;
mod watches;

use control::Control;
pub use watches::{inputs, inputs_in};

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::Instrument;

use crate::engine_shifts::EngineShifts;
pub use crate::index::{Index, Input};
pub use crate::metrics::OperatorMetrics;
use crate::peers::PeerChecks;
use crate::publish::{PublishFeedback, PublishRequest, Publisher};
pub use crate::readiness::Readiness;
use crate::status::Ledger;
use crate::writes::{self, WriteQueue, WriterConfig};
use healthroute_api::METRIC_EVALUATOR;
use healthroute_checker::{Checker, CheckerEvent, TargetPolicy};

/// How often the leader compares every object's status with what it would write, by default.
pub const STATUS_RECHECK: Duration = Duration::from_secs(60);

#[derive(Clone, Debug)]
pub struct Config {
    /// Where the table ConfigMaps and checker Leases live.
    pub namespace: String,
    /// The fewest shards of the published table; more are used when the table needs them.
    pub shards: u32,
    pub zones: healthroute_compiler::ServedZones,
    pub default_ttl: u32,
    /// A compile follows a change at once after a quiet spell, and at most once per
    /// `debounce` under a stream of changes.
    pub debounce: Duration,
    /// The one writer (statuses, Peer checks, mirrors): concurrency, timeout per request, and
    /// this replica's name.
    pub status: WriterConfig,
    /// How often the leader compares every object's status, as watched, with what it would
    /// write, and writes again what another writer changed.
    pub status_recheck: Duration,
    /// Where the leader's Metric-check evaluator may connect (H15, as H12 for checkers).
    pub metric_policy: TargetPolicy,
    /// Compile only the objects of this namespace (`--watch-namespace`); every namespace's
    /// when `None`.
    pub watch_namespace: Option<String>,
    /// The key the leader signs pushed deltas with (P12); nothing is pushed without one.
    pub push_key: Option<healthroute_table::push::PushKey>,
    /// The file `push_key` was read from (`--push-key-file`, a mounted Secret): read again
    /// while running, so that a changed Secret's key is used without a restart.
    pub push_key_file: Option<std::path::PathBuf>,
    /// The ServiceAccount (in `namespace`) that owns the table's ConfigMaps and the leader
    /// Lease, so that uninstalling removes them (P13); no owner when `None`.
    pub owner_service_account: Option<String>,
}

impl Config {
    /// The defaults the binary ships, for `zones` and the table in `namespace`.
    pub fn new(namespace: impl Into<String>, zones: healthroute_compiler::ServedZones) -> Self {
        Config {
            namespace: namespace.into(),
            shards: 8,
            zones,
            default_ttl: healthroute_compiler::DEFAULT_TTL,
            debounce: Duration::from_millis(20),
            status: WriterConfig::default(),
            status_recheck: STATUS_RECHECK,
            metric_policy: TargetPolicy::cluster_default(),
            watch_namespace: None,
            push_key: None,
            push_key_file: None,
            owner_service_account: None,
        }
    }
}

/// Runs the control loop on the cluster's watches until `shutdown` turns true.
pub async fn run(
    client: Client,
    config: Config,
    leader: watch::Receiver<bool>,
    metrics: OperatorMetrics,
    readiness: Arc<Readiness>,
    shutdown: watch::Receiver<bool>,
) {
    let inputs = inputs_in(
        &client,
        &config.namespace,
        config.watch_namespace.as_deref(),
    );
    run_with(client, config, inputs, leader, metrics, readiness, shutdown).await
}

/// Runs the control loop on `inputs` (the cluster's watches, or a test's), with the table
/// publisher and the one writer beside it, until `shutdown` turns true.
pub async fn run_with(
    client: Client,
    config: Config,
    inputs: impl Stream<Item = Input> + Send + Unpin,
    leader: watch::Receiver<bool>,
    metrics: OperatorMetrics,
    readiness: Arc<Readiness>,
    shutdown: watch::Receiver<bool>,
) {
    let table_writes = writes::TableWrites::default();
    let (publisher, requests, feedback) =
        PublisherTask::spawn(&client, &config, &metrics, &table_writes);
    // Statuses, Peer checks (X4) and the engines' shifts' mirrors (AS13): one queue, one
    // leader-gated writer.
    let queue = WriteQueue::default();
    let (writer_leader, writer_leading) = watch::channel(false);
    let writer_task = tokio::spawn(
        writes::run(
            client.clone(),
            queue.clone(),
            writer_leading,
            table_writes.clone(),
            metrics.writes(),
            config.status.clone(),
            shutdown.clone(),
        )
        .instrument(tracing::info_span!("writer")),
    );
    let (evaluator, evaluations) = metric_evaluator(&client, &config, &metrics);
    let control = Control::new(
        &config,
        Some(evaluator),
        requests,
        Ledger::new(queue.clone(), metrics.status.clone()),
        (
            PeerChecks::new(queue.clone(), metrics.peers.clone()),
            EngineShifts::new(queue),
        ),
        &metrics,
        readiness,
    );
    let wakers = Wakers {
        leader,
        writer_leader,
        feedback,
        evaluations,
        shutdown,
    };
    drive(control, inputs, wakers, &config).await; // drops the control: closes the requests
    publisher.stopped().await;
    let _ = writer_task.await;
}

/// The table publisher's task and the push key's follower.
struct PublisherTask {
    task: JoinHandle<()>,
    key_follower: Option<JoinHandle<()>>,
}

impl PublisherTask {
    /// Starts the publisher of `config.namespace`'s table ConfigMaps (with its pusher and the
    /// owner of what it creates, when configured); with its requests and its feedback.
    fn spawn(
        client: &Client,
        config: &Config,
        metrics: &OperatorMetrics,
        table_writes: &writes::TableWrites,
    ) -> (
        Self,
        watch::Sender<PublishRequest>,
        mpsc::UnboundedReceiver<PublishFeedback>,
    ) {
        let (requests, requests_rx) = watch::channel(PublishRequest::default());
        let (feedback_tx, feedback) = mpsc::unbounded_channel();
        let mut publisher = Publisher::new(
            Api::<ConfigMap>::namespaced(client.clone(), &config.namespace),
            config.shards,
        );
        let mut key_follower = None;
        if let Some(key) = config.push_key.clone() {
            let keys: Arc<healthroute_table::push::PushKeys> = key.into();
            if let Some(path) = config.push_key_file.clone() {
                key_follower = Some(tokio::spawn(
                    {
                        let keys = keys.clone();
                        healthroute_admin::key_file::follow(
                            path,
                            healthroute_table::push::KEY_FILE_CHECK,
                            "push key",
                            move |read| keys.take_file(read),
                        )
                    }
                    .instrument(tracing::info_span!("push_key_file")),
                ));
            }
            publisher =
                publisher.with_pusher(crate::push::Pusher::new(keys, metrics.pushes.clone()));
        }
        if let Some(account) = &config.owner_service_account {
            publisher = publisher.with_owner(account, crate::LEADER_LEASE);
        }
        let task = tokio::spawn(
            crate::publish::run_publisher(
                publisher,
                requests_rx,
                feedback_tx,
                metrics.publisher.clone(),
                table_writes.clone(),
            )
            .instrument(tracing::info_span!("publisher", namespace = %config.namespace)),
        );
        let this = PublisherTask { task, key_follower };
        (this, requests, feedback)
    }

    /// Waits for the publisher to end (its requests are closed), the key's follower stopped.
    async fn stopped(self) {
        if let Some(follower) = self.key_follower {
            follower.abort();
        }
        let _ = self.task.await;
    }
}

/// H14: the leader evaluates Metric checks, once for the cluster; its views reach the compiler
/// through the loop, in memory, and its last evaluation goes out with the check's status.
fn metric_evaluator(
    client: &Client,
    config: &Config,
    metrics: &OperatorMetrics,
) -> (Checker, mpsc::Receiver<CheckerEvent>) {
    let (evaluations_tx, evaluations) = mpsc::channel(1024);
    let mut evaluator = Checker::new(
        METRIC_EVALUATOR,
        None,
        config.metric_policy.clone(),
        evaluations_tx,
    )
    .metric_checks_only(crate::credentials::secret_credentials(client.clone()));
    evaluator.metrics = metrics.metric_evaluator.clone();
    evaluator.start_heartbeat(Duration::from_secs(1));
    (evaluator, evaluations)
}

/// What the loop waits on besides the inputs, and the writer's leadership it sets.
struct Wakers {
    leader: watch::Receiver<bool>,
    /// The one writer writes while this is true.
    writer_leader: watch::Sender<bool>,
    feedback: mpsc::UnboundedReceiver<PublishFeedback>,
    evaluations: mpsc::Receiver<CheckerEvent>,
    shutdown: watch::Receiver<bool>,
}

/// The loop: each input, feedback and evaluation into `control`; a compile after a quiet
/// spell or at most every debounce (and at the compiler's deadline); the re-check's ticks and
/// steps; until `shutdown` turns true.
async fn drive(
    mut control: Control,
    mut inputs: impl Stream<Item = Input> + Send + Unpin,
    mut w: Wakers,
    config: &Config,
) {
    let mut due: Option<Instant> = None;
    let mut last_compile: Option<Instant> = None;
    let recheck_every = config.status_recheck.max(Duration::from_millis(10));
    let mut recheck = tokio::time::interval_at(Instant::now() + recheck_every, recheck_every);
    recheck.set_missed_tick_behavior(MissedTickBehavior::Delay);
    if *w.leader.borrow_and_update() {
        control.set_leader(true);
        let _ = w.writer_leader.send(true);
    }
    // A compile is due at once, or after the debounce since the last one.
    let soon = |last_compile: Option<Instant>| {
        let earliest = last_compile.map_or(Instant::now(), |t| t + config.debounce);
        earliest.max(Instant::now())
    };
    loop {
        // A stream of inputs never holds a compile back by more than the debounce.
        if due.is_some_and(|t| t <= Instant::now()) {
            due = None;
            last_compile = Some(Instant::now());
            control.compile();
        }
        let deadline = control.deadline().map(Instant::from_std);
        let wake = match (due, deadline) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        tokio::select! {
            biased;
            _ = w.shutdown.changed() => break,
            Ok(()) = w.leader.changed() => {
                let is_leader = *w.leader.borrow_and_update();
                tracing::info!(leader = is_leader, "leadership changed");
                control.set_leader(is_leader);
                let _ = w.writer_leader.send(is_leader);
            }
            Some(fb) = w.feedback.recv() => {
                if control.take_feedback(fb) {
                    due = Some(Instant::now());
                }
            }
            Some(event) = w.evaluations.recv() => {
                let view = matches!(event, CheckerEvent::View { .. });
                control.take_evaluation(event);
                if view {
                    due.get_or_insert(soon(last_compile));
                }
            }
            Some(input) = inputs.next() => {
                let mut changed = control.apply(input);
                // Everything already queued joins this compile.
                for _ in 0..4096 {
                    match inputs.next().now_or_never() {
                        Some(Some(input)) => changed |= control.apply(input),
                        _ => break,
                    }
                }
                // A Node's heartbeat changes nothing the compiler reads: no compile for it.
                if changed {
                    due.get_or_insert(soon(last_compile));
                }
            }
            _ = recheck.tick() => {
                // Judged against a compile of everything watched so far: an edit applied but
                // not compiled yet would pair a new generation with the old outcome.
                if due.take().is_some() {
                    last_compile = Some(Instant::now());
                    control.compile();
                }
                control.start_recheck();
            }
            _ = async { match wake { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {
                due = None;
                last_compile = Some(Instant::now());
                control.compile();
            }
            // Last, and only while no compile is due (each step is judged against a compile
            // of everything watched so far): a step of the statuses' work, the groups whose
            // publication came (all of them at a term's first table) or the re-check. A change
            // that comes meanwhile waits for one step, not for the whole pass.
            () = std::future::ready(()), if due.is_none() && control.status_work() => {
                control.status_step();
                tokio::task::yield_now().await;
            }
        }
    }
}
