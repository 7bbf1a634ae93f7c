//! Status as data: what the operator writes on each object, computed from the compiler's
//! outcomes, with conditions whose `lastTransitionTime` comes from a pure merge of the old
//! and the new (linkerd `k8s/status`, stackable `status/condition`).
//!
//! One leader-gated writer applies these with server-side apply under one field manager;
//! checkers own their own `HealthCheck.status.checkers[]` entries under theirs, so the two
//! never overwrite each other.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value as Json, json};

use healthroute_api::{AppliedStatus, HealthCheckStatus, RecordGroupStatus, ZonalShiftStatus};
use healthroute_compiler::{CheckHealth, GroupOutcome, reasons};

/// The field manager of every status the operator writes.
pub const FIELD_MANAGER: &str = "healthroute-operator";

/// Condition types.
pub mod types {
    pub const READY: &str = "Ready";
    pub const COMPILED: &str = "Compiled";
    pub const LAST_RESORT: &str = "LastResort";
    pub const HEALTHY: &str = "Healthy";
    pub const APPLIED: &str = "Applied";
}

/// Condition reasons beyond the compiler's.
pub mod condition_reasons {
    pub const SERVED: &str = "Served";
    pub const NOT_SERVED: &str = "NotServed";
    /// This version of the group is not published: the table write failed (P5).
    pub const PUBLISH_FAILED: &str = "PublishFailed";
    pub const HEALTHY_RECORDS: &str = "HealthyRecords";
    pub const NO_HEALTHY_RECORD: &str = "NoHealthyRecord";
    pub const CHECKERS_AGREE: &str = "QuorumHealthy";
    pub const CHECKERS_DISAGREE: &str = "QuorumUnhealthy";
    /// Unhealthy because checkers refuse to probe the target (their policy denies it, H12).
    pub const TARGET_DENIED: &str = "TargetDenied";
    pub const ACTIVE: &str = "Active";
    pub const ENDED: &str = "Ended";
}

/// One desired condition: (type, status, reason, message).
pub struct Desired<'a> {
    pub kind: &'a str,
    pub status: bool,
    pub reason: &'a str,
    pub message: String,
}

/// Merges desired conditions with the previous ones: a condition whose status did not change
/// keeps its `lastTransitionTime`.
pub fn merge_conditions(
    old: &[Condition],
    desired: Vec<Desired<'_>>,
    now: jiff::Timestamp,
    generation: Option<i64>,
) -> Vec<Condition> {
    desired
        .into_iter()
        .map(|d| {
            let status = if d.status { "True" } else { "False" }.to_owned();
            let previous = old.iter().find(|c| c.type_ == d.kind);
            let last_transition_time = match previous {
                Some(p) if p.status == status => p.last_transition_time.clone(),
                _ => Time(now),
            };
            Condition {
                type_: d.kind.to_owned(),
                status,
                reason: d.reason.to_owned(),
                message: d.message,
                last_transition_time,
                observed_generation: generation,
            }
        })
        .collect()
}

/// Where the group's current version stands against the published table (SEMANTICS P5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Publication<'a> {
    /// The published table holds exactly what the compiler serves for the group: since
    /// `since`, the generation that first carried this version (`None`: nothing, as wanted).
    InSync { since: Option<u64> },
    /// The compiler's version is not published because publishing fails; the resolvers serve
    /// the version first published in `serving_since` (or nothing).
    Failed {
        error: &'a str,
        serving_since: Option<u64>,
    },
}

