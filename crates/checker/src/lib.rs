//! The checker: runs HealthCheck probes from one place and reports its own view of each.
//!
//! ```text
//!   sync(checks) ──▶ one task per probe check
//!        task: phase (spread over the interval) + jitter ─▶ probe ─▶ Threshold (H5, H6)
//!              view flipped? ─▶ CheckerEvent::View ─▶ compiler (standalone) / status (cluster)
//!   heartbeat task ─▶ CheckerEvent::Heartbeat every second (H7: who is reachable)
//! ```
//!
//! Probes run on their own schedule and nothing waits for them (H1). A check's task only ever
//! waits on its own target (bounded by its timeouts), so a hung target delays no other check;
//! a per-target semaphore bounds how many probes hit one address at once.

mod error;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod metric;
pub mod peer;
pub mod policy;
pub mod probe;

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use healthroute_admin::metrics::{AtomicHistogram, Collector, DescriptorEncoder, Exposition};
use jiff::Timestamp;
use tokio::sync::{Semaphore, mpsc};
use tokio::task::JoinHandle;
use tracing::Instrument;

use healthroute_api::{CheckType, HealthCheckSpec, MetricCheck, PrometheusSource};
use healthroute_api::{CheckerView, MetricState, ObjectKey, PeerValue};
use metric::{Credentials, Endpoint, Evaluation};

pub use error::{Error, UrlProblem};
pub use policy::{Cidr, TargetPolicy};
pub use probe::{Observation, ProbeSpec, probe};

/// Probes of one target address that may run at once.
pub const PER_TARGET_CONCURRENCY: usize = 8;

/// One semaphore per target (address, port), shared by the checks that probe it.
type TargetLimits = Arc<Mutex<HashMap<(String, u16), Arc<Semaphore>>>>;

/// What a checker reports.
#[derive(Debug, Clone, PartialEq)]
pub enum CheckerEvent {
    /// The checker's view of a check changed (or was first formed).
    View { check: ObjectKey, view: CheckerView },
    /// The checker is alive.
    Heartbeat { checker: String, at: Timestamp },
}

/// A checker's view of one check: healthy until `threshold` consecutive failures, unhealthy
/// until `threshold` consecutive successes (H5); healthy before any observation (H6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Threshold {
    healthy: bool,
    streak: u32,
    threshold: u32,
}

impl Threshold {
    pub fn new(threshold: u32) -> Self {
        Threshold {
            healthy: true,
            streak: 0,
            threshold: threshold.clamp(1, 10),
        }
    }
    pub fn healthy(&self) -> bool {
        self.healthy
    }
    /// Sets the view outright (what a peer answered, X4); returns true when it flips.
    pub fn set(&mut self, healthy: bool) -> bool {
        self.streak = 0;
        let flipped = self.healthy != healthy;
        self.healthy = healthy;
        flipped
    }

    /// Counts one observation; returns true when the view flips.
    pub fn observe(&mut self, ok: bool) -> bool {
        if ok == self.healthy {
            self.streak = 0;
            return false;
        }
        self.streak += 1;
        if self.streak >= self.threshold {
            self.healthy = ok;
            self.streak = 0;
            return true;
        }
        false
    }
}

/// Probe (and Metric evaluation) latency buckets, in microseconds: 1 ms to 10 s.
const LATENCY_BOUNDS_US: [u64; 11] = [
    1_000, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000,
    10_000_000,
];

/// Counters of one checker, exported by the binary that runs it (see [`CheckerCollector`]).
#[derive(Debug)]
pub struct CheckerMetrics {
    pub probes_healthy: AtomicU64,
    pub probes_unhealthy: AtomicU64,
    pub probes_rejected: AtomicU64,
    pub flips: AtomicU64,
    /// How long each probe or evaluation took, whatever its result.
    pub latency: AtomicHistogram<{ LATENCY_BOUNDS_US.len() }>,
    /// Per check: (healthy, unhealthy, rejected) probes and view flips. One entry per check;
    /// touched once per probe, never on the DNS path.
    pub by_check: Mutex<std::collections::BTreeMap<ObjectKey, [u64; 4]>>,
    /// Peer checks' exchanges, per peer (X9).
    pub peers: peer::PeerMetrics,
}

