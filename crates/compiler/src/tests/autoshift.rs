//! Zonal autoshift and practice runs (SEMANTICS AS1–AS12) through the whole compiler, on a
//! clock the tests drive: detection from the groups' health, the autoshift and its hold time,
//! precedence over and under other shifts, the practice runs' schedule, refusals, capacity
//! check, outcomes and requests.

use super::*;
use crate::autoshift::{AutoshiftEvent, AutoshiftInput, NodeInput};
use std::collections::BTreeSet;

use healthroute_api::{
    AutoshiftState, NotAppliedReason, NotStartedReason, PracticeRunOutcome, PracticeRunRequest,
    RequestAction, ShiftType, ZonalAutoshiftSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

const GROUPS: [&str; 3] = ["api", "web", "search"];
const ZONES: [&str; 3] = ["zone-a", "zone-b", "zone-c"];

/// The address of `group`'s value in `zone`.
fn ip(group: &str, zone: &str) -> String {
    let g = GROUPS.iter().position(|x| *x == group).unwrap_or(9) + 1;
    let z = ZONES.iter().position(|x| *x == zone).unwrap_or(9) + 1;
    format!("192.0.2.{}{}", g, z)
}

/// A check's state as one checker reports it now (with a fresh heartbeat).
fn report(c: &mut Compiler, name: &str, healthy: bool, now: Timestamp) {
    let mut input = CheckInput::new(mk_check(name));
    input.views = vec![mk_view("checker-a", healthy)];
    c.upsert_check(key(name), input);
    c.set_heartbeat("checker-a", now);
}

/// Three frontend groups (api, web, search), each with a checked record per zone, every
/// check healthy, an `outcome` and a `blocking` alarm, and a ZonalAutoshift `fleet` over them.
fn fleet(spec: impl FnOnce(&mut ZonalAutoshiftSpec)) -> Compiler {
    let mut c = mk_compiler();
    for g in GROUPS {
        let records = ZONES
            .iter()
            .map(|z| {
                in_zone(
                    checked(weighted(mk_record(z, &[&ip(g, z)]), 1), &format!("{g}-{z}")),
                    z,
                )
            })
            .collect();
        let mut input = group_input(mk_group(g, RoutingPolicy::Weighted, records));
        input.labels = [("tier".to_string(), "frontend".to_string())].into();
        c.upsert_group(key(g), input);
        for z in ZONES {
            report(&mut c, &format!("{g}-{z}"), true, t0());
        }
    }
    report(&mut c, "outcome", true, t0());
    report(&mut c, "blocking", true, t0());
    let mut s = mk_autoshift("api", true);
    s.target.record_group = None;
    s.target.selector = Some(LabelSelector {
        match_labels: Some([("tier".to_string(), "frontend".to_string())].into()),
        ..Default::default()
    });
    if let Some(p) = s.practice_run.as_mut() {
        p.blocking_alarms = vec![healthroute_api::HealthCheckRef {
            name: "blocking".into(),
        }];
    }
    spec(&mut s);
    c.upsert_autoshift(key("fleet"), autoshift_input(s));
    c
}

fn autoshift_input(spec: ZonalAutoshiftSpec) -> AutoshiftInput {
    AutoshiftInput {
        spec,
        created: Some(t0()),
        request: Ok(None),
        status: None,
    }
}

/// Sets the fleet's on-demand request (the annotation's value).
fn request(c: &mut Compiler, spec: &ZonalAutoshiftSpec, value: &str, zone: Option<&str>) {
    let mut input = autoshift_input(spec.clone());
    input.request = Ok(Some(PracticeRunRequest {
        value: value.into(),
        action: if value.starts_with("cancel") {
            RequestAction::Cancel
        } else {
            RequestAction::Start
        },
        zone: zone.map(str::to_owned),
    }));
    c.upsert_autoshift(key("fleet"), input);
}

/// Asserts that all a compile reports is the end of a practice run with `outcome`.
fn assert_run_ended(r: &crate::CompileReport, outcome: PracticeRunOutcome) {
    let ended = match &r.autoshift_events[..] {
        [AutoshiftEvent::PracticeRunEnded { outcome, .. }] => Some(*outcome),
        _ => None,
    };
    assert_eq!(ended, Some(outcome), "{:?}", r.autoshift_events);
}

fn fleet_spec(c: &Compiler) -> ZonalAutoshiftSpec {
    c.autoshifts[&key("fleet")].spec.clone()
}

/// Every value `group` answers over many draws.
fn values(c: &Compiler, group: &str) -> BTreeSet<String> {
    shares(c, group, 300)
        .into_keys()
        .flat_map(|k| k.split(',').map(str::to_owned).collect::<Vec<_>>())
        .collect()
}

fn zones_answered(c: &Compiler, group: &str) -> Vec<&'static str> {
    let answered = values(c, group);
    ZONES
        .into_iter()
        .filter(|z| answered.contains(&ip(group, z)))
        .collect()
}

fn status(c: &Compiler) -> healthroute_api::ZonalAutoshiftStatus {
    c.autoshift_status(&key("fleet")).expect("a status")
}

/// Fails (or heals) `group`'s check in `zone`.
fn zone_check(c: &mut Compiler, group: &str, zone: &str, healthy: bool, now: Timestamp) {
    report(c, &format!("{group}-{zone}"), healthy, now);
}

