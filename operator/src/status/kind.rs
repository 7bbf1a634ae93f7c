//! The kinds whose status the operator writes, and those statuses as typed data: they become
//! JSON only in the body of the server-side apply.
//!
//! Whether an object already shows a status is a comparison of typed values
//! ([`Status::shown_by`]), within the fields the operator writes: another writer's fields
//! (a checker's `HealthCheck.status.checkers[]`) are left out, and so are the
//! `lastTransitionTime`s, which change only on a transition. Times are compared at the
//! precision the API carries (seconds).

use std::fmt;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::Resource;
use kube::api::ApiResource;

use healthroute_api::{
    HealthCheck, HealthCheckStatus, ObjectKey, RecordGroup, RecordGroupStatus, ZonalAutoshift,
    ZonalAutoshiftStatus, ZonalShift, ZonalShiftStatus,
};

/// A kind whose status the operator writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StatusKind {
    HealthCheck,
    RecordGroup,
    ZonalShift,
    ZonalAutoshift,
}

impl StatusKind {
    /// Group, version, kind and plural, as the API type declares them.
    pub fn api_resource(self) -> ApiResource {
        match self {
            StatusKind::HealthCheck => ApiResource::erase::<HealthCheck>(&()),
            StatusKind::RecordGroup => ApiResource::erase::<RecordGroup>(&()),
            StatusKind::ZonalShift => ApiResource::erase::<ZonalShift>(&()),
            StatusKind::ZonalAutoshift => ApiResource::erase::<ZonalAutoshift>(&()),
        }
    }
}

impl fmt::Display for StatusKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            StatusKind::HealthCheck => HealthCheck::kind(&()),
            StatusKind::RecordGroup => RecordGroup::kind(&()),
            StatusKind::ZonalShift => ZonalShift::kind(&()),
            StatusKind::ZonalAutoshift => ZonalAutoshift::kind(&()),
        };
        f.write_str(&kind)
    }
}

/// Which object a status belongs to.
pub type StatusKey = (StatusKind, ObjectKey);

/// A status the operator writes, of one of its kinds. A HealthCheck's never holds
/// `checkers`: those entries are the checkers' own.
#[derive(Debug, Clone, PartialEq)]
pub enum Status {
    HealthCheck(HealthCheckStatus),
    RecordGroup(RecordGroupStatus),
    ZonalShift(ZonalShiftStatus),
    /// Boxed: twice the others' size.
    ZonalAutoshift(Box<ZonalAutoshiftStatus>),
}

impl Status {
    pub fn kind(&self) -> StatusKind {
        match self {
            Status::HealthCheck(_) => StatusKind::HealthCheck,
            Status::RecordGroup(_) => StatusKind::RecordGroup,
            Status::ZonalShift(_) => StatusKind::ZonalShift,
            Status::ZonalAutoshift(_) => StatusKind::ZonalAutoshift,
        }
    }

    /// Whether `shown` (what an object shows, or what was last sent) already says what this
    /// status says: an apply of this one would change none of the operator's fields.
    pub fn shown_by(&self, shown: &Status) -> bool {
        match (self, shown) {
            (Status::HealthCheck(a), Status::HealthCheck(b)) => a.shown_by(b),
            (Status::RecordGroup(a), Status::RecordGroup(b)) => a.shown_by(b),
            (Status::ZonalShift(a), Status::ZonalShift(b)) => a.shown_by(b),
            (Status::ZonalAutoshift(a), Status::ZonalAutoshift(b)) => a.shown_by(b),
            _ => false,
        }
    }
}

