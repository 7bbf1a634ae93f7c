//! Conditions as data: their types and reasons are constants, and `lastTransitionTime`
//! comes from a pure merge of the old conditions and the desired ones (linkerd
//! `k8s/status`, stackable `status/condition`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition types.
pub mod types {
    pub const READY: &str = "Ready";
    pub const COMPILED: &str = "Compiled";
    pub const LAST_RESORT: &str = "LastResort";
    pub const HEALTHY: &str = "Healthy";
    pub const APPLIED: &str = "Applied";
    /// A ZonalAutoshift's: True while its autoshift moves traffic away from a zone.
    pub const AUTOSHIFT: &str = "Autoshift";
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
    /// A ZonalAutoshift whose configuration is in use.
    pub const CONFIGURED: &str = "Configured";
    /// An autoshift in force: its zone is impaired (the zone is in the message: a reason
    /// cannot hold a zone's name, whose hyphens the API refuses there).
    pub const ZONE_IMPAIRED: &str = "ZoneImpaired";
    /// An autoshift in force whose zone is healthy again, for less than the hold time.
    pub const ZONE_RECOVERING: &str = "ZoneRecovering";
    /// No autoshift: `autoshift: Disabled`.
    pub const DISABLED: &str = "Disabled";
    pub const NO_ZONE_IMPAIRED: &str = "NoZoneImpaired";
    /// No autoshift: more than one zone is impaired at once (AS4).
    pub const SEVERAL_ZONES_IMPAIRED: &str = "SeveralZonesImpaired";
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

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000 + s).expect("valid")
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
