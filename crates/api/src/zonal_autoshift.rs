//! `ZonalAutoshift`: traffic moved away from an impaired zone without anyone asking, and the
//! practice runs that rehearse it (SEMANTICS AS1-AS12).
//!
//! One object configures a set of RecordGroups (a name or a label selector, as a ZonalShift
//! targets them): whether autoshift is enabled, how an impaired zone is told apart from one
//! bad service, and the practice runs (their alarms, when they may run, how long and how
//! often). Its status is what the engine decided: the autoshift in force, the zones as
//! detection sees them, the practice run running, the last outcomes, the next run, and every
//! shift it holds in the shape of a ZonalShift's status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::record_group::HealthCheckRef;
use crate::zonal_shift::{ShiftTarget, ZonalShiftStatus};

/// Annotation that asks for a practice run now, or cancels the running one:
/// `start`, `start:<id>`, `cancel` or `cancel:<id>`. Each distinct value is acted on once
/// (SEMANTICS AS10); a new id repeats a request.
pub const PRACTICE_RUN_ANNOTATION: &str = "healthroute.io/practice-run";
/// Annotation naming the zone a requested practice run shifts away from (default: the next
/// zone in rotation, AS6).
pub const PRACTICE_RUN_ZONE_ANNOTATION: &str = "healthroute.io/practice-run-zone";

/// Defaults of the contract (SEMANTICS AS3, AS4, AS6, AS8).
pub const DEFAULT_UNHEALTHY_PERCENT: u32 = 50;
pub const DEFAULT_OTHER_ZONES_UNDER_PERCENT: u32 = 20;
pub const DEFAULT_MINIMUM_GROUPS: u32 = 2;
pub const DEFAULT_NODE_NOT_READY_PERCENT: u32 = 50;
pub const DEFAULT_HOLD_TIME: &str = "10m";
pub const DEFAULT_PRACTICE_RUN_DURATION: &str = "30m";
pub const DEFAULT_PRACTICE_RUN_CADENCE: &str = "168h";
pub const DEFAULT_MINIMUM_REMAINING_CAPACITY_PERCENT: u32 = 50;
/// How many practice run outcomes the status keeps, newest first.
pub const OUTCOMES_KEPT: usize = 10;

/// Moves traffic away from an impaired zone on its own, and rehearses it with practice runs.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "healthroute.io",
    version = "v1alpha1",
    kind = "ZonalAutoshift",
    namespaced,
    status = "ZonalAutoshiftStatus",
    shortname = "zas",
    doc = "Shifts the targeted RecordGroups away from a zone that is impaired, and rehearses that with practice runs.",
    printcolumn(name = "Autoshift", type_ = "string", json_path = ".spec.autoshift"),
    printcolumn(
        name = "Away From",
        type_ = "string",
        json_path = ".status.activeZone",
        description = "the zone an autoshift moves traffic away from now"
    ),
    printcolumn(
        name = "Practice Run",
        type_ = "string",
        json_path = ".status.practiceRun.zone",
        description = "the zone a running practice run moves traffic away from"
    ),
    printcolumn(
        name = "Last Outcome",
        type_ = "string",
        json_path = ".status.outcomes[0].outcome"
    ),
    // A string, not a date: kubectl prints a future date as <invalid>.
    printcolumn(name = "Next Run", type_ = "string", json_path = ".status.nextPracticeRun"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("has(self.target.recordGroup) != has(self.target.selector)").message("target has exactly one of recordGroup, selector"),
    validation = Rule::new("self.autoshift != 'Enabled' || has(self.practiceRun)").message("autoshift Enabled requires a practiceRun configuration"),
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::openapi::kubernetes_formats)]
pub struct ZonalAutoshiftSpec {
    /// The RecordGroups autoshift and practice runs apply to.
    pub target: ShiftTarget,
    /// Whether an impaired zone is shifted away from (SEMANTICS AS4). Practice runs run either
    /// way, once configured.
    pub autoshift: AutoshiftMode,
    /// How an impaired zone is detected (AS3); every field has a default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detection: Option<DetectionSpec>,
    /// The practice runs (AS6-AS10); required with `autoshift: Enabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub practice_run: Option<PracticeRunSpec>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum AutoshiftMode {
    Enabled,
    Disabled,
}