// SEM-AS2 SEM-AS3 SEM-AS4 SEM-AS12: zone-a fails in all three groups: the autoshift moves
// every group away from it at once; zone-a heals: traffic returns after the hold time, which
// the compiler's next deadline names.
#[test]
fn an_impaired_zone_is_shifted_away_from_until_it_holds_healthy() {
    let mut c = fleet(|s| {
        s.detection = Some(healthroute_api::DetectionSpec {
            hold_time: Some("5m".into()),
            ..Default::default()
        })
    });
    let report0 = c.compile(at(1));
    assert!(report0.autoshift_events.is_empty());
    assert_eq!(status(&c).autoshift, Some(AutoshiftState::Inactive));
    for g in GROUPS {
        zone_check(&mut c, g, "zone-a", false, at(10));
    }
    let r = c.compile(at(10));
    assert!(
        matches!(&r.autoshift_events[..], [AutoshiftEvent::AutoshiftStarted { zone, .. }] if zone == "zone-a"),
        "{:?}",
        r.autoshift_events
    );
    for g in GROUPS {
        assert_eq!(zones_answered(&c, g), ["zone-b", "zone-c"], "{g}");
    }
    let st = status(&c);
    assert_eq!(st.autoshift, Some(AutoshiftState::Active));
    assert_eq!(st.active_zone.as_deref(), Some("zone-a"));
    assert_eq!(st.autoshift_start_time.map(|t| t.0), Some(at(10)));
    let a = st
        .zones
        .iter()
        .find(|z| z.zone == "zone-a")
        .expect("zone-a");
    assert!(
        a.impaired && a.unhealthy_values == 3 && a.unhealthy_groups == 3,
        "{a:?}"
    );
    // The autoshift is a shift of type Autoshift, applied to every group (AS5).
    assert_eq!(st.shifts.len(), 1);
    assert_eq!(st.shifts[0].name, "fleet:autoshift");
    assert_eq!(st.shifts[0].status.shift_type, Some(ShiftType::Autoshift));
    assert_eq!(st.shifts[0].status.applied_groups.as_deref(), Some("3/3"));

    // Recovery: healthy since 100 s, back at 100 + 300 s, not before.
    for g in GROUPS {
        zone_check(&mut c, g, "zone-a", true, at(100));
    }
    c.compile(at(100));
    assert_eq!(status(&c).healthy_since.map(|t| t.0), Some(at(100)));
    // Once the checker's heartbeat is stale (a deadline of its own), the hold time's end is
    // the next one.
    c.compile(at(200));
    assert_eq!(c.next_deadline(), Some(at(400)));
    c.compile(at(399));
    assert_eq!(zones_answered(&c, "api"), ["zone-b", "zone-c"]);
    let r = c.compile(at(400));
    assert!(
        matches!(&r.autoshift_events[..], [AutoshiftEvent::AutoshiftEnded { zone, .. }] if zone == "zone-a"),
        "{:?}",
        r.autoshift_events
    );
    for g in GROUPS {
        assert_eq!(zones_answered(&c, g), ZONES, "{g}");
    }
    let st = status(&c);
    assert_eq!(st.autoshift, Some(AutoshiftState::Inactive));
    assert_eq!(st.autoshift_end_time.map(|t| t.0), Some(at(400)));
    assert!(st.shifts.is_empty());
}

// SEM-AS4: a relapse during the hold time restarts it.
#[test]
fn a_relapse_restarts_the_hold_time() {
    let mut c = fleet(|_| {});
    for g in GROUPS {
        zone_check(&mut c, g, "zone-a", false, at(1));
    }
    c.compile(at(1));
    for g in GROUPS {
        zone_check(&mut c, g, "zone-a", true, at(60));
    }
    c.compile(at(60));
    for g in GROUPS {
        zone_check(&mut c, g, "zone-a", false, at(300));
    }
    c.compile(at(300));
    assert_eq!(status(&c).healthy_since, None);
    for g in GROUPS {
        zone_check(&mut c, g, "zone-a", true, at(400));
    }
    c.compile(at(400));
    // The default hold time is 10 minutes, from the last recovery.
    c.compile(at(60 + 600));
    assert_eq!(status(&c).active_zone.as_deref(), Some("zone-a"));
    c.compile(at(400 + 600));
    assert_eq!(status(&c).active_zone, None);
}

// SEM-AS3: one group failing alone in zone-a is one bad service, not a zone.
#[test]
fn one_group_failing_alone_is_not_an_impaired_zone() {
    let mut c = fleet(|_| {});
    zone_check(&mut c, "api", "zone-a", false, at(1));
    let r = c.compile(at(1));
    assert!(r.autoshift_events.is_empty(), "{:?}", r.autoshift_events);
    let st = status(&c);
    assert_eq!(st.autoshift, Some(AutoshiftState::Inactive));
    let a = st
        .zones
        .iter()
        .find(|z| z.zone == "zone-a")
        .expect("zone-a");
    assert!(!a.impaired);
    assert_eq!((a.unhealthy_values, a.values), (1, 3));
    // Failing everywhere is not one zone's failure either.
    for g in GROUPS {
        for z in ["zone-a", "zone-b"] {
            zone_check(&mut c, g, z, false, at(2));
        }
    }
    c.compile(at(2));
    assert_eq!(status(&c).autoshift, Some(AutoshiftState::Inactive));
}

