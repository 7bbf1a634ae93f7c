//! What one group's compilation reads of the world around it ([`GroupEnv`]: checks,
//! endpoints, alias targets, shifts) and the decision path it writes when asked
//! ([`Explain`]): the ground every other part of `group/` stands on.

use std::collections::BTreeMap;

use healthroute_api::{ObjectKey, RecordTypeSpec, ShiftType};
use healthroute_table::RecordType;

use crate::health::CheckHealth;
use crate::inputs::ServiceEndpoints;
use crate::zones::ServedZones;

/// The table's record type of an API record type.
pub fn record_type(spec: RecordTypeSpec) -> RecordType {
    match spec {
        RecordTypeSpec::A => RecordType::A,
        RecordTypeSpec::Aaaa => RecordType::Aaaa,
        RecordTypeSpec::Cname => RecordType::Cname,
        RecordTypeSpec::Txt => RecordType::Txt,
    }
}

/// What an alias needs to know about its target.
#[derive(Clone, Debug, PartialEq)]
pub struct AliasTargetState {
    pub record_type: RecordType,
    /// The target has a healthy record by its own policy (not its last resort).
    pub healthy: bool,
    /// The target answers something: a value, or an alias of its own (whose target is not
    /// looked through). A target with no value anywhere answers nothing (R4).
    pub answers: bool,
}

/// An active shift that targets the group being compiled.
#[derive(Clone, Debug, PartialEq)]
pub struct ActiveShift {
    pub key: ObjectKey,
    /// Customer (a ZonalShift), Autoshift or PracticeRun: the first kind wins (AS5).
    pub shift_type: ShiftType,
    pub away_from: String,
    pub start: jiff::Timestamp,
}

/// Everything outside the group that its compilation reads.
pub struct GroupEnv<'a> {
    pub key: &'a ObjectKey,
    pub zones: &'a ServedZones,
    pub checks: &'a BTreeMap<ObjectKey, CheckHealth>,
    pub services: &'a BTreeMap<ObjectKey, ServiceEndpoints>,
    pub alias_target: &'a dyn Fn(&ObjectKey) -> Option<AliasTargetState>,
    /// Active shifts targeting this group, in any order.
    pub shifts: &'a [ActiveShift],
    /// Whether to write the decision path ([`GroupOutcome::explain`]).
    pub explain: bool,
    /// Whether to write the per-record status ([`GroupOutcome::records`]).
    pub statuses: bool,
    /// Whether to count the zone health a ZonalAutoshift reads ([`GroupOutcome::zone_health`]).
    pub zone_health: bool,
}

/// The decision path of one compile, written only when asked for: the simulator asks, the
/// operator and standalone mode do not (they would hold the lines of every group).
pub(super) struct Explain(pub(super) Option<Vec<String>>);

impl Explain {
    pub(super) fn line(&mut self, line: impl FnOnce() -> String) {
        if let Some(lines) = &mut self.0 {
            lines.push(line());
        }
    }
}