/// A zone's health signals and thresholds (SEMANTICS AS3, AS4).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DetectionSpec {
    /// A zone is impaired when at least this percentage of the targeted values in it are
    /// unhealthy (default 50) ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub unhealthy_percent: Option<u32>,
    /// ... while every other zone stays under this percentage (default 20): a failure that
    /// lies in one zone, not everywhere. The same bar holds for other zones' Nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub other_zones_under_percent: Option<u32>,
    /// ... and the unhealthy values lie in at least this many groups (default 2; or in every
    /// group with values in the zone, when fewer): not one bad service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub minimum_groups: Option<u32>,
    /// Per zone, a HealthCheck (in this namespace) whose ALARM (unhealthy) marks the zone
    /// impaired.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub zone_alarms: Vec<ZoneAlarm>,
    /// A zone is impaired when at least this percentage of its Nodes are not Ready (default
    /// 50), while every other zone stays under `otherZonesUnderPercent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub node_not_ready_percent: Option<u32>,
    /// How long an autoshifted zone must stay healthy before traffic returns: 0s to 24h,
    /// default 10m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+h)?([0-9]+m)?([0-9]+s)?$') && duration(self) <= duration('24h')").message("holdTime must be a duration such as 30s or 10m, at most 24h"))]
    pub hold_time: Option<String>,
}

/// A zone and the HealthCheck that says it is impaired.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneAlarm {
    #[schemars(length(min = 1, max = 63))]
    pub zone: String,
    /// A HealthCheck in this namespace, by name.
    #[schemars(length(min = 1, max = 253))]
    pub health_check: String,
}

/// When practice runs run, how long, and which alarms judge them (SEMANTICS AS6-AS10).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PracticeRunSpec {
    /// HealthChecks (in this namespace) watched during a run: one in ALARM (unhealthy) ends
    /// it at once as Failed. At least one.
    #[schemars(length(min = 1, max = 10))]
    pub outcome_alarms: Vec<HealthCheckRef>,
    /// HealthChecks that keep a run from starting while in ALARM, and interrupt a running one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub blocking_alarms: Vec<HealthCheckRef>,
    /// UTC dates (`YYYY-MM-DD`) on which no run takes place.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 15), inner(length(max = 10)))]
    #[x_kube(validation = Rule::new("self.all(d, d.matches('^[0-9]{4}-[0-9]{2}-[0-9]{2}$'))").message("blockedDates are written YYYY-MM-DD"))]
    pub blocked_dates: Vec<String>,
    /// Weekly UTC windows (`Mon:10:00-Mon:10:30`) that no run overlaps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 15), inner(length(max = 19)))]
    #[x_kube(validation = Rule::new("self.all(w, w.matches('^(Mon|Tue|Wed|Thu|Fri|Sat|Sun):([01][0-9]|2[0-3]):[0-5][0-9]-(Mon|Tue|Wed|Thu|Fri|Sat|Sun):([01][0-9]|2[0-3]):[0-5][0-9]$'))").message("blockedWindows are written Mon:10:00-Mon:10:30 (UTC)"))]
    pub blocked_windows: Vec<String>,
    /// Weekly UTC windows (`Tue:09:00-Thu:17:00`); when given, a run lies wholly inside one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 15), inner(length(max = 19)))]
    #[x_kube(validation = Rule::new("self.all(w, w.matches('^(Mon|Tue|Wed|Thu|Fri|Sat|Sun):([01][0-9]|2[0-3]):[0-5][0-9]-(Mon|Tue|Wed|Thu|Fri|Sat|Sun):([01][0-9]|2[0-3]):[0-5][0-9]$'))").message("allowedWindows are written Mon:10:00-Mon:10:30 (UTC)"))]
    pub allowed_windows: Vec<String>,
    /// How long a run shifts traffic: 1s to 24h, default 30m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+h)?([0-9]+m)?([0-9]+s)?$') && duration(self) >= duration('1s') && duration(self) <= duration('24h')").message("duration must be a duration such as 30m, from 1s to 24h"))]
    pub duration: Option<String>,
    /// Time from one run's start to the next: 1h to 2160h (90 days), default 168h (weekly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 2, max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+h)?([0-9]+m)?([0-9]+s)?$') && duration(self) >= duration('1h') && duration(self) <= duration('2160h')").message("cadence must be a duration such as 168h, from 1h to 2160h"))]
    pub cadence: Option<String>,
    /// The capacity check (AS8): the healthy capacity left outside the zone must be at least
    /// this percentage of a group's whole capacity (0-100, default 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub minimum_remaining_capacity_percent: Option<u32>,
}