// SEM-AS3 SEM-AS4: a zone alarm and Nodes impair a zone; two impaired zones at once shift
// nothing.
#[test]
fn zone_alarms_nodes_and_two_zones_at_once() {
    let mut c = fleet(|s| {
        s.detection = Some(healthroute_api::DetectionSpec {
            zone_alarms: vec![
                healthroute_api::ZoneAlarm {
                    zone: "zone-b".into(),
                    health_check: "net-b".into(),
                },
                healthroute_api::ZoneAlarm {
                    zone: "zone-c".into(),
                    health_check: "net-c".into(),
                },
            ],
            hold_time: Some("0s".into()),
            ..Default::default()
        })
    });
    report(&mut c, "net-b", true, t0());
    report(&mut c, "net-c", true, t0());
    c.compile(at(1));
    report(&mut c, "net-b", false, at(2));
    c.compile(at(2));
    assert_eq!(status(&c).active_zone.as_deref(), Some("zone-b"));
    // While zone-b is shifted away from, zone-c's alarm changes nothing.
    report(&mut c, "net-c", false, at(3));
    c.compile(at(3));
    assert_eq!(status(&c).active_zone.as_deref(), Some("zone-b"));
    report(&mut c, "net-b", true, at(4));
    c.compile(at(4));
    // zone-b healthy, hold time 0: back at once; zone-c alone is impaired now.
    let st = status(&c);
    assert_eq!(st.active_zone.as_deref(), Some("zone-c"), "{st:?}");

    let mut c = fleet(|_| {});
    for (i, z) in ZONES.iter().enumerate() {
        for n in 0..2 {
            c.upsert_node(
                format!("node-{i}-{n}"),
                NodeInput {
                    zone: Some((*z).into()),
                    ready: true,
                },
            );
        }
    }
    c.compile(at(1));
    assert_eq!(status(&c).autoshift, Some(AutoshiftState::Inactive));
    c.upsert_node(
        "node-0-0",
        NodeInput {
            zone: Some("zone-a".into()),
            ready: false,
        },
    );
    c.compile(at(2));
    let st = status(&c);
    assert_eq!(st.active_zone.as_deref(), Some("zone-a"));
    let a = st
        .zones
        .iter()
        .find(|z| z.zone == "zone-a")
        .expect("zone-a");
    assert_eq!((a.nodes, a.nodes_not_ready), (Some(2), Some(1)));

    // Two zones impaired at once: no autoshift, and the status says so.
    let mut c = fleet(|_| {});
    for g in GROUPS {
        zone_check(&mut c, g, "zone-a", false, at(1));
    }
    c.assume_impaired(Some("zone-b".into()));
    c.compile(at(1));
    let st = status(&c);
    assert_eq!(st.autoshift, Some(AutoshiftState::Inactive));
    assert!(
        st.message
            .as_deref()
            .is_some_and(|m| m.contains("zone-a, zone-b are impaired at the same time")),
        "{st:?}"
    );
}

// SEM-AS4 SEM-Z6: an autoshift never leaves a group with no healthy endpoint outside the zone;
// disabling autoshift ends it at once.
#[test]
fn an_autoshift_fails_open_and_ends_when_disabled() {
    let mut c = fleet(|_| {});
    c.upsert_group(
        key("solo"),
        GroupInput {
            labels: [("tier".to_string(), "frontend".to_string())].into(),
            ..group_input(mk_group(
                "solo",
                RoutingPolicy::Simple,
                vec![in_zone(mk_record("a", &["198.51.100.1"]), "zone-a")],
            ))
        },
    );
    // zone-a taken as impaired while its values stay healthy: what the shift does shows.
    c.assume_impaired(Some("zone-a".into()));
    c.compile(at(1));
    let st = status(&c);
    assert_eq!(st.active_zone.as_deref(), Some("zone-a"));
    assert_eq!(zones_answered(&c, "api"), ["zone-b", "zone-c"]);
    let solo = st.shifts[0]
        .status
        .groups
        .iter()
        .find(|g| g.record_group == "solo")
        .expect("solo");
    assert_eq!(
        solo.reason,
        Some(NotAppliedReason::NoHealthyCapacityElsewhere)
    );
    assert_eq!(answer(&c, "solo"), "198.51.100.1");

    let mut spec = fleet_spec(&c);
    spec.autoshift = healthroute_api::AutoshiftMode::Disabled;
    c.upsert_autoshift(key("fleet"), autoshift_input(spec));
    let r = c.compile(at(2));
    assert!(matches!(
        &r.autoshift_events[..],
        [AutoshiftEvent::AutoshiftEnded { .. }]
    ));
    assert_eq!(zones_answered(&c, "api"), ["zone-a", "zone-b", "zone-c"]);
}

