//! The status writer: applies the newest status of each object, and its Events, beside the
//! control loop and never inside it (linkerd2's `k8s/status` shape).
//!
//! ```text
//!  Ledger (control loop) ──push(update)──▶ StatusQueue: newest update per object (coalesced;
//!                                             │ a newer one waits while one is in flight)
//!                                             │ ready (FIFO) / delayed (backoff after a failure)
//!                                             ▼
//!  writer task (leader only): up to N patches in flight, each with a timeout
//!       ok ──▶ its Events ──▶ next         failed ──▶ back in the queue after a backoff,
//!                                                     unless a newer update replaced it
//! ```
//!
//! A backlog, a slow API server or failing writes delay only statuses: the table publisher is
//! a separate task (SEMANTICS P7). Only the newest status of an object is ever sent. The
//! status is typed up to here; [`write`] turns it into the body of a server-side apply.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, Resource};
use serde_json::json;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tracing::Instrument;

use super::events::{Notice, Related};
use super::kind::{Status, StatusKey};
use crate::FIELD_MANAGER;
use crate::error::Error;
use crate::metrics::StatusMetrics;
use healthroute_admin::retry::{Backoff, ErrorLog};
use healthroute_api::RecordGroup;
use healthroute_compiler::ObjectKey;

/// The newest status of one object, with the Events its transition deserves.
#[derive(Debug, Clone)]
pub struct StatusUpdate {
    pub key: ObjectKey,
    /// Applied with server-side apply under [`FIELD_MANAGER`].
    pub status: Status,
    /// Recorded after the status is written.
    pub events: Vec<Notice>,
    pub reference: ObjectReference,
}

impl StatusUpdate {
    pub fn status_key(&self) -> StatusKey {
        (self.status.kind(), self.key.clone())
    }
}

#[derive(Default)]
struct QueueState {
    pending: HashMap<StatusKey, StatusUpdate>,
    /// Keys to write, oldest first; a key may be stale (written or delayed since).
    ready: VecDeque<StatusKey>,
    /// Keys waiting out a backoff, by when they may go again.
    delayed: BinaryHeap<Reverse<(Instant, u64, StatusKey)>>,
    delayed_until: HashMap<StatusKey, Instant>,
    in_flight: HashSet<StatusKey>,
    backoff: HashMap<StatusKey, Backoff>,
    /// Written since the ledger last asked ([`StatusQueue::take_written`]) and not seen by the
    /// watch since ([`StatusQueue::seen`]): their write may not be back yet.
    written: HashSet<StatusKey>,
    seq: u64,
}

impl QueueState {
    /// Once nothing waits and nothing is in flight, the maps give back the room a burst made
    /// them grow to (a first start queues every object's status: at 10,000 groups the pending
    /// map alone held megabytes, empty, for as long as the process ran). Small maps are kept,
    /// so that single writes do not shrink and grow them each time.
    fn shrink_when_idle(&mut self) {
        const KEPT: usize = 1024;
        let idle = self.pending.is_empty() && self.in_flight.is_empty() && self.delayed.is_empty();
        if idle && self.pending.capacity() + self.ready.capacity() > 2 * KEPT {
            *self = QueueState {
                backoff: std::mem::take(&mut self.backoff),
                written: std::mem::take(&mut self.written),
                seq: self.seq,
                ..Default::default()
            };
        }
    }
}

/// The queue between the control loop and the writer: cheap to push to, never blocks.
#[derive(Clone, Default)]
pub struct StatusQueue {
    state: Arc<Mutex<QueueState>>,
    notify: Arc<Notify>,
}