/// The status of a RecordGroup, conditions included.
pub fn record_group(
    mut status: RecordGroupStatus,
    outcome: &GroupOutcome,
    publication: Publication<'_>,
    old: Option<&RecordGroupStatus>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> RecordGroupStatus {
    let (compiled_ok, compiled_reason, compiled_message) = match &outcome.compiled {
        Ok(_) => (true, reasons::COMPILED, "compiled".to_owned()),
        Err(r) => (false, r.reason, r.message.clone()),
    };
    let healthy = status.records.iter().filter(|r| r.healthy).count();
    let (ready, ready_reason, ready_message) = match publication {
        Publication::InSync { since: Some(g) } => {
            status.served = true;
            status.served_generation = Some(g);
            let what = if compiled_ok {
                "served by the resolvers"
            } else {
                "serving the last good version"
            };
            (
                true,
                condition_reasons::SERVED,
                format!("{what} (table generation {g})"),
            )
        }
        Publication::InSync { since: None } => {
            status.served = false;
            status.served_generation = None;
            (
                false,
                condition_reasons::NOT_SERVED,
                "not served".to_owned(),
            )
        }
        Publication::Failed {
            error,
            serving_since,
        } => {
            status.served = serving_since.is_some();
            status.served_generation = serving_since;
            let serving = match serving_since {
                Some(g) => format!("the resolvers still serve the version of table generation {g}"),
                None => "the resolvers serve nothing for this group".to_owned(),
            };
            (
                false,
                condition_reasons::PUBLISH_FAILED,
                format!(
                    "this version is not served: publishing the routing table failed ({error}); {serving}"
                ),
            )
        }
    };
    let desired = vec![
        Desired {
            kind: types::COMPILED,
            status: compiled_ok,
            reason: compiled_reason,
            message: compiled_message,
        },
        Desired {
            kind: types::READY,
            status: ready,
            reason: ready_reason,
            message: ready_message,
        },
        Desired {
            kind: types::LAST_RESORT,
            status: status.last_resort,
            reason: if status.last_resort {
                condition_reasons::NO_HEALTHY_RECORD
            } else {
                condition_reasons::HEALTHY_RECORDS
            },
            message: if compiled_ok {
                format!("{healthy}/{} records healthy", status.records.len())
            } else {
                // This version is rejected: say what is served instead (its last good version,
                // or nothing), not "0/0 records healthy".
                format!(
                    "this version is rejected; served: {}",
                    status.healthy_records.as_deref().unwrap_or("nothing")
                )
            },
        },
    ];
    status.conditions = merge_conditions(
        old.map_or(&[][..], |s| &s.conditions),
        desired,
        now,
        generation,
    );
    status.observed_generation = generation;
    status
}

/// The operator's part of a HealthCheck's status (never `checkers`: those are the checkers').
pub fn health_check(
    health: &CheckHealth,
    old: Option<&HealthCheckStatus>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> Json {
    let last_transition = match old {
        Some(o) if o.healthy == Some(health.healthy) => {
            o.last_transition_time.clone().unwrap_or(Time(now))
        }
        _ => Time(now),
    };
    let conditions = merge_conditions(
        old.map_or(&[][..], |s| &s.conditions),
        vec![Desired {
            kind: types::HEALTHY,
            status: health.healthy,
            reason: if health.healthy {
                condition_reasons::CHECKERS_AGREE
            } else if health.denied_checkers > 0 {
                condition_reasons::TARGET_DENIED
            } else {
                condition_reasons::CHECKERS_DISAGREE
            },
            message: if !health.healthy && health.denied_checkers > 0 {
                format!(
                    "{}; {} of {} reachable checkers refuse to probe the target (checker policy: see their messages)",
                    health.reason, health.denied_checkers, health.reachable_checkers
                )
            } else {
                health.reason.clone()
            },
        }],
        now,
        generation,
    );
    json!({
        "healthy": health.healthy,
        "lastTransitionTime": last_transition,
        "checkersHealthy": format!("{}/{}", health.healthy_checkers, health.reachable_checkers),
        "conditions": conditions,
        "observedGeneration": generation,
    })
}

/// A ZonalShift's status, conditions included.
pub fn zonal_shift(
    mut status: ZonalShiftStatus,
    old: Option<&ZonalShiftStatus>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> ZonalShiftStatus {
    let active = status.status == Some(healthroute_api::ShiftState::Active);
    let applied = status
        .groups
        .iter()
        .filter(|g| g.applied_status == AppliedStatus::Applied)
        .count();
    status.conditions = merge_conditions(
        old.map_or(&[][..], |s| &s.conditions),
        vec![Desired {
            kind: types::APPLIED,
            status: active && applied > 0,
            reason: if active {
                condition_reasons::ACTIVE
            } else {
                condition_reasons::ENDED
            },
            message: format!(
                "applied to {applied} of {} targeted groups",
                status.groups.len()
            ),
        }],
        now,
        generation,
    );
    status.observed_generation = generation;
    status
}

/// The reasons of the Events the operator records (each documented in docs/user-guide.md,
/// "Events"). A compile rejection's Event has the rejection's reason (`reasons::*`).
pub mod event_reasons {
    pub const RECORD_UNHEALTHY: &str = "RecordUnhealthy";
    pub const RECORD_HEALTHY: &str = "RecordHealthy";
    pub const LAST_RESORT_ENTERED: &str = "LastResortEntered";
    pub const LAST_RESORT_LEFT: &str = "LastResortLeft";
    /// A group that was rejected compiles again.
    pub const COMPILED: &str = healthroute_compiler::reasons::COMPILED;
    pub const PUBLISH_FAILED: &str = super::condition_reasons::PUBLISH_FAILED;
    pub const PUBLISHED: &str = "Published";
    pub const SHIFT_APPLIED: &str = "ShiftApplied";
    pub const SHIFT_NOT_APPLIED: &str = "ShiftNotApplied";
}

/// What else an Event is about, besides the object it is recorded on: it is part of the
/// Event's aggregation key, so that two facts never merge into one series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Related {
    /// One record of the group (`fieldPath: spec.records{ID}`).
    Record(String),
    /// A RecordGroup of the object's namespace (a shift's target).
    Group(String),
}

/// A fact worth an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
    pub related: Option<Related>,
}

/// The Events between the status on the server (`old`) and the new one, one per fact: each
/// record that turned unhealthy or healthy again, the last resort entered or left, a version
/// rejected (with the rejection's reason) or compiling again, a version that could not be
/// published or was published after all. A first status announces what is wrong in it (a
/// rejection, unhealthy records, the last resort), so that every "again" and "left" follows
/// an Event that said so.
pub fn group_events(old: Option<&RecordGroupStatus>, new: &RecordGroupStatus) -> Vec<Notice> {
    let mut out = compile_events(old, new);
    out.extend(publish_events(old, new));
    for r in &new.records {
        let before = old.map(|o| {
            o.records
                .iter()
                .find(|x| x.set_identifier == r.set_identifier)
                .is_none_or(|x| x.healthy)
        });
        // A record new to the group (or a first status) counts as healthy before.
        let was_healthy = before.unwrap_or(true);
        if was_healthy && !r.healthy {
            out.push(Notice {
                warning: true,
                reason: event_reasons::RECORD_UNHEALTHY,
                action: "Route",
                note: format!(
                    "record {} is unhealthy: {}",
                    r.set_identifier,
                    r.reason.as_deref().unwrap_or("no reason given")
                ),
                related: Some(Related::Record(r.set_identifier.clone())),
            });
        } else if !was_healthy && r.healthy {
            out.push(Notice {
                warning: false,
                reason: event_reasons::RECORD_HEALTHY,
                action: "Route",
                note: format!("record {} is healthy again", r.set_identifier),
                related: Some(Related::Record(r.set_identifier.clone())),
            });
        }
    }
    let was_last_resort = old.is_some_and(|o| o.last_resort);
    if !was_last_resort && new.last_resort {
        out.push(Notice {
            warning: true,
            reason: event_reasons::LAST_RESORT_ENTERED,
            action: "Route",
            note: "no record is healthy: every record is answered, as if healthy (last resort)"
                .into(),
            related: None,
        });
    } else if was_last_resort && !new.last_resort {
        out.push(Notice {
            warning: false,
            reason: event_reasons::LAST_RESORT_LEFT,
            action: "Route",
            note: "a record is healthy again: only healthy records are answered".into(),
            related: None,
        });
    }
    out
}

fn condition<'a>(s: &'a RecordGroupStatus, kind: &str) -> Option<&'a Condition> {
    s.conditions.iter().find(|c| c.type_ == kind)
}