// SEM-AS5 SEM-Z5: a customer shift wins over an autoshift, which wins over a practice run;
// the losers say NotApplied (Conflict), each shift says its type.
#[test]
fn customer_shifts_win_over_autoshifts_which_win_over_practice_runs() {
    let mut c = fleet(|_| {});
    c.assume_impaired(Some("zone-a".into()));
    c.compile(at(1));
    assert_eq!(zones_answered(&c, "api"), ["zone-b", "zone-c"]);
    // A customer shift away from zone-b, younger than the autoshift, wins on api.
    c.upsert_shift(
        key("drain-b"),
        ShiftInput {
            spec: mk_shift("zone-b", "api", "1h"),
            created: Some(at(5)),
            status: None,
        },
    );
    c.compile(at(5));
    assert_eq!(zones_answered(&c, "api"), ["zone-a", "zone-c"]);
    assert_eq!(zones_answered(&c, "web"), ["zone-b", "zone-c"]);
    let customer = c
        .shift_status(&key("drain-b"), at(5))
        .expect("shift")
        .expect("valid");
    assert_eq!(customer.shift_type, Some(ShiftType::Customer));
    assert_eq!(customer.groups[0].applied_status, AppliedStatus::Applied);
    let st = status(&c);
    let api = st.shifts[0]
        .status
        .groups
        .iter()
        .find(|g| g.record_group == "api")
        .expect("api");
    assert_eq!(
        (api.applied_status, api.reason),
        (AppliedStatus::NotApplied, Some(NotAppliedReason::Conflict))
    );
    assert_eq!(st.shifts[0].status.applied_groups.as_deref(), Some("2/3"));
    // The customer shift ends: the autoshift applies again.
    c.delete_shift(&key("drain-b"));
    c.compile(at(6));
    assert_eq!(zones_answered(&c, "api"), ["zone-b", "zone-c"]);

    // Under the engine, a practice run of another configuration loses to the autoshift.
    let mut other = mk_autoshift("api", false);
    if let Some(p) = other.practice_run.as_mut() {
        p.duration = Some("10m".into());
    }
    let mut input = autoshift_input(other);
    input.request = Ok(Some(PracticeRunRequest {
        value: "start".into(),
        action: RequestAction::Start,
        zone: Some("zone-c".into()),
    }));
    c.upsert_autoshift(key("other"), input);
    c.compile(at(7));
    let other = c.autoshift_status(&key("other")).expect("status");
    // It may not even start: an autoshift is in force for its group (AS7).
    assert_eq!(
        other.not_started.map(|n| n.reason),
        Some(NotStartedReason::AutoshiftActive)
    );
}

// SEM-AS5: within a compile, the ordering of types is the rule, whatever the ages.
#[test]
fn precedence_orders_types_before_ages() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Weighted,
            ZONES
                .iter()
                .map(|z| in_zone(weighted(mk_record(z, &[&ip("api", z)]), 1), z))
                .collect(),
        )),
    );
    report(&mut c, "outcome", true, t0());
    let mut spec = mk_autoshift("api", false);
    if let Some(p) = spec.practice_run.as_mut() {
        p.duration = Some("1h".into());
    }
    let mut input = autoshift_input(spec);
    input.request = Ok(Some(PracticeRunRequest {
        value: "start".into(),
        action: RequestAction::Start,
        zone: Some("zone-c".into()),
    }));
    c.upsert_autoshift(key("fleet"), input);
    c.compile(at(1));
    assert_eq!(zones_answered(&c, "api"), ["zone-a", "zone-b"]);
    // An older customer shift would have been refused the run; a younger one wins anyway.
    c.upsert_shift(
        key("drain-a"),
        ShiftInput {
            spec: mk_shift("zone-a", "api", "1h"),
            created: Some(at(2)),
            status: None,
        },
    );
    let r = c.compile(at(2));
    // The customer shift interrupts the practice run (AS9) and applies.
    assert!(
        r.autoshift_events.iter().any(|e| matches!(
            e,
            AutoshiftEvent::PracticeRunEnded {
                outcome: PracticeRunOutcome::Interrupted,
                ..
            }
        )),
        "{:?}",
        r.autoshift_events
    );
    assert_eq!(zones_answered(&c, "api"), ["zone-b", "zone-c"]);
}

// SEM-AS6 SEM-AS9 SEM-AS12: runs are due one cadence after the configuration appeared, run
// their duration, succeed, and rotate over the zones; the next deadline names each step.
#[test]
fn practice_runs_follow_the_cadence_and_rotate_over_the_zones() {
    let mut c = fleet(|_| {});
    c.compile(at(1));
    let week = 168 * 3600;
    assert_eq!(
        status(&c).next_practice_run.map(|t| t.0),
        Some(at(week)),
        "one cadence after creation"
    );
    c.compile(at(100));
    assert_eq!(c.next_deadline(), Some(at(week)));
    for g in GROUPS {
        for z in ZONES {
            zone_check(&mut c, g, z, true, at(week));
        }
    }
    report(&mut c, "outcome", true, at(week));
    report(&mut c, "blocking", true, at(week));
    let r = c.compile(at(week));
    assert!(
        matches!(&r.autoshift_events[..], [AutoshiftEvent::PracticeRunStarted { zone, requested: false, .. }] if zone == "zone-a"),
        "{:?}",
        r.autoshift_events
    );
    for g in GROUPS {
        assert_eq!(zones_answered(&c, g), ["zone-b", "zone-c"]);
    }
    let st = status(&c);
    assert_eq!(st.outcomes[0].outcome, PracticeRunOutcome::Pending);
    assert_eq!(st.shifts[0].status.shift_type, Some(ShiftType::PracticeRun));
    assert_eq!(
        st.practice_run.as_ref().map(|p| p.end_time.0),
        Some(at(week + 1800))
    );
    c.compile(at(week + 100));
    assert_eq!(c.next_deadline(), Some(at(week + 1800)));
    let r = c.compile(at(week + 1800));
    assert_run_ended(&r, PracticeRunOutcome::Succeeded);
    assert_eq!(zones_answered(&c, "api"), ZONES);
    let st = status(&c);
    assert_eq!(st.outcomes.len(), 1);
    assert_eq!(
        st.outcomes[0].end_time.as_ref().map(|t| t.0),
        Some(at(week + 1800))
    );
    assert_eq!(
        st.outcomes[0].message.as_deref(),
        Some("ran 30m with no outcome alarm in ALARM"),
        "the length as a spec writes it"
    );
    assert_eq!(st.next_practice_run.map(|t| t.0), Some(at(2 * week)));
    for g in GROUPS {
        for z in ZONES {
            zone_check(&mut c, g, z, true, at(2 * week));
        }
    }
    report(&mut c, "outcome", true, at(2 * week));
    report(&mut c, "blocking", true, at(2 * week));
    c.compile(at(2 * week));
    assert_eq!(
        status(&c).practice_run.map(|p| p.zone).as_deref(),
        Some("zone-b"),
        "the next zone in rotation"
    );
}

