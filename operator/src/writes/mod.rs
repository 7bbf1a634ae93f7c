//! The one writer of everything the leader owns: every status (with its Events), the Peer
//! checks that peer sources need (SEMANTICS X4) and the ZonalShifts that mirror the autoshift
//! engines' shifts (AS13), beside the control loop and never inside it (P7; linkerd2's
//! `k8s/status` shape). Up to the queue each write is typed: a [`Status`], a [`HealthCheck`],
//! a [`ZonalShift`]; only `api.rs` turns one into the body of a server-side apply, or a delete.
//!
//! ```text
//!  status::Ledger (statuses, Events) ─┐
//!  peers::PeerChecks (X4) ────────────┼─push(Write)──▶ WriteQueue: newest write per object
//!  engine_shifts::EngineShifts (AS13) ┘                 │ (coalesced; a newer one waits while
//!                                                       │  one is in flight)
//!                                                       │ ready: Peer checks, then the
//!                                                       │  rest (each FIFO) /
//!                                                       │ delayed (backoff per object
//!                                                       ▼  after a failure)
//!  writer task (leader only): up to N writes in flight, each with a timeout
//!       ok ──▶ a status's Events ──▶ next     failed ──▶ back in the queue after the object's
//!                                                        backoff, unless a newer write replaced it
//!  api.rs: Write ──JSON──▶ server-side apply (object, /status) or DELETE (only the uid seen)
//! ```
//!
//! A backlog, a slow API server or failing writes delay only these writes: the table publisher
//! is a separate task (P7). Each kind keeps its field manager ([`crate::FIELD_MANAGER`] for
//! statuses, [`PEER_FIELD_MANAGER`], [`ENGINE_SHIFT_FIELD_MANAGER`]), so that objects a
//! former build wrote are adopted, not fought over.
//!
//! ```text
//!   mod.rs    what can be written: Write, its key, the field managers
//!   queue.rs  WriteQueue: newest per object, backoff per object, what was written
//!   task.rs   the leader-gated task: run, WriterConfig, each outcome's metrics
//!   api.rs    the only place with JSON: the bodies, the requests, the Events
//! ```

mod api;
mod queue;
mod task;

pub use api::delete_params;
pub use queue::{Handover, WriteOutcome, WriteQueue};
pub use task::{DEFAULT_BURST, DEFAULT_QPS, TableWrites, WriterConfig, run};

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;

use crate::status::{Notice, Status, StatusKey, StatusKind};
use healthroute_api::{HealthCheck, ZonalShift, ZonalShiftStatus};
use healthroute_compiler::ObjectKey;

/// The field manager of the operator's Peer checks (apart from the statuses it writes, so
/// that `kubectl get --show-managed-fields` tells the two apart).
pub const PEER_FIELD_MANAGER: &str = "healthroute-operator/peers";

/// The field manager of the mirrors (apart from the statuses of the customers' ZonalShifts,
/// so that `kubectl get --show-managed-fields` tells them apart).
pub const ENGINE_SHIFT_FIELD_MANAGER: &str = "healthroute-operator/engine-shifts";

/// What a write is about: with the object's key, the queue's key (one write per key at a
/// time, the newest).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WriteKind {
    /// An object's status (its `/status`), under [`crate::FIELD_MANAGER`].
    Status(StatusKind),
    /// A Peer check, under [`PEER_FIELD_MANAGER`].
    PeerCheck,
    /// A ZonalShift that mirrors an engine's shift, under [`ENGINE_SHIFT_FIELD_MANAGER`].
    EngineShift,
}

impl WriteKind {
    /// What the logs and the metrics call it.
    pub fn name(self) -> &'static str {
        match self {
            WriteKind::Status(_) => "status",
            WriteKind::PeerCheck => "peer check",
            WriteKind::EngineShift => "engine shift",
        }
    }
}

/// The queue's key of a write.
pub type WriteKey = (WriteKind, ObjectKey);

/// The status queue key of a status write.
pub fn status_key((kind, key): StatusKey) -> WriteKey {
    (WriteKind::Status(kind), key)
}

/// One write of what the leader owns, typed.
// Statuses are nearly every write (10,000 at a first start): unboxed, as the status queue
// held them before, rather than an allocation more per status for the rarer kinds' sake.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    Status(StatusUpdate),
    PeerCheck(PeerWrite),
    EngineShift(ShiftWrite),
}

impl Write {
    pub fn key(&self) -> WriteKey {
        match self {
            Write::Status(u) => (WriteKind::Status(u.status.kind()), u.key.clone()),
            Write::PeerCheck(w) => (WriteKind::PeerCheck, w.key().clone()),
            Write::EngineShift(w) => (WriteKind::EngineShift, w.key().clone()),
        }
    }

    /// Puts `earlier` Events (of a write this one replaces) before this one's own.
    fn take_events_before(&mut self, earlier: &mut Write) {
        if let (Write::Status(mine), Write::Status(theirs)) = (self, earlier) {
            mine.take_events_before(theirs);
        }
    }
}

impl From<StatusUpdate> for Write {
    fn from(update: StatusUpdate) -> Self {
        Write::Status(update)
    }
}

impl From<PeerWrite> for Write {
    fn from(write: PeerWrite) -> Self {
        Write::PeerCheck(write)
    }
}

