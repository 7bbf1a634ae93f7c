//! What callers read back from the compiler after a compile: the table, each group's
//! outcome, each check's health and views, and the status of groups, shifts and
//! ZonalAutoshifts as data (the status writer adds the conditions and writes them; standalone
//! mode writes none).

use std::sync::Arc;

use healthroute_api::{
    AppliedStatus, CheckerView, EngineShiftStatus, ObjectKey, RecordGroupSpec, RecordGroupStatus,
    ShiftGroupStatus, ShiftState, ShiftTarget, ShiftType, ZonalAutoshiftStatus, ZonalShiftStatus,
};
use healthroute_table::{RoutingTable, Selection, Value};
use jiff::Timestamp;

use crate::autoshift::InvalidConfiguration;
use crate::error::Error;
use crate::group::GroupOutcome;
use crate::health::CheckHealth;
use crate::{Compiler, shift};

impl Compiler {
    /// The current table: cheap to clone, shared with readers.
    pub fn table(&self) -> Arc<RoutingTable<Value>> {
        self.table.clone()
    }

    pub fn outcome(&self, key: &ObjectKey) -> Option<&GroupOutcome> {
        self.outcomes.get(key)
    }

    pub fn group_keys(&self) -> impl Iterator<Item = &ObjectKey> {
        self.groups.keys()
    }

    /// Every group's spec as last upserted: the one copy a caller that feeds the compiler
    /// needs to keep (the operator's index keeps none of its own).
    pub fn group_specs(&self) -> impl Iterator<Item = (&ObjectKey, &RecordGroupSpec)> {
        self.groups.iter().map(|(k, g)| (k, &g.spec))
    }

    /// One group's spec as last upserted.
    pub fn group_spec(&self, key: &ObjectKey) -> Option<&RecordGroupSpec> {
        self.groups.get(key).map(|g| &g.spec)
    }

    pub fn check_health(&self, key: &ObjectKey) -> Option<&CheckHealth> {
        self.check_health.get(key)
    }

    /// One checker's view of a check, as last set.
    pub fn check_view(&self, key: &ObjectKey, checker: &str) -> Option<&CheckerView> {
        self.checks
            .get(key)?
            .views
            .iter()
            .find(|v| v.checker == checker)
    }

    /// The status of a RecordGroup as data (conditions are the status writer's).
    pub fn group_status(&self, key: &ObjectKey) -> Option<RecordGroupStatus> {
        let outcome = self.outcomes.get(key)?;
        let served = self.served(key);
        let (healthy_records, last_resort) = match (&outcome.compiled, &served) {
            // A rejected group that still serves its last good version: the health of what it
            // serves, not the 0 of a version that compiled to nothing.
            (Err(_), Some(g)) => {
                let answering = match &g.selection {
                    Selection::MultiValue {
                        set_identifiers, ..
                    } => set_identifiers.len(),
                    s => s.answers().len(),
                };
                let text = if g.last_resort {
                    "last good version, last resort".to_owned()
                } else {
                    format!("last good version, {answering} answering")
                };
                (text, g.last_resort)
            }
            (Err(_), None) => ("not served".to_owned(), false),
            (Ok(_), _) => {
                let healthy = outcome.records.iter().filter(|r| r.healthy).count();
                (
                    format!("{healthy}/{}", self.groups.get(key)?.spec.records.len()),
                    outcome.last_resort(),
                )
            }
        };
        Some(RecordGroupStatus {
            served: served.is_some(),
            served_generation: None,
            healthy_records: Some(healthy_records),
            records: outcome.records.clone(),
            last_resort,
            conditions: Vec::new(),
            observed_generation: None,
        })
    }

    /// The status of a ZonalShift at `now`: its clock and what it does to each targeted group.
    pub fn shift_status(
        &self,
        key: &ObjectKey,
        now: Timestamp,
    ) -> Option<Result<ZonalShiftStatus, Error>> {
        let shift = self.shifts.get(key)?;
        let clock = match self.shift_clocks.get(key)? {
            Ok(c) => c,
            Err(e) => return Some(Err(e.clone())),
        };
        let state = clock.state(now);
        let groups = if state == ShiftState::Active {
            self.shift_groups(key, &shift.spec.target)
        } else {
            Vec::new()
        };
        Some(Ok(ZonalShiftStatus {
            shift_type: Some(ShiftType::Customer),
            status: Some(state),
            start_time: Some(clock.start.into()),
            expiry_time: Some(clock.expiry.into()),
            expires_in: Some(clock.expires_in.clone()),
            applied_groups: Some(applied_of(&groups)),
            groups,
            conditions: Vec::new(),
            observed_generation: None,
        }))
    }

    /// The ZonalAutoshifts, by key.
    pub fn autoshift_keys(&self) -> impl Iterator<Item = &ObjectKey> {
        self.autoshifts.keys()
    }

    /// The status of a ZonalAutoshift as data (AS11): what its engine decided at the last
    /// compile, and each shift it holds in a ZonalShift's status shape. `None` before the
    /// first compile that saw it.
    pub fn autoshift_status(&self, key: &ObjectKey) -> Option<ZonalAutoshiftStatus> {
        let input = self.autoshifts.get(key)?;
        let engine = self.engines.get(key)?;
        let mut status = engine.status();
        status.shifts = engine
            .shifts(key)
            .into_iter()
            .map(|s| {
                let groups = self.shift_groups(&s.key, &input.spec.target);
                EngineShiftStatus {
                    name: s.key.name.to_string(),
                    away_from: s.away_from,
                    status: ZonalShiftStatus {
                        shift_type: Some(s.shift_type),
                        status: Some(ShiftState::Active),
                        start_time: Some(s.start.into()),
                        expiry_time: s.end.map(Into::into),
                        applied_groups: Some(applied_of(&groups)),
                        groups,
                        ..Default::default()
                    },
                }
            })
            .collect();
        Some(status)
    }

    /// Why a ZonalAutoshift's configuration cannot be used, if it cannot (AS1).
    pub fn autoshift_error(&self, key: &ObjectKey) -> Option<&str> {
        self.engines.get(key)?.error()
    }

    /// [`Compiler::autoshift_error`] with its reason, the label of standalone mode's metric.
    pub fn autoshift_invalid(&self, key: &ObjectKey) -> Option<&InvalidConfiguration> {
        self.engines.get(key)?.invalid()
    }

    /// What the shift `shift` does to each group `target` names in its namespace (Z5, Z6, AS5).
    fn shift_groups(&self, shift: &ObjectKey, target: &ShiftTarget) -> Vec<ShiftGroupStatus> {
        let mut groups = Vec::new();
        for (gk, g) in self
            .groups
            .range(shift.sibling("")..)
            .take_while(|(k, _)| k.namespace == shift.namespace)
        {
            if !shift::target_matches(target, &gk.name, &g.labels) {
                continue;
            }
            let outcome = self
                .outcomes
                .get(gk)
                .and_then(|o| o.shifts.iter().find(|s| &s.shift == shift));
            groups.push(ShiftGroupStatus {
                record_group: gk.name.to_string(),
                applied_status: outcome.map_or(AppliedStatus::NotApplied, |o| o.applied),
                reason: outcome.and_then(|o| o.reason),
            });
        }
        groups
    }
}

/// "applied/targeted", for `kubectl get zs`.
fn applied_of(groups: &[ShiftGroupStatus]) -> String {
    let applied = groups
        .iter()
        .filter(|g| g.applied_status == AppliedStatus::Applied)
        .count();
    format!("{applied}/{}", groups.len())
}