/// A status type of one of the operator's kinds.
pub trait OwnStatus: Clone + PartialEq + Sized {
    const KIND: StatusKind;
    fn into_status(self) -> Status;
    fn of(status: &Status) -> Option<&Self>;
    /// A RecordGroup's status as `Self` (only RecordGroupStatus is one).
    fn of_group(_status: &RecordGroupStatus) -> Option<&Self> {
        None
    }
    /// This status and `shown`, reduced to what comparing them means: the fields this one
    /// leaves unset are another writer's (or nobody's), so they are unset in both; times
    /// that move only on transitions are left out; times at the API's precision.
    fn comparable(&self, shown: &Self) -> (Self, Self);

    /// Whether `shown` says what `self` says (see [`Status::shown_by`]).
    fn shown_by(&self, shown: &Self) -> bool {
        let (a, b) = self.comparable(shown);
        a == b
    }
}

/// Unsets `shown`'s field where `new`'s is unset (a field the apply leaves alone).
fn within<T>(new: &Option<T>, shown: &mut Option<T>) {
    if new.is_none() {
        *shown = None;
    }
}

fn within_list<T>(new: &[T], shown: &mut Vec<T>) {
    if new.is_empty() {
        shown.clear();
    }
}

/// A time as the API keeps it (RFC 3339, whole seconds).
fn wire_time(t: &mut Time) {
    if let Ok(s) = Timestamp::from_second(t.0.as_second()) {
        t.0 = s;
    }
}

fn without_transition_times(conditions: &mut [Condition]) {
    for c in conditions {
        c.last_transition_time = Time(Timestamp::UNIX_EPOCH);
    }
}

impl OwnStatus for RecordGroupStatus {
    const KIND: StatusKind = StatusKind::RecordGroup;
    fn into_status(self) -> Status {
        Status::RecordGroup(self)
    }
    fn of(status: &Status) -> Option<&Self> {
        match status {
            Status::RecordGroup(s) => Some(s),
            _ => None,
        }
    }
    fn of_group(status: &RecordGroupStatus) -> Option<&Self> {
        Some(status)
    }
    fn comparable(&self, shown: &Self) -> (Self, Self) {
        let (mut a, mut b) = (self.clone(), shown.clone());
        within(&a.served_generation, &mut b.served_generation);
        within(&a.healthy_records, &mut b.healthy_records);
        within_list(&a.records, &mut b.records);
        within_list(&a.conditions, &mut b.conditions);
        within(&a.observed_generation, &mut b.observed_generation);
        without_transition_times(&mut a.conditions);
        without_transition_times(&mut b.conditions);
        (a, b)
    }
}

impl OwnStatus for HealthCheckStatus {
    const KIND: StatusKind = StatusKind::HealthCheck;
    fn into_status(self) -> Status {
        Status::HealthCheck(self)
    }
    fn of(status: &Status) -> Option<&Self> {
        match status {
            Status::HealthCheck(s) => Some(s),
            _ => None,
        }
    }
    fn comparable(&self, shown: &Self) -> (Self, Self) {
        let (mut a, mut b) = (self.clone(), shown.clone());
        within(&a.healthy, &mut b.healthy);
        within(&a.checkers_healthy, &mut b.checkers_healthy);
        within_list(&a.checkers, &mut b.checkers);
        within(&a.metric, &mut b.metric);
        within_list(&a.conditions, &mut b.conditions);
        within(&a.observed_generation, &mut b.observed_generation);
        for s in [&mut a, &mut b] {
            s.last_transition_time = None;
            without_transition_times(&mut s.conditions);
            if let Some(t) = s.metric.as_mut().and_then(|m| m.last_evaluated.as_mut()) {
                wire_time(t);
            }
        }
        (a, b)
    }
}

