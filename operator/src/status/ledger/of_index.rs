//! The status each object would have now, built from the index and the compiler's outcomes
//! (with the Events since `old` where its kind has them): what a compile hands to the writer
//! and what the re-check compares with the object as watched.

use jiff::Timestamp;

use crate::index::Index;
use crate::status::build::{self, Publication};
use crate::status::events::{self, Notice};
use healthroute_api::{
    HealthCheckStatus, MetricStatus, RecordGroupStatus, ZonalAutoshiftStatus, ZonalShiftStatus,
};
use healthroute_compiler::ObjectKey;

/// A RecordGroup's status for `publication`, with the Events since `old`.
pub(super) fn group_status(
    index: &Index,
    key: &ObjectKey,
    publication: Publication<'_>,
    old: Option<RecordGroupStatus>,
    now: Timestamp,
) -> Option<(RecordGroupStatus, Vec<Notice>)> {
    let g = index.groups.get(key)?;
    let data = index.compiler.group_status(key)?;
    let outcome = index.compiler.outcome(key)?;
    let status = build::record_group(data, outcome, publication, old.as_ref(), g.generation, now);
    let events = events::group_events(old.as_ref(), &status);
    Some((status, events))
}

/// A HealthCheck's status, with the leader's last evaluation of it (a Metric check's).
pub(super) fn check_status(
    index: &Index,
    key: &ObjectKey,
    evaluation: Option<&MetricStatus>,
    old: Option<HealthCheckStatus>,
    now: Timestamp,
) -> Option<HealthCheckStatus> {
    let c = index.checks.get(key)?;
    let health = index.compiler.check_health(key)?;
    let mut status = build::health_check(health, old.as_ref(), c.metadata.generation, now);
    status.metric = evaluation.cloned();
    Some(status)
}

/// A ZonalShift's status, with the Events since `old`.
pub(super) fn shift_status(
    index: &Index,
    key: &ObjectKey,
    old: Option<ZonalShiftStatus>,
    now: Timestamp,
) -> Option<(ZonalShiftStatus, Vec<Notice>)> {
    let s = index.shifts.get(key)?;
    let generation = s.metadata.generation;
    let status = match index.compiler.shift_status(key, now)? {
        Ok(st) => build::zonal_shift(st, old.as_ref(), generation, now),
        Err(e) => build::zonal_shift_invalid(e.to_string(), old.as_ref(), generation, now),
    };
    let events = events::shift_events(old.as_ref(), &status, &s.spec.away_from);
    Some((status, events))
}

/// A ZonalAutoshift's status: its engine's, with its conditions. `None` before a compile
/// has stepped its engine.
pub(super) fn autoshift_status(
    index: &Index,
    key: &ObjectKey,
    old: Option<ZonalAutoshiftStatus>,
    now: Timestamp,
) -> Option<ZonalAutoshiftStatus> {
    let a = index.autoshifts.get(key)?;
    let status = index.compiler.autoshift_status(key)?;
    Some(build::zonal_autoshift(
        status,
        &a.spec,
        index.compiler.autoshift_error(key),
        old.as_ref(),
        a.metadata.generation,
        now,
    ))
}
