//! The host's part, pure: what a compile counts and reports (AS1, AS11), when the next one is
//! due (AS12), and what a host that stops compiling exports (AS13: the leader's alone).

use std::sync::Arc;
use std::time::{Duration, Instant};

use healthroute_api::{InvalidConfigurationReason, NotStartedReason, RoutingPolicy};
use prometheus_client::registry::Registry;

use super::*;
use crate::AutoshiftInput;
use crate::testing::*;

/// A group `api` with a record in zone-a and one in zone-b, and a ZonalAutoshift `fleet` over
/// it, autoshift enabled.
fn fleet() -> Compiler {
    let mut c = mk_compiler();
    let records = ["zone-a", "zone-b"]
        .iter()
        .enumerate()
        .map(|(i, z)| in_zone(weighted(mk_record(z, &[&format!("192.0.2.{i}")]), 1), z))
        .collect();
    c.upsert_group(
        key("api"),
        group_input(mk_group("api", RoutingPolicy::Weighted, records)),
    );
    c.upsert_autoshift(key("fleet"), input(mk_autoshift("api", true)));
    c
}

fn input(spec: healthroute_api::ZonalAutoshiftSpec) -> AutoshiftInput {
    AutoshiftInput {
        spec,
        created: Some(t0()),
        request: Ok(None),
        status: None,
    }
}

/// The same configuration with a practice run no longer than its cadence (AS1).
fn unusable_fleet(c: &mut Compiler, cadence: &str) {
    let mut spec = mk_autoshift("api", true);
    if let Some(p) = spec.practice_run.as_mut() {
        p.duration = Some("1h".into());
        p.cadence = Some(cadence.into());
    }
    c.upsert_autoshift(key("fleet"), input(spec));
}

/// The metrics' text exposition.
fn exposition(metrics: &Arc<AutoshiftMetrics>) -> String {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(metrics.clone()));
    let mut out = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut out, &registry).expect("encodes");
    out
}

fn shows(metrics: &Arc<AutoshiftMetrics>, line: &str) -> bool {
    exposition(metrics).lines().any(|l| l == line)
}

