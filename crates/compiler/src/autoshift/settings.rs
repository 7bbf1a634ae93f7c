//! A ZonalAutoshift's spec read into numbers, with the contract's defaults (SEMANTICS AS1,
//! AS3, AS4, AS6, AS8). What the CRD cannot check (a date that does not exist, a cadence not
//! longer than the run) is checked here; the [`InvalidConfiguration`] is the configuration's
//! status, standalone mode's log line and metric, and the simulator's answer.

use std::fmt;

use healthroute_api::{
    AutoshiftMode, DEFAULT_HOLD_TIME, DEFAULT_MINIMUM_GROUPS,
    DEFAULT_MINIMUM_REMAINING_CAPACITY_PERCENT, DEFAULT_NODE_NOT_READY_PERCENT,
    DEFAULT_OTHER_ZONES_UNDER_PERCENT, DEFAULT_PRACTICE_RUN_CADENCE, DEFAULT_PRACTICE_RUN_DURATION,
    DEFAULT_UNHEALTHY_PERCENT, InvalidConfigurationReason, ZonalAutoshiftSpec, format_duration,
    parse_duration,
};
use jiff::SignedDuration;

use super::detect::Thresholds;
use super::schedule::Calendar;

/// Why a configuration cannot be used (AS1): which check failed, and in words which field
/// and value (durations as written). Displays as its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidConfiguration {
    pub reason: InvalidConfigurationReason,
    pub message: String,
}

impl InvalidConfiguration {
    fn new(reason: InvalidConfigurationReason, message: impl Into<String>) -> Self {
        InvalidConfiguration {
            reason,
            message: message.into(),
        }
    }
}

impl fmt::Display for InvalidConfiguration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Everything the engine reads of a configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub enabled: bool,
    pub thresholds: Thresholds,
    pub hold: SignedDuration,
    /// `hold` as the spec writes it (the default's text without one): how messages show it.
    pub hold_written: String,
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

/// A duration field (`default` when absent) within `min..=max` seconds, and its text.
fn duration<'a>(
    field: &str,
    raw: Option<&'a str>,
    default: &'a str,
    min: i64,
    max: i64,
) -> Result<(SignedDuration, &'a str), InvalidConfiguration> {
    let bad = |message: String| {
        InvalidConfiguration::new(InvalidConfigurationReason::BadDuration, message)
    };
    let raw = raw.unwrap_or(default);
    let secs = parse_duration(raw).map_err(|e| bad(format!("{field}: {e}")))?;
    let secs = i64::try_from(secs).unwrap_or(i64::MAX);
    if !(min..=max).contains(&secs) {
        return Err(bad(format!(
            "{field}: {raw:?} is outside {} to {}",
            format_duration(SignedDuration::from_secs(min)),
            format_duration(SignedDuration::from_secs(max))
        )));
    }
    Ok((SignedDuration::from_secs(secs), raw))
}

