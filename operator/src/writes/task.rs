//! The writer task: while the replica leads, sends what the queue holds, up to N writes at
//! once and at most `qps` a second on average (`burst` at once), each within a timeout, and
//! settles each outcome with the queue and the metrics of what it wrote (statuses, Peer
//! checks, engine shifts).
//!
//! The pace is the writer's share of the API server. A term's first table makes every
//! group's status due at once, and one status write costs the API server about 5 ms of CPU
//! (Kubernetes 1.36 on this machine, `bench/status_cost.py`): unpaced, 10,000 of them went out
//! at about 200 a second, and an EndpointSlice change made meanwhile waited for the API server
//! behind them (p99 152 ms from the patch to both resolvers answering, against 28 ms in steady
//! state; docs/benchmarks.md, #44). The default is kube-scheduler's own client share, 50 a
//! second and 100 at once. The table's writes are not paced: they are the publisher's, beside
//! this task (P7); a status write does not start while one of them is under way
//! ([`TableWrites`]), for at most [`TABLE_FIRST`], and while they follow each other (one in
//! the last [`CHANGING`]) the writer keeps to [`CHANGING_SHARE`] of its pace, one write at a
//! time.

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
    /// Writes a second on average; 0: unpaced.
    pub qps: f64,
    /// Writes that may go at once after a quiet spell (at least 1).
    pub burst: u32,
    /// This replica's name, on the Events it records.
    pub identity: String,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            concurrency: 8,
            timeout: Duration::from_secs(10),
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
            identity: FIELD_MANAGER.into(),
        }
    }
}

/// The writer's pace unless told otherwise, kube-scheduler's client default: 10,000 first
/// statuses in under 4 minutes, 100,000 in under 34, about a quarter of one core of the API
/// server's, while a change made meanwhile is served as fast as in steady state.
pub const DEFAULT_QPS: f64 = 50.0;
/// Writes that may go at once: a burst of changes (a zone's endpoints, a rollout) is written
/// without waiting for the pace.
pub const DEFAULT_BURST: u32 = 100;

/// The longest a status write waits for a table write under way: a table that is written
/// without a pause (changes arriving faster than it is written) does not starve the statuses.
pub const TABLE_FIRST: Duration = Duration::from_secs(1);

/// The table is changing while the publisher wrote a change this recently: the writer then
/// goes at [`CHANGING_SHARE`] of its pace, one write at a time.
pub const CHANGING: Duration = Duration::from_secs(2);

/// The writer's share of its pace while the table is changing. A status write costs the API
/// server about as much as the table's write of a change (5 ms of CPU here): at 50 a second a
/// 10,000-group first start's statuses took a quarter of this machine's two cores, and the
/// EndpointSlice flips made meanwhile answered with a p99 of 86 ms against 47 ms in steady
/// state; at a fifth of it, in 33 ms (three runs' flips pooled; #44, docs/benchmarks.md). A
/// status backlog drains at the whole pace once the table is quiet for [`CHANGING`].
pub const CHANGING_SHARE: f64 = 0.2;

/// The writer's pace while the table is changing, for a pace of `qps`.
fn changing_qps(qps: f64) -> f64 {
    qps * CHANGING_SHARE
}

/// What the publisher does, as the writer sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Table {
    /// A change is being written, since then.
    writing: Option<Instant>,
    /// The last change was written (or failed) then.
    written: Option<Instant>,
}

impl Table {
    /// Whether a status write should wait for the table: `None` when it may go, else until
    /// when at the latest (`TABLE_FIRST` after the table's write started).
    fn first(&self, now: Instant) -> Option<Instant> {
        let until = self.writing? + TABLE_FIRST;
        (now < until).then_some(until)
    }

    /// Whether the table is changing: a change under way or written in the last `CHANGING`.
    fn changing(&self, now: Instant) -> bool {
        self.writing.is_some()
            || self
                .written
                .is_some_and(|at| now.saturating_duration_since(at) < CHANGING)
    }
}