impl StatusQueue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A panic while holding the lock would leave plain data behind; keep using it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `update`, replacing any older update of the same object not yet sent: its
    /// status, not its Events, which go out with the newer one (a transition's Event is not
    /// lost because the status moved on before it was written).
    pub fn push(&self, mut update: StatusUpdate) {
        let key = update.status_key();
        let mut s = self.lock();
        if let Some(older) = s.pending.get_mut(&key)
            && !older.events.is_empty()
        {
            let mut events = std::mem::take(&mut older.events);
            events.append(&mut update.events);
            update.events = events;
        }
        let fresh = s.pending.insert(key.clone(), update).is_none();
        if fresh && !s.in_flight.contains(&key) && !s.delayed_until.contains_key(&key) {
            s.ready.push_back(key);
        }
        drop(s);
        self.notify.notify_one();
    }

    /// Drops everything not yet sent (leadership lost: the next leader writes its own).
    pub fn clear(&self) {
        let mut s = self.lock();
        let in_flight = std::mem::take(&mut s.in_flight);
        *s = QueueState {
            in_flight,
            ..Default::default()
        };
    }

    /// Objects with a status waiting to be written (sent or not).
    pub fn backlog(&self) -> usize {
        let s = self.lock();
        s.pending.len() + s.in_flight.len()
    }

    /// Whether a status of `key` waits to be written or is being written: a newer one would
    /// replace it, and the object's watched status says nothing yet about it.
    pub fn holds(&self, key: &StatusKey) -> bool {
        let s = self.lock();
        s.pending.contains_key(key) || s.in_flight.contains(key)
    }

    /// The objects whose status was written since the last call and that no watch event
    /// showed since. Their watched objects may not show the write yet: a write completes
    /// before its watch event arrives, by milliseconds, or by seconds behind a first start's
    /// burst.
    pub fn take_written(&self) -> HashSet<StatusKey> {
        std::mem::take(&mut self.lock().written)
    }

    /// The watch showed the object: what it shows is at least as new as any write finished.
    pub fn seen(&self, key: &StatusKey) {
        let mut s = self.lock();
        if !s.written.is_empty() {
            s.written.remove(key);
        }
    }

    /// The next update that may be sent now, marked in flight.
    pub(super) fn take_ready(&self, now: Instant) -> Option<StatusUpdate> {
        let mut s = self.lock();
        while let Some(Reverse((at, _, _))) = s.delayed.peek()
            && *at <= now
        {
            let Some(Reverse((at, _, key))) = s.delayed.pop() else {
                break;
            };
            if s.delayed_until.get(&key) == Some(&at) {
                s.delayed_until.remove(&key);
                s.ready.push_back(key);
            }
        }
        while let Some(key) = s.ready.pop_front() {
            if s.in_flight.contains(&key) || s.delayed_until.contains_key(&key) {
                continue;
            }
            if let Some(update) = s.pending.remove(&key) {
                s.in_flight.insert(key);
                return Some(update);
            }
        }
        None
    }

    /// When the earliest delayed update may go.
    fn next_delayed(&self) -> Option<Instant> {
        self.lock().delayed.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Settles a write: on success the object's backoff resets; on a failure worth retrying
    /// the update goes back (unless a newer one replaced it) after the object's next backoff.
    pub(super) fn finish(&self, update: StatusUpdate, outcome: &WriteOutcome, now: Instant) {
        let key = update.status_key();
        let mut s = self.lock();
        if !s.in_flight.remove(&key) {
            return; // cleared meanwhile: this term is over
        }
        match outcome {
            WriteOutcome::Written | WriteOutcome::Dropped => {
                s.backoff.remove(&key);
                if matches!(outcome, WriteOutcome::Written) {
                    s.written.insert(key.clone());
                }
                if s.pending.contains_key(&key) {
                    s.ready.push_back(key);
                }
                s.shrink_when_idle();
            }
            WriteOutcome::Retry => {
                let delay = s
                    .backoff
                    .entry(key.clone())
                    .or_insert_with(|| {
                        Backoff::new(Duration::from_millis(200), Duration::from_secs(30))
                    })
                    .next_delay();
                // A newer status replaces this one; its Events still go out, first.
                match s.pending.get_mut(&key) {
                    Some(newer) => {
                        let mut events = update.events;
                        events.append(&mut newer.events);
                        newer.events = events;
                    }
                    None => {
                        s.pending.insert(key.clone(), update);
                    }
                }
                let at = now + delay;
                s.seq += 1;
                let seq = s.seq;
                s.delayed_until.insert(key.clone(), at);
                s.delayed.push(Reverse((at, seq, key)));
            }
        }
    }
}

/// How the writer runs.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Patches in flight at once.
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

pub(super) enum WriteOutcome {
    Written,
    /// Not worth retrying (the object is gone, or the server refuses the body).
    Dropped,
    Retry,
}