impl Settings {
    pub fn parse(spec: &ZonalAutoshiftSpec) -> Result<Settings, InvalidConfiguration> {
        use InvalidConfigurationReason as Why;
        let d = spec.detection.clone().unwrap_or_default();
        let percent = |field: &str, v: Option<u32>, default: u32, min: u32| {
            let v = v.unwrap_or(default);
            if (min..=100).contains(&v) {
                Ok(v)
            } else {
                Err(InvalidConfiguration::new(
                    Why::PercentOutOfRange,
                    format!("{field}: {v} is outside {min} to 100"),
                ))
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
        let (hold, hold_written) = duration(
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
                    return Err(InvalidConfiguration::new(
                        Why::NoOutcomeAlarm,
                        "practiceRun.outcomeAlarms needs at least one alarm",
                    ));
                }
                let (duration_, duration_written) = duration(
                    "practiceRun.duration",
                    p.duration.as_deref(),
                    DEFAULT_PRACTICE_RUN_DURATION,
                    1,
                    24 * 3600,
                )?;
                let (cadence, cadence_written) = duration(
                    "practiceRun.cadence",
                    p.cadence.as_deref(),
                    DEFAULT_PRACTICE_RUN_CADENCE,
                    3600,
                    2160 * 3600,
                )?;
                if cadence <= duration_ {
                    return Err(InvalidConfiguration::new(
                        Why::CadenceNotLongerThanDuration,
                        format!(
                            "practiceRun.cadence {cadence_written} must be longer than its duration {duration_written}"
                        ),
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
                    .map_err(|(reason, e)| {
                        InvalidConfiguration::new(reason, format!("practiceRun: {e}"))
                    })?,
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
            return Err(InvalidConfiguration::new(
                Why::PracticeRunRequired,
                "autoshift Enabled requires a practiceRun configuration",
            ));
        }
        Ok(Settings {
            enabled,
            thresholds,
            hold,
            hold_written: hold_written.to_owned(),
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
        assert!(Settings::parse(&bad).is_err_and(|e| e.message.contains("2026-13-01")));
        let mut bad = mk_autoshift("api", true);
        if let Some(p) = bad.practice_run.as_mut() {
            p.duration = Some("2h".into());
            p.cadence = Some("1h".into());
        }
        assert!(Settings::parse(&bad).is_err_and(|e| e.message.contains("longer than")));
        let mut bad = mk_autoshift("api", true);
        bad.practice_run = None;
        assert!(Settings::parse(&bad).is_err_and(|e| e.message.contains("requires a practiceRun")));
    }

    // SEM-AS1: each check that fails has its reason (the metric's label) and says which field
    // and value, durations as the spec writes them.
    #[test]
    fn an_unusable_configuration_says_which_check_failed() {
        use InvalidConfigurationReason as Why;
        type Edit = fn(&mut ZonalAutoshiftSpec);
        let cases: [(Edit, Why, &str); 7] = [
            (
                |s| s.detection.get_or_insert_default().unhealthy_percent = Some(0),
                Why::PercentOutOfRange,
                "detection.unhealthyPercent: 0 is outside 1 to 100",
            ),
            (
                |s| s.detection.get_or_insert_default().hold_time = Some("25h".into()),
                Why::BadDuration,
                "detection.holdTime: \"25h\" is outside 0s to 24h",
            ),
            (
                |s| {
                    if let Some(p) = s.practice_run.as_mut() {
                        p.outcome_alarms.clear();
                    }
                },
                Why::NoOutcomeAlarm,
                "practiceRun.outcomeAlarms needs at least one alarm",
            ),
            (
                |s| {
                    if let Some(p) = s.practice_run.as_mut() {
                        p.duration = Some("1h".into());
                        p.cadence = Some("60m".into());
                    }
                },
                Why::CadenceNotLongerThanDuration,
                "practiceRun.cadence 60m must be longer than its duration 1h",
            ),
            (
                |s| {
                    if let Some(p) = s.practice_run.as_mut() {
                        p.blocked_dates = vec!["2026-02-30".into()];
                    }
                },
                Why::BadDate,
                "practiceRun: blocked date \"2026-02-30\"",
            ),
            (
                |s| {
                    if let Some(p) = s.practice_run.as_mut() {
                        p.allowed_windows = vec!["Mon:10:00-Mon:10:00".into()];
                    }
                },
                Why::BadWindow,
                "practiceRun: \"Mon:10:00-Mon:10:00\" is empty",
            ),
            (
                |s| s.practice_run = None,
                Why::PracticeRunRequired,
                "autoshift Enabled requires a practiceRun configuration",
            ),
        ];
        for (edit, reason, message) in cases {
            let mut spec = mk_autoshift("api", true);
            edit(&mut spec);
            let e = Settings::parse(&spec).expect_err(message);
            assert_eq!(e.reason, reason, "{e}");
            assert!(e.message.starts_with(message), "{e}");
            assert_eq!(e.to_string(), e.message);
        }
        let mut spec = mk_autoshift("api", true);
        spec.detection.get_or_insert_default().hold_time = Some("90s".into());
        let s = Settings::parse(&spec).expect("valid");
        assert_eq!(
            (s.hold, s.hold_written.as_str()),
            (SignedDuration::from_secs(90), "90s")
        );
        let s = Settings::parse(&mk_autoshift("api", true)).expect("valid");
        assert_eq!(s.hold_written, "10m", "the default's text");
    }
}