/// A version rejected (S8), with its reason, and a group that compiles again.
fn compile_events(old: Option<&RecordGroupStatus>, new: &RecordGroupStatus) -> Vec<Notice> {
    let Some(now) = condition(new, types::COMPILED) else {
        return Vec::new();
    };
    let before = old.and_then(|o| condition(o, types::COMPILED));
    let rejected = now.status == "False";
    let was_rejected = before.is_some_and(|c| c.status == "False");
    if rejected && (!was_rejected || before.is_some_and(|c| c.reason != now.reason)) {
        let reason = healthroute_compiler::reasons::ALL
            .iter()
            .find(|r| **r == now.reason)
            .copied()
            .unwrap_or(healthroute_compiler::reasons::INVALID_SPEC);
        vec![Notice {
            warning: true,
            reason,
            action: "Compile",
            note: format!("this version is rejected: {}", now.message),
            related: None,
        }]
    } else if !rejected && was_rejected {
        vec![Notice {
            warning: false,
            reason: event_reasons::COMPILED,
            action: "Compile",
            note: "the group compiles again".into(),
            related: None,
        }]
    } else {
        Vec::new()
    }
}

/// A version that could not be published (P5), and the publish that succeeded after it.
fn publish_events(old: Option<&RecordGroupStatus>, new: &RecordGroupStatus) -> Vec<Notice> {
    let failed =
        |c: Option<&Condition>| c.is_some_and(|c| c.reason == condition_reasons::PUBLISH_FAILED);
    let before = old.and_then(|o| condition(o, types::READY));
    match condition(new, types::READY) {
        Some(c) if failed(Some(c)) && !failed(before) => vec![Notice {
            warning: true,
            reason: event_reasons::PUBLISH_FAILED,
            action: "Publish",
            note: c.message.clone(),
            related: None,
        }],
        Some(c) if failed(before) && c.reason == condition_reasons::SERVED => vec![Notice {
            warning: false,
            reason: event_reasons::PUBLISHED,
            action: "Publish",
            note: c.message.clone(),
            related: None,
        }],
        _ => Vec::new(),
    }
}

