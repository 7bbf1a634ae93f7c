//! What can be checked of a group from its spec alone and the served zones (SEMANTICS S8):
//! its name, each record's one source, weights and failover roles for its policy, its values
//! parsed; a group that fails is rejected with a reason, and never compiled.

use std::collections::BTreeSet;

use healthroute_api::{ObjectKey, RecordGroupSpec, RecordSpec, RoutingPolicy};
use healthroute_table::{RecordType, Value, normalize_name};

use super::env::record_type;
use crate::reasons;
use crate::zones::ServedZones;

/// Why a group is not compiled (SEMANTICS S8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    pub reason: &'static str,
    pub message: String,
}

impl Rejection {
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Rejection {
            reason,
            message: message.into(),
        }
    }
}

/// The parts of a record that [`validate`] computed.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedRecord {
    pub values: Vec<Value>,
    pub alias: Option<ObjectKey>,
    /// A peer source's check (`peer.<cluster>.<namespace>.<name>`, X4).
    pub peer: Option<ObjectKey>,
}

fn invalid(message: String) -> Rejection {
    Rejection::new(reasons::INVALID_SPEC, message)
}

/// Checks what can be checked from the spec alone and the served zones.
pub fn validate(
    key: &ObjectKey,
    spec: &RecordGroupSpec,
    zones: &ServedZones,
) -> Result<(String, Vec<ParsedRecord>), Rejection> {
    let name = normalize_name(&spec.name).map_err(|e| invalid(e.to_string()))?;
    if zones.zone_of(&name).is_none() {
        return Err(Rejection::new(
            reasons::ZONE_NOT_SERVED,
            format!(
                "{name} lies in no served zone (served: {})",
                zones.names().join(", ")
            ),
        ));
    }
    let rtype = record_type(spec.record_type);
    if spec.records.is_empty() {
        return Err(invalid("a group needs at least one record".into()));
    }
    let mut ids = BTreeSet::new();
    let mut parsed = Vec::with_capacity(spec.records.len());
    for (i, r) in spec.records.iter().enumerate() {
        let at = format!("records[{i}] ({})", r.set_identifier);
        if !ids.insert(r.set_identifier.as_str()) {
            return Err(invalid(format!("{at}: setIdentifier is used twice")));
        }
        parsed.push(validate_record(key, spec.routing_policy, rtype, r, &at)?);
    }
    validate_policy(spec)?;
    Ok((name, parsed))
}

/// One record: exactly one source, the fields its policy needs and no others, its values
/// parsed as the group's type.
fn validate_record(
    key: &ObjectKey,
    policy: RoutingPolicy,
    rtype: RecordType,
    r: &RecordSpec,
    at: &str,
) -> Result<ParsedRecord, Rejection> {
    let sources = usize::from(r.values.is_some())
        + usize::from(r.service.is_some())
        + usize::from(r.alias.is_some())
        + usize::from(r.peer.is_some());
    if sources != 1 {
        return Err(invalid(format!(
            "{at}: exactly one of values, service, alias, peer"
        )));
    }
    match (policy, r.weight) {
        (RoutingPolicy::Weighted, None) => {
            return Err(invalid(format!(
                "{at}: a Weighted group needs a weight on every record"
            )));
        }
        (RoutingPolicy::Weighted, Some(w)) if w > 255 => {
            return Err(invalid(format!("{at}: weight {w} is over 255")));
        }
        (p, Some(_)) if p != RoutingPolicy::Weighted => {
            return Err(invalid(format!("{at}: weight is only for Weighted groups")));
        }
        _ => {}
    }
    match (policy, &r.failover) {
        (RoutingPolicy::Failover, None) => {
            return Err(invalid(format!(
                "{at}: a Failover group needs failover on every record"
            )));
        }
        (p, Some(_)) if p != RoutingPolicy::Failover => {
            return Err(invalid(format!(
                "{at}: failover is only for Failover groups"
            )));
        }
        _ => {}
    }
    if r.zone.is_some() && r.values.is_none() {
        return Err(invalid(format!("{at}: zone applies to static values only")));
    }
    let mut values = Vec::new();
    if let Some(raw) = &r.values {
        if raw.is_empty() {
            return Err(invalid(format!("{at}: values is empty")));
        }
        for v in raw {
            let value = Value::parse(rtype, v).map_err(|e| invalid(format!("{at}: {e}")))?;
            if !values.contains(&value) {
                values.push(value);
            }
        }
    }
    if r.service.is_some() && !matches!(rtype, RecordType::A | RecordType::Aaaa) {
        return Err(invalid(format!(
            "{at}: service records need an A or AAAA group"
        )));
    }
    let alias = match &r.alias {
        Some(alias) => {
            if policy == RoutingPolicy::MultiValue {
                return Err(invalid(format!(
                    "{at}: MultiValue records cannot be aliases"
                )));
            }
            Some(key.sibling(&alias.record_group))
        }
        None => None,
    };
    let peer = match &r.peer {
        Some(peer) if peer.group().is_none() => {
            return Err(invalid(format!(
                "{at}: peer.recordGroup {:?} is not namespace/name",
                peer.record_group
            )));
        }
        Some(peer) => Some(key.sibling(&peer.check_name())),
        None => None,
    };
    Ok(ParsedRecord {
        values,
        alias,
        peer,
    })
}

/// What the policy asks of the records together: a Simple group has one, a Failover group
/// one Primary and a tier per record.
fn validate_policy(spec: &RecordGroupSpec) -> Result<(), Rejection> {
    match spec.routing_policy {
        RoutingPolicy::Simple if spec.records.len() != 1 => Err(invalid(format!(
            "a Simple group has exactly one record, not {}",
            spec.records.len()
        ))),
        RoutingPolicy::Failover => {
            let primaries = spec
                .records
                .iter()
                .filter(|r| r.failover.as_ref().is_some_and(|f| f.tier() == 0))
                .count();
            if primaries != 1 {
                return Err(Rejection::new(
                    reasons::NO_PRIMARY,
                    format!("a Failover group needs exactly one Primary record, not {primaries}"),
                ));
            }
            let mut tiers = BTreeSet::new();
            for r in &spec.records {
                let tier = r.failover.as_ref().map_or(0, |f| f.tier());
                if !tiers.insert(tier) {
                    return Err(invalid(format!(
                        "two records share failover tier {tier}; give each Secondary its own priority"
                    )));
                }
            }
            Ok(())
        }
        _ => Ok(()),
    }
}
