//! The queue between those who decide what the leader writes and the writer task: the newest
//! write of each object, coalesced; a backoff per object after a failure; and what was written
//! that no watch event has shown yet (for the re-check). Cheap to push to, never blocks.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Write, WriteKey, WriteKind};
use healthroute_admin::retry::Backoff;
use healthroute_compiler::ObjectKey;

/// How a write went, as the queue settles it.
pub enum WriteOutcome {
    Written,
    /// Not worth retrying (the object is gone, or the server refuses the body).
    Dropped,
    Retry,
}

/// Writes waiting (queued or in flight), per what they write.
#[derive(Debug, Default, Clone, Copy)]
struct Backlog {
    statuses: usize,
    peer_checks: usize,
    engine_shifts: usize,
}

impl Backlog {
    fn of(&mut self, kind: WriteKind) -> &mut usize {
        match kind {
            WriteKind::Status(_) => &mut self.statuses,
            WriteKind::PeerCheck => &mut self.peer_checks,
            WriteKind::EngineShift => &mut self.engine_shifts,
        }
    }
}

#[derive(Default)]
struct QueueState {
    pending: HashMap<WriteKey, Write>,
    /// Keys to write, oldest first; a key may be stale (written or delayed since). Peer
    /// checks (`first`) go before the others (`ready`): they are inputs of the table (X4),
    /// and a term's first statuses are a backlog of thousands.
    ready: VecDeque<WriteKey>,
    first: VecDeque<WriteKey>,
    /// Keys waiting out a backoff, by when they may go again.
    delayed: BinaryHeap<Reverse<(Instant, u64, WriteKey)>>,
    delayed_until: HashMap<WriteKey, Instant>,
    in_flight: HashSet<WriteKey>,
    /// `pending` and `in_flight` entries, per kind of write.
    backlog: Backlog,
    backoff: HashMap<WriteKey, Backoff>,
    /// Written since the ledger last asked ([`WriteQueue::take_written`]) and not seen by the
    /// watch since ([`WriteQueue::seen`]): their write may not be back yet.
    written: HashSet<WriteKey>,
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

    /// The keys of `kind`'s rank, oldest first: Peer checks go before the others.
    fn rank(&mut self, kind: WriteKind) -> &mut VecDeque<WriteKey> {
        match kind {
            WriteKind::PeerCheck => &mut self.first,
            WriteKind::Status(_) | WriteKind::EngineShift => &mut self.ready,
        }
    }

    /// `key` may be sent: behind the others of its rank.
    fn enqueue(&mut self, key: WriteKey) {
        self.rank(key.0).push_back(key);
    }

    /// Puts `write` in `pending`; true when no write of its object was pending.
    fn insert_pending(&mut self, key: WriteKey, write: Write) -> bool {
        let kind = key.0;
        let fresh = self.pending.insert(key, write).is_none();
        if fresh {
            *self.backlog.of(kind) += 1;
        }
        fresh
    }

    /// Moves the pending write of `key`, if any, in flight.
    fn start(&mut self, key: WriteKey) -> Option<Write> {
        let write = self.pending.remove(&key)?;
        *self.backlog.of(key.0) -= 1;
        self.in_flight.insert(key.clone());
        *self.backlog.of(key.0) += 1;
        Some(write)
    }

    /// Takes `key` out of flight; false when it was not (cleared meanwhile).
    fn land(&mut self, key: &WriteKey) -> bool {
        let was = self.in_flight.remove(key);
        if was {
            *self.backlog.of(key.0) -= 1;
        }
        was
    }
}

/// The queue between the control loop and the writer: cheap to push to, never blocks.
#[derive(Clone, Default)]
pub struct WriteQueue {
    state: Arc<Mutex<QueueState>>,
    notify: Arc<Notify>,
}

impl WriteQueue {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // A panic while holding the lock would leave plain data behind; keep using it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `write`, replacing any older write of the same object not yet sent: its body,
    /// not a status's Events, which go out with the newer one (a transition's Event is not
    /// lost because the status moved on before it was written).
    pub fn push(&self, write: impl Into<Write>) {
        let mut write = write.into();
        let key = write.key();
        let mut s = self.lock();
        if let Some(older) = s.pending.get_mut(&key) {
            write.take_events_before(older);
        }
        let fresh = s.insert_pending(key.clone(), write);
        if fresh && !s.in_flight.contains(&key) && !s.delayed_until.contains_key(&key) {
            s.enqueue(key);
        }
        drop(s);
        self.notify.notify_one();
    }