/// Whether the publisher is writing a change, and when it last wrote one: the writer starts
/// no status write meanwhile, and keeps to a fifth of its pace while changes follow each other,
/// so that the API server serves the table's writes, and the changes they follow, first (P7).
#[derive(Debug, Clone)]
pub struct TableWrites(watch::Sender<Table>);

impl Default for TableWrites {
    fn default() -> Self {
        TableWrites(watch::channel(Table::default()).0)
    }
}

impl TableWrites {
    /// The publisher starts writing a change.
    pub fn started(&self) {
        self.0
            .send_modify(|table| table.writing = Some(Instant::now()));
    }

    /// The publisher's write is done (written, failed or given up).
    pub fn ended(&self) {
        self.0.send_modify(|table| {
            table.writing = None;
            table.written = Some(Instant::now());
        });
    }

    /// What the writer watches.
    fn watch(&self) -> watch::Receiver<Table> {
        self.0.subscribe()
    }
}

/// A token bucket: `qps` tokens a second, up to `burst` held; a write spends one. While the
/// table is changing, [`CHANGING_SHARE`] of `qps`, and at most one token held.
#[derive(Debug)]
struct Pace {
    qps: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl Pace {
    fn new(qps: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Pace {
            qps,
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// `None` when a write may go now; else when the next token comes.
    fn wait(&mut self, now: Instant, changing: bool) -> Option<Instant> {
        if self.qps <= 0.0 {
            return None;
        }
        let (qps, burst) = if changing {
            (changing_qps(self.qps), 1.0)
        } else {
            (self.qps, self.burst)
        };
        let earned = now.saturating_duration_since(self.at).as_secs_f64() * qps;
        self.tokens = (self.tokens + earned).min(burst);
        self.at = now;
        if self.tokens >= 1.0 {
            None
        } else {
            Some(now + Duration::from_secs_f64((1.0 - self.tokens) / qps))
        }
    }

    /// A write went.
    fn spend(&mut self) {
        if self.qps > 0.0 {
            self.tokens -= 1.0;
        }
    }
}

/// How often the writer says how far a long status backlog is.
const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// The statuses' progress, in the log: a backlog that outlasts [`PROGRESS_EVERY`] (a term's
/// first statuses, at 100,000 groups about 17 minutes) gets a line every [`PROGRESS_EVERY`]
/// with what is left and about how long it takes at the pace, and one when it is caught up.
/// The gauge `healthroute_operator_status_backlog` says the same to a dashboard (P7).
#[derive(Debug, Default)]
struct Progress {
    /// The backlog is not empty since then, and was this large at its largest.
    since: Option<(Instant, usize)>,
    /// The last line said.
    told: Option<Instant>,
}

impl Progress {
    /// The line to log, if one is due, for `backlog` statuses waiting at `now`, written at
    /// `qps` (a fifth of it while the table is `changing`).
    fn observe(
        &mut self,
        backlog: usize,
        qps: f64,
        changing: bool,
        now: Instant,
    ) -> Option<String> {
        let Some((since, largest)) = self.since.as_mut() else {
            if backlog > 0 {
                self.since = Some((now, backlog));
            }
            return None;
        };
        *largest = (*largest).max(backlog);
        if backlog == 0 {
            let (since, largest) = (*since, *largest);
            self.since = None;
            return self.told.take().map(|_| {
                format!(
                    "statuses caught up: {largest} written in {} s",
                    now.duration_since(since).as_secs()
                )
            });
        }
        let last = self.told.unwrap_or(*since);
        if now.duration_since(last) < PROGRESS_EVERY {
            return None;
        }
        self.told = Some(now);
        let left = match (qps > 0.0, changing) {
            (false, _) => String::new(),
            (true, false) => format!(
                ", about {} s at {qps} a second",
                (backlog as f64 / qps).ceil()
            ),
            (true, true) => {
                let slow = changing_qps(qps);
                format!(", {slow} a second while the table changes, {qps} once it is quiet")
            }
        };
        Some(format!(
            "statuses still to write: {backlog}{left}; answers do not wait for them"
        ))
    }
}

/// Writes what `queue` holds while `leader` is true, until `shutdown` turns true, never
/// starting one while `table` is being written (for at most [`TABLE_FIRST`]), and at a fifth
/// of the pace while it changes.
pub async fn run(
    client: Client,
    queue: WriteQueue,
    mut leader: watch::Receiver<bool>,
    table: TableWrites,
    metrics: WriteMetrics,
    config: WriterConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut table = table.watch();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(config.identity.clone()),
        },
    );
    let mut errors = ErrorLog::default();
    let mut in_flight = FuturesUnordered::new();
    let mut pace = Pace::new(config.qps, config.burst, Instant::now());
    let mut progress = Progress::default();
    loop {
        let is_leader = *leader.borrow_and_update();
        let publishing = *table.borrow_and_update();
        let mut paced = None;
        while is_leader && in_flight.len() < config.concurrency.max(1) {
            let now = Instant::now();
            if let Some(until) = publishing.first(now) {
                paced = Some(until);
                break;
            }
            if let Some(at) = pace.wait(now, publishing.changing(now)) {
                paced = Some(at);
                break;
            }
            let Some(write) = queue.take_ready(now) else {
                break;
            };
            pace.spend();
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
        let statuses = set_backlogs(&metrics, &queue);
        let now = Instant::now();
        if let Some(line) = progress.observe(statuses, config.qps, publishing.changing(now), now) {
            tracing::info!("{line}");
        }
        // Held by the pace or the table: the next token, or the table's write ended (a change
        // of `table`) or waited for long enough, is the next chance, whatever else is due.
        let retry_at = match (paced, queue.next_delayed()) {
            (Some(at), _) => Some(at),
            (None, delayed) => delayed,
        };
        tokio::select! {
            Some((write, result)) = in_flight.next() => {
                let outcome = settle(&write, result, &metrics, &mut errors);
                queue.finish(write, &outcome, Instant::now());
            }
            _ = queue.pushed() => {}
            _ = async { match retry_at { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {}
            Ok(()) = leader.changed() => {}
            Ok(()) = table.changed() => {}
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

/// Each kind's backlog, in its component's gauge; returns the statuses'.
fn set_backlogs(metrics: &WriteMetrics, queue: &WriteQueue) -> usize {
    let status = WriteKind::Status(crate::status::StatusKind::RecordGroup);
    let statuses = queue.backlog_of(status);
    metrics.status.set_backlog(statuses);
    let pending = |kind| queue.backlog_of(kind) as u64;
    StatusMetrics::set(&metrics.peer_checks.pending, pending(WriteKind::PeerCheck));
    StatusMetrics::set(
        &metrics.engine_shifts.pending,
        pending(WriteKind::EngineShift),
    );
    statuses
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

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-P7: the writer's pace: a burst goes at once, then one write per 1/qps, and a quiet
    // spell earns the burst back, never more.
    #[test]
    fn the_pace_lets_a_burst_go_then_one_write_per_interval() {
        let t0 = Instant::now();
        let mut pace = Pace::new(10.0, 3, t0);
        for _ in 0..3 {
            assert_eq!(pace.wait(t0, false), None);
            pace.spend();
        }
        let next = pace.wait(t0, false).expect("the burst is spent");
        assert_eq!(next, t0 + Duration::from_millis(100));
        assert_eq!(pace.wait(next, false), None);
        pace.spend();
        let later = next + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(pace.wait(later, false), None);
            pace.spend();
        }
        assert!(
            pace.wait(later, false).is_some(),
            "a quiet minute earns the burst, not 600"
        );
        let mut unpaced = Pace::new(0.0, 1, t0);
        for _ in 0..1000 {
            assert_eq!(unpaced.wait(t0, false), None);
            unpaced.spend();
        }
    }

    // SEM-P7: a status write does not start while the table is being written, and waits for
    // it at most TABLE_FIRST.
    #[test]
    fn a_status_write_waits_for_the_table_a_bounded_time() {
        let t0 = Instant::now();
        let quiet = Table::default();
        assert_eq!(quiet.first(t0), None, "no table write: go");
        let ms = Duration::from_millis;
        let writing = Table {
            writing: Some(t0),
            written: None,
        };
        assert_eq!(writing.first(t0 + ms(10)), Some(t0 + TABLE_FIRST));
        assert_eq!(writing.first(t0 + TABLE_FIRST), None, "waited long enough");
        let table = TableWrites::default();
        let seen = table.watch();
        table.started();
        assert!(seen.borrow().writing.is_some());
        table.ended();
        let now = *seen.borrow();
        assert_eq!(now.writing, None);
        assert!(now.written.is_some());
    }

    // SEM-P7: while the table is changing (a change under way or written in the last
    // CHANGING), statuses go at a fifth of the pace, one at a time; once it is quiet, at the
    // whole pace, and a quiet spell earns the burst back.
    #[test]
    fn statuses_slow_down_while_the_table_changes() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let changed = Table {
            writing: None,
            written: Some(t0),
        };
        assert!(changed.changing(t0 + ms(1999)));
        assert!(!changed.changing(t0 + CHANGING));
        let under_way = Table {
            writing: Some(t0),
            written: None,
        };
        assert!(under_way.changing(t0 + Duration::from_secs(60)));

        let mut pace = Pace::new(50.0, 100, t0);
        assert_eq!(pace.wait(t0, true), None, "one token held");
        pace.spend();
        // 50 a second is one every 20 ms; a fifth of it, one every 100 ms.
        assert_eq!(pace.wait(t0, true), Some(t0 + ms(100)));
        assert_eq!(pace.wait(t0 + ms(100), true), None);
        pace.spend();
        // Quiet: the whole pace at once.
        assert_eq!(pace.wait(t0 + ms(100), false), Some(t0 + ms(120)));
        let mut went = 0;
        let later = t0 + Duration::from_secs(10);
        while pace.wait(later, false).is_none() {
            pace.spend();
            went += 1;
        }
        assert_eq!(went, 100, "the burst, earned back");
        // A change after another quiet spell: the burst held does not go at once.
        let again = later + Duration::from_secs(10);
        assert_eq!(pace.wait(again, false), None, "the burst is back");
        assert_eq!(pace.wait(again, true), None);
        pace.spend();
        assert_eq!(pace.wait(again, true), Some(again + ms(100)));
    }

    // SEM-P7: a long status backlog says how far it is every 10 s and when it is caught up;
    // a short one says nothing.
    #[test]
    fn a_long_backlog_reports_its_progress() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut short = Progress::default();
        assert_eq!(short.observe(300, 100.0, false, at(0)), None);
        assert_eq!(
            short.observe(0, 100.0, false, at(3)),
            None,
            "done before a line"
        );
        let mut long = Progress::default();
        assert_eq!(long.observe(0, 100.0, false, at(0)), None);
        assert_eq!(long.observe(10_000, 100.0, false, at(1)), None);
        assert_eq!(long.observe(9_500, 100.0, false, at(10)), None);
        assert_eq!(
            long.observe(9_000, 100.0, false, at(11)).as_deref(),
            Some(
                "statuses still to write: 9000, about 90 s at 100 a second; answers do not wait for them"
            )
        );
        assert_eq!(long.observe(8_000, 100.0, false, at(20)), None);
        assert_eq!(
            long.observe(7_000, 100.0, true, at(21)).as_deref(),
            Some(
                "statuses still to write: 7000, 20 a second while the table changes, 100 once it is quiet; answers do not wait for them"
            )
        );
        assert_eq!(
            long.observe(0, 100.0, false, at(101)).as_deref(),
            Some("statuses caught up: 10000 written in 100 s")
        );
        assert_eq!(long.observe(0, 100.0, false, at(200)), None);
    }
}