/// What the engine decided for one ZonalAutoshift (SEMANTICS AS11).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::openapi::kubernetes_formats)]
pub struct ZonalAutoshiftStatus {
    /// Whether an autoshift is in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoshift: Option<AutoshiftState>,
    /// The zone the autoshift moves traffic away from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoshift_start_time: Option<Time>,
    /// When the last autoshift ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoshift_end_time: Option<Time>,
    /// While the autoshifted zone looks healthy again: since when (traffic returns at
    /// `healthySince` + `holdTime`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy_since: Option<Time>,
    /// Why the autoshift is in force or not, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Every zone that holds targeted values, as detection sees it now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["zone"]))]
    pub zones: Vec<ZoneDetection>,
    /// The practice run running now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub practice_run: Option<RunningPracticeRun>,
    /// The last practice runs' outcomes, newest first (at most 10).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outcomes: Vec<PracticeRunRecord>,
    /// When the next scheduled practice run is due (AS6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_practice_run: Option<Time>,
    /// Why the last due or requested practice run did not start (AS7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_started: Option<PracticeRunNotStarted>,
    /// The last `healthroute.io/practice-run` value acted on (AS10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_request: Option<String>,
    /// The shifts this configuration holds now, each in a ZonalShift's status shape with its
    /// type (AS5).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shifts: Vec<EngineShiftStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum AutoshiftState {
    Active,
    Inactive,
}

/// One zone as detection sees it (SEMANTICS AS2, AS3).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneDetection {
    pub zone: String,
    /// Targeted values in the zone, and how many of them are unhealthy (before any shift).
    pub values: u32,
    pub unhealthy_values: u32,
    /// Targeted groups with an unhealthy value in the zone.
    pub unhealthy_groups: u32,
    /// Nodes in the zone, and how many are not Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes_not_ready: Option<u32>,
    pub impaired: bool,
    /// Why it is impaired, or what keeps it from counting as impaired.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A practice run that is running.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RunningPracticeRun {
    pub zone: String,
    pub start_time: Time,
    /// When it ends as Succeeded, unless an alarm or a stop ends it first.
    pub end_time: Time,
    /// Started by a request (the annotation) rather than the cadence.
    #[serde(default, skip_serializing_if = "crate::health_check::is_false")]
    pub requested: bool,
}

/// One practice run's outcome (SEMANTICS AS9).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PracticeRunRecord {
    pub zone: String,
    pub start_time: Time,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<Time>,
    pub outcome: PracticeRunOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "crate::health_check::is_false")]
    pub requested: bool,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum PracticeRunOutcome {
    /// Running.
    Pending,
    /// Ran its whole duration with no outcome alarm in ALARM.
    Succeeded,
    /// An outcome alarm went into ALARM: the run ended at once.
    Failed,
    /// Stopped early for another reason, or inconclusive.
    Interrupted,
    /// Not started: the zones left could not take the shifted capacity (AS8).
    CapacityCheckFailed,
}

impl PracticeRunOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            PracticeRunOutcome::Pending => "Pending",
            PracticeRunOutcome::Succeeded => "Succeeded",
            PracticeRunOutcome::Failed => "Failed",
            PracticeRunOutcome::Interrupted => "Interrupted",
            PracticeRunOutcome::CapacityCheckFailed => "CapacityCheckFailed",
        }
    }
}

/// Why a practice run did not start (SEMANTICS AS7).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PracticeRunNotStarted {
    pub time: Time,
    pub reason: NotStartedReason,
    pub message: String,
    /// The request it answers, when it was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum NotStartedReason {
    /// The configuration has no `practiceRun`, or it is invalid.
    NoPracticeRunConfiguration,
    BlockedDate,
    BlockedWindow,
    OutsideAllowedWindows,
    /// A blocking alarm is in ALARM.
    BlockingAlarm,
    /// An outcome alarm is in ALARM already.
    OutcomeAlarm,
    /// An alarm names a HealthCheck that does not exist.
    AlarmMissing,
    /// An autoshift is in force for a targeted group.
    AutoshiftActive,
    /// A customer's ZonalShift is active for a targeted group.
    CustomerShiftActive,
    /// No targeted value lies in a zone (or in the zone asked for).
    NoZone,
    /// A practice run is running already.
    AlreadyRunning,
    /// The `healthroute.io/practice-run` annotation holds neither `start[:id]` nor
    /// `cancel[:id]`.
    InvalidRequest,
}