impl OwnStatus for ZonalShiftStatus {
    const KIND: StatusKind = StatusKind::ZonalShift;
    fn into_status(self) -> Status {
        Status::ZonalShift(self)
    }
    fn of(status: &Status) -> Option<&Self> {
        match status {
            Status::ZonalShift(s) => Some(s),
            _ => None,
        }
    }
    fn comparable(&self, shown: &Self) -> (Self, Self) {
        let (mut a, mut b) = (self.clone(), shown.clone());
        within(&a.status, &mut b.status);
        within(&a.start_time, &mut b.start_time);
        within(&a.expiry_time, &mut b.expiry_time);
        within(&a.expires_in, &mut b.expires_in);
        within(&a.applied_groups, &mut b.applied_groups);
        within_list(&a.groups, &mut b.groups);
        within_list(&a.conditions, &mut b.conditions);
        within(&a.observed_generation, &mut b.observed_generation);
        for s in [&mut a, &mut b] {
            without_transition_times(&mut s.conditions);
            for t in [s.start_time.as_mut(), s.expiry_time.as_mut()]
                .into_iter()
                .flatten()
            {
                wire_time(t);
            }
        }
        (a, b)
    }
}

impl OwnStatus for ZonalAutoshiftStatus {
    const KIND: StatusKind = StatusKind::ZonalAutoshift;
    fn into_status(self) -> Status {
        Status::ZonalAutoshift(Box::new(self))
    }
    fn of(status: &Status) -> Option<&Self> {
        match status {
            Status::ZonalAutoshift(s) => Some(s),
            _ => None,
        }
    }
    /// The whole status is the operator's: no field is left to another writer, and one that
    /// goes (`activeZone` when an autoshift ends, `practiceRun` when a run ends) is a change.
    fn comparable(&self, shown: &Self) -> (Self, Self) {
        let (mut a, mut b) = (self.clone(), shown.clone());
        for s in [&mut a, &mut b] {
            without_transition_times(&mut s.conditions);
            let run = s.practice_run.as_mut();
            let outcomes = s.outcomes.iter_mut();
            let times = [
                s.autoshift_start_time.as_mut(),
                s.autoshift_end_time.as_mut(),
                s.healthy_since.as_mut(),
                s.next_practice_run.as_mut(),
                s.not_started.as_mut().map(|n| &mut n.time),
            ]
            .into_iter()
            .flatten()
            .chain(
                run.into_iter()
                    .flat_map(|r| [&mut r.start_time, &mut r.end_time]),
            )
            .chain(
                outcomes
                    .flat_map(|o| std::iter::once(&mut o.start_time).chain(o.end_time.as_mut())),
            );
            for t in times {
                wire_time(t);
            }
            for shift in &mut s.shifts {
                let st = &mut shift.status;
                without_transition_times(&mut st.conditions);
                for t in [st.start_time.as_mut(), st.expiry_time.as_mut()]
                    .into_iter()
                    .flatten()
                {
                    wire_time(t);
                }
            }
        }
        (a, b)
    }
}