impl Default for CheckerMetrics {
    fn default() -> Self {
        CheckerMetrics {
            probes_healthy: AtomicU64::new(0),
            probes_unhealthy: AtomicU64::new(0),
            probes_rejected: AtomicU64::new(0),
            flips: AtomicU64::new(0),
            latency: AtomicHistogram::new(LATENCY_BOUNDS_US),
            by_check: Mutex::default(),
            peers: peer::PeerMetrics::default(),
        }
    }
}

/// A checker's metrics in a process's registry, labelled with the checker's name.
#[derive(Debug, Clone)]
pub struct CheckerCollector {
    pub checker: String,
    pub metrics: Arc<CheckerMetrics>,
}

impl Collector for CheckerCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        let m = &*self.metrics;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let checker = self.checker.as_str();
        let mut out = Exposition::new(encoder);
        out.counters(
            "healthroute_checker_probes_total",
            "Probes run, by result.",
            [
                ("healthy", &m.probes_healthy),
                ("unhealthy", &m.probes_unhealthy),
                ("rejected", &m.probes_rejected),
            ]
            .map(|(result, n)| ([("checker", checker), ("result", result)], get(n))),
        )?;
        out.counters(
            "healthroute_checker_view_flips_total",
            "Times a checker's view of a check flipped.",
            [([("checker", checker)], get(&m.flips))],
        )?;
        out.histograms(
            "healthroute_checker_probe_latency_seconds",
            "How long probes and Metric evaluations took, whatever their result.",
            [([("checker", checker)], m.latency.snapshot())],
        )?;
        let by_check: Vec<(String, [u64; 4])> = m
            .by_check
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(key, counts)| (key.to_string(), *counts))
            .collect();
        out.counters(
            "healthroute_checker_check_probes_total",
            "Probes of one check from one checker, by result.",
            by_check.iter().flat_map(|(check, counts)| {
                ["healthy", "unhealthy", "rejected"]
                    .into_iter()
                    .zip(counts)
                    .filter(|(_, n)| **n > 0)
                    .map(move |(result, n)| {
                        (
                            [
                                ("checker", checker),
                                ("check", check.as_str()),
                                ("result", result),
                            ],
                            *n,
                        )
                    })
            }),
        )?;
        out.counters(
            "healthroute_checker_check_flips_total",
            "Times one checker's view of one check flipped.",
            by_check.iter().map(|(check, counts)| {
                ([("checker", checker), ("check", check.as_str())], counts[3])
            }),
        )?;
        m.peers.with(|by_peer| {
            out.counters(
                "healthroute_peer_exchanges_total",
                "Exchanges with a peer cluster's listeners (one per peer check observation), by result.",
                by_peer.iter().flat_map(|(peer, counts)| {
                    counts.results.iter().map(move |(result, n)| {
                        (
                            [("checker", checker), ("peer", peer.as_str()), ("result", result)],
                            *n,
                        )
                    })
                }),
            )?;
            out.histograms(
                "healthroute_peer_exchange_seconds",
                "How long an exchange with a peer cluster took, whatever its result.",
                by_peer.iter().map(|(peer, counts)| {
                    (
                        [("checker", checker), ("peer", peer.as_str())],
                        counts.latency.snapshot(),
                    )
                }),
            )
        })?;
        match m.peers.key_reloads.get() {
            Some(reloads) => out.counters(
                "healthroute_peer_key_reloads_total",
                "Peer key files read again that held another secret, by result: loaded (in use now) or refused (unusable: the secret in use is kept), each problem once.",
                ["loaded", "refused"]
                    .map(|result| ([("checker", checker), ("result", result)], reloads.get(result))),
            ),
            None => Ok(()),
        }
    }
}

/// Where in its interval a check fires: a stable, evenly spread phase from its key.
pub fn phase(key: &ObjectKey, interval: Duration) -> Duration {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    let ms = interval.as_millis().max(1) as u64;
    Duration::from_millis(h.finish() % ms)
}

/// When a check's task observes next: at its phase, then once per interval; a slot missed
/// (an observation ran past it) is skipped, not caught up in a burst.
struct Schedule {
    next: tokio::time::Instant,
    interval: Duration,
    /// Up to this much random delay per slot (probes), so that phases do not line up again.
    jitter_max_ms: u64,
    rng: fastrand::Rng,
}