// SEM-AS6 SEM-AS7: a due run waits for an allowed window and skips blocked dates; a
// requested one in a blocked window does not start and says why.
#[test]
fn practice_runs_keep_to_the_calendar() {
    // t0 is 2027-01-15T08:00:00Z, a Friday.
    assert_eq!(t0().to_string(), "2027-01-15T08:00:00Z");
    let mut c = fleet(|s| {
        if let Some(p) = s.practice_run.as_mut() {
            p.cadence = Some("24h".into());
            p.allowed_windows = vec!["Tue:09:00-Tue:12:00".into()];
            p.blocked_dates = vec!["2027-01-19".into()];
            p.blocked_windows = vec!["Fri:08:00-Fri:09:00".into()];
        }
    });
    c.compile(at(1));
    // Due Saturday 08:00; Tuesday the 19th is blocked: Tuesday the 26th at 09:00.
    assert_eq!(
        status(&c).next_practice_run.map(|t| t.0.to_string()),
        Some("2027-01-26T09:00:00Z".into())
    );
    let spec = fleet_spec(&c);
    request(&mut c, &spec, "start:1", None);
    let r = c.compile(at(60));
    let st = status(&c);
    let refused = st.not_started.expect("not started");
    assert_eq!(
        refused.reason,
        NotStartedReason::BlockedWindow,
        "{refused:?}"
    );
    assert!(
        refused.message.contains("Fri:08:00-Fri:09:00"),
        "{refused:?}"
    );
    assert_eq!(refused.request.as_deref(), Some("start:1"));
    assert_eq!(st.last_request.as_deref(), Some("start:1"));
    assert_eq!(r.autoshift_events.len(), 1, "{:?}", r.autoshift_events);
    assert!(st.practice_run.is_none());
    // Answered once: the same value asks nothing more.
    let r = c.compile(at(61));
    assert!(r.autoshift_events.is_empty());
}

// SEM-AS9 SEM-AS10: a requested run whose outcome alarm goes into ALARM fails at once and
// traffic returns in that compile; cancel interrupts; a second start while one runs is refused.
#[test]
fn an_outcome_alarm_fails_the_run_at_once() {
    let mut c = fleet(|_| {});
    c.compile(at(1));
    let spec = fleet_spec(&c);
    request(&mut c, &spec, "start:a", Some("zone-b"));
    let r = c.compile(at(10));
    assert!(matches!(
        &r.autoshift_events[..],
        [AutoshiftEvent::PracticeRunStarted { requested: true, zone, .. }] if zone == "zone-b"
    ));
    assert_eq!(zones_answered(&c, "web"), ["zone-a", "zone-c"]);
    report(&mut c, "outcome", false, at(20));
    let r = c.compile(at(20));
    assert_run_ended(&r, PracticeRunOutcome::Failed);
    assert_eq!(zones_answered(&c, "web"), ZONES, "traffic back at once");
    let st = status(&c);
    assert_eq!(st.outcomes[0].outcome, PracticeRunOutcome::Failed);
    assert_eq!(st.outcomes[0].end_time.as_ref().map(|t| t.0), Some(at(20)));
    assert!(st.outcomes[0].requested);

    // A new request while an outcome alarm is in ALARM: refused.
    request(&mut c, &spec, "start:b", None);
    c.compile(at(30));
    assert_eq!(
        status(&c).not_started.map(|n| n.reason),
        Some(NotStartedReason::OutcomeAlarm)
    );
    report(&mut c, "outcome", true, at(40));
    request(&mut c, &spec, "start:c", None);
    c.compile(at(40));
    assert_eq!(
        status(&c).practice_run.map(|p| p.zone).as_deref(),
        Some("zone-c"),
        "rotation goes on after zone-b"
    );
    request(&mut c, &spec, "start:d", None);
    c.compile(at(41));
    assert_eq!(
        status(&c).not_started.map(|n| n.reason),
        Some(NotStartedReason::AlreadyRunning)
    );
    request(&mut c, &spec, "cancel:1", None);
    let r = c.compile(at(50));
    assert!(matches!(
        &r.autoshift_events[..],
        [AutoshiftEvent::PracticeRunEnded {
            outcome: PracticeRunOutcome::Interrupted,
            ..
        }]
    ));
    assert_eq!(zones_answered(&c, "web"), ZONES);
}

