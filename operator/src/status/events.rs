//! Events as data: the facts between the status an object showed and its new one, one
//! Event per fact, each with what else it is about (its aggregation key).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::conditions::{condition_reasons, types};
use healthroute_api::{
    AppliedStatus, ObjectKey, PracticeRunOutcome, RecordGroupStatus, ZonalShiftStatus,
};
use healthroute_compiler::AutoshiftEvent;

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
    /// A ZonalAutoshift's (SEMANTICS AS11): Normal.
    pub const AUTOSHIFT_STARTED: &str = "AutoshiftStarted";
    pub const AUTOSHIFT_ENDED: &str = "AutoshiftEnded";
    pub const PRACTICE_RUN_STARTED: &str = "PracticeRunStarted";
    pub const PRACTICE_RUN_SUCCEEDED: &str = "PracticeRunSucceeded";
    /// Warning.
    pub const PRACTICE_RUN_FAILED: &str = "PracticeRunFailed";
    pub const PRACTICE_RUN_INTERRUPTED: &str = "PracticeRunInterrupted";
    pub const PRACTICE_RUN_CAPACITY_CHECK_FAILED: &str = "PracticeRunCapacityCheckFailed";
    pub const PRACTICE_RUN_NOT_STARTED: &str = "PracticeRunNotStarted";
}

/// What else an Event is about, besides the object it is recorded on: it is part of the
/// Event's aggregation key, so that two facts never merge into one series.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Related {
    /// One record of the group (`fieldPath: spec.records{ID}`).
    Record(String),
    /// A RecordGroup of the object's namespace (a shift's target).
    Group(String),
    /// A zone a ZonalAutoshift shifts away from (`fieldPath: status.zones{ZONE}`): an
    /// autoshift away from zone-a and then one away from zone-b are two facts.
    Zone(String),
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

/// The Event of one thing a ZonalAutoshift's engine did, with the configuration it is
/// recorded on. The note is the event's text without the configuration's name, which the
/// Event names already.
pub fn autoshift_notice(event: &AutoshiftEvent) -> (ObjectKey, Notice) {
    use event_reasons::*;
    let text = event.to_string();
    let (config, warning, reason, action, zone) = match event {
        AutoshiftEvent::AutoshiftStarted { config, zone, .. } => {
            (config, false, AUTOSHIFT_STARTED, "Autoshift", Some(zone))
        }
        AutoshiftEvent::AutoshiftEnded { config, zone, .. } => {
            (config, false, AUTOSHIFT_ENDED, "Autoshift", Some(zone))
        }
        AutoshiftEvent::PracticeRunStarted { config, zone, .. } => (
            config,
            false,
            PRACTICE_RUN_STARTED,
            "PracticeRun",
            Some(zone),
        ),
        AutoshiftEvent::PracticeRunEnded {
            config,
            zone,
            outcome,
            ..
        } => {
            let (warning, reason) = match outcome {
                PracticeRunOutcome::Succeeded => (false, PRACTICE_RUN_SUCCEEDED),
                PracticeRunOutcome::Failed => (true, PRACTICE_RUN_FAILED),
                PracticeRunOutcome::CapacityCheckFailed => {
                    (true, PRACTICE_RUN_CAPACITY_CHECK_FAILED)
                }
                // A run that ended is never Pending; were it, it did not run its course.
                PracticeRunOutcome::Interrupted | PracticeRunOutcome::Pending => {
                    (true, PRACTICE_RUN_INTERRUPTED)
                }
            };
            (config, warning, reason, "PracticeRun", Some(zone))
        }
        AutoshiftEvent::PracticeRunNotStarted { config, .. } => {
            (config, true, PRACTICE_RUN_NOT_STARTED, "PracticeRun", None)
        }
    };
    let note = text
        .strip_prefix(&format!("{config}: "))
        .unwrap_or(&text)
        .to_owned();
    (
        config.clone(),
        Notice {
            warning,
            reason,
            action,
            note,
            related: zone.map(|z| Related::Zone(z.clone())),
        },
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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

    // SEM-AS11: each thing an engine does is an Event on its ZonalAutoshift, Warning for a
    // run that failed, was interrupted, failed its capacity check or did not start; the note
    // is the engine's text without the configuration's name; a zone is in the key.
    #[test]
    fn autoshift_events_are_normal_or_warning_by_what_happened() {
        use healthroute_api::NotStartedReason;
        let config = ObjectKey::new("shop", "frontend");
        let ended = |outcome| AutoshiftEvent::PracticeRunEnded {
            config: config.clone(),
            zone: "zone-b".into(),
            outcome,
            message: "why".into(),
        };
        let cases = [
            (
                AutoshiftEvent::AutoshiftStarted {
                    config: config.clone(),
                    zone: "zone-a".into(),
                    message: "zone-a is impaired: 3 of 4 values unhealthy".into(),
                },
                false,
                "AutoshiftStarted",
            ),
            (
                AutoshiftEvent::AutoshiftEnded {
                    config: config.clone(),
                    zone: "zone-a".into(),
                    message: "healthy".into(),
                },
                false,
                "AutoshiftEnded",
            ),
            (
                AutoshiftEvent::PracticeRunStarted {
                    config: config.clone(),
                    zone: "zone-b".into(),
                    requested: true,
                    end: jiff::Timestamp::UNIX_EPOCH,
                },
                false,
                "PracticeRunStarted",
            ),
            (
                ended(PracticeRunOutcome::Succeeded),
                false,
                "PracticeRunSucceeded",
            ),
            (ended(PracticeRunOutcome::Failed), true, "PracticeRunFailed"),
            (
                ended(PracticeRunOutcome::Interrupted),
                true,
                "PracticeRunInterrupted",
            ),
            (
                ended(PracticeRunOutcome::CapacityCheckFailed),
                true,
                "PracticeRunCapacityCheckFailed",
            ),
            (
                AutoshiftEvent::PracticeRunNotStarted {
                    config: config.clone(),
                    reason: NotStartedReason::BlockedWindow,
                    message: "the run would overlap blocked window Tue:12:00-Tue:13:30".into(),
                    request: Some("start:1".into()),
                },
                true,
                "PracticeRunNotStarted",
            ),
        ];
        for (event, warning, reason) in cases {
            let (key, notice) = autoshift_notice(&event);
            assert_eq!(key, config);
            assert_eq!(
                (notice.warning, notice.reason),
                (warning, reason),
                "{event}"
            );
            assert!(!notice.note.starts_with("shop/frontend"), "{}", notice.note);
            assert_eq!(
                format!("{config}: {}", notice.note),
                event.to_string(),
                "the engine's text"
            );
        }
        let (_, started) = autoshift_notice(&AutoshiftEvent::AutoshiftStarted {
            config,
            zone: "zone-a".into(),
            message: "zone-a is impaired".into(),
        });
        assert_eq!(started.related, Some(Related::Zone("zone-a".into())));
        assert_eq!(
            started.note,
            "autoshift away from zone-a started: zone-a is impaired"
        );
    }

    // SEM-S8 SEM-P5: a rejected edit's written status says the last good version is served,
}
