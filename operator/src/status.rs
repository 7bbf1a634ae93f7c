//! Status as data: what the operator writes on each object, computed from the compiler's
//! outcomes, with conditions whose `lastTransitionTime` comes from a pure merge of the old
//! and the new (linkerd `k8s/status`, stackable `status/condition`).
//!
//! One leader-gated writer applies these with server-side apply under one field manager;
//! checkers own their own `HealthCheck.status.checkers[]` entries under theirs, so the two
//! never overwrite each other.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use serde_json::{Value as Json, json};

use crate::api::{AppliedStatus, HealthCheckStatus, RecordGroupStatus, ZonalShiftStatus};
use crate::compiler::{CheckHealth, GroupOutcome, reasons};

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
    let active = status.status == Some(crate::api::ShiftState::Active);
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

/// A transition worth an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub warning: bool,
    pub reason: &'static str,
    pub action: &'static str,
    pub note: String,
}

/// Records that turned unhealthy or healthy again, the last resort entered or left, and a
/// version that could not be published or was published after all, between the status on
/// the server and the new one. For a first status, only a failed publish.
pub fn group_events(old: Option<&RecordGroupStatus>, new: &RecordGroupStatus) -> Vec<Notice> {
    let mut out = publish_events(old, new);
    let Some(old) = old else { return out };
    for r in &new.records {
        let Some(before) = old
            .records
            .iter()
            .find(|o| o.set_identifier == r.set_identifier)
        else {
            continue;
        };
        if before.healthy && !r.healthy {
            out.push(Notice {
                warning: true,
                reason: "RecordUnhealthy",
                action: "Route",
                note: format!(
                    "{}: {}",
                    r.set_identifier,
                    r.reason.as_deref().unwrap_or("unhealthy")
                ),
            });
        } else if !before.healthy && r.healthy {
            out.push(Notice {
                warning: false,
                reason: "RecordHealthy",
                action: "Route",
                note: format!("{} is healthy again", r.set_identifier),
            });
        }
    }
    if !old.last_resort && new.last_resort {
        out.push(Notice {
            warning: true,
            reason: "LastResortEntered",
            action: "Route",
            note: "no record is healthy: every record is answered as if healthy".into(),
        });
    } else if old.last_resort && !new.last_resort {
        out.push(Notice {
            warning: false,
            reason: "LastResortLeft",
            action: "Route",
            note: "a record is healthy again".into(),
        });
    }
    out
}

/// A version that could not be published (P5), and the publish that succeeded after it.
fn publish_events(old: Option<&RecordGroupStatus>, new: &RecordGroupStatus) -> Vec<Notice> {
    fn ready(s: &RecordGroupStatus) -> Option<&Condition> {
        s.conditions.iter().find(|c| c.type_ == types::READY)
    }
    let failed =
        |c: Option<&Condition>| c.is_some_and(|c| c.reason == condition_reasons::PUBLISH_FAILED);
    let before = old.and_then(ready);
    match ready(new) {
        Some(c) if failed(Some(c)) && !failed(before) => vec![Notice {
            warning: true,
            reason: condition_reasons::PUBLISH_FAILED,
            action: "Publish",
            note: c.message.clone(),
        }],
        Some(c) if failed(before) && c.reason == condition_reasons::SERVED => vec![Notice {
            warning: false,
            reason: "Published",
            action: "Publish",
            note: c.message.clone(),
        }],
        _ => Vec::new(),
    }
}

/// Groups where a shift became applied or not applied.
pub fn shift_events(old: Option<&ZonalShiftStatus>, new: &ZonalShiftStatus) -> Vec<Notice> {
    let mut out = Vec::new();
    for g in &new.groups {
        let before = old.and_then(|o| o.groups.iter().find(|x| x.record_group == g.record_group));
        if before.map(|b| (b.applied_status, b.reason)) == Some((g.applied_status, g.reason)) {
            continue;
        }
        out.push(match g.applied_status {
            AppliedStatus::Applied => Notice {
                warning: false,
                reason: "ShiftApplied",
                action: "Shift",
                note: format!("applied to {}", g.record_group),
            },
            AppliedStatus::NotApplied => Notice {
                warning: true,
                reason: "ShiftNotApplied",
                action: "Shift",
                note: format!("not applied to {}: {:?}", g.record_group, g.reason),
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

    #[test]
    fn events_on_transitions_only() {
        use crate::api::RecordStatus;
        let st = |healthy: bool, last_resort: bool| RecordGroupStatus {
            served: true,
            records: vec![RecordStatus {
                set_identifier: "a".into(),
                healthy,
                values: vec![],
                reason: (!healthy).then(|| "health check hc: 0/3".into()),
            }],
            last_resort,
            ..Default::default()
        };
        assert!(
            group_events(None, &st(false, true)).is_empty(),
            "no event for a first status"
        );
        assert!(group_events(Some(&st(true, false)), &st(true, false)).is_empty());
        let down = group_events(Some(&st(true, false)), &st(false, true));
        let reasons: Vec<_> = down.iter().map(|n| n.reason).collect();
        assert_eq!(reasons, ["RecordUnhealthy", "LastResortEntered"]);
        assert!(down[0].note.contains("0/3"));
        let up = group_events(Some(&st(false, true)), &st(true, false));
        assert_eq!(
            up.iter().map(|n| n.reason).collect::<Vec<_>>(),
            ["RecordHealthy", "LastResortLeft"]
        );
    }

    // SEM-H12: a check unhealthy because its checkers refuse the target says so in its reason.
    #[test]
    fn a_denied_target_is_named_in_the_reason() {
        use crate::compiler::health::{CheckInput, DENIED_BY_POLICY, probe_health};
        use crate::compiler::testing::{mk_check, mk_view};
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