impl From<ShiftWrite> for Write {
    fn from(write: ShiftWrite) -> Self {
        Write::EngineShift(write)
    }
}

/// The newest status of one object, with the Events its transition deserves.
///
/// A term's first statuses are owed all at once (100,000 at 100,000 groups) and wait in the
/// queue at the writer's pace: each is the ledger's own record of what it sent, shared, and
/// carries an object reference only when it has Events to record about it. (As a typed copy
/// with its reference, each held about 1.5 KB more: 14 MiB at 10,000 groups; #44.)
#[derive(Debug, Clone, PartialEq)]
pub struct StatusUpdate {
    pub key: ObjectKey,
    /// Applied with server-side apply under [`crate::FIELD_MANAGER`].
    pub status: Arc<Status>,
    /// Recorded after the status is written; `None` for most writes (a first start's, a
    /// re-check's repair).
    pub events: Option<Box<StatusEvents>>,
}

/// The Events of a status's transition, and the object they are about.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusEvents {
    pub notices: Vec<Notice>,
    pub about: ObjectReference,
}

impl StatusUpdate {
    /// `status` of `key`, with `notices` about the object `about` gives (asked only when
    /// there are any).
    pub fn new(
        key: ObjectKey,
        status: impl Into<Arc<Status>>,
        notices: Vec<Notice>,
        about: impl FnOnce() -> ObjectReference,
    ) -> Self {
        let events = (!notices.is_empty()).then(|| {
            Box::new(StatusEvents {
                notices,
                about: about(),
            })
        });
        StatusUpdate {
            key,
            status: status.into(),
            events,
        }
    }

    /// `status` of `key`, without Events.
    pub fn quiet(key: ObjectKey, status: impl Into<Arc<Status>>) -> Self {
        StatusUpdate {
            key,
            status: status.into(),
            events: None,
        }
    }

    pub fn status_key(&self) -> StatusKey {
        (self.status.kind(), self.key.clone())
    }

    /// The Events recorded after the write.
    pub fn notices(&self) -> &[Notice] {
        self.events.as_ref().map_or(&[], |e| &e.notices)
    }

    /// Puts the Events of `earlier` (a write this one replaces) before this one's own.
    fn take_events_before(&mut self, earlier: &mut StatusUpdate) {
        let Some(mut theirs) = earlier.events.take() else {
            return;
        };
        if let Some(mine) = self.events.as_mut() {
            theirs.notices.append(&mut mine.notices);
            theirs.about = std::mem::take(&mut mine.about);
        }
        self.events = Some(theirs);
    }
}

/// One write of a Peer check (X4).
#[derive(Debug, Clone)]
pub enum PeerWrite {
    /// Server-side apply of the whole check (its label, owners and spec).
    Apply {
        key: ObjectKey,
        check: Box<HealthCheck>,
    },
    /// Delete the check, only if it is still the object seen (its uid).
    Delete { key: ObjectKey, uid: Option<String> },
}

// The API types derive no `PartialEq` of their own: objects are compared by their parts.
impl PartialEq for PeerWrite {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (PeerWrite::Apply { key, check }, PeerWrite::Apply { key: k, check: c }) => {
                key == k
                    && check.metadata == c.metadata
                    && check.spec == c.spec
                    && check.status == c.status
            }
            (PeerWrite::Delete { key, uid }, PeerWrite::Delete { key: k, uid: u }) => {
                key == k && uid == u
            }
            _ => false,
        }
    }
}

impl PeerWrite {
    pub fn key(&self) -> &ObjectKey {
        match self {
            PeerWrite::Apply { key, .. } | PeerWrite::Delete { key, .. } => key,
        }
    }
}

/// One write of a ZonalShift that mirrors an engine's shift (AS13).
#[derive(Debug, Clone)]
pub enum ShiftWrite {
    /// Server-side apply of the mirror's metadata and spec (when `object`), then of its status
    /// (when `status`: the engine's shift status, AS5).
    Apply {
        key: ObjectKey,
        object: Option<Box<ZonalShift>>,
        status: Option<Box<ZonalShiftStatus>>,
    },
    /// Delete the mirror, only if it is still the object seen (its uid).
    Delete { key: ObjectKey, uid: Option<String> },
}

impl PartialEq for ShiftWrite {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: &ZonalShift, b: &ZonalShift| {
            a.metadata == b.metadata && a.spec == b.spec && a.status == b.status
        };
        match (self, other) {
            (
                ShiftWrite::Apply {
                    key,
                    object,
                    status,
                },
                ShiftWrite::Apply {
                    key: k,
                    object: o,
                    status: s,
                },
            ) => {
                key == k
                    && status == s
                    && match (object, o) {
                        (Some(a), Some(b)) => same(a, b),
                        (a, b) => a.is_none() && b.is_none(),
                    }
            }
            (ShiftWrite::Delete { key, uid }, ShiftWrite::Delete { key: k, uid: u }) => {
                key == k && uid == u
            }
            _ => false,
        }
    }
}

impl ShiftWrite {
    pub fn key(&self) -> &ObjectKey {
        match self {
            ShiftWrite::Apply { key, .. } | ShiftWrite::Delete { key, .. } => key,
        }
    }
}