impl Schedule {
    fn new(key: &ObjectKey, interval: Duration) -> Self {
        Schedule {
            next: tokio::time::Instant::now() + phase(key, interval),
            interval,
            jitter_max_ms: 0,
            rng: fastrand::Rng::new(),
        }
    }

    /// The first slot within `bound` of now (the phase taken modulo `bound`).
    fn first_within(mut self, bound: Duration) -> Self {
        let now = tokio::time::Instant::now();
        let phase = self.next.saturating_duration_since(now);
        let bound_ms = bound.as_millis().max(1) as u64;
        self.next = now + Duration::from_millis(phase.as_millis() as u64 % bound_ms);
        self
    }

    /// Up to 5% of the interval, at most 250 ms.
    fn with_jitter(mut self) -> Self {
        self.jitter_max_ms = (self.interval.as_millis() as u64 / 20).min(250);
        self
    }

    async fn tick(&mut self) {
        let jitter = Duration::from_millis(self.rng.u64(0..=self.jitter_max_ms));
        tokio::time::sleep_until(self.next + jitter).await;
        self.next += self.interval;
        let now = tokio::time::Instant::now();
        if self.next < now {
            self.next = now + self.interval;
        }
    }
}

struct Running {
    spec: HealthCheckSpec,
    task: JoinHandle<()>,
}

/// What a Metric check's credentials resolve to, looked up at each evaluation (a Secret in a
/// cluster, files in standalone mode), so that a rotated token is used at once.
pub type CredentialFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Credentials, Error>> + Send>>;
/// Looks up the credentials of one check's Prometheus source.
pub type CredentialSource =
    Arc<dyn Fn(&ObjectKey, &PrometheusSource) -> CredentialFuture + Send + Sync>;

/// Which checks a checker runs (H14: Metric checks once for the whole cluster).
#[derive(Clone)]
enum Runs {
    /// HTTP, HTTPS and TCP probes (the checkers in the resolver pods).
    Probes,
    /// Probes and Metric checks (standalone mode).
    ProbesAndMetrics(CredentialSource),
    /// Metric checks only (the operator's leader).
    Metrics(CredentialSource),
}

impl Runs {
    fn runs(&self, spec: &HealthCheckSpec) -> bool {
        let metric = spec.check_type == CheckType::Metric && spec.metric.is_some();
        // Peer checks are asked by every checker that probes (X4).
        let probe = ProbeSpec::from_check(spec).is_some()
            || (spec.check_type == CheckType::Peer && spec.peer.is_some());
        match self {
            Runs::Probes => probe,
            Runs::ProbesAndMetrics(_) => probe || metric,
            Runs::Metrics(_) => metric,
        }
    }
    fn credentials(&self) -> Option<&CredentialSource> {
        match self {
            Runs::Probes => None,
            Runs::ProbesAndMetrics(c) | Runs::Metrics(c) => Some(c),
        }
    }
}

/// Runs the probes of a set of checks. Dropping it stops them.
pub struct Checker {
    runs: Runs,
    name: String,
    zone: Option<String>,
    policy: Arc<TargetPolicy>,
    events: mpsc::Sender<CheckerEvent>,
    running: HashMap<ObjectKey, Running>,
    limits: TargetLimits,
    pub metrics: Arc<CheckerMetrics>,
    heartbeat: Option<JoinHandle<()>>,
    /// The peer clusters Peer checks ask (X1); none configured: every Peer check is
    /// unhealthy and says so.
    peers: peer::SharedPeers,
}

impl Checker {
    pub fn new(
        name: impl Into<String>,
        zone: Option<String>,
        policy: TargetPolicy,
        events: mpsc::Sender<CheckerEvent>,
    ) -> Self {
        Checker {
            runs: Runs::Probes,
            name: name.into(),
            zone,
            policy: Arc::new(policy),
            events,
            running: HashMap::new(),
            limits: Default::default(),
            metrics: Default::default(),
            heartbeat: None,
            peers: Default::default(),
        }
    }

