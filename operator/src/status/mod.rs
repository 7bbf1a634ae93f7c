//! Every status the operator writes, from the compiler's outcomes to the server-side apply
//! (linkerd2's `k8s/status` shape: status is computed as data, and one leader-gated task
//! writes it under one field manager).
//!
//! ```text
//!  index (objects as watched) ─┐
//!  compiler (outcomes, health) ┼─▶ Ledger ── build: pure builders (conditions merged, old → new)
//!  publisher feedback ─────────┘     │       events: one Notice per fact (old → new)
//!    (Published: what is served, P5) │ typed StatusUpdate (HealthCheckStatus, RecordGroupStatus,
//!                                    ▼                     ZonalShiftStatus)
//!                              the one writer (`writes`, with the Peer checks and the
//!                              mirrors): WriteQueue, newest per object, backoff per object
//!                                    ▼
//!                              writer task (leader only) ── JSON ──▶ server-side apply
//!                                                                     of /status, then Events
//!  every --status-recheck-interval: Ledger::recheck compares each watched object's status,
//!  each Peer check and each mirror with what the leader would write, and queues again what
//!  another writer changed
//! ```
//!
//! A ZonalAutoshift's status is what its engine decided, and more than a report: it is the
//! engine's memory (the autoshift in force, the running practice run, the outcomes, the last
//! request answered), from which the next leader's engine starts (AS11). Its Events are what
//! the engine reported at the compile (`CompileReport::autoshift_events`), not a difference of
//! statuses, and go out with the status of that compile.
//!
//! Checkers own their own `HealthCheck.status.checkers[]` entries under their own field
//! managers; the operator never writes them, and leaves them out of every comparison.
//!
//! ```text
//!   kind.rs        StatusKind (its API resource from the type), Status, the comparison
//!   conditions.rs  condition types and reasons, merge_conditions
//!   build.rs       the status of each kind, as pure functions
//!   events.rs      the Events between two statuses
//!   published.rs   what the resolvers can assemble (the table, served_since, the error)
//!   ledger/        the term's statuses: what waits, what was sent, the re-check
//! ```

pub mod build;
pub mod conditions;
pub mod events;
mod kind;
mod ledger;
mod published;

pub use build::{
    Publication, UNINSTALLED, health_check, record_group, record_group_not_served, zonal_autoshift,
    zonal_shift,
};
pub use conditions::{Desired, condition_reasons, merge_conditions, types};
pub use events::{Notice, Related, autoshift_notice, event_reasons, group_events, shift_events};
pub use kind::{OwnStatus, Status, StatusKey, StatusKind};
pub use ledger::Ledger;