    /// Makes room for `total` writes of `kind`, those waiting included, so that queuing them
    /// does not grow the queue by doubling, each time rehashing what it holds (at a term's
    /// first table, 100,000 statuses may be owed). Room a burst did not use is given back
    /// once the queue is idle.
    pub fn reserve(&self, kind: WriteKind, total: usize) {
        let mut s = self.lock();
        let more = total.saturating_sub(s.pending.len());
        s.pending.reserve(more);
        s.rank(kind).reserve(more);
    }

    /// Room for pending writes, without growing.
    #[cfg(test)]
    pub(crate) fn pending_capacity(&self) -> usize {
        self.lock().pending.capacity()
    }

    /// Drops everything not yet sent (leadership lost: the next leader writes its own).
    pub fn clear(&self) {
        let mut s = self.lock();
        let in_flight = std::mem::take(&mut s.in_flight);
        let mut backlog = Backlog::default();
        for key in &in_flight {
            *backlog.of(key.0) += 1;
        }
        *s = QueueState {
            in_flight,
            backlog,
            ..Default::default()
        };
    }

    /// Writes waiting to be sent, or being sent (an object may count twice: one in flight, a
    /// newer one waiting for it).
    pub fn backlog(&self) -> usize {
        let s = self.lock();
        s.pending.len() + s.in_flight.len()
    }

    /// [`WriteQueue::backlog`] of one kind of write (every status kind counts as one).
    pub fn backlog_of(&self, kind: WriteKind) -> usize {
        *self.lock().backlog.of(kind)
    }

    /// Whether a write of `key` waits to be sent or is being sent: a newer one would replace
    /// it, and the object as watched says nothing yet about it.
    pub fn holds(&self, key: &WriteKey) -> bool {
        let s = self.lock();
        s.pending.contains_key(key) || s.in_flight.contains(key)
    }

    /// The objects written since the last call that no watch event showed since. Their
    /// watched objects may not show the write yet: a write completes before its watch event
    /// arrives, by milliseconds, or by seconds behind a first start's burst.
    pub fn take_written(&self) -> HashSet<WriteKey> {
        std::mem::take(&mut self.lock().written)
    }

    /// The watch showed the object: what it shows is at least as new as any write finished.
    pub fn seen(&self, key: &WriteKey) {
        let mut s = self.lock();
        if !s.written.is_empty() {
            s.written.remove(key);
        }
    }

    /// Waits until a write is pushed (or the queue is woken otherwise).
    pub(super) async fn pushed(&self) {
        self.notify.notified().await
    }

    /// The next write that may be sent now, marked in flight.
    pub fn take_ready(&self, now: Instant) -> Option<Write> {
        let mut s = self.lock();
        while let Some(Reverse((at, _, _))) = s.delayed.peek()
            && *at <= now
        {
            let Some(Reverse((at, _, key))) = s.delayed.pop() else {
                break;
            };
            if s.delayed_until.get(&key) == Some(&at) {
                s.delayed_until.remove(&key);
                s.enqueue(key);
            }
        }
        while let Some(key) = s.first.pop_front().or_else(|| s.ready.pop_front()) {
            if s.in_flight.contains(&key) || s.delayed_until.contains_key(&key) {
                continue;
            }
            if let Some(write) = s.start(key) {
                return Some(write);
            }
        }
        None
    }

    /// When the earliest delayed write may go.
    pub(super) fn next_delayed(&self) -> Option<Instant> {
        self.lock().delayed.peek().map(|Reverse((at, _, _))| *at)
    }

