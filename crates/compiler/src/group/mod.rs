//! Compiling one RecordGroup: record health (SEMANTICS R1–R5), zonal shifts on its endpoints
//! (Z2, Z5, Z6, and their precedence by type, AS5), the routing policy with its last resort
//! (S1–S7), and, for groups a ZonalAutoshift targets, their zone health before any shift
//! (AS2).
//!
//! ```text
//!   validate(spec) ──▶ evaluate records (checks, endpoints, alias targets, shift zone)
//!                          │  shift would empty the group? evaluate again without it (Z6)
//!                          ▼
//!                    select by policy ──▶ Selection + lastResort + status + explanation
//!                          └─ zone affinity: each zone's part of the selection (A1–A5)
//!
//!   env.rs       what a compile reads (GroupEnv) and the decision path it writes (Explain)
//!   validate.rs  validate(spec): the checks of the spec alone (S8), the values parsed
//!   evaluate.rs  each record's health and values (R1–R5, Z2, X2, X3), zone health (AS2)
//!   select.rs    the policy over the evaluated records (S2–S6)
//!   affinity.rs  zone affinity (A1–A5)
//!   this file    compile: shift precedence (Z5, AS5), fail open (Z6), the outcome
//! ```
//!
//! Everything here is a pure function of its [`GroupEnv`]; the incremental driver (the
//! [`Compiler`](crate::Compiler), `compile.rs`) decides when to call it. The table's key of a
//! group is `ObjectKey::group_key`'s.

mod affinity;
mod env;
mod evaluate;
mod select;
mod validate;

use std::collections::BTreeMap;
use std::sync::Arc;

use healthroute_api::{
    AppliedStatus, NotAppliedReason, ObjectKey, RecordGroupSpec, RecordStatus, ZoneAffinity,
};
use healthroute_table::{CompiledGroup, Value};

use crate::autoshift::detect::GroupZoneHealth;
use evaluate::Evaluated;

pub use env::{ActiveShift, AliasTargetState, GroupEnv, record_type};
pub use validate::{ParsedRecord, Rejection, validate};

use env::Explain;

/// What a shift does to one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShiftOutcome {
    pub shift: ObjectKey,
    pub applied: AppliedStatus,
    pub reason: Option<NotAppliedReason>,
}

/// The result of compiling one group.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupOutcome {
    pub compiled: Result<Arc<CompiledGroup<Value>>, Rejection>,
    /// A record is healthy by the group's own policy (what an alias with
    /// `evaluateTargetHealth` reads, R4).
    pub healthy: bool,
    pub records: Vec<RecordStatus>,
    pub shifts: Vec<ShiftOutcome>,
    /// The decision path, one line per step, for `simulate --explain`.
    pub explain: Vec<String>,
    /// Per zone, the values and their health before any shift (AS2), when a ZonalAutoshift
    /// targets the group.
    pub zone_health: Option<Box<GroupZoneHealth>>,
}

impl GroupOutcome {
    pub fn rejected(rejection: Rejection) -> Self {
        GroupOutcome {
            explain: vec![format!(
                "rejected ({}): {}",
                rejection.reason, rejection.message
            )],
            compiled: Err(rejection),
            healthy: false,
            records: Vec::new(),
            shifts: Vec::new(),
            zone_health: None,
        }
    }
    pub fn last_resort(&self) -> bool {
        self.compiled.as_ref().is_ok_and(|g| g.last_resort)
    }
}