// SEM-AS7: blocking alarms, a missing alarm and a customer shift keep a due run from
// starting; it starts as soon as nothing holds it back, and says why it waited once.
#[test]
fn a_due_run_waits_while_something_holds_it_back() {
    let week = 168 * 3600;
    let mut c = fleet(|_| {});
    c.compile(at(1));
    let refresh = |c: &mut Compiler, now: Timestamp| {
        for g in GROUPS {
            for z in ZONES {
                zone_check(c, g, z, true, now);
            }
        }
        report(c, "outcome", true, now);
    };
    refresh(&mut c, at(week));
    report(&mut c, "blocking", false, at(week));
    let r = c.compile(at(week));
    assert!(matches!(
        &r.autoshift_events[..],
        [AutoshiftEvent::PracticeRunNotStarted {
            reason: NotStartedReason::BlockingAlarm,
            request: None,
            ..
        }]
    ));
    let r = c.compile(at(week + 5));
    assert!(r.autoshift_events.is_empty(), "said once");
    assert!(
        status(&c)
            .next_practice_run
            .is_some_and(|t| t.0 <= at(week + 5))
    );
    // A customer shift now, and the blocking alarm clears: still waiting.
    c.upsert_shift(
        key("drain-c"),
        ShiftInput {
            spec: mk_shift("zone-c", "search", "1h"),
            created: Some(at(week + 10)),
            status: None,
        },
    );
    report(&mut c, "blocking", true, at(week + 10));
    c.compile(at(week + 10));
    assert_eq!(
        status(&c).not_started.map(|n| n.reason),
        Some(NotStartedReason::CustomerShiftActive)
    );
    c.delete_shift(&key("drain-c"));
    let r = c.compile(at(week + 20));
    assert!(
        matches!(
            &r.autoshift_events[..],
            [AutoshiftEvent::PracticeRunStarted { .. }]
        ),
        "{:?}",
        r.autoshift_events
    );
    assert!(status(&c).not_started.is_none());

    // An alarm that names no HealthCheck.
    let mut c = fleet(|s| {
        if let Some(p) = s.practice_run.as_mut() {
            p.outcome_alarms[0].name = "nowhere".into();
        }
    });
    c.compile(at(1));
    let spec = fleet_spec(&c);
    request(&mut c, &spec, "start", None);
    c.compile(at(2));
    assert_eq!(
        status(&c).not_started.map(|n| n.reason),
        Some(NotStartedReason::AlarmMissing)
    );
}

// SEM-AS8 SEM-AS6: a run whose zone's capacity the others cannot take does not start:
// CapacityCheckFailed, and the next attempt is an hour later.
#[test]
fn the_capacity_check_keeps_a_run_from_starting() {
    let mut c = fleet(|_| {});
    // web keeps only zone-a healthy... and zone-b: shifting zone-a away leaves 1 of 3.
    zone_check(&mut c, "web", "zone-c", false, at(1));
    zone_check(&mut c, "web", "zone-b", false, at(1));
    c.compile(at(1));
    let spec = fleet_spec(&c);
    request(&mut c, &spec, "start", Some("zone-a"));
    let r = c.compile(at(2));
    assert!(
        matches!(&r.autoshift_events[..], [AutoshiftEvent::PracticeRunEnded { outcome: PracticeRunOutcome::CapacityCheckFailed, message, .. }] if message.contains("shop/web")),
        "{:?}",
        r.autoshift_events
    );
    assert_eq!(zones_answered(&c, "api"), ZONES, "no shift");
    let st = status(&c);
    assert_eq!(
        st.outcomes[0].outcome,
        PracticeRunOutcome::CapacityCheckFailed
    );
    assert_eq!(st.next_practice_run.map(|t| t.0), Some(at(2 + 3600)));
}

// SEM-AS11 SEM-AS12: a new compiler (an operator that restarted) picks the engine up from the
// status: the autoshift keeps its start, the running run its end.
#[test]
fn the_engine_resumes_from_its_status() {
    let mut c = fleet(|_| {});
    for g in GROUPS {
        zone_check(&mut c, g, "zone-a", false, at(1));
    }
    c.compile(at(1));
    let written = status(&c);

    let mut d = fleet(|_| {});
    for g in GROUPS {
        zone_check(&mut d, g, "zone-a", false, at(50));
    }
    let mut input = autoshift_input(fleet_spec(&c));
    input.status = Some(written);
    d.upsert_autoshift(key("fleet"), input);
    let r = d.compile(at(50));
    assert!(r.autoshift_events.is_empty(), "{:?}", r.autoshift_events);
    let st = status(&d);
    assert_eq!(st.autoshift_start_time.map(|t| t.0), Some(at(1)));
    assert_eq!(zones_answered(&d, "api"), ["zone-b", "zone-c"]);
}

// SEM-AS1: a configuration that cannot be used holds no shift and says why.
#[test]
fn an_unusable_configuration_holds_nothing() {
    let mut c = fleet(|_| {});
    c.assume_impaired(Some("zone-a".into()));
    c.compile(at(1));
    assert_eq!(zones_answered(&c, "api"), ["zone-b", "zone-c"]);
    let mut spec = fleet_spec(&c);
    if let Some(p) = spec.practice_run.as_mut() {
        p.blocked_dates = vec!["2027-02-30".into()];
    }
    c.upsert_autoshift(key("fleet"), autoshift_input(spec));
    c.compile(at(2));
    assert_eq!(zones_answered(&c, "api"), ZONES);
    assert!(
        c.autoshift_error(&key("fleet"))
            .is_some_and(|e| e.contains("2027-02-30"))
    );
}

