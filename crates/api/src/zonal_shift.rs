//! `ZonalShift`: traffic moved away from one zone for a bounded time (SEMANTICS Z1-Z6).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::Error;
use crate::health_check::is_false;

/// Moves traffic away from one zone for a bounded time.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "healthroute.io",
    version = "v1alpha1",
    kind = "ZonalShift",
    namespaced,
    status = "ZonalShiftStatus",
    shortname = "zs",
    doc = "Treats the endpoints of one zone as unhealthy in the targeted RecordGroups until it expires or is cancelled.",
    printcolumn(name = "Away From", type_ = "string", json_path = ".spec.awayFrom"),
    printcolumn(name = "Type", type_ = "string", json_path = ".status.type"),
    printcolumn(name = "Status", type_ = "string", json_path = ".status.status"),
    printcolumn(
        name = "Applied",
        type_ = "string",
        json_path = ".status.appliedGroups",
        description = "groups the shift applies to / targeted groups"
    ),
    // A string, not a date: kubectl prints a future date as <invalid>.
    printcolumn(name = "Expires", type_ = "string", json_path = ".status.expiryTime"),
    printcolumn(
        name = "Comment",
        type_ = "string",
        json_path = ".spec.comment",
        priority = 1
    )
)]
#[x_kube(
    validation = Rule::new("has(self.target.recordGroup) != has(self.target.selector)").message("target has exactly one of recordGroup, selector"),
)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::openapi::kubernetes_formats)]
pub struct ZonalShiftSpec {
    /// The zone (`topology.kubernetes.io/zone`) to move traffic away from.
    #[schemars(length(min = 1, max = 63))]
    pub away_from: String,
    /// The RecordGroups the shift applies to.
    pub target: ShiftTarget,
    /// How long the shift lasts, from its start or from the latest change of this field:
    /// a duration such as 30m or 2h, from 1m to 72h.
    #[schemars(length(min = 2, max = 16))]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+h)?([0-9]+m)?([0-9]+s)?$') && duration(self) >= duration('1m') && duration(self) <= duration('72h')").message("expiresIn must be a duration such as 30m or 2h, from 1m to 72h"))]
    pub expires_in: String,
    /// Why the shift exists; only the latest is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 512))]
    pub comment: Option<String>,
    /// Ends the shift; the object stays as a record.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cancel: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShiftTarget {
    /// One RecordGroup in the same namespace, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_group: Option<String>,
    /// RecordGroups in the same namespace, by label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(transform = crate::openapi::kubernetes_formats)]
pub struct ZonalShiftStatus {
    /// What kind of shift this is: a ZonalShift object is always `Customer`; the shifts a
    /// ZonalAutoshift starts are `Autoshift` or `PracticeRun` (SEMANTICS AS5).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub shift_type: Option<ShiftType>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ShiftState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expiry_time: Option<Time>,
    /// The `expiresIn` that `expiryTime` was computed from; a different spec value restarts
    /// the clock from the change (SEMANTICS Z4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in: Option<String>,
    /// "applied/targeted" groups, for `kubectl get zs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_groups: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["recordGroup"]))]
    pub groups: Vec<ShiftGroupStatus>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// The kinds of shift, in order of precedence: when several are active for a group, the first
/// kind applies (SEMANTICS AS5), and within a kind the oldest (Z5).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, schemars::JsonSchema,
)]
pub enum ShiftType {
    /// A ZonalShift object: someone moved traffic on purpose.
    Customer,
    /// Started by a ZonalAutoshift on an impaired zone.
    Autoshift,
    /// A ZonalAutoshift's practice run.
    PracticeRun,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum ShiftState {
    Active,
    Expired,
    Canceled,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShiftGroupStatus {
    pub record_group: String,
    pub applied_status: AppliedStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<NotAppliedReason>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum AppliedStatus {
    Applied,
    NotApplied,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, schemars::JsonSchema)]
pub enum NotAppliedReason {
    /// Another active shift applies to the group: one of a kind that takes precedence, or an
    /// older one of the same kind (SEMANTICS Z5, AS5).
    Conflict,
    /// Applying would leave no healthy endpoint outside the zone (SEMANTICS Z6).
    NoHealthyCapacityElsewhere,
}

/// The label on a ZonalShift that mirrors a shift a ZonalAutoshift holds (an autoshift or a
/// practice run, SEMANTICS AS13); its value is the configuration's name.
pub const ENGINE_SHIFT_LABEL: &str = "healthroute.io/engine-shift";

/// Whether `shift` is the operator's mirror of a ZonalAutoshift's shift (AS13): it carries
/// [`ENGINE_SHIFT_LABEL`] and a controller reference to a ZonalAutoshift. A mirror is a record
/// to read, never an input: the shift it shows is the engine's, so compiling it as a customer
/// shift would apply it twice. The label alone is not enough, so that a user's object with
/// the label copied is still the customer shift it looks like.
pub fn is_engine_shift(shift: &ZonalShift) -> bool {
    let meta = &shift.metadata;
    meta.labels
        .as_ref()
        .is_some_and(|l| l.contains_key(ENGINE_SHIFT_LABEL))
        && meta.owner_references.iter().flatten().any(|o| {
            o.kind == "ZonalAutoshift"
                && o.api_version == format!("{}/{}", crate::GROUP, crate::VERSION)
                && o.controller == Some(true)
        })
}

/// The name of the ZonalShift that mirrors an engine shift: the engine names its shifts
/// `<config>:autoshift` and `<config>:practice-run`, and a ':' is not allowed in an object name.
pub fn engine_shift_object_name(engine_name: &str) -> String {
    engine_name.replace(':', "-")
}

/// Parses `expiresIn` ("90s", "30m", "2h", "1h30m") into seconds.
pub fn parse_expires_in(raw: &str) -> Result<u64, Error> {
    let total = parse_duration(raw)?;
    if !(60..=72 * 3600).contains(&total) {
        return Err(Error::ExpiresInRange(raw.to_owned()));
    }
    Ok(total)
}

/// Parses a duration written as the CRDs' rules allow it (`^([0-9]+h)?([0-9]+m)?([0-9]+s)?$`:
/// hours, minutes and seconds, each once, largest first) into whole seconds; each field that
/// takes one checks its own range.
pub fn parse_duration(raw: &str) -> Result<u64, Error> {
    // The CRD's rule, then jiff reads the span: "30m2h" or "1h1h" are refused here as by the
    // API server.
    let well_formed = !raw.is_empty()
        && raw
            .split_inclusive(['h', 'm', 's'])
            .try_fold(None::<char>, |last, part| {
                let unit = part.chars().last()?;
                let digits = &part[..part.len() - 1];
                let rank = |u: char| "hms".find(u);
                let ok = !digits.is_empty()
                    && digits.bytes().all(|b| b.is_ascii_digit())
                    && last.is_none_or(|l| rank(l) < rank(unit));
                ok.then_some(Some(unit))
            })
            .is_some();
    if !well_formed {
        return Err(Error::DurationForm(raw.to_owned()));
    }
    let not_a_duration = |e: jiff::Error| Error::NotADuration {
        raw: raw.to_owned(),
        reason: e.to_string(),
    };
    let span: jiff::Span = raw.parse().map_err(not_a_duration)?;
    let total = span.total(jiff::Unit::Second).map_err(not_a_duration)?;
    Ok(total as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_expires_in;

    // SEM-Z4: expiresIn from 1m to 72h, written as the CRD's rule allows it and nothing else.
    #[test]
    fn expires_in_reads_as_the_api_server_does() {
        for (raw, secs) in [
            ("1m", 60),
            ("90s", 90),
            ("2h", 7200),
            ("1h30m", 5400),
            ("72h", 259200),
            ("1h0m30s", 3630),
        ] {
            assert_eq!(parse_expires_in(raw), Ok(secs), "{raw}");
        }
        for bad in [
            "30m2h", "1h1h", "2", "h", "", "59s", "73h", "1.5h", "2d", "1h 30m", "-1h", "PT2H",
        ] {
            assert!(parse_expires_in(bad).is_err(), "{bad} was accepted");
        }
    }
}