#[cfg(test)]
mod tests {
    use healthroute_api::{CheckerStatus, MetricStatus};

    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).expect("valid")
    }

    fn ready(status: &str, at: i64) -> Condition {
        Condition {
            type_: "Ready".into(),
            status: status.into(),
            reason: "Served".into(),
            message: "served by the resolvers (table generation 4)".into(),
            last_transition_time: Time(t(at)),
            observed_generation: Some(1),
        }
    }

    fn group(served: bool) -> RecordGroupStatus {
        RecordGroupStatus {
            served,
            served_generation: Some(4),
            conditions: vec![ready(if served { "True" } else { "False" }, 0)],
            observed_generation: Some(1),
            ..Default::default()
        }
    }

    // The re-check's comparison: a status someone else overwrote is not shown; one that
    // differs only in its transition times is.
    #[test]
    fn a_status_overwritten_by_another_writer_is_not_shown() {
        let ours = group(true);
        assert!(ours.shown_by(&ours));
        let mut later = ours.clone();
        later.conditions[0].last_transition_time = Time(t(60));
        assert!(ours.shown_by(&later), "transition times aside");
        assert!(
            !ours.shown_by(&group(false)),
            "served flipped by another writer"
        );
        let mut gone = ours.clone();
        gone.conditions.clear();
        assert!(!ours.shown_by(&gone), "our conditions removed");
        assert!(!ours.shown_by(&RecordGroupStatus::default()));
        assert!(
            !Status::RecordGroup(ours.clone())
                .shown_by(&Status::HealthCheck(HealthCheckStatus::default())),
            "another kind"
        );
    }

    // SEM-AS11: a ZonalAutoshift's status is the operator's alone: a field that goes (the
    // autoshift ended, the run ended) makes it differ, where another kind's unset fields are
    // left out; its times count in whole seconds, wherever they are.
    #[test]
    fn a_zonal_autoshift_status_that_loses_a_field_is_not_shown() {
        use healthroute_api::{
            AutoshiftState, PracticeRunOutcome, PracticeRunRecord, RunningPracticeRun,
            ZonalAutoshiftStatus,
        };
        let precise = |s: i64| {
            Time(
                t(s).checked_add(jiff::SignedDuration::from_millis(700))
                    .expect("in range"),
            )
        };
        let ours = ZonalAutoshiftStatus {
            autoshift: Some(AutoshiftState::Active),
            active_zone: Some("zone-a".into()),
            autoshift_start_time: Some(precise(0)),
            practice_run: Some(RunningPracticeRun {
                zone: "zone-b".into(),
                start_time: precise(1),
                end_time: precise(1801),
                requested: true,
            }),
            outcomes: vec![PracticeRunRecord {
                zone: "zone-b".into(),
                start_time: precise(1),
                end_time: None,
                outcome: PracticeRunOutcome::Pending,
                message: None,
                requested: true,
            }],
            conditions: vec![ready("True", 0)],
            ..Default::default()
        };
        let wire: ZonalAutoshiftStatus =
            serde_json::from_value(serde_json::to_value(&ours).expect("json")).expect("reads");
        assert!(ours.shown_by(&wire), "as the API gives it back, in seconds");
        let mut later = wire.clone();
        later.conditions[0].last_transition_time = Time(t(99));
        assert!(ours.shown_by(&later));
        let ended = ZonalAutoshiftStatus {
            autoshift: Some(AutoshiftState::Inactive),
            active_zone: None,
            autoshift_start_time: None,
            ..ours.clone()
        };
        assert!(
            !ended.shown_by(&wire),
            "the autoshift ended: activeZone goes"
        );
        let run_over = ZonalAutoshiftStatus {
            practice_run: None,
            ..ours.clone()
        };
        assert!(!run_over.shown_by(&wire), "the run ended");
    }

    // A HealthCheck's `checkers[]` are the checkers' own: they never make our status differ.
    // An evaluation time is compared as the API keeps it, in whole seconds.
    #[test]
    fn the_checkers_entries_and_sub_second_times_make_no_difference() {
        let evaluated = |nanos: i32| MetricStatus {
            state: healthroute_api::MetricState::Ok,
            value: Some("no samples".into()),
            error: None,
            last_evaluated: Some(Time(
                t(5).checked_add(jiff::SignedDuration::new(0, nanos))
                    .expect("in range"),
            )),
        };
        let ours = HealthCheckStatus {
            healthy: Some(true),
            last_transition_time: Some(Time(t(0))),
            checkers_healthy: Some("1/1".into()),
            metric: Some(evaluated(250_000_000)),
            observed_generation: Some(1),
            ..Default::default()
        };
        let mut shown = ours.clone();
        shown.checkers = vec![CheckerStatus {
            name: "zone-a".into(),
            zone: Some("zone-a".into()),
            healthy: true,
            last_observed: Some(Time(t(4))),
            message: Some("200 OK in 3 ms".into()),
            values: Vec::new(),
        }];
        shown.last_transition_time = Some(Time(t(-30)));
        shown.metric = Some(evaluated(0));
        assert!(ours.shown_by(&shown));
        shown.healthy = Some(false);
        assert!(!ours.shown_by(&shown));
    }
}