// SEM-AS1 SEM-AS11: the reason a configuration cannot be used survives: in the end of the
// autoshift it held, in the status, and in what the compiler answers (with the metric's
// reason); it goes when the configuration is usable again. A hold time is shown as written
// (`6s`, not `PT6S`).
#[test]
fn the_reason_a_configuration_cannot_be_used_survives() {
    use healthroute_api::InvalidConfigurationReason;
    /// What a compile's engine said: `started`, or `ended: ` and why.
    fn told(r: &crate::CompileReport) -> Vec<String> {
        r.autoshift_events
            .iter()
            .map(|e| match e {
                AutoshiftEvent::AutoshiftStarted { .. } => "started".to_owned(),
                AutoshiftEvent::AutoshiftEnded { message, .. } => format!("ended: {message}"),
                other => format!("{other:?}"),
            })
            .collect()
    }
    let mut c = fleet(|s| {
        s.detection = Some(healthroute_api::DetectionSpec {
            hold_time: Some("6s".into()),
            ..Default::default()
        })
    });
    c.assume_impaired(Some("zone-a".into()));
    assert_eq!(told(&c.compile(at(1))), ["started"]);
    let usable = fleet_spec(&c);
    let mut spec = usable.clone();
    if let Some(p) = spec.practice_run.as_mut() {
        p.duration = Some("1h".into());
        p.cadence = Some("1h".into());
    }
    c.upsert_autoshift(key("fleet"), autoshift_input(spec));
    let r = c.compile(at(2));
    let why = "the configuration cannot be used: practiceRun.cadence 1h must be longer than its duration 1h";
    assert_eq!(told(&r), [format!("ended: {why}")]);
    assert_eq!(
        r.autoshift_events[0].to_string(),
        format!("shop/fleet: autoshift away from zone-a ended: {why}")
    );
    assert_eq!(status(&c).message.as_deref(), Some(why));
    let invalid = c.autoshift_invalid(&key("fleet")).expect("unusable");
    assert_eq!(
        invalid.reason,
        InvalidConfigurationReason::CadenceNotLongerThanDuration
    );
    assert_eq!(
        c.autoshift_error(&key("fleet")),
        Some("practiceRun.cadence 1h must be longer than its duration 1h")
    );
    // A later compile changes nothing and says nothing more.
    assert!(told(&c.compile(at(3))).is_empty());

    c.upsert_autoshift(key("fleet"), autoshift_input(usable));
    assert_eq!(told(&c.compile(at(4))), ["started"]);
    assert_eq!(c.autoshift_invalid(&key("fleet")), None);
    c.assume_impaired(None);
    c.compile(at(10));
    let ended = told(&c.compile(at(16)));
    assert!(
        ended.len() == 1 && ended[0].ends_with("(6s hold time)"),
        "{ended:?}"
    );
}

// SEM-AS5 SEM-AS2: on one group, the first type applies whatever the ages, then the oldest of
// that type; the others are Conflict, and the explanation says which took precedence. The
// zone health counts every value as before any shift.
#[test]
fn one_group_applies_the_first_type_then_the_oldest() {
    let spec = mk_group(
        "api",
        RoutingPolicy::Weighted,
        ZONES
            .iter()
            .map(|z| in_zone(weighted(mk_record(z, &[&ip("api", z)]), 2), z))
            .collect(),
    );
    let zones = ServedZones::new(["example.com"]).expect("zone");
    let (name, parsed) = group::validate(&key("api"), &spec, &zones).expect("valid");
    let shift = |n: &str, shift_type: ShiftType, zone: &str, start: i64| group::ActiveShift {
        key: key(n),
        shift_type,
        away_from: zone.into(),
        start: at(start),
    };
    let checks = BTreeMap::new();
    let services = BTreeMap::new();
    let compile = |shifts: &[group::ActiveShift]| {
        let env = group::GroupEnv {
            key: &key("api"),
            zones: &zones,
            checks: &checks,
            services: &services,
            alias_target: &|_| None,
            shifts,
            explain: true,
            statuses: true,
            zone_health: true,
        };
        group::compile(&env, &spec, &name, &parsed, 60)
    };
    let applied = |o: &group::GroupOutcome| -> Vec<String> {
        o.shifts
            .iter()
            .filter(|s| s.applied == AppliedStatus::Applied)
            .map(|s| s.shift.name.to_string())
            .collect()
    };
    let all = [
        shift("practice", ShiftType::PracticeRun, "zone-c", 0),
        shift("auto-young", ShiftType::Autoshift, "zone-b", 7),
        shift("auto-old", ShiftType::Autoshift, "zone-b", 5),
        shift("customer", ShiftType::Customer, "zone-a", 10),
    ];
    let out = compile(&all);
    assert_eq!(applied(&out), ["customer"]);
    assert!(
        out.shifts
            .iter()
            .filter(|s| s.shift.name.as_ref() != "customer")
            .all(|s| s.reason == Some(NotAppliedReason::Conflict))
    );
    assert!(
        out.explain.iter().any(|l| l.contains(
            "zonal shift shop/practice (PracticeRun) not applied: shop/customer (Customer) takes precedence"
        )),
        "{:#?}",
        out.explain
    );
    assert_eq!(applied(&compile(&all[..3])), ["auto-old"]);
    assert_eq!(applied(&compile(&all[..1])), ["practice"]);
    let health = out.zone_health.expect("counted");
    for z in ZONES {
        let h = &health.zones[z];
        assert_eq!((h.values, h.unhealthy, h.capacity), (1, 0, 2.0), "{z}");
    }
}