/// Why a shift does not apply, in words.
fn not_applied(reason: Option<healthroute_api::NotAppliedReason>, away_from: &str) -> String {
    use healthroute_api::NotAppliedReason::*;
    match reason {
        Some(Conflict) => "an older active shift applies to it (Conflict)".into(),
        Some(NoHealthyCapacityElsewhere) => format!(
            "it would leave no healthy endpoint outside {away_from}, so traffic stays (fail open, NoHealthyCapacityElsewhere)"
        ),
        None => "not targeted while the shift is not active".into(),
    }
}

/// One Event per targeted group whose shift became applied or not applied, naming the group.
pub fn shift_events(
    old: Option<&ZonalShiftStatus>,
    new: &ZonalShiftStatus,
    away_from: &str,
) -> Vec<Notice> {
    let mut out = Vec::new();
    for g in &new.groups {
        let before = old.and_then(|o| o.groups.iter().find(|x| x.record_group == g.record_group));
        if before.map(|b| (b.applied_status, b.reason)) == Some((g.applied_status, g.reason)) {
            continue;
        }
        out.push(match g.applied_status {
            AppliedStatus::Applied => Notice {
                warning: false,
                reason: event_reasons::SHIFT_APPLIED,
                action: "Shift",
                note: format!(
                    "applied to RecordGroup {}: its endpoints in {away_from} are treated as unhealthy",
                    g.record_group
                ),
                related: Some(Related::Group(g.record_group.clone())),
            },
            AppliedStatus::NotApplied => Notice {
                warning: true,
                reason: event_reasons::SHIFT_NOT_APPLIED,
                action: "Shift",
                note: format!(
                    "not applied to RecordGroup {}: {}",
                    g.record_group,
                    not_applied(g.reason, away_from)
                ),
                related: Some(Related::Group(g.record_group.clone())),
            },
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).expect("valid")
    }

    fn group_status(records: &[(&str, bool)], last_resort: bool) -> RecordGroupStatus {
        use healthroute_api::RecordStatus;
        RecordGroupStatus {
            served: true,
            records: records
                .iter()
                .map(|(id, healthy)| RecordStatus {
                    set_identifier: (*id).into(),
                    healthy: *healthy,
                    values: vec![],
                    reason: (!healthy)
                        .then(|| format!("health check hc-{id}: 0/3 checkers healthy")),
                })
                .collect(),
            last_resort,
            ..Default::default()
        }
    }

    fn with_compiled(mut st: RecordGroupStatus, reason: Option<&str>) -> RecordGroupStatus {
        st.conditions.push(Condition {
            type_: types::COMPILED.into(),
            status: if reason.is_some() { "False" } else { "True" }.into(),
            reason: reason.unwrap_or("Compiled").into(),
            message: reason.map_or("compiled".into(), |r| {
                format!("{r}: alias to b leads back to a")
            }),
            last_transition_time: Time(t(0)),
            observed_generation: Some(1),
        });
        st
    }

    // One Event per fact: each record that turns unhealthy is named in its note and in the
    // aggregation key (the related record), so three records make three Events.
    #[test]
    fn each_record_is_its_own_event() {
        let before = group_status(&[("a", true), ("b", true), ("c", true)], false);
        let after = group_status(&[("a", false), ("b", false), ("c", false)], true);
        let events = group_events(Some(&before), &after);
        let unhealthy: Vec<_> = events
            .iter()
            .filter(|n| n.reason == event_reasons::RECORD_UNHEALTHY)
            .collect();
        assert_eq!(unhealthy.len(), 3);
        for (n, id) in unhealthy.iter().zip(["a", "b", "c"]) {
            assert_eq!(n.related, Some(Related::Record(id.into())));
            assert!(
                n.note
                    .starts_with(&format!("record {id} is unhealthy: health check hc-{id}")),
                "{}",
                n.note
            );
        }
        assert_eq!(
            events.last().map(|n| n.reason),
            Some(event_reasons::LAST_RESORT_ENTERED)
        );
        let back = group_events(Some(&after), &before);
        assert_eq!(
            back.iter().map(|n| n.reason).collect::<Vec<_>>(),
            [
                "RecordHealthy",
                "RecordHealthy",
                "RecordHealthy",
                "LastResortLeft"
            ]
        );
        assert!(
            group_events(Some(&before), &before).is_empty(),
            "no change, no Event"
        );
    }

    // A new group announces what is wrong in its first status, so that "healthy again" and
    // "LastResortLeft" always follow an Event that said the opposite; a healthy new group
    // announces nothing.
    #[test]
    fn a_new_group_never_gets_an_unpaired_again() {
        assert!(group_events(None, &group_status(&[("pods", true)], false)).is_empty());
        let first = group_status(&[("pods", false)], true);
        let announced: Vec<_> = group_events(None, &first)
            .iter()
            .map(|n| n.reason)
            .collect();
        assert_eq!(announced, ["RecordUnhealthy", "LastResortEntered"]);
        let healthy: Vec<_> = group_events(Some(&first), &group_status(&[("pods", true)], false))
            .iter()
            .map(|n| n.reason)
            .collect();
        assert_eq!(healthy, ["RecordHealthy", "LastResortLeft"]);
    }

    // A rejection is an Event with the rejection's reason (S8); compiling again is one too.
    #[test]
    fn rejections_are_events_with_their_reason() {
        let ok = with_compiled(group_status(&[("a", true)], false), None);
        let cycle = with_compiled(group_status(&[], false), Some("AliasCycle"));
        let events = group_events(Some(&ok), &cycle);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].reason, "AliasCycle");
        assert!(
            events[0].warning && events[0].note.contains("leads back"),
            "{:?}",
            events[0]
        );
        assert_eq!(
            group_events(None, &cycle)[0].reason,
            "AliasCycle",
            "a first status too"
        );
        assert!(group_events(Some(&cycle), &cycle).is_empty());
        assert_eq!(group_events(Some(&cycle), &ok)[0].reason, "Compiled");
    }

    // A shift's Event per group it applies to (or not), with the group in the note and the
    // key, in plain words.
    #[test]
    fn shift_events_name_each_group_in_words() {
        use healthroute_api::{NotAppliedReason, ShiftGroupStatus};
        let st = |groups: Vec<(&str, AppliedStatus, Option<NotAppliedReason>)>| ZonalShiftStatus {
            groups: groups
                .into_iter()
                .map(|(g, applied_status, reason)| ShiftGroupStatus {
                    record_group: g.into(),
                    applied_status,
                    reason,
                })
                .collect(),
            ..Default::default()
        };
        let new = st(vec![
            ("api", AppliedStatus::Applied, None),
            ("www", AppliedStatus::Applied, None),
            (
                "search",
                AppliedStatus::NotApplied,
                Some(NotAppliedReason::NoHealthyCapacityElsewhere),
            ),
        ]);
        let events = shift_events(None, &new, "zone-b");
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].related, Some(Related::Group("api".into())));
        assert_eq!(events[1].related, Some(Related::Group("www".into())));
        assert!(
            events[0].note.contains("RecordGroup api")
                && events[1].note.contains("RecordGroup www")
        );
        let note = &events[2].note;
        assert!(
            !note.contains("Some(") && note.contains("no healthy endpoint outside zone-b"),
            "{note}"
        );
        assert!(shift_events(Some(&new), &new, "zone-b").is_empty());
    }

    // SEM-S8 SEM-P5: a rejected edit's written status says the last good version is served,
    // and how many of its records answer (the compiler's half: compiler::tests).
    #[test]
    fn a_rejected_edit_names_the_version_served() {
        use healthroute_api::RoutingPolicy;
        use healthroute_compiler::testing::{
            group_input, key, mk_compiler, mk_group, mk_record, t0,
        };
        let mut c = mk_compiler();
        for value in ["192.0.2.1", "bad"] {
            c.upsert_group(
                key("api"),
                group_input(mk_group(
                    "api",
                    RoutingPolicy::Simple,
                    vec![mk_record("x", &[value])],
                )),
            );
            c.compile(t0());
        }
        let st = c.group_status(&key("api")).expect("status");
        let outcome = c.outcome(&key("api")).expect("outcome").clone();
        let written = record_group(
            st,
            &outcome,
            Publication::InSync { since: Some(1) },
            None,
            Some(2),
            t0(),
        );
        let lr = written
            .conditions
            .iter()
            .find(|c| c.type_ == "LastResort")
            .expect("LastResort");
        assert_eq!(lr.status, "False");
        assert_eq!(
            lr.message,
            "this version is rejected; served: last good version, 1 answering"
        );
    }

    // SEM-H12: a check unhealthy because its checkers refuse the target says so in its reason.
    #[test]
    fn a_denied_target_is_named_in_the_reason() {
        use healthroute_api::DENIED_BY_POLICY;
        use healthroute_compiler::health::{CheckInput, probe_health};
        use healthroute_compiler::testing::{mk_check, mk_view};
        let mut check = CheckInput::new(mk_check("web"));
        let mut view = mk_view("zone-a", false);
        view.message = Some(format!(
            "target 127.0.0.1 rejected: {DENIED_BY_POLICY} (in 127.0.0.0/8)"
        ));
        check.views = vec![view];
        let heartbeats = [("zone-a".to_owned(), t(0))].into_iter().collect();
        let health = probe_health(&check, &heartbeats, t(1));
        assert_eq!(health.denied_checkers, 1);
        let body = health_check(&health, None, Some(1), t(1));
        assert_eq!(body["conditions"][0]["reason"], "TargetDenied");
        assert!(
            body["conditions"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("refuse to probe")),
            "{body}"
        );
    }

    #[test]
    fn transition_time_moves_only_on_a_status_change() {
        let first = merge_conditions(
            &[],
            vec![Desired {
                kind: "Ready",
                status: true,
                reason: "Served",
                message: "a".into(),
            }],
            t(0),
            Some(1),
        );
        assert_eq!(first[0].last_transition_time, Time(t(0)));
        let same = merge_conditions(
            &first,
            vec![Desired {
                kind: "Ready",
                status: true,
                reason: "Served",
                message: "b".into(),
            }],
            t(10),
            Some(2),
        );
        assert_eq!(
            same[0].last_transition_time,
            Time(t(0)),
            "message changes keep the time"
        );
        assert_eq!(same[0].observed_generation, Some(2));
        let flipped = merge_conditions(
            &same,
            vec![Desired {
                kind: "Ready",
                status: false,
                reason: "NotServed",
                message: "c".into(),
            }],
            t(20),
            Some(2),
        );
        assert_eq!(flipped[0].last_transition_time, Time(t(20)));
    }
}