/// Compiles a validated group with the world around it.
pub fn compile(
    env: &GroupEnv<'_>,
    spec: &RecordGroupSpec,
    name: &str,
    parsed: &[ParsedRecord],
    default_ttl: u32,
) -> GroupOutcome {
    let rtype = record_type(spec.record_type);
    let mut explain = Explain(env.explain.then(Vec::new));

    let (shifts, mut shift_outcomes) = order_shifts(env, &mut explain);

    let mut evaluated = evaluate::evaluate(env, spec, rtype, parsed, shifts.first().copied());
    if let Some(winner) = shifts.first() {
        if evaluated.iter().any(|e| e.healthy) {
            shift_outcomes.insert(
                0,
                ShiftOutcome {
                    shift: winner.key.clone(),
                    applied: AppliedStatus::Applied,
                    reason: None,
                },
            );
            explain.line(|| {
                format!(
                    "zonal shift {}: endpoints in {} are treated as unhealthy",
                    winner.key, winner.away_from
                )
            });
        } else {
            // Z6: fail open.
            evaluated = evaluate::evaluate(env, spec, rtype, parsed, None);
            shift_outcomes.insert(
                0,
                ShiftOutcome {
                    shift: winner.key.clone(),
                    applied: AppliedStatus::NotApplied,
                    reason: Some(NotAppliedReason::NoHealthyCapacityElsewhere),
                },
            );
            explain.line(|| format!(
                "zonal shift {} not applied: no healthy endpoint outside {} (NoHealthyCapacityElsewhere)",
                winner.key, winner.away_from
            ));
        }
    }

    let (selection, last_resort, notes) = select::select(spec, &evaluated);
    let healthy = evaluated.iter().any(|e| e.healthy);
    if last_resort {
        explain.line(|| {
            "no record is healthy: last resort, every record is treated as healthy".into()
        });
    }
    let records = record_lines(env, spec, &evaluated, &notes, last_resort, &mut explain);
    let affinity = spec.zone_affinity == Some(ZoneAffinity::PreferSameZone);
    let zones = if affinity && !last_resort {
        affinity::zone_views(spec, &evaluated, &selection, &mut explain)
    } else {
        if affinity {
            explain.line(|| "zone affinity: not applied under the last resort (A4)".into());
        }
        BTreeMap::new()
    };
    let compiled = CompiledGroup {
        key: env.key.group_key(),
        name: name.into(),
        record_type: rtype,
        ttl: spec.ttl.unwrap_or(default_ttl),
        last_resort,
        selection,
        zone_affinity: affinity.then(|| Box::new(healthroute_table::ZoneViews { zones })),
    };
    let zone_health = env
        .zone_health
        .then(|| Box::new(evaluate::zone_health(spec, &evaluated)));
    GroupOutcome {
        compiled: Ok(Arc::new(compiled)),
        healthy,
        records,
        shifts: shift_outcomes,
        explain: explain.0.unwrap_or_default(),
        zone_health,
    }
}

/// Z5, AS5: the shifts targeting the group, the one that applies first; the others'
/// outcomes (Conflict), each explained.
fn order_shifts<'a>(
    env: &GroupEnv<'a>,
    explain: &mut Explain,
) -> (Vec<&'a ActiveShift>, Vec<ShiftOutcome>) {
    // A customer shift before an autoshift before a practice run, then the oldest; the
    // others conflict.
    let mut shifts: Vec<&ActiveShift> = env.shifts.iter().collect();
    shifts.sort_by(|a, b| {
        a.shift_type
            .cmp(&b.shift_type)
            .then_with(|| a.start.cmp(&b.start))
            .then_with(|| a.key.cmp(&b.key))
    });
    let shift_outcomes: Vec<ShiftOutcome> = shifts
        .iter()
        .skip(1)
        .map(|s| ShiftOutcome {
            shift: s.key.clone(),
            applied: AppliedStatus::NotApplied,
            reason: Some(NotAppliedReason::Conflict),
        })
        .collect();
    for s in shifts.iter().skip(1) {
        let winner = shifts[0];
        explain.line(|| {
            if winner.shift_type == s.shift_type {
                format!(
                    "zonal shift {} not applied: {} is older (Conflict)",
                    s.key, winner.key
                )
            } else {
                format!(
                    "zonal shift {} ({:?}) not applied: {} ({:?}) takes precedence (Conflict)",
                    s.key, s.shift_type, winner.key, winner.shift_type
                )
            }
        });
    }
    (shifts, shift_outcomes)
}

/// Each record's line of the decision path, and, when statuses are asked for, its status:
/// healthy or not, why, and what it answers.
fn record_lines(
    env: &GroupEnv<'_>,
    spec: &RecordGroupSpec,
    evaluated: &[Evaluated],
    notes: &[String],
    last_resort: bool,
    explain: &mut Explain,
) -> Vec<RecordStatus> {
    let mut records = Vec::with_capacity(if env.statuses { spec.records.len() } else { 0 });
    for ((r, e), note) in spec.records.iter().zip(evaluated).zip(notes) {
        explain.line(|| {
            format!(
                "{}: {}{} -> {}",
                r.set_identifier,
                if e.healthy { "healthy" } else { "unhealthy" },
                e.reason
                    .as_deref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default(),
                note
            )
        });
        if !env.statuses {
            continue;
        }
        let answered: Vec<String> = match &e.alias {
            Some(k) => vec![format!("alias {}", k.name)],
            None if last_resort => e.all_values.iter().map(Value::to_string).collect(),
            None => e.healthy_values.iter().map(Value::to_string).collect(),
        };
        records.push(RecordStatus {
            set_identifier: r.set_identifier.clone(),
            healthy: e.healthy,
            values: answered,
            reason: e.reason.clone(),
        });
    }
    records
}
