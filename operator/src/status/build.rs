//! Status as data: what the operator writes on each object, computed from the compiler's
//! outcomes and, for a RecordGroup, from where its version stands against the published
//! table (P5). Pure functions: the old status in, the new one out.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::conditions::{Desired, condition_reasons, merge_conditions, types};
use healthroute_api::{
    AppliedStatus, AutoshiftMode, HealthCheckStatus, RecordGroupStatus, ZonalAutoshiftSpec,
    ZonalAutoshiftStatus, ZonalShiftStatus,
};
use healthroute_compiler::{CheckHealth, GroupOutcome, reasons};

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

/// Why a RecordGroup is not served once healthroute is uninstalled (SEMANTICS P13).
pub const UNINSTALLED: &str = "healthroute was uninstalled: no resolver serves this group";

/// The status of a RecordGroup that nothing serves (P13): not served, no served generation,
/// no record health (no checker probes them any more) and `Ready` False, reason `NotServed`,
/// with `why`. Applied under the operator's field manager it also removes what the operator
/// wrote before (records, the other conditions). Built on `old` unchanged when `old` already
/// says it, so that a second uninstall writes nothing.
pub fn record_group_not_served(
    old: Option<&RecordGroupStatus>,
    why: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> RecordGroupStatus {
    let conditions = merge_conditions(
        old.map_or(&[][..], |s| &s.conditions),
        vec![Desired {
            kind: types::READY,
            status: false,
            reason: condition_reasons::NOT_SERVED,
            message: why.to_owned(),
        }],
        now,
        generation,
    );
    RecordGroupStatus {
        served: false,
        served_generation: None,
        healthy_records: None,
        records: Vec::new(),
        last_resort: false,
        conditions,
        observed_generation: generation,
    }
}

/// The operator's part of a HealthCheck's status: never `checkers` (those are the
/// checkers'), and `metric` only from the leader's evaluator (set by the caller).
pub fn health_check(
    health: &CheckHealth,
    old: Option<&HealthCheckStatus>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> HealthCheckStatus {
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
    HealthCheckStatus {
        healthy: Some(health.healthy),
        last_transition_time: Some(last_transition),
        checkers_healthy: Some(format!(
            "{}/{}",
            health.healthy_checkers, health.reachable_checkers
        )),
        conditions,
        observed_generation: generation,
        ..HealthCheckStatus::default()
    }
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

/// The status of a ZonalShift whose spec cannot be applied: its `Applied` condition alone,
/// False with the reason why.
pub fn zonal_shift_invalid(
    error: String,
    old: Option<&ZonalShiftStatus>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> ZonalShiftStatus {
    ZonalShiftStatus {
        conditions: merge_conditions(
            old.map_or(&[][..], |s| &s.conditions),
            vec![Desired {
                kind: types::APPLIED,
                status: false,
                reason: reasons::INVALID_SPEC,
                message: error,
            }],
            now,
            generation,
        ),
        ..ZonalShiftStatus::default()
    }
}

/// A ZonalAutoshift's status: what its engine decided (`status`, from the compiler), with
/// `Ready` (False with reason `InvalidSpec` and why, when the configuration cannot be used)
/// and `Autoshift` (True while traffic moves away from a zone, the zone in its message).
pub fn zonal_autoshift(
    mut status: ZonalAutoshiftStatus,
    spec: &ZonalAutoshiftSpec,
    error: Option<&str>,
    old: Option<&ZonalAutoshiftStatus>,
    generation: Option<i64>,
    now: jiff::Timestamp,
) -> ZonalAutoshiftStatus {
    let message = status.message.clone().unwrap_or_default();
    let ready = match error {
        Some(e) => Desired {
            kind: types::READY,
            status: false,
            reason: reasons::INVALID_SPEC,
            message: e.to_owned(),
        },
        None => Desired {
            kind: types::READY,
            status: true,
            reason: condition_reasons::CONFIGURED,
            message: "the configuration is in use".into(),
        },
    };
    let impaired = status.zones.iter().filter(|z| z.impaired).count();
    let (active, reason) = match (&status.active_zone, error) {
        (_, Some(_)) => (false, reasons::INVALID_SPEC),
        (Some(_), _) if status.healthy_since.is_some() => {
            (true, condition_reasons::ZONE_RECOVERING)
        }
        (Some(_), _) => (true, condition_reasons::ZONE_IMPAIRED),
        (None, _) if spec.autoshift == AutoshiftMode::Disabled => {
            (false, condition_reasons::DISABLED)
        }
        (None, _) if impaired > 1 => (false, condition_reasons::SEVERAL_ZONES_IMPAIRED),
        (None, _) => (false, condition_reasons::NO_ZONE_IMPAIRED),
    };
    let autoshift_message = match (&status.active_zone, &status.autoshift_start_time) {
        (Some(zone), Some(start)) if active => {
            // In whole seconds, as the status keeps the start: the same text after a leader
            // change.
            let since = jiff::Timestamp::from_second(start.0.as_second()).unwrap_or(start.0);
            format!("traffic moves away from {zone} since {since}: {message}")
        }
        _ => message,
    };
    status.conditions = merge_conditions(
        old.map_or(&[][..], |s| &s.conditions),
        vec![
            ready,
            Desired {
                kind: types::AUTOSHIFT,
                status: active,
                reason,
                message: autoshift_message,
            },
        ],
        now,
        generation,
    );
    status.observed_generation = generation;
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).expect("valid")
    }

    // SEM-P13: after uninstall a group says that nothing serves it: not served, no generation,
    // no records' health, Ready False NotServed with why; the status built on itself is the
    // same (a second uninstall writes nothing), its transition time kept.
    #[test]
    fn an_uninstalled_group_says_nothing_serves_it() {
        use healthroute_api::RecordStatus;
        let served = RecordGroupStatus {
            served: true,
            served_generation: Some(7),
            healthy_records: Some("1/1".into()),
            records: vec![RecordStatus {
                set_identifier: "x".into(),
                healthy: true,
                values: vec!["192.0.2.1".into()],
                reason: None,
            }],
            last_resort: false,
            conditions: merge_conditions(
                &[],
                vec![Desired {
                    kind: types::READY,
                    status: true,
                    reason: condition_reasons::SERVED,
                    message: "served by the resolvers (table generation 7)".into(),
                }],
                t(0),
                Some(2),
            ),
            observed_generation: Some(2),
        };
        let gone = record_group_not_served(Some(&served), UNINSTALLED, Some(3), t(10));
        assert!(!gone.served);
        assert_eq!(
            (
                &gone.served_generation,
                &gone.healthy_records,
                gone.records.len()
            ),
            (&None, &None, 0)
        );
        assert_eq!(gone.conditions.len(), 1, "{:?}", gone.conditions);
        let ready = &gone.conditions[0];
        assert_eq!(
            (
                ready.type_.as_str(),
                ready.status.as_str(),
                ready.reason.as_str()
            ),
            ("Ready", "False", "NotServed")
        );
        assert_eq!(
            ready.message,
            "healthroute was uninstalled: no resolver serves this group"
        );
        assert_eq!(ready.last_transition_time, Time(t(10)));
        assert_eq!(gone.observed_generation, Some(3));
        let again = record_group_not_served(Some(&gone), UNINSTALLED, Some(3), t(20));
        assert_eq!(again, gone, "already said: nothing to write");
        let never = record_group_not_served(None, UNINSTALLED, None, t(0));
        assert!(!never.served && never.conditions.len() == 1);
    }

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

    // SEM-AS1 SEM-AS4 SEM-AS11: a ZonalAutoshift's conditions: Ready False with InvalidSpec
    // and why when its configuration cannot be used; Autoshift True while a zone is shifted
    // away from (impaired, or healthy again within the hold time), the zone in the message
    // (a reason cannot hold it); False with why not otherwise.
    #[test]
    fn a_zonal_autoshift_says_whether_it_shifts_and_why() {
        use healthroute_api::{AutoshiftState, ZoneDetection};
        use healthroute_compiler::testing::mk_autoshift;
        let zone = |name: &str, impaired: bool| ZoneDetection {
            zone: name.into(),
            impaired,
            ..Default::default()
        };
        let active = |healthy_since: Option<i64>| ZonalAutoshiftStatus {
            autoshift: Some(AutoshiftState::Active),
            active_zone: Some("zone-a".into()),
            autoshift_start_time: Some(Time(
                t(0).checked_add(jiff::SignedDuration::from_millis(250))
                    .expect("in range"),
            )),
            healthy_since: healthy_since.map(|s| Time(t(s))),
            message: Some("zone-a is impaired: 3 of 3 values unhealthy".into()),
            zones: vec![
                zone("zone-a", healthy_since.is_none()),
                zone("zone-b", false),
            ],
            ..Default::default()
        };
        let inactive = |zones: Vec<ZoneDetection>, message: &str| ZonalAutoshiftStatus {
            autoshift: Some(AutoshiftState::Inactive),
            message: Some(message.into()),
            zones,
            ..Default::default()
        };
        let enabled = mk_autoshift("api", true);
        let disabled = mk_autoshift("api", false);
        let cond = |st: &ZonalAutoshiftStatus, kind: &str| {
            st.conditions
                .iter()
                .find(|c| c.type_ == kind)
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
                .expect("condition")
        };
        let impaired = zonal_autoshift(active(None), &enabled, None, None, Some(3), t(1));
        assert_eq!(impaired.observed_generation, Some(3));
        assert_eq!(cond(&impaired, "Ready").0, "True");
        let (status, reason, message) = cond(&impaired, "Autoshift");
        assert_eq!((status.as_str(), reason.as_str()), ("True", "ZoneImpaired"));
        assert_eq!(
            message,
            "traffic moves away from zone-a since 2027-01-15T08:00:00Z: zone-a is impaired: 3 of 3 values unhealthy"
        );
        let recovering = zonal_autoshift(
            active(Some(5)),
            &enabled,
            None,
            Some(&impaired),
            Some(3),
            t(6),
        );
        let autoshift = recovering
            .conditions
            .iter()
            .find(|c| c.type_ == "Autoshift")
            .expect("Autoshift");
        assert_eq!(autoshift.reason, "ZoneRecovering");
        assert_eq!(
            autoshift.last_transition_time,
            Time(t(1)),
            "still True: no transition"
        );
        for (st, spec, reason) in [
            (
                inactive(vec![zone("zone-a", false)], "no zone is impaired"),
                &enabled,
                "NoZoneImpaired",
            ),
            (
                inactive(
                    vec![zone("zone-a", true), zone("zone-b", true)],
                    "zone-a, zone-b are impaired at the same time",
                ),
                &enabled,
                "SeveralZonesImpaired",
            ),
            (
                inactive(vec![zone("zone-a", true)], "autoshift is Disabled"),
                &disabled,
                "Disabled",
            ),
        ] {
            let written = zonal_autoshift(st.clone(), spec, None, None, None, t(1));
            let (status, got, message) = cond(&written, "Autoshift");
            assert_eq!((status.as_str(), got.as_str()), ("False", reason));
            assert_eq!(Some(message), st.message, "the engine's words");
        }
        let invalid = zonal_autoshift(
            inactive(
                Vec::new(),
                "the configuration cannot be used: no such date 2026-02-30",
            ),
            &enabled,
            Some("no such date 2026-02-30"),
            None,
            None,
            t(1),
        );
        assert_eq!(
            cond(&invalid, "Ready"),
            (
                "False".to_owned(),
                "InvalidSpec".to_owned(),
                "no such date 2026-02-30".to_owned()
            )
        );
        assert_eq!(cond(&invalid, "Autoshift").1, "InvalidSpec");
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
        // As the apply sends it.
        let body = serde_json::to_value(health_check(&health, None, Some(1), t(1))).expect("json");
        assert_eq!(body["conditions"][0]["reason"], "TargetDenied");
        assert!(
            body["conditions"][0]["message"]
                .as_str()
                .is_some_and(|m| m.contains("refuse to probe")),
            "{body}"
        );
    }
}