impl NotStartedReason {
    pub fn as_str(self) -> &'static str {
        match self {
            NotStartedReason::NoPracticeRunConfiguration => "NoPracticeRunConfiguration",
            NotStartedReason::BlockedDate => "BlockedDate",
            NotStartedReason::BlockedWindow => "BlockedWindow",
            NotStartedReason::OutsideAllowedWindows => "OutsideAllowedWindows",
            NotStartedReason::BlockingAlarm => "BlockingAlarm",
            NotStartedReason::OutcomeAlarm => "OutcomeAlarm",
            NotStartedReason::AlarmMissing => "AlarmMissing",
            NotStartedReason::AutoshiftActive => "AutoshiftActive",
            NotStartedReason::CustomerShiftActive => "CustomerShiftActive",
            NotStartedReason::NoZone => "NoZone",
            NotStartedReason::AlreadyRunning => "AlreadyRunning",
            NotStartedReason::InvalidRequest => "InvalidRequest",
        }
    }
}

/// Why a ZonalAutoshift's configuration cannot be used (SEMANTICS AS1), in a word: the
/// `reason` label of `healthroute_autoshift_configuration_invalid`. A fixed set, one per check
/// the engine makes of a spec that the CRD schema cannot make (or that a manifest file
/// skipped); the message says which field and value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InvalidConfigurationReason {
    /// A percentage outside its range.
    PercentOutOfRange,
    /// A duration not written as `1h30m`, or outside its range.
    BadDuration,
    /// `practiceRun.outcomeAlarms` is empty.
    NoOutcomeAlarm,
    /// `practiceRun.cadence` is not longer than `practiceRun.duration`.
    CadenceNotLongerThanDuration,
    /// A blocked date that is not a date (`2026-02-30`).
    BadDate,
    /// A blocked or allowed window that does not read, or is empty.
    BadWindow,
    /// `autoshift: Enabled` without a `practiceRun`.
    PracticeRunRequired,
}

impl InvalidConfigurationReason {
    pub const ALL: [InvalidConfigurationReason; 7] = [
        InvalidConfigurationReason::PercentOutOfRange,
        InvalidConfigurationReason::BadDuration,
        InvalidConfigurationReason::NoOutcomeAlarm,
        InvalidConfigurationReason::CadenceNotLongerThanDuration,
        InvalidConfigurationReason::BadDate,
        InvalidConfigurationReason::BadWindow,
        InvalidConfigurationReason::PracticeRunRequired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            InvalidConfigurationReason::PercentOutOfRange => "PercentOutOfRange",
            InvalidConfigurationReason::BadDuration => "BadDuration",
            InvalidConfigurationReason::NoOutcomeAlarm => "NoOutcomeAlarm",
            InvalidConfigurationReason::CadenceNotLongerThanDuration => {
                "CadenceNotLongerThanDuration"
            }
            InvalidConfigurationReason::BadDate => "BadDate",
            InvalidConfigurationReason::BadWindow => "BadWindow",
            InvalidConfigurationReason::PracticeRunRequired => "PracticeRunRequired",
        }
    }
}

/// A duration as the specs write one and as people read it (AS11): hours, minutes and
/// seconds, each only when not zero, largest first, no spaces: `6s`, `30m`, `1h30m`, `168h`,
/// `0s` (Go's and Kubernetes' form without its zero units, and what
/// [`parse_duration`](crate::parse_duration) reads). Whole seconds: a fraction is dropped.
/// Messages show a spec's duration as the user wrote it where they have that text, and this
/// otherwise (never jiff's `Display`, which is ISO 8601: `PT6S`).
pub fn format_duration(duration: jiff::SignedDuration) -> String {
    use jiff::fmt::friendly::{Spacing, SpanPrinter};
    static PRINTER: SpanPrinter = SpanPrinter::new().spacing(Spacing::None);
    PRINTER.duration_to_string(&jiff::SignedDuration::from_secs(duration.as_secs()))
}

