//! Small builders for compiler tests (`mk_*`), in the style of controller-rs fixtures.

use jiff::Timestamp;

use healthroute_api::{
    AliasTarget, AutoshiftMode, CheckType, FailoverRole, FailoverSpec, HealthCheckRef,
    HealthCheckSpec, PracticeRunSpec, ProbeTarget, RecordGroupSpec, RecordSpec, RecordTypeSpec,
    RoutingPolicy, ServiceRef, ShiftTarget, ZonalAutoshiftSpec, ZonalShiftSpec,
};

use super::{CheckerView, Compiler, EndpointInput, GroupInput, ObjectKey, ServedZones};

pub const NS: &str = "shop";

pub fn key(name: &str) -> ObjectKey {
    ObjectKey::new(NS, name)
}

pub fn t0() -> Timestamp {
    Timestamp::from_second(1_800_000_000).expect("valid")
}

pub fn at(seconds: i64) -> Timestamp {
    t0() + jiff::SignedDuration::from_secs(seconds)
}

pub fn mk_compiler() -> Compiler {
    Compiler::new(ServedZones::new(["example.com"]).expect("zone"), 60)
}

pub fn mk_check(name: &str) -> HealthCheckSpec {
    HealthCheckSpec {
        check_type: CheckType::Http,
        target: Some(ProbeTarget {
            address: format!("{name}.internal"),
            port: 80,
            path: None,
            host: None,
        }),
        search_string: None,
        request_interval_seconds: 10,
        failure_threshold: 3,
        connect_timeout_seconds: None,
        response_timeout_seconds: 2,
        healthy_checker_percent: 18,
        inverted: false,
        disabled: false,
        calculated: None,
        metric: None,
        peer: None,
    }
}

pub fn mk_view(checker: &str, healthy: bool) -> CheckerView {
    CheckerView {
        checker: checker.into(),
        zone: None,
        healthy,
        message: None,
        values: Vec::new(),
    }
}

pub fn mk_record(id: &str, values: &[&str]) -> RecordSpec {
    RecordSpec {
        set_identifier: id.into(),
        weight: None,
        failover: None,
        values: Some(values.iter().map(|s| s.to_string()).collect()),
        zone: None,
        service: None,
        alias: None,
        peer: None,
        health_check_ref: None,
    }
}

pub fn weighted(mut r: RecordSpec, weight: u32) -> RecordSpec {
    r.weight = Some(weight);
    r
}

pub fn checked(mut r: RecordSpec, check: &str) -> RecordSpec {
    r.health_check_ref = Some(HealthCheckRef { name: check.into() });
    r
}

pub fn in_zone(mut r: RecordSpec, zone: &str) -> RecordSpec {
    r.zone = Some(zone.into());
    r
}

pub fn failover(mut r: RecordSpec, role: FailoverRole, priority: Option<u32>) -> RecordSpec {
    r.failover = Some(FailoverSpec { role, priority });
    r
}

pub fn mk_service_record(id: &str, service: &str) -> RecordSpec {
    RecordSpec {
        values: None,
        service: Some(ServiceRef {
            name: service.into(),
            addresses: None,
        }),
        ..mk_record(id, &[])
    }
}

/// A record whose values come from `group` (`namespace/name`) in peer cluster `cluster` (X2).
pub fn mk_peer_record(id: &str, cluster: &str, group: &str) -> RecordSpec {
    RecordSpec {
        values: None,
        peer: Some(healthroute_api::PeerTarget {
            cluster: cluster.into(),
            record_group: group.into(),
        }),
        ..mk_record(id, &[])
    }
}

pub fn mk_alias_record(id: &str, target: &str, evaluate: bool) -> RecordSpec {
    RecordSpec {
        values: None,
        alias: Some(AliasTarget {
            record_group: target.into(),
            evaluate_target_health: evaluate,
        }),
        ..mk_record(id, &[])
    }
}

pub fn mk_group(name: &str, policy: RoutingPolicy, records: Vec<RecordSpec>) -> RecordGroupSpec {
    RecordGroupSpec {
        name: format!("{name}.example.com."),
        record_type: RecordTypeSpec::A,
        routing_policy: policy,
        ttl: None,
        records,
        zone_affinity: None,
        minimum_zone_capacity_percent: None,
    }
}

pub fn group_input(spec: RecordGroupSpec) -> GroupInput {
    GroupInput {
        spec,
        labels: Default::default(),
        created: Some(t0()),
    }
}

pub fn mk_endpoint(ip: &str, ready: bool, zone: &str) -> EndpointInput {
    EndpointInput {
        address: ip.parse().expect("ip"),
        ready,
        serving: ready,
        terminating: false,
        zone: Some(zone.into()),
    }
}

pub fn mk_shift(away_from: &str, group: &str, expires_in: &str) -> ZonalShiftSpec {
    ZonalShiftSpec {
        away_from: away_from.into(),
        target: ShiftTarget {
            record_group: Some(group.into()),
            selector: None,
        },
        expires_in: expires_in.into(),
        comment: None,
        cancel: false,
    }
}

/// A ZonalAutoshift over `group`, with autoshift enabled or not, and practice runs judged by
/// the outcome alarm `outcome` (defaults elsewhere).
pub fn mk_autoshift(group: &str, enabled: bool) -> ZonalAutoshiftSpec {
    ZonalAutoshiftSpec {
        target: ShiftTarget {
            record_group: Some(group.into()),
            selector: None,
        },
        autoshift: if enabled {
            AutoshiftMode::Enabled
        } else {
            AutoshiftMode::Disabled
        },
        detection: None,
        practice_run: Some(PracticeRunSpec {
            outcome_alarms: vec![HealthCheckRef {
                name: "outcome".into(),
            }],
            blocking_alarms: Vec::new(),
            blocked_dates: Vec::new(),
            blocked_windows: Vec::new(),
            allowed_windows: Vec::new(),
            duration: None,
            cadence: None,
            minimum_remaining_capacity_percent: None,
        }),
    }
}