    /// Settles a write: on success the object's backoff resets; on a failure worth retrying
    /// the write goes back (unless a newer one replaced it) after the object's next backoff.
    pub fn finish(&self, write: Write, outcome: &WriteOutcome, now: Instant) {
        let key = write.key();
        let mut s = self.lock();
        if !s.land(&key) {
            return; // cleared meanwhile: this term is over
        }
        match outcome {
            WriteOutcome::Written | WriteOutcome::Dropped => {
                s.backoff.remove(&key);
                if matches!(outcome, WriteOutcome::Written) {
                    s.written.insert(key.clone());
                }
                if s.pending.contains_key(&key) {
                    s.enqueue(key);
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
                // A newer write replaces this one; a status's Events still go out, first.
                let mut write = write;
                match s.pending.get_mut(&key) {
                    Some(newer) => newer.take_events_before(&mut write),
                    None => {
                        s.insert_pending(key.clone(), write);
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

    /// Drops the write of `key` not yet sent, if any (a newer plan no longer wants it); one
    /// in flight lands as it will.
    pub fn withdraw(&self, key: &WriteKey) {
        let mut s = self.lock();
        if s.pending.remove(key).is_some() {
            *s.backlog.of(key.0) -= 1;
        }
    }
}

/// The writes of a planner that plans again after every compile (Peer checks, mirrors), as
/// last handed to the queue: a plan made again queues only the writes that changed, and a
/// write the newer plan no longer has is withdrawn if not sent yet (the newest plan replaces
/// the older, P7).
#[derive(Debug)]
pub struct Handover<W> {
    kind: WriteKind,
    sent: HashMap<ObjectKey, W>,
}

impl<W: Clone + PartialEq + Into<Write>> Handover<W> {
    pub fn new(kind: WriteKind) -> Self {
        Handover {
            kind,
            sent: HashMap::new(),
        }
    }

    /// Queues the writes of `plan` (each with its object's key) not handed over already.
    pub fn plan(&mut self, queue: &WriteQueue, plan: Vec<(ObjectKey, W)>) {
        let wanted: HashSet<&ObjectKey> = plan.iter().map(|(key, _)| key).collect();
        let kind = self.kind;
        self.sent.retain(|key, _| {
            let keep = wanted.contains(key);
            if !keep {
                queue.withdraw(&(kind, key.clone()));
            }
            keep
        });
        for (key, write) in plan {
            if self.sent.get(&key) != Some(&write) {
                self.sent.insert(key, write.clone());
                queue.push(write);
            }
        }
    }

    /// Forgets what was handed over (a new term, whose queue starts empty).
    pub fn clear(&mut self) {
        self.sent.clear();
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ObjectReference;

    use super::*;
    use crate::status::{Notice, Status};
    use crate::writes::{PeerWrite, StatusUpdate};

    /// The `n`th status of group `name` (told apart by its `servedGeneration`).
    fn update(name: &str, n: u64) -> StatusUpdate {
        let status = Status::RecordGroup(healthroute_api::RecordGroupStatus {
            served_generation: Some(n),
            ..Default::default()
        });
        StatusUpdate::quiet(ObjectKey::new("shop", name), status)
    }

    fn status(write: Write) -> StatusUpdate {
        match write {
            Write::Status(u) => u,
            other => panic!("not a status: {other:?}"),
        }
    }

    fn n(write: Write) -> Option<u64> {
        match status(write).status.as_ref() {
            Status::RecordGroup(s) => s.served_generation,
            _ => None,
        }
    }

    fn name(write: &Write) -> String {
        write.key().1.name.to_string()
    }

    #[test]
    fn a_burst_drained_gives_back_the_room_it_took() {
        let q = WriteQueue::default();
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

    // SEM-P7: only the newest write of an object is sent, once, in the order objects
    // first asked; a failed write comes back after its backoff unless a newer one replaced it.
    #[test]
    fn the_queue_coalesces_and_backs_off() {
        let q = WriteQueue::default();
        let now = Instant::now();
        q.push(update("a", 1));
        q.push(update("b", 1));
        q.push(update("a", 2));
        assert_eq!(q.backlog(), 2);
        let first = q.take_ready(now).expect("a");
        assert_eq!((name(&first).as_str(), n(first.clone())), ("a", Some(2)));
        // "a" is in flight: a newer status waits for it instead of going out beside it.
        q.push(update("a", 3));
        let second = q.take_ready(now).expect("b");
        assert_eq!(name(&second), "b");
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

    // SEM-P7 SEM-X4: every kind of write shares the queue with its own key and its own
    // backoff: a Peer check of the same name as a status's object is another write, a failed
    // one waits out its own backoff while the others go, and each kind's backlog is its own.
    #[test]
    fn each_object_has_its_own_backoff_whatever_it_writes() {
        let q = WriteQueue::default();
        let now = Instant::now();
        let delete = |name: &str| PeerWrite::Delete {
            key: ObjectKey::new("shop", name),
            uid: Some(format!("uid-{name}")),
        };
        q.push(update("a", 1));
        q.push(delete("a"));
        q.push(delete("b"));
        assert_eq!(q.backlog_of(WriteKind::PeerCheck), 2);
        assert_eq!(
            q.backlog_of(WriteKind::Status(crate::status::StatusKind::HealthCheck)),
            1
        );
        let peer_a = q.take_ready(now).expect("a's check");
        assert!(matches!(peer_a, Write::PeerCheck(_)), "{peer_a:?}");
        q.finish(peer_a, &WriteOutcome::Retry, now);
        let peer_b = q.take_ready(now).expect("b's check goes, a's waits");
        assert_eq!(name(&peer_b), "b");
        q.finish(peer_b, &WriteOutcome::Written, now);
        let status_a = q.take_ready(now).expect("a's status");
        assert!(matches!(status_a, Write::Status(_)), "{status_a:?}");
        q.finish(status_a, &WriteOutcome::Written, now);
        assert!(
            q.take_ready(now).is_none(),
            "a's check waits out its backoff"
        );
        assert_eq!(q.backlog_of(WriteKind::PeerCheck), 1);
        let again = q
            .take_ready(now + Duration::from_millis(250))
            .expect("a's check, after its backoff");
        assert_eq!(again, Write::PeerCheck(delete("a")));
        q.finish(again, &WriteOutcome::Written, now);
        assert_eq!(q.backlog(), 0);
        assert_eq!(q.take_written().len(), 3, "a's status, a's and b's checks");
    }

    // SEM-P7 SEM-X4: a Peer check (an input of the table) goes before the statuses waiting,
    // however many: a term's first statuses do not hold it back; a retried one too, once its
    // backoff is over.
    #[test]
    fn peer_checks_go_before_the_statuses_waiting() {
        let q = WriteQueue::default();
        let now = Instant::now();
        for i in 0..100 {
            q.push(update(&format!("g{i}"), 1));
        }
        let check = PeerWrite::Delete {
            key: ObjectKey::new("shop", "peer"),
            uid: None,
        };
        q.push(check.clone());
        let first = q.take_ready(now).expect("a write");
        assert_eq!(first, Write::PeerCheck(check.clone()));
        q.finish(first, &WriteOutcome::Retry, now);
        let next = q
            .take_ready(now)
            .expect("a status, while the check backs off");
        assert_eq!(name(&next), "g0");
        let later = now + Duration::from_millis(250);
        assert_eq!(q.take_ready(later), Some(Write::PeerCheck(check)));
        assert_eq!(name(&q.take_ready(later).expect("a status")), "g1");
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
        let with = |n: u64, reasons: &[&'static str]| {
            let notices = reasons.iter().map(|r| notice(r)).collect();
            let about = || ObjectReference {
                resource_version: Some(n.to_string()),
                ..Default::default()
            };
            let u = update("a", n);
            StatusUpdate::new(u.key, u.status, notices, about)
        };
        let reasons = |u: &Write| {
            let u = status(u.clone());
            let about = u
                .events
                .as_ref()
                .and_then(|e| e.about.resource_version.clone());
            let reasons = u.notices().iter().map(|e| e.reason).collect::<Vec<_>>();
            (reasons, about)
        };
        let q = WriteQueue::default();
        let now = Instant::now();
        q.push(with(1, &["AutoshiftStarted"]));
        q.push(with(2, &[]));
        let sent = q.take_ready(now).expect("a");
        assert_eq!(n(sent.clone()), Some(2));
        // A write without Events of its own carries the older one's, about its object.
        let about = |rv: &str| Some(rv.to_string());
        assert_eq!(reasons(&sent), (vec!["AutoshiftStarted"], about("1")));
        // The write fails while a newer status waits: both Events go with the newer one.
        q.push(with(3, &["AutoshiftEnded"]));
        q.finish(sent, &WriteOutcome::Retry, now);
        let again = q
            .take_ready(now + Duration::from_secs(1))
            .expect("after the backoff");
        assert_eq!(n(again.clone()), Some(3));
        let both = vec!["AutoshiftStarted", "AutoshiftEnded"];
        assert_eq!(reasons(&again), (both, about("3")));
    }
}