// SEM-AS11: a compile that starts an autoshift counts its zone; the practice runs' outcomes
// are there from 0; the zone stays at 0 once the autoshift ends.
#[test]
fn a_compile_counts_the_zones_autoshifted_away_from() {
    let mut c = fleet();
    let mut host = Host::default();
    host.compile(&mut c, at(1));
    c.assume_impaired(Some("zone-a".into()));
    let compiled = host.compile(&mut c, at(2));
    assert!(
        matches!(
            &compiled.report.autoshift_events[..],
            [crate::AutoshiftEvent::AutoshiftStarted { zone, .. }] if zone == "zone-a"
        ),
        "{:?}",
        compiled.report.autoshift_events
    );
    let m = &host.metrics().clone();
    assert!(shows(m, r#"healthroute_autoshift_active{zone="zone-a"} 1"#));
    assert!(shows(m, "# TYPE healthroute_practice_runs_total counter"));
    for outcome in ["Succeeded", "Failed", "Interrupted", "CapacityCheckFailed"] {
        let zero = format!(r#"healthroute_practice_runs_total{{outcome="{outcome}"}} 0"#);
        assert!(shows(m, &zero), "{}", exposition(m));
    }
    assert!(shows(
        m,
        "# TYPE healthroute_practice_runs_not_started_total counter"
    ));
    c.assume_impaired(None);
    c.delete_autoshift(&key("fleet"));
    host.compile(&mut c, at(3));
    assert!(shows(m, r#"healthroute_autoshift_active{zone="zone-a"} 0"#));
}

// SEM-AS11: each run that did not start is counted by its reason.
#[test]
fn runs_not_started_and_ended_are_counted_by_reason_and_outcome() {
    let metrics = AutoshiftMetrics::default();
    let config = key("fleet");
    metrics.count(&[
        crate::AutoshiftEvent::PracticeRunNotStarted {
            config: config.clone(),
            reason: NotStartedReason::BlockedWindow,
            message: "in a blocked window".into(),
            request: None,
        },
        crate::AutoshiftEvent::PracticeRunEnded {
            config,
            zone: "zone-b".into(),
            outcome: healthroute_api::PracticeRunOutcome::Failed,
            message: "outcome alarm outcome is in ALARM".into(),
        },
    ]);
    let m = Arc::new(metrics);
    assert!(shows(
        &m,
        r#"healthroute_practice_runs_not_started_total{reason="BlockedWindow"} 1"#
    ));
    assert!(shows(
        &m,
        r#"healthroute_practice_runs_total{outcome="Failed"} 1"#
    ));
}

// SEM-AS1: a configuration that cannot be used is reported once when it becomes so, again
// when its reason changes, not at every compile, and once when it can be used again; the
// gauge holds a series while it lasts.
#[test]
fn an_unusable_configuration_is_reported_when_it_changes() {
    let mut c = fleet();
    let mut host = Host::default();
    assert!(host.compile(&mut c, at(1)).configurations.is_empty());
    unusable_fleet(&mut c, "1h");
    let changes = host.compile(&mut c, at(2)).configurations;
    let [ConfigurationChange::Unusable { config, why }] = &changes[..] else {
        panic!("{changes:?}");
    };
    assert_eq!(config, &key("fleet"));
    assert_eq!(
        why.reason,
        InvalidConfigurationReason::CadenceNotLongerThanDuration
    );
    let series = r#"healthroute_autoshift_configuration_invalid{zonal_autoshift="shop/fleet",reason="CadenceNotLongerThanDuration"} 1"#;
    assert!(
        shows(host.metrics(), series),
        "{}",
        exposition(host.metrics())
    );
    assert!(host.compile(&mut c, at(3)).configurations.is_empty());

    // Another reason is another report.
    unusable_fleet(&mut c, "1x");
    let changes = host.compile(&mut c, at(4)).configurations;
    assert!(
        matches!(&changes[..], [ConfigurationChange::Unusable { why, .. }] if why.reason == InvalidConfigurationReason::BadDuration),
        "{changes:?}"
    );

    c.upsert_autoshift(key("fleet"), input(mk_autoshift("api", true)));
    let changes = host.compile(&mut c, at(5)).configurations;
    assert_eq!(
        changes,
        [ConfigurationChange::Usable {
            config: key("fleet")
        }]
    );
    assert!(!exposition(host.metrics()).contains("healthroute_autoshift_configuration_invalid{"));

    // A deleted configuration is not "in use" again; its series ends.
    unusable_fleet(&mut c, "1h");
    host.compile(&mut c, at(6));
    c.delete_autoshift(&key("fleet"));
    assert!(host.compile(&mut c, at(7)).configurations.is_empty());
    assert!(!exposition(host.metrics()).contains("healthroute_autoshift_configuration_invalid{"));
}

// SEM-AS11 SEM-AS13: a host that stops compiling (a replica that lost the lease) exports no
// zone and no unusable configuration; its next term reports them afresh.
#[test]
fn a_host_that_stands_by_exports_nothing_of_the_engines() {
    let mut c = fleet();
    let mut host = Host::default();
    unusable_fleet(&mut c, "1h");
    assert_eq!(host.compile(&mut c, at(1)).configurations.len(), 1);
    host.stand_by();
    let text = exposition(host.metrics());
    assert!(
        !text.contains("healthroute_autoshift_active{")
            && !text.contains("healthroute_autoshift_configuration_invalid{"),
        "{text}"
    );
    assert_eq!(host.compile(&mut c, at(2)).configurations.len(), 1);
}

// SEM-AS12: the next compile is due at the engine's wake-up, on the host's monotonic clock:
// the compiler's deadline from `now`, added to the `Instant` that stands for it.
#[test]
fn the_next_compile_is_due_at_the_compilers_deadline() {
    let mut c = fleet();
    let host = Host::default();
    let clock = Instant::now();
    assert_eq!(host.deadline(&c, at(0), clock), None, "before any compile");
    c.upsert_shift(
        key("drain"),
        crate::ShiftInput {
            spec: mk_shift("zone-a", "api", "1h"),
            created: Some(t0()),
            status: None,
        },
    );
    let mut host = host;
    host.compile(&mut c, at(0));
    let due = host.deadline(&c, at(0), clock).expect("the shift expires");
    assert!(
        due <= clock + Duration::from_secs(3600),
        "{:?}",
        due - clock
    );
    assert_eq!(
        host.deadline(&c, at(7200), clock),
        Some(clock),
        "a deadline passed is due at once"
    );
}