/// A shift a ZonalAutoshift holds: its name (`<config>:autoshift` or `<config>:practice-run`),
/// its zone, and its status as a ZonalShift's (with `type`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EngineShiftStatus {
    pub name: String,
    pub away_from: String,
    pub status: ZonalShiftStatus,
}

/// An on-demand request read from [`PRACTICE_RUN_ANNOTATION`] (SEMANTICS AS10).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PracticeRunRequest {
    /// The annotation's whole value: the request's identity.
    pub value: String,
    pub action: RequestAction,
    /// [`PRACTICE_RUN_ZONE_ANNOTATION`], when set.
    pub zone: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestAction {
    Start,
    Cancel,
}

impl PracticeRunRequest {
    /// The request the annotations hold: `None` without one; an error naming the value when
    /// it is neither `start[:id]` nor `cancel[:id]`.
    pub fn from_annotations(
        annotations: &std::collections::BTreeMap<String, String>,
    ) -> Result<Option<PracticeRunRequest>, String> {
        let Some(value) = annotations.get(PRACTICE_RUN_ANNOTATION) else {
            return Ok(None);
        };
        let value = value.trim();
        let action = match value.split_once(':').map_or(value, |(a, _)| a) {
            "start" => RequestAction::Start,
            "cancel" => RequestAction::Cancel,
            _ => {
                return Err(format!(
                    "{PRACTICE_RUN_ANNOTATION}: {value:?} is not start, start:<id>, cancel or cancel:<id>"
                ));
            }
        };
        Ok(Some(PracticeRunRequest {
            value: value.to_owned(),
            action,
            zone: annotations
                .get(PRACTICE_RUN_ZONE_ANNOTATION)
                .map(|z| z.trim().to_owned())
                .filter(|z| !z.is_empty()),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-AS1 SEM-AS11: durations are shown as specs write them (`6s`, `1h30m`), never as ISO
    // 8601 (`PT6S`); what is shown reads back as the same duration.
    #[test]
    fn durations_are_shown_as_specs_write_them() {
        use jiff::SignedDuration;
        for (secs, shown) in [
            (6, "6s"),
            (60, "1m"),
            (90, "1m30s"),
            (1800, "30m"),
            (3600, "1h"),
            (5400, "1h30m"),
            (3630, "1h30s"),
            (168 * 3600, "168h"),
            (2160 * 3600, "2160h"),
            (0, "0s"),
        ] {
            let d = SignedDuration::from_secs(secs);
            assert_eq!(format_duration(d), shown, "{secs}s");
            assert_eq!(crate::parse_duration(shown), Ok(secs as u64), "{shown}");
        }
        assert_eq!(format_duration(SignedDuration::new(6, 700_000_000)), "6s");
        assert_eq!(format_duration(SignedDuration::from_secs(-90)), "-1m30s");
    }

    // SEM-AS10: the annotation's forms; anything else is named.
    #[test]
    fn requests_read_from_annotations() {
        let ann = |pairs: &[(&str, &str)]| -> std::collections::BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(PracticeRunRequest::from_annotations(&ann(&[])), Ok(None));
        let r = PracticeRunRequest::from_annotations(&ann(&[
            (PRACTICE_RUN_ANNOTATION, "start:42"),
            (PRACTICE_RUN_ZONE_ANNOTATION, "zone-b"),
        ]))
        .expect("valid")
        .expect("a request");
        assert_eq!(r.action, RequestAction::Start);
        assert_eq!(r.value, "start:42");
        assert_eq!(r.zone.as_deref(), Some("zone-b"));
        let r = PracticeRunRequest::from_annotations(&ann(&[(PRACTICE_RUN_ANNOTATION, "cancel")]))
            .expect("valid")
            .expect("a request");
        assert_eq!(r.action, RequestAction::Cancel);
        let e = PracticeRunRequest::from_annotations(&ann(&[(PRACTICE_RUN_ANNOTATION, "go")]))
            .expect_err("not a request");
        assert!(e.contains("\"go\""), "{e}");
    }
}
