//! A ZonalAutoshift's spec read into numbers, with the contract's defaults (SEMANTICS AS1,
//! AS3, AS4, AS6, AS8). What the CRD cannot check (a date that does not exist, a cadence not
//! longer than the run) is checked here; the error is the configuration's status.

use healthroute_api::{
    AutoshiftMode, DEFAULT_HOLD_TIME, DEFAULT_MINIMUM_GROUPS,
    DEFAULT_MINIMUM_REMAINING_CAPACITY_PERCENT, DEFAULT_NODE_NOT_READY_PERCENT,
    DEFAULT_OTHER_ZONES_UNDER_PERCENT, DEFAULT_PRACTICE_RUN_CADENCE, DEFAULT_PRACTICE_RUN_DURATION,
    DEFAULT_UNHEALTHY_PERCENT, ZonalAutoshiftSpec, parse_duration,
};
use jiff::SignedDuration;

use super::detect::Thresholds;
use super::schedule::Calendar;

/// Everything the engine reads of a configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub enabled: bool,
    pub thresholds: Thresholds,
    pub hold: SignedDuration,
    /// `(zone, HealthCheck name)`.
    pub zone_alarms: Vec<(String, String)>,
    pub practice: Option<PracticeSettings>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PracticeSettings {
    pub outcome_alarms: Vec<String>,
    pub blocking_alarms: Vec<String>,
    pub calendar: Calendar,
    pub duration: SignedDuration,
    pub cadence: SignedDuration,
    pub minimum_remaining_capacity_percent: u32,
}

fn duration(
    field: &str,
    raw: Option<&str>,
    default: &str,
    min: i64,
    max: i64,
) -> Result<SignedDuration, String> {
    let raw = raw.unwrap_or(default);
    let secs = parse_duration(raw).map_err(|e| format!("{field}: {e}"))?;
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    if !(min..=max).contains(&secs) {
        return Err(format!(
            "{field}: {raw:?} is outside {} to {}",
            SignedDuration::from_secs(min),
            SignedDuration::from_secs(max)
        ));
    }
    Ok(SignedDuration::from_secs(secs))
}

impl Settings {
    pub fn parse(spec: &ZonalAutoshiftSpec) -> Result<Settings, String> {
        let d = spec.detection.clone().unwrap_or_default();
        let percent = |field: &str, v: Option<u32>, default: u32, min: u32| {
            let v = v.unwrap_or(default);
            if (min..=100).contains(&v) {
                Ok(v)
            } else {
                Err(format!("{field}: {v} is outside {min} to 100"))
            }
        };
        let thresholds = Thresholds {
            unhealthy_percent: percent(
                "detection.unhealthyPercent",
                d.unhealthy_percent,
                DEFAULT_UNHEALTHY_PERCENT,
                1,
            )?,
            other_zones_under_percent: percent(
                "detection.otherZonesUnderPercent",
                d.other_zones_under_percent,
                DEFAULT_OTHER_ZONES_UNDER_PERCENT,
                1,
            )?,
            minimum_groups: d.minimum_groups.unwrap_or(DEFAULT_MINIMUM_GROUPS).max(1),
            node_not_ready_percent: percent(
                "detection.nodeNotReadyPercent",
                d.node_not_ready_percent,
                DEFAULT_NODE_NOT_READY_PERCENT,
                1,
            )?,
        };
        let hold = duration(
            "detection.holdTime",
            d.hold_time.as_deref(),
            DEFAULT_HOLD_TIME,
            0,
            24 * 3600,
        )?;
        let practice = match &spec.practice_run {
            None => None,
            Some(p) => {
                if p.outcome_alarms.is_empty() {
                    return Err("practiceRun.outcomeAlarms needs at least one alarm".into());
                }
                let duration_ = duration(
                    "practiceRun.duration",
                    p.duration.as_deref(),
                    DEFAULT_PRACTICE_RUN_DURATION,
                    1,
                    24 * 3600,
                )?;
                let cadence = duration(
                    "practiceRun.cadence",
                    p.cadence.as_deref(),
                    DEFAULT_PRACTICE_RUN_CADENCE,
                    3600,
                    2160 * 3600,
                )?;
                if cadence <= duration_ {
                    return Err(format!(
                        "practiceRun.cadence ({cadence}) must be longer than its duration ({duration_})"
                    ));
                }
                Some(PracticeSettings {
                    outcome_alarms: p.outcome_alarms.iter().map(|a| a.name.clone()).collect(),
                    blocking_alarms: p.blocking_alarms.iter().map(|a| a.name.clone()).collect(),
                    calendar: Calendar::parse(
                        &p.blocked_dates,
                        &p.blocked_windows,
                        &p.allowed_windows,
                    )
                    .map_err(|e| format!("practiceRun: {e}"))?,
                    duration: duration_,
                    cadence,
                    minimum_remaining_capacity_percent: percent(
                        "practiceRun.minimumRemainingCapacityPercent",
                        p.minimum_remaining_capacity_percent,
                        DEFAULT_MINIMUM_REMAINING_CAPACITY_PERCENT,
                        0,
                    )?,
                })
            }
        };
        let enabled = spec.autoshift == AutoshiftMode::Enabled;
        if enabled && practice.is_none() {
            return Err("autoshift Enabled requires a practiceRun configuration".into());
        }
        Ok(Settings {
            enabled,
            thresholds,
            hold,
            zone_alarms: d
                .zone_alarms
                .iter()
                .map(|a| (a.zone.clone(), a.health_check.clone()))
                .collect(),
            practice,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::mk_autoshift;

    // SEM-AS1: the contract's defaults; what the CRD cannot check is refused here.
    #[test]
    fn defaults_and_what_the_schema_cannot_check() {
        let spec = mk_autoshift("api", true);
        let s = Settings::parse(&spec).expect("valid");
        assert!(s.enabled);
        assert_eq!(
            s.thresholds,
            Thresholds {
                unhealthy_percent: 50,
                other_zones_under_percent: 20,
                minimum_groups: 2,
                node_not_ready_percent: 50
            }
        );
        assert_eq!(s.hold, SignedDuration::from_mins(10));
        let p = s.practice.expect("practice runs");
        assert_eq!(p.duration, SignedDuration::from_mins(30));
        assert_eq!(p.cadence, SignedDuration::from_hours(168));
        assert_eq!(p.minimum_remaining_capacity_percent, 50);

        let mut bad = mk_autoshift("api", true);
        if let Some(p) = bad.practice_run.as_mut() {
            p.blocked_dates = vec!["2026-13-01".into()];
        }
        assert!(Settings::parse(&bad).is_err_and(|e| e.contains("2026-13-01")));
        let mut bad = mk_autoshift("api", true);
        if let Some(p) = bad.practice_run.as_mut() {
            p.duration = Some("2h".into());
            p.cadence = Some("1h".into());
        }
        assert!(Settings::parse(&bad).is_err_and(|e| e.contains("longer than")));
        let mut bad = mk_autoshift("api", true);
        bad.practice_run = None;
        assert!(Settings::parse(&bad).is_err_and(|e| e.contains("requires a practiceRun")));
    }
}