    /// Asks these peer clusters for Peer checks (X4); its collector exports their key file
    /// reloads (X1) when some key is in a file.
    pub fn with_peers(mut self, peers: peer::SharedPeers) -> Self {
        if peers.has_key_files() {
            // Set once: a checker is given its peers once, before it is shared.
            let _ = self
                .metrics
                .peers
                .key_reloads
                .set(peers.key_reloads().clone());
        }
        self.peers = peers;
        self
    }

    /// Runs Metric checks too, with their credentials from `source` (standalone mode).
    pub fn with_metric_checks(mut self, source: CredentialSource) -> Self {
        self.runs = Runs::ProbesAndMetrics(source);
        self
    }

    /// Runs Metric checks only (the operator's leader, H14).
    pub fn metric_checks_only(mut self, source: CredentialSource) -> Self {
        self.runs = Runs::Metrics(source);
        self
    }

    /// Its metrics, for the registry of the process that runs it.
    pub fn collector(&self) -> CheckerCollector {
        CheckerCollector {
            checker: self.name.clone(),
            metrics: self.metrics.clone(),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Starts a heartbeat every `every`.
    pub fn start_heartbeat(&mut self, every: Duration) {
        let events = self.events.clone();
        let checker = self.name.clone();
        let span = tracing::info_span!("heartbeat", checker = %self.name);
        self.heartbeat = Some(tokio::spawn(
            async move {
                let mut tick = tokio::time::interval(every);
                loop {
                    tick.tick().await;
                    let event = CheckerEvent::Heartbeat {
                        checker: checker.clone(),
                        at: Timestamp::now(),
                    };
                    if events.send(event).await.is_err() {
                        return;
                    }
                }
            }
            .instrument(span),
        ));
    }

    /// Runs exactly the probe checks given: starts new ones, restarts changed ones, stops the
    /// others. Calculated checks have nothing to probe.
    pub fn sync<'a>(
        &mut self,
        checks: impl IntoIterator<Item = (&'a ObjectKey, &'a HealthCheckSpec)>,
    ) {
        let mut wanted: HashMap<ObjectKey, &HealthCheckSpec> = HashMap::new();
        for (key, spec) in checks {
            if self.runs.runs(spec) && !spec.disabled {
                wanted.insert(key.clone(), spec);
            }
        }
        self.running.retain(|key, running| {
            let keep = wanted.get(key).is_some_and(|spec| **spec == running.spec);
            if !keep {
                running.task.abort();
            }
            keep
        });
        for (key, spec) in wanted {
            if self.running.contains_key(&key) {
                continue;
            }
            let task = self.spawn(key.clone(), spec.clone());
            self.running.insert(
                key,
                Running {
                    spec: spec.clone(),
                    task,
                },
            );
        }
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    fn spawn(&self, key: ObjectKey, spec: HealthCheckSpec) -> JoinHandle<()> {
        let span = tracing::debug_span!("check", check = %key);
        let ctx = CheckTask {
            key,
            spec,
            checker: self.name.clone(),
            zone: self.zone.clone(),
            policy: self.policy.clone(),
            events: self.events.clone(),
            limits: self.limits.clone(),
            metrics: self.metrics.clone(),
            credentials: self.runs.credentials().cloned(),
            peers: self.peers.clone(),
        };
        tokio::spawn(ctx.run().instrument(span))
    }
}

impl Drop for Checker {
    fn drop(&mut self) {
        for r in self.running.values() {
            r.task.abort();
        }
        if let Some(h) = &self.heartbeat {
            h.abort();
        }
    }
}

struct CheckTask {
    key: ObjectKey,
    spec: HealthCheckSpec,
    checker: String,
    zone: Option<String>,
    policy: Arc<TargetPolicy>,
    events: mpsc::Sender<CheckerEvent>,
    limits: TargetLimits,
    metrics: Arc<CheckerMetrics>,
    credentials: Option<CredentialSource>,
    peers: peer::SharedPeers,
}

impl CheckTask {
    /// Counts one event for this check: 0 healthy, 1 unhealthy, 2 rejected, 3 flip.
    fn bump(&self, slot: usize) {
        let mut by_check = self
            .metrics
            .by_check
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        by_check.entry(self.key.clone()).or_default()[slot] += 1;
    }

    /// The task's loop. What runs only now and then (a probe) or only for some checks (Peer,
    /// Metric) is boxed: a future holds its largest state inline for its whole life, and a
    /// resolver holds one of these per HealthCheck.
    async fn run(self) {
        if let Some(target) = self.spec.peer.clone() {
            return Box::pin(self.run_peer(target)).await;
        }
        if let (Some(metric), Some(credentials)) =
            (self.spec.metric.clone(), self.credentials.clone())
        {
            return Box::pin(self.run_metric(metric, credentials)).await;
        }
        let Some(probe_spec) = ProbeSpec::from_check(&self.spec) else {
            return;
        };
        let interval = Duration::from_secs(u64::from(self.spec.request_interval_seconds.max(1)));
        let limit = {
            let mut limits = self.limits.lock().unwrap_or_else(|p| p.into_inner());
            limits
                .entry((probe_spec.address.clone(), probe_spec.port))
                .or_insert_with(|| Arc::new(Semaphore::new(PER_TARGET_CONCURRENCY)))
                .clone()
        };
        let mut state = Threshold::new(self.spec.failure_threshold);
        let mut reported: Option<(bool, bool)> = None; // (healthy, rejected) last sent
        // Jitter up to 5% of the interval (at most 250 ms) keeps phases from lining up again.
        let mut schedule = Schedule::new(&self.key, interval).with_jitter();
        loop {
            schedule.tick().await;
            let Ok(permit) = tokio::time::timeout(interval, limit.clone().acquire_owned()).await
            else {
                tracing::debug!("target busy: skipped one probe");
                continue;
            };
            let obs = Box::pin(probe(&probe_spec, &self.policy)).await;
            drop(permit);
            self.metrics.latency.record(1, obs.latency);
            let counter = if obs.rejected {
                &self.metrics.probes_rejected
            } else if obs.healthy {
                &self.metrics.probes_healthy
            } else {
                &self.metrics.probes_unhealthy
            };
            counter.fetch_add(1, Ordering::Relaxed);
            self.bump(if obs.rejected {
                2
            } else if obs.healthy {
                0
            } else {
                1
            });
            let healthy = if obs.rejected {
                false
            } else {
                if state.observe(obs.healthy) {
                    self.metrics.flips.fetch_add(1, Ordering::Relaxed);
                    self.bump(3);
                }
                state.healthy()
            };
            if reported != Some((healthy, obs.rejected)) {
                reported = Some((healthy, obs.rejected));
                let view = CheckerView {
                    checker: self.checker.clone(),
                    zone: self.zone.clone(),
                    healthy,
                    message: Some(obs.reason.clone()),
                    values: Vec::new(),
                };
                tracing::info!(check = %self.key, healthy, reason = %obs.reason, "checker view");
                if self
                    .events
                    .send(CheckerEvent::View {
                        check: self.key.clone(),
                        view,
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }
    }
}

impl CheckTask {
    /// A Metric check (H13): one query per interval; samples are a failure, an empty vector a
    /// success, no data what `insufficientDataHealthStatus` says (by default nothing: the view
    /// stays as it was). Thresholds (H5) count those observations. Every evaluation whose
    /// outcome reads differently is reported, so that status shows the last one (H14).
    async fn run_metric(self, metric: MetricCheck, credentials: CredentialSource) {
        let interval = Duration::from_secs(u64::from(self.spec.request_interval_seconds.max(1)));
        let connect_timeout = Duration::from_secs(u64::from(self.spec.connect_timeout_seconds()));
        let timeout = Duration::from_secs(u64::from(self.spec.response_timeout_seconds.max(1)));
        let insufficient = metric.insufficient_data_health_status.unwrap_or_default();
        let mut state = Threshold::new(self.spec.failure_threshold);
        let mut reported: Option<(bool, String)> = None;
        let mut schedule = Schedule::new(&self.key, interval);
        loop {
            schedule.tick().await;
            let started = std::time::Instant::now();
            let evaluation = match (credentials)(&self.key, &metric.prometheus).await {
                Err(why) => Evaluation::NoData(why.to_string()),
                Ok(creds) => match Endpoint::parse(&metric.prometheus.url, creds) {
                    Err(why) => Evaluation::NoData(why.to_string()),
                    Ok(endpoint) => {
                        metric::evaluate(
                            &endpoint,
                            &metric.query,
                            connect_timeout,
                            timeout,
                            &self.policy,
                        )
                        .await
                    }
                },
            };
            self.metrics.latency.record(1, started.elapsed());
            let observation = evaluation.state().observation(insufficient);
            let (counter, slot) = match observation {
                Some(true) => (&self.metrics.probes_healthy, 0),
                Some(false) => (&self.metrics.probes_unhealthy, 1),
                None => (&self.metrics.probes_rejected, 2),
            };
            counter.fetch_add(1, Ordering::Relaxed);
            self.bump(slot);
            if let Some(ok) = observation
                && state.observe(ok)
            {
                self.metrics.flips.fetch_add(1, Ordering::Relaxed);
                self.bump(3);
            }
            let message = format!("{}: {}", evaluation.state(), evaluation.describe());
            let healthy = state.healthy();
            if reported.as_ref() != Some(&(healthy, message.clone())) {
                tracing::info!(check = %self.key, healthy, evaluation = %message, "metric check evaluated");
                reported = Some((healthy, message.clone()));
                let view = CheckerView {
                    checker: self.checker.clone(),
                    zone: self.zone.clone(),
                    healthy,
                    message: Some(message),
                    values: Vec::new(),
                };
                let event = CheckerEvent::View {
                    check: self.key.clone(),
                    view,
                };
                if self.events.send(event).await.is_err() {
                    return;
                }
            }
        }
    }
}

impl CheckTask {
    /// A Peer check (X4, X5): one exchange per interval, thresholded like a probe (H5). The
    /// view carries the values last heard, kept while the peer fails (for a last resort, X3),
    /// and is reported whenever its health, its values or the kind of failure change.
    async fn run_peer(self, target: healthroute_api::PeerTarget) {
        let interval = Duration::from_secs(u64::from(self.spec.request_interval_seconds.max(1)));
        let timeout = Duration::from_secs(u64::from(self.spec.response_timeout_seconds.max(1)));
        let mut state = Threshold::new(self.spec.failure_threshold);
        let mut values: Vec<PeerValue> = Vec::new();
        let mut reported: Option<(bool, Vec<PeerValue>, &'static str)> = None;
        let mut path = peer::PathState::default();
        // A peer source has no value until its first exchange: ask within a second of
        // starting rather than at the check's phase, which may be an interval away.
        let mut schedule = Schedule::new(&self.key, interval).first_within(Duration::from_secs(1));
        loop {
            schedule.tick().await;
            let obs = match (self.peers.get(&target.cluster), target.group()) {
                (Some(p), Some(group)) => {
                    let (obs, took) =
                        peer::observe_timed(p, &group.namespace, &group.name, timeout).await;
                    self.metrics.peers.record(&p.name, obs.result, took);
                    self.metrics.latency.record(1, took);
                    obs
                }
                (None, _) => peer::PeerObservation {
                    values: Vec::new(),
                    healthy: false,
                    message: format!(
                        "peer cluster {} is not configured on this checker",
                        target.cluster
                    ),
                    result: "not_configured",
                },
                (_, None) => peer::PeerObservation {
                    values: Vec::new(),
                    healthy: false,
                    message: format!("{:?} is not namespace/name", target.record_group),
                    result: "not_configured",
                },
            };
            let (counter, slot) = if obs.healthy {
                (&self.metrics.probes_healthy, 0)
            } else {
                (&self.metrics.probes_unhealthy, 1)
            };
            counter.fetch_add(1, Ordering::Relaxed);
            self.bump(slot);
            if path.observe(&mut state, &obs) {
                self.metrics.flips.fetch_add(1, Ordering::Relaxed);
                self.bump(3);
            }
            if obs.healthy {
                values = obs.values;
            }
            let healthy = state.healthy();
            let now_reported = (healthy, values.clone(), obs.result);
            if reported.as_ref() != Some(&now_reported) {
                tracing::info!(check = %self.key, healthy, peer = %target.cluster, result = obs.result, "{}", obs.message);
                reported = Some(now_reported);
                let view = CheckerView {
                    checker: self.checker.clone(),
                    zone: self.zone.clone(),
                    healthy,
                    message: Some(obs.message),
                    values: values.clone(),
                };
                let event = CheckerEvent::View {
                    check: self.key.clone(),
                    view,
                };
                if self.events.send(event).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Reads a Metric check's status (H14) back from its evaluator's view: the view's message is
/// `STATE: detail`, as [`CheckTask::run_metric`] writes it.
pub fn metric_status(
    view: &CheckerView,
    at: Option<jiff::Timestamp>,
) -> healthroute_api::MetricStatus {
    let message = view.message.as_deref().unwrap_or("");
    // The evaluator wrote the message from a `MetricState`; text that is not one (never
    // written) reads as no data, with the whole message as the reason.
    let (state, detail) = message
        .split_once(": ")
        .and_then(|(state, detail)| Some((state.parse::<MetricState>().ok()?, detail)))
        .unwrap_or((MetricState::InsufficientData, message));
    let no_data = state == MetricState::InsufficientData;
    healthroute_api::MetricStatus {
        state,
        value: (!no_data).then(|| detail.to_owned()),
        error: no_data.then(|| detail.to_owned()),
        last_evaluated: at.map(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-H5: flips after exactly N consecutive failures, and back after N successes; a
    // success in between resets the count.
    #[test]
    fn threshold_flips_after_exactly_n() {
        for n in 1..=10 {
            let mut t = Threshold::new(n);
            for i in 1..n {
                assert!(!t.observe(false), "n={n}: flipped after {i}");
            }
            assert!(t.observe(false), "n={n}: flips at {n}");
            assert!(!t.healthy());
            for _ in 1..n {
                assert!(!t.observe(true));
            }
            assert!(t.observe(true));
            assert!(t.healthy());
        }
        let mut t = Threshold::new(3);
        t.observe(false);
        t.observe(false);
        t.observe(true);
        assert!(
            !t.observe(false) && !t.observe(false),
            "the success reset the streak"
        );
        assert!(t.observe(false));
    }

    // SEM-H6: healthy before any observation, and until enough failures.
    #[test]
    fn threshold_starts_healthy() {
        let mut t = Threshold::new(3);
        assert!(t.healthy());
        t.observe(false);
        assert!(t.healthy());
    }

    // 10,000 checks at one interval start spread over it: no 100 ms slot holds more than a
    // few times its fair share.
    #[test]
    fn phases_spread_evenly() {
        let interval = Duration::from_secs(10);
        let mut slots = [0u32; 100];
        for i in 0..10_000 {
            let p = phase(
                &ObjectKey::new(format!("ns{}", i % 7), format!("check-{i}")),
                interval,
            );
            slots[(p.as_millis() / 100) as usize] += 1;
        }
        let max = *slots.iter().max().unwrap_or(&0);
        let min = *slots.iter().min().unwrap_or(&0);
        assert!(
            max < 150 && min > 50,
            "fair share is 100 per slot: min {min}, max {max}"
        );
    }

    // A check's task holds its probe only while the probe runs: a resolver runs one task per
    // HealthCheck, and between probes (nearly all the time) each held the largest probe's
    // state inline (HTTPS: a TLS handshake), 7.8 KB a task in a release build by heaptrack.
    #[test]
    fn a_check_task_between_probes_is_small() {
        let (events, _rx) = mpsc::channel(1);
        let spec: HealthCheckSpec = serde_json::from_value(serde_json::json!(
            {"type": "HTTPS", "target": {"address": "127.0.0.1", "port": 1}}))
        .expect("valid");
        let task = CheckTask {
            key: ObjectKey::new("shop", "hc"),
            spec,
            checker: "a".into(),
            zone: None,
            policy: Arc::new(TargetPolicy::cluster_default()),
            events,
            limits: Default::default(),
            metrics: Default::default(),
            credentials: None,
            peers: Default::default(),
        };
        // 7,656 bytes in a debug build with the probe inline, 1,816 without (most of it the
        // task's own spec and the loop's timers).
        let run = task.run();
        assert!(
            std::mem::size_of_val(&run) < 2048,
            "{} bytes",
            std::mem::size_of_val(&run)
        );
    }
}