// SEM-AS2: endpoint values count by readiness, in their EndpointSlice's zone; a shift does not
// change what detection sees.
#[test]
fn endpoint_values_count_by_readiness_whatever_the_shifts() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("web"),
        group_input(mk_group(
            "web",
            RoutingPolicy::Simple,
            vec![mk_service_record("pods", "web")],
        )),
    );
    c.upsert_service(
        key("web"),
        ServiceEndpoints {
            cluster_ips: vec![],
            endpoints: vec![
                mk_endpoint("10.0.0.1", false, "zone-a"),
                mk_endpoint("10.0.0.2", true, "zone-a"),
                mk_endpoint("10.0.0.3", true, "zone-b"),
            ],
        },
    );
    report(&mut c, "outcome", true, t0());
    c.upsert_autoshift(key("fleet"), autoshift_input(mk_autoshift("web", true)));
    c.upsert_shift(
        key("drain-b"),
        ShiftInput {
            spec: mk_shift("zone-b", "web", "1h"),
            created: Some(t0()),
            status: None,
        },
    );
    c.compile(at(1));
    assert_eq!(answer(&c, "web"), "10.0.0.2");
    let health = c
        .outcome(&key("web"))
        .and_then(|o| o.zone_health.clone())
        .expect("counted");
    assert_eq!(
        (
            health.zones["zone-a"].values,
            health.zones["zone-a"].unhealthy
        ),
        (2, 1)
    );
    assert_eq!(
        (
            health.zones["zone-b"].values,
            health.zones["zone-b"].unhealthy
        ),
        (1, 0)
    );
    let st = status(&c);
    let a = st
        .zones
        .iter()
        .find(|z| z.zone == "zone-a")
        .expect("zone-a");
    assert!(
        a.impaired,
        "one group alone: every group with values is enough ({a:?})"
    );
}

// SEM-AS9 SEM-AS5: another configuration's autoshift interrupts a practice run on the same
// groups in the compile that starts it, whichever configuration steps first.
#[test]
fn an_autoshift_of_another_configuration_interrupts_a_practice_run_at_once() {
    let mut c = fleet(|s| s.autoshift = healthroute_api::AutoshiftMode::Disabled);
    c.delete_autoshift(&key("fleet"));
    let mut practice = autoshift_input(mk_autoshift("api", false));
    practice.request = Ok(Some(PracticeRunRequest {
        value: "start".into(),
        action: RequestAction::Start,
        zone: Some("zone-c".into()),
    }));
    c.upsert_autoshift(key("aa-practice"), practice);
    c.compile(at(1));
    assert_eq!(zones_answered(&c, "api"), ["zone-a", "zone-b"]);
    c.upsert_autoshift(key("zz-auto"), autoshift_input(mk_autoshift("api", true)));
    c.assume_impaired(Some("zone-a".into()));
    let r = c.compile(at(2));
    assert!(
        r.autoshift_events.iter().any(|e| matches!(
            e,
            AutoshiftEvent::PracticeRunEnded { config, outcome: PracticeRunOutcome::Interrupted, .. }
                if config.name.as_ref() == "aa-practice"
        )),
        "{:?}",
        r.autoshift_events
    );
    assert_eq!(zones_answered(&c, "api"), ["zone-b", "zone-c"]);
}

// SEM-Z3 SEM-AS9: a run's end that the clock passes after a compile, before its caller asks
// for the next deadline, is still the next deadline, due at once: traffic returns on the
// next compile, not at some later, unrelated one.
#[test]
fn a_run_end_passed_before_the_timer_is_armed_is_due_at_once() {
    let ms = jiff::SignedDuration::from_millis;
    let mut c = fleet(|_| {});
    c.compile(at(1));
    let spec = fleet_spec(&c);
    request(&mut c, &spec, "start:late", Some("zone-c"));
    c.compile(at(10));
    let end = status(&c).practice_run.expect("a run").end_time.0;
    assert_eq!(zones_answered(&c, "api"), ["zone-a", "zone-b"]);

    // The last compile before the end; the caller reads the clock again just after the end.
    c.compile(end - ms(1));
    assert_eq!(c.next_deadline(), Some(end));
    assert_eq!(
        c.time_to_deadline(end + ms(1)),
        Some(std::time::Duration::ZERO)
    );
    // A timer that fires a little early finds the deadline still ahead, never at zero.
    assert_eq!(
        c.time_to_deadline(end - jiff::SignedDuration::from_micros(300)),
        Some(std::time::Duration::from_micros(300))
    );

    let r = c.compile(end + ms(1));
    assert_run_ended(&r, PracticeRunOutcome::Succeeded);
    assert_eq!(zones_answered(&c, "api"), ZONES);
    assert!(
        c.next_deadline().is_none_or(|t| t > end + ms(1)),
        "acted on, so no longer due"
    );
}