/// Writes what `queue` holds while `leader` is true, until `shutdown` turns true.
pub async fn run(
    client: Client,
    queue: StatusQueue,
    mut leader: watch::Receiver<bool>,
    metrics: Arc<StatusMetrics>,
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
            let Some(update) = queue.take_ready(Instant::now()) else {
                break;
            };
            let (client, recorder) = (client.clone(), recorder.clone());
            let timeout = config.timeout;
            let span = tracing::debug_span!("status_patch", kind = %update.status.kind(), object = %update.key);
            in_flight.push(
                async move {
                    let result = write(&client, &recorder, &update, timeout).await;
                    (update, result)
                }
                .instrument(span),
            );
        }
        metrics.set_backlog(queue.backlog());
        let retry_at = queue.next_delayed();
        tokio::select! {
            Some((update, result)) = in_flight.next() => {
                let outcome = match result {
                    Ok(events) => {
                        StatusMetrics::add(&metrics.writes, 1);
                        StatusMetrics::add(&metrics.events_recorded, events);
                        WriteOutcome::Written
                    }
                    Err(e) => {
                        StatusMetrics::add(&metrics.write_errors, 1);
                        let retry = worth_retrying(&e);
                        let kind = update.status.kind();
                        let what = format!("{kind}: {e}");
                        if errors.should_log(&what) {
                            tracing::warn!(%kind, object = %update.key, error = %e,
                                retried = retry, "status write failed (logged once a minute per error)");
                        }
                        if retry { WriteOutcome::Retry } else { WriteOutcome::Dropped }
                    }
                };
                queue.finish(update, &outcome, Instant::now());
            }
            _ = queue.notify.notified() => {}
            _ = async { match retry_at { Some(t) => tokio::time::sleep_until(t).await, None => std::future::pending().await } } => {}
            Ok(()) = leader.changed() => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Whether a failed write is worth trying again.
fn worth_retrying(error: &Error) -> bool {
    match error {
        // Gone (404) or refused as invalid (400, 422): the next status will say more.
        Error::Api(kube::Error::Api(s)) => !matches!(s.code, 400 | 404 | 422),
        // The same status would fail the same way.
        Error::EncodeStatus(_) => false,
        _ => true,
    }
}

/// Applies one status, then records its Events; returns how many Events were recorded.
async fn write(
    client: &Client,
    recorder: &Recorder,
    update: &StatusUpdate,
    timeout: Duration,
) -> Result<u64, Error> {
    let resource = update.status.kind().api_resource();
    let patch = json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "status": update.status.to_json().map_err(Error::EncodeStatus)?,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // The server answers with the whole object, which the watch brings anyway: it is read as
    // text and dropped, not parsed (`Api::patch_status` would build a tree of the object,
    // managed fields included, thousands of small blocks per write that a first start's
    // 10,000 writes left scattered through the heap).
    let url = DynamicObject::url_path(&resource, Some(&update.key.namespace));
    let request = kube::core::Request::new(url)
        .patch_subresource("status", &update.key.name, &params, &Patch::Apply(patch))
        .map_err(|e| Error::Api(kube::Error::BuildRequest(e)))?;
    tokio::time::timeout(timeout, client.request_text(request))
        .await
        .map_err(|_| Error::Timeout {
            what: "status patch".into(),
            after: timeout,
        })??;
    let mut recorded = 0;
    for n in &update.events {
        let event = Event {
            type_: if n.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: n.reason.into(),
            note: Some(n.note.clone()),
            action: n.action.into(),
            secondary: n.related.as_ref().map(|r| related(&update.reference, r)),
        };
        match tokio::time::timeout(timeout, recorder.publish(&event, &update.reference)).await {
            Ok(Ok(())) => recorded += 1,
            Ok(Err(e)) => tracing::debug!(error = %e, "event not recorded"),
            Err(_) => tracing::debug!("event not recorded in time"),
        }
    }
    Ok(recorded)
}

/// The `related` reference of an Event: a record of the group (the group, with the record's
/// field path), a RecordGroup of the object's namespace, or a zone of a ZonalAutoshift (the
/// object, with the zone's field path).
fn related(regarding: &ObjectReference, what: &Related) -> ObjectReference {
    match what {
        Related::Record(id) => ObjectReference {
            field_path: Some(format!("spec.records{{{id}}}")),
            ..regarding.clone()
        },
        Related::Zone(zone) => ObjectReference {
            field_path: Some(format!("status.zones{{{zone}}}")),
            ..regarding.clone()
        },
        Related::Group(name) => ObjectReference {
            api_version: Some(RecordGroup::api_version(&()).into_owned()),
            kind: Some(RecordGroup::kind(&()).into_owned()),
            name: Some(name.clone()),
            namespace: regarding.namespace.clone(),
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `n`th status of group `name` (told apart by its `servedGeneration`).
    fn update(name: &str, n: u64) -> StatusUpdate {
        StatusUpdate {
            key: ObjectKey::new("shop", name),
            status: Status::RecordGroup(healthroute_api::RecordGroupStatus {
                served_generation: Some(n),
                ..Default::default()
            }),
            events: Vec::new(),
            reference: ObjectReference::default(),
        }
    }

    fn n(update: StatusUpdate) -> Option<u64> {
        match update.status {
            Status::RecordGroup(s) => s.served_generation,
            _ => None,
        }
    }

    #[test]
    fn a_burst_drained_gives_back_the_room_it_took() {
        let q = StatusQueue::default();
        let now = Instant::now();
        for i in 0..5000 {
            q.push(update(&format!("g{i}"), 1));
        }
        let mut written = 0;
        while let Some(u) = q.take_ready(now) {
            assert!(q.lock().pending.capacity() >= 4096, "still a burst");
            q.finish(u, &WriteOutcome::Written, now);
            written += 1;
        }
        assert_eq!((written, q.backlog()), (5000, 0));
        let s = q.lock();
        assert!(
            s.pending.capacity() < 1024 && s.ready.capacity() < 1024,
            "pending {} ready {}",
            s.pending.capacity(),
            s.ready.capacity()
        );
        drop(s);
        // And it is a queue still.
        q.push(update("a", 2));
        assert_eq!(q.take_ready(now).and_then(n), Some(2));
    }

    // SEM-P7: only the newest status of an object is sent, once, in the order objects
    // first asked; a failed write comes back after its backoff unless a newer one replaced it.
    #[test]
    fn the_queue_coalesces_and_backs_off() {
        let q = StatusQueue::default();
        let now = Instant::now();
        q.push(update("a", 1));
        q.push(update("b", 1));
        q.push(update("a", 2));
        assert_eq!(q.backlog(), 2);
        let first = q.take_ready(now).expect("a");
        assert_eq!((&*first.key.name, n(first.clone())), ("a", Some(2)));
        // "a" is in flight: a newer status waits for it instead of going out beside it.
        q.push(update("a", 3));
        let second = q.take_ready(now).expect("b");
        assert_eq!(&*second.key.name, "b");
        assert!(q.take_ready(now).is_none(), "a is in flight");
        q.finish(first, &WriteOutcome::Retry, now);
        assert_eq!(
            q.take_ready(now).and_then(n),
            None,
            "a waits out its backoff"
        );
        let later = now + Duration::from_millis(250);
        assert_eq!(
            q.take_ready(later).and_then(n),
            Some(3),
            "the newer status, not the failed one"
        );
        q.finish(second, &WriteOutcome::Written, now);
        assert_eq!(q.backlog(), 1);
        q.clear();
        assert!(q.take_ready(later).is_none());
    }

    // SEM-P7 SEM-AS11: a newer status of an object replaces the one not yet sent, but not its
    // Events: a transition's Event (AutoshiftStarted) goes out with the newer status, and with
    // the status that replaces a failed write.
    #[test]
    fn a_replaced_status_keeps_its_events() {
        let notice = |reason: &'static str| Notice {
            warning: false,
            reason,
            action: "Test",
            note: String::new(),
            related: None,
        };
        let with = |n: u64, reasons: &[&'static str]| StatusUpdate {
            events: reasons.iter().map(|r| notice(r)).collect(),
            ..update("a", n)
        };
        let reasons = |u: &StatusUpdate| u.events.iter().map(|e| e.reason).collect::<Vec<_>>();
        let q = StatusQueue::default();
        let now = Instant::now();
        q.push(with(1, &["AutoshiftStarted"]));
        q.push(with(2, &[]));
        let sent = q.take_ready(now).expect("a");
        assert_eq!(n(sent.clone()), Some(2));
        assert_eq!(reasons(&sent), ["AutoshiftStarted"]);
        // The write fails while a newer status waits: both Events go with the newer one.
        q.push(with(3, &["AutoshiftEnded"]));
        q.finish(sent, &WriteOutcome::Retry, now);
        let again = q
            .take_ready(now + Duration::from_secs(1))
            .expect("after the backoff");
        assert_eq!(n(again.clone()), Some(3));
        assert_eq!(reasons(&again), ["AutoshiftStarted", "AutoshiftEnded"]);
    }
}
