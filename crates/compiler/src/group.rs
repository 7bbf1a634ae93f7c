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
//! ```
//!
//! Everything here is a pure function of its [`GroupEnv`]; the incremental driver (the
//! [`Compiler`](crate::Compiler), `compile.rs`) decides when to call it. The table's key of a
//! group ([`table_key`]) is made here, and only here.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use healthroute_table::{
    Answer, CompiledGroup, GroupKey, RecordType, Selection, Target, Value, normalize_name,
};

use healthroute_api::{
    AppliedStatus, DEFAULT_MINIMUM_ZONE_CAPACITY_PERCENT, NotAppliedReason, ObjectKey,
    RecordGroupSpec, RecordSpec, RecordStatus, RecordTypeSpec, RoutingPolicy, ServiceAddresses,
    ShiftType, ZoneAffinity,
};

use crate::autoshift::detect::GroupZoneHealth;
use crate::health::CheckHealth;
use crate::inputs::ServiceEndpoints;
use crate::reasons;
use crate::zones::ServedZones;

/// The table's record type of an API record type (the API crate does not know the table).
pub fn record_type(spec: RecordTypeSpec) -> RecordType {
    match spec {
        RecordTypeSpec::A => RecordType::A,
        RecordTypeSpec::Aaaa => RecordType::Aaaa,
        RecordTypeSpec::Cname => RecordType::Cname,
        RecordTypeSpec::Txt => RecordType::Txt,
    }
}

/// A peer's reported values (`TYPE value`, X6) that are of `rtype` and parse as such.
fn peer_values(rtype: RecordType, reported: &[String]) -> Vec<Value> {
    let mut values = Vec::new();
    for line in reported {
        let Some((t, v)) = line.split_once(' ') else {
            continue;
        };
        if t == rtype.as_str()
            && let Ok(value) = Value::parse(rtype, v)
            && !values.contains(&value)
        {
            values.push(value);
        }
    }
    values
}

/// The table's key of a group (its `namespace/name`, the wire form of a published table's
/// keys; `ObjectKey::parse_group_key` reads it back). Every key the compiler writes into a
/// table (a group's, an alias's target) comes from here.
pub fn table_key(key: &ObjectKey) -> GroupKey {
    key.to_string().into()
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
struct Explain(Option<Vec<String>>);

impl Explain {
    fn line(&mut self, line: impl FnOnce() -> String) {
        if let Some(lines) = &mut self.0 {
            lines.push(line());
        }
    }
}

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

/// Checks what can be checked from the spec alone and the served zones.
pub fn validate(
    key: &ObjectKey,
    spec: &RecordGroupSpec,
    zones: &ServedZones,
) -> Result<(String, Vec<ParsedRecord>), Rejection> {
    let invalid = |m: String| Rejection::new(reasons::INVALID_SPEC, m);
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
        let sources = usize::from(r.values.is_some())
            + usize::from(r.service.is_some())
            + usize::from(r.alias.is_some())
            + usize::from(r.peer.is_some());
        if sources != 1 {
            return Err(invalid(format!(
                "{at}: exactly one of values, service, alias, peer"
            )));
        }
        match (spec.routing_policy, r.weight) {
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
        match (spec.routing_policy, &r.failover) {
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
                if spec.routing_policy == RoutingPolicy::MultiValue {
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
        parsed.push(ParsedRecord {
            values,
            alias,
            peer,
        });
    }
    match spec.routing_policy {
        RoutingPolicy::Simple if spec.records.len() != 1 => {
            return Err(invalid(format!(
                "a Simple group has exactly one record, not {}",
                spec.records.len()
            )));
        }
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
        }
        _ => {}
    }
    Ok((name, parsed))
}

/// The parts of a record that [`validate`] computed.
#[derive(Clone, Debug, PartialEq)]
pub struct ParsedRecord {
    pub values: Vec<Value>,
    pub alias: Option<ObjectKey>,
    /// A peer source's check (`peer.<cluster>.<namespace>.<name>`, X4).
    pub peer: Option<ObjectKey>,
}

/// One record after health: a candidate or not, and what it answers.
struct Evaluated {
    healthy: bool,
    /// Values answered while healthy (its healthy endpoints).
    healthy_values: Vec<Value>,
    /// Values answered under last resort (all of them).
    all_values: Vec<Value>,
    alias: Option<ObjectKey>,
    /// An alias's target answers something (R4); false for other records.
    alias_answers: bool,
    reason: Option<String>,
    /// The zone of each value that has one (a static record's `zone`, an endpoint's zone).
    zones: Vec<(Value, Arc<str>)>,
    /// Each value's zone and health as if no shift applied (AS2); filled only for groups a
    /// ZonalAutoshift targets.
    unshifted: Vec<(Option<Arc<str>>, bool)>,
}

impl Evaluated {
    fn target(&self, last_resort: bool) -> Target<Value> {
        match &self.alias {
            Some(k) => Target::Alias(table_key(k)),
            None if last_resort => Target::Values(self.all_values.clone()),
            None => Target::Values(self.healthy_values.clone()),
        }
    }
    fn answerable(&self, last_resort: bool) -> bool {
        if self.alias.is_some() {
            return self.alias_answers;
        }
        !(if last_resort {
            &self.all_values
        } else {
            &self.healthy_values
        })
        .is_empty()
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

    // Z5, AS5: a customer shift before an autoshift before a practice run, then the oldest;
    // the others conflict.
    let mut shifts: Vec<&ActiveShift> = env.shifts.iter().collect();
    shifts.sort_by(|a, b| {
        a.shift_type
            .cmp(&b.shift_type)
            .then_with(|| a.start.cmp(&b.start))
            .then_with(|| a.key.cmp(&b.key))
    });
    let mut shift_outcomes: Vec<ShiftOutcome> = shifts
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

    let mut evaluated = evaluate(env, spec, rtype, parsed, shifts.first().copied());
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
            evaluated = evaluate(env, spec, rtype, parsed, None);
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

    let (selection, last_resort, notes) = select(spec, &evaluated);
    let healthy = evaluated.iter().any(|e| e.healthy);
    if last_resort {
        explain.line(|| {
            "no record is healthy: last resort, every record is treated as healthy".into()
        });
    }
    let mut records = Vec::with_capacity(if env.statuses { spec.records.len() } else { 0 });
    for ((r, e), note) in spec.records.iter().zip(&evaluated).zip(&notes) {
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
    let affinity = spec.zone_affinity == Some(ZoneAffinity::PreferSameZone);
    let zones = if affinity && !last_resort {
        zone_views(spec, &evaluated, &selection, &mut explain)
    } else {
        if affinity {
            explain.line(|| "zone affinity: not applied under the last resort (A4)".into());
        }
        BTreeMap::new()
    };
    let compiled = CompiledGroup {
        key: table_key(env.key),
        name: name.into(),
        record_type: rtype,
        ttl: spec.ttl.unwrap_or(default_ttl),
        last_resort,
        selection,
        zone_affinity: affinity.then(|| Box::new(healthroute_table::ZoneViews { zones })),
    };
    let zone_health = env
        .zone_health
        .then(|| Box::new(zone_health(spec, &evaluated)));
    GroupOutcome {
        compiled: Ok(Arc::new(compiled)),
        healthy,
        records,
        shifts: shift_outcomes,
        explain: explain.0.unwrap_or_default(),
        zone_health,
    }
}

/// AS2: every value of the group with its zone and its health before any shift, and its
/// capacity as A3 counts it (a Weighted record's weight split evenly over its values).
fn zone_health(spec: &RecordGroupSpec, evaluated: &[Evaluated]) -> GroupZoneHealth {
    let mut health = GroupZoneHealth::default();
    for (r, e) in spec.records.iter().zip(evaluated) {
        let n = e.unshifted.len().max(1) as f64;
        let capacity = match spec.routing_policy {
            RoutingPolicy::Weighted => f64::from(r.weight.unwrap_or(0)) / n,
            _ => 1.0,
        };
        for (zone, healthy) in &e.unshifted {
            health.add(zone.as_ref(), *healthy, capacity);
        }
    }
    health
}

fn evaluate(
    env: &GroupEnv<'_>,
    spec: &RecordGroupSpec,
    rtype: RecordType,
    parsed: &[ParsedRecord],
    shift: Option<&ActiveShift>,
) -> Vec<Evaluated> {
    let shifted_zone = shift.map(|s| s.away_from.as_str());
    spec.records
        .iter()
        .zip(parsed)
        .map(|(r, p)| evaluate_record(env, rtype, r, p, shifted_zone, shift))
        .collect()
}

fn evaluate_record(
    env: &GroupEnv<'_>,
    rtype: RecordType,
    r: &RecordSpec,
    p: &ParsedRecord,
    shifted_zone: Option<&str>,
    shift: Option<&ActiveShift>,
) -> Evaluated {
    let mut reasons_down: Vec<String> = Vec::new();
    // R1: the health check, when there is one.
    if let Some(check) = &r.health_check_ref {
        let key = ObjectKey::new(&env.key.namespace, &check.name);
        match env.checks.get(&key) {
            Some(h) if h.healthy => {}
            Some(h) => reasons_down.push(format!("health check {}: {}", check.name, h.reason)),
            None => reasons_down.push(format!("health check {} does not exist", check.name)),
        }
    }
    let mut healthy_values = Vec::new();
    let mut all_values = Vec::new();
    let mut alias_answers = false;
    let mut zones: Vec<(Value, Arc<str>)> = Vec::new();
    // AS2: health before any shift, for detection; only the record's check so far.
    let check_ok = reasons_down.is_empty();
    let mut unshifted: Vec<(Option<Arc<str>>, bool)> = Vec::new();
    if r.values.is_some() {
        // R2 / Z2: static values share the record's zone.
        all_values = p.values.clone();
        if let Some(zone) = &r.zone {
            let zone: Arc<str> = zone.as_str().into();
            zones = p.values.iter().map(|v| (v.clone(), zone.clone())).collect();
        }
        if env.zone_health {
            let zone: Option<Arc<str>> = r.zone.as_deref().map(Arc::from);
            unshifted = p.values.iter().map(|_| (zone.clone(), check_ok)).collect();
        }
        if let (Some(zone), Some(record_zone)) = (shifted_zone, &r.zone)
            && zone == record_zone
        {
            reasons_down.push(format!(
                "zone {zone} is shifted away ({})",
                shift.map(|s| s.key.to_string()).unwrap_or_default()
            ));
        }
        if reasons_down.is_empty() {
            healthy_values = p.values.clone();
        }
    } else if let Some(service) = &r.service {
        // R3 / H11: healthy endpoints of the Service.
        let key = ObjectKey::new(&env.key.namespace, &service.name);
        let endpoints = env.services.get(&key);
        let family = |ip: &IpAddr| match rtype {
            RecordType::A => ip.is_ipv4(),
            _ => ip.is_ipv6(),
        };
        let to_value = |ip: &IpAddr| match ip {
            IpAddr::V4(a) => Value::A(*a),
            IpAddr::V6(a) => Value::Aaaa(*a),
        };
        let eps: Vec<_> = endpoints
            .map(|s| s.endpoints.iter().filter(|e| family(&e.address)).collect())
            .unwrap_or_default();
        if env.zone_health {
            unshifted = match service.addresses.unwrap_or_default() {
                ServiceAddresses::Endpoints => eps
                    .iter()
                    .map(|e| (e.zone.as_deref().map(Arc::from), check_ok && e.ready))
                    .collect(),
                ServiceAddresses::ClusterIp => {
                    let ready = check_ok && eps.iter().any(|e| e.ready);
                    endpoints
                        .map_or(&[][..], |s| &s.cluster_ips[..])
                        .iter()
                        .filter(|ip| family(ip))
                        .map(|_| (None, ready))
                        .collect()
                }
            };
        }
        let in_shifted =
            |zone: &Option<String>| shifted_zone.is_some() && zone.as_deref() == shifted_zone;
        let mut usable: Vec<IpAddr> = eps
            .iter()
            .filter(|e| e.ready && !in_shifted(&e.zone))
            .map(|e| e.address)
            .collect();
        let mut note = None;
        if usable.is_empty() {
            usable = eps
                .iter()
                .filter(|e| e.serving && e.terminating && !in_shifted(&e.zone))
                .map(|e| e.address)
                .collect();
            if !usable.is_empty() {
                note = Some("no ready endpoint: using serving, terminating endpoints");
            }
        }
        usable.sort();
        usable.dedup();
        let shifted_out = eps
            .iter()
            .filter(|e| e.ready && in_shifted(&e.zone))
            .count();
        if usable.is_empty() {
            reasons_down.push(match (endpoints, eps.is_empty(), shifted_out) {
                (None, _, _) => format!("service {} has no endpoints", service.name),
                (_, true, _) => format!("service {} has no {rtype} endpoints", service.name),
                (_, _, n) if n > 0 => format!(
                    "service {}: its {n} ready endpoints are in shifted zone {}",
                    service.name,
                    shifted_zone.unwrap_or_default()
                ),
                _ => format!("service {} has no ready endpoint", service.name),
            });
        }
        match service.addresses.unwrap_or_default() {
            ServiceAddresses::Endpoints => {
                zones = eps
                    .iter()
                    .filter_map(|e| Some((to_value(&e.address), e.zone.as_deref()?.into())))
                    .collect();
                let mut all: Vec<IpAddr> = eps.iter().map(|e| e.address).collect();
                all.sort();
                all.dedup();
                all_values = all.iter().map(to_value).collect();
                healthy_values = usable.iter().map(to_value).collect();
            }
            ServiceAddresses::ClusterIp => {
                let ips: Vec<Value> = endpoints
                    .map(|s| {
                        s.cluster_ips
                            .iter()
                            .filter(|ip| family(ip))
                            .map(to_value)
                            .collect()
                    })
                    .unwrap_or_default();
                if ips.is_empty() {
                    reasons_down.push(format!(
                        "service {} has no {rtype} cluster IP",
                        service.name
                    ));
                }
                all_values = ips.clone();
                healthy_values = if usable.is_empty() { Vec::new() } else { ips };
            }
        }
        if !reasons_down.is_empty() {
            healthy_values.clear();
        } else if let Some(n) = note {
            return Evaluated {
                healthy: true,
                healthy_values,
                all_values,
                alias: None,
                alias_answers: false,
                reason: Some(n.into()),
                zones,
                unshifted,
            };
        }
    } else if let (Some(check), Some(peer)) = (&p.peer, &r.peer) {
        // X2, X3: what the peer's checkers last heard, of this group's type; healthy while
        // the check is and it holds a value.
        let label = format!("peer {} {}", peer.cluster, peer.record_group);
        match env.checks.get(check) {
            None => reasons_down.push(format!("{label}: check {} does not exist", check.name)),
            Some(h) => {
                all_values = peer_values(rtype, &h.values);
                if !h.healthy {
                    reasons_down.push(format!("{label}: {}", h.reason));
                } else if h.values.is_empty() {
                    reasons_down.push(format!("{label}: no value heard from the peer yet"));
                } else if all_values.is_empty() {
                    reasons_down.push(format!("{label} answers no {rtype} value"));
                } else if reasons_down.is_empty() {
                    healthy_values = all_values.clone();
                }
            }
        }
    } else if let Some(target) = &p.alias {
        // R4: the alias is healthy when its target is (with evaluateTargetHealth).
        let evaluate = r.alias.as_ref().is_some_and(|a| a.evaluate_target_health);
        let state = (env.alias_target)(target);
        // S7: under the last resort the target answers by its own, so it takes part while it
        // has anything to answer with.
        alias_answers = state.as_ref().is_some_and(|t| t.answers);
        match state {
            // S6: a target with nothing to answer is never an answer, whatever the flag.
            Some(t) if !t.answers => {
                reasons_down.push(format!("alias target {} answers nothing", target.name))
            }
            Some(t) if evaluate && !t.healthy => reasons_down.push(format!(
                "alias target {} has no healthy record",
                target.name
            )),
            Some(_) => {}
            None => reasons_down.push(format!("alias target {} is not served", target.name)),
        }
    }
    if env.zone_health && (p.peer.is_some() || p.alias.is_some()) {
        // Peer values and aliases lie in no zone (A2, X3); shifts never touch them.
        let healthy = reasons_down.is_empty();
        unshifted = if p.alias.is_some() {
            vec![(None, healthy)]
        } else {
            all_values.iter().map(|_| (None, healthy)).collect()
        };
    }
    Evaluated {
        healthy: reasons_down.is_empty(),
        healthy_values,
        all_values,
        alias: p.alias.clone(),
        alias_answers,
        reason: (!reasons_down.is_empty()).then(|| reasons_down.join("; ")),
        zones,
        unshifted,
    }
}

/// Zone affinity (A1–A5): for each zone that holds candidates of `selection`, the part of it
/// in that zone, when the zone holds at least `minimumZoneCapacityPercent` of an even split of
/// the candidates' capacity. Capacity is weight for a weighted choice (a record's weight split
/// evenly over its values), one per value otherwise; values without a zone and alias
/// targets count in the total and lie in no zone.
fn zone_views(
    spec: &RecordGroupSpec,
    evaluated: &[Evaluated],
    selection: &Selection<Value>,
    explain: &mut Explain,
) -> BTreeMap<Arc<str>, Selection<Value>> {
    let zone_of: std::collections::HashMap<&Value, &Arc<str>> = evaluated
        .iter()
        .rev() // the first record that names a value's zone wins
        .flat_map(|e| e.zones.iter().map(|(v, z)| (v, z)))
        .collect();
    // (capacity, zone) of every candidate value, and the total.
    let mut capacity: BTreeMap<&Arc<str>, f64> = BTreeMap::new();
    let mut total = 0.0;
    let mut count = |values: &[Value], weight: f64| {
        total += weight;
        for v in values {
            if let Some(z) = zone_of.get(v) {
                *capacity.entry(z).or_default() += weight / values.len() as f64;
            }
        }
    };
    match selection {
        Selection::Fixed(a) => {
            if let Target::Values(vs) = &a.target {
                for v in vs {
                    count(std::slice::from_ref(v), 1.0);
                }
            } else {
                count(&[], 1.0);
            }
        }
        Selection::Weighted {
            cumulative,
            answers,
        } => {
            for (w, a) in weights(cumulative).zip(answers) {
                let w = f64::from(w);
                match &a.target {
                    Target::Values(vs) => count(vs, w),
                    Target::Alias(_) => count(&[], w),
                }
            }
        }
        Selection::MultiValue { pool, .. } => {
            for v in pool {
                count(std::slice::from_ref(v), 1.0);
            }
        }
    }
    let percent = spec
        .minimum_zone_capacity_percent
        .unwrap_or(DEFAULT_MINIMUM_ZONE_CAPACITY_PERCENT);
    let zones = capacity.len() as f64;
    let mut views = BTreeMap::new();
    if capacity.is_empty() {
        explain.line(|| {
            "zone affinity: no candidate has a zone: every resolver answers from all of them".into()
        });
    }
    for (zone, cap) in capacity {
        let even = total / zones;
        // A3: at least `percent` of an even split (cap * zones >= percent% of total).
        if cap * 100.0 + 1e-9 < f64::from(percent) * even {
            explain.line(|| {
                format!(
                    "zone affinity: {zone} holds {} of {} ({:.0}% of an even split, under {percent}%): resolvers there answer from every zone",
                    fmt_capacity(cap),
                    fmt_capacity(total),
                    100.0 * cap / even
                )
            });
            continue;
        }
        let in_zone = |v: &Value| zone_of.get(v).is_some_and(|z| *z == zone);
        let restrict = |a: &Answer<Value>| match &a.target {
            Target::Values(vs) => {
                let vs: Vec<Value> = vs.iter().filter(|v| in_zone(v)).cloned().collect();
                (!vs.is_empty()).then(|| Answer {
                    set_identifier: a.set_identifier.clone(),
                    target: Target::Values(vs),
                })
            }
            Target::Alias(_) => None,
        };
        let view = match selection {
            Selection::Fixed(a) => restrict(a).map(Selection::Fixed),
            Selection::Weighted {
                cumulative,
                answers,
            } => Selection::weighted(
                weights(cumulative)
                    .zip(answers)
                    .filter_map(|(w, a)| restrict(a).map(|a| (w, a))),
            ),
            Selection::MultiValue {
                set_identifiers,
                pool,
                owners,
            } => {
                let kept: Vec<usize> = (0..pool.len()).filter(|&i| in_zone(&pool[i])).collect();
                (!kept.is_empty()).then(|| Selection::MultiValue {
                    set_identifiers: set_identifiers.clone(),
                    pool: kept.iter().map(|&i| pool[i].clone()).collect(),
                    owners: if owners.is_empty() {
                        Vec::new()
                    } else {
                        kept.iter().map(|&i| owners[i]).collect()
                    },
                })
            }
        };
        if let Some(view) = view {
            explain.line(|| {
                format!(
                    "zone affinity: {zone} holds {} of {} ({:.0}% of an even split): resolvers there answer from {zone}",
                    fmt_capacity(cap),
                    fmt_capacity(total),
                    100.0 * cap / even
                )
            });
            views.insert(zone.clone(), view);
        }
    }
    views
}

/// Each answer's own weight, from a weighted selection's cumulative weights.
fn weights(cumulative: &[u32]) -> impl Iterator<Item = u32> + '_ {
    cumulative.iter().scan(0, |before, &c| {
        let w = c - *before;
        *before = c;
        Some(w)
    })
}

fn fmt_capacity(c: f64) -> String {
    if (c - c.round()).abs() < 1e-9 {
        format!("{c:.0}")
    } else {
        format!("{c:.2}")
    }
}

/// The policy over evaluated records (S2–S6): the selection, whether it is the last resort,
/// and a note per record for the explanation.
fn select(
    spec: &RecordGroupSpec,
    evaluated: &[Evaluated],
) -> (Selection<Value>, bool, Vec<String>) {
    let any_healthy = evaluated.iter().any(|e| e.healthy);
    let last_resort = !any_healthy;
    let mut notes: Vec<String> = vec![String::new(); evaluated.len()];
    let answer = |i: usize, lr: bool| Answer {
        set_identifier: spec.records[i].set_identifier.as_str().into(),
        target: evaluated[i].target(lr),
    };
    let empty = || {
        Selection::Fixed(Answer {
            set_identifier: spec.records[0].set_identifier.as_str().into(),
            target: Target::Values(Vec::new()),
        })
    };
    let selection = match spec.routing_policy {
        RoutingPolicy::Simple => {
            notes[0] = if last_resort {
                "answers all its values (last resort)".into()
            } else {
                "answers its healthy values".into()
            };
            Selection::Fixed(answer(0, last_resort))
        }
        RoutingPolicy::Weighted => {
            let weight = |i: usize| spec.records[i].weight.unwrap_or(0);
            let usable =
                |i: usize, lr: bool| evaluated[i].answerable(lr) && (lr || evaluated[i].healthy);
            let positive: Vec<usize> = (0..evaluated.len())
                .filter(|&i| usable(i, last_resort) && weight(i) > 0)
                .collect();
            let chosen: Vec<(usize, u32)> = if !positive.is_empty() {
                positive.iter().map(|&i| (i, weight(i))).collect()
            } else {
                // S3: weight-0 records only when no positive-weight record can answer.
                (0..evaluated.len())
                    .filter(|&i| usable(i, last_resort))
                    .map(|i| (i, 1))
                    .collect()
            };
            let total: u32 = chosen.iter().map(|(_, w)| w).sum();
            for (i, note) in notes.iter_mut().enumerate() {
                *note = match chosen.iter().find(|(j, _)| *j == i) {
                    Some((_, w)) if positive.is_empty() => {
                        format!("candidate, chosen uniformly (1/{})", chosen.len())
                    }
                    Some((_, w)) => format!(
                        "candidate, weight {w}/{total} = {:.1}%",
                        100.0 * f64::from(*w) / f64::from(total)
                    ),
                    None if !evaluated[i].healthy && !last_resort => {
                        "not a candidate (unhealthy)".into()
                    }
                    None if weight(i) == 0 => {
                        "not a candidate (weight 0: used only when no weighted record can answer)"
                            .into()
                    }
                    None => "not a candidate (no values)".into(),
                };
            }
            Selection::weighted(chosen.iter().map(|&(i, w)| (w, answer(i, last_resort))))
                .unwrap_or_else(empty)
        }
        RoutingPolicy::Failover => {
            let mut order: Vec<usize> = (0..evaluated.len()).collect();
            order.sort_by_key(|&i| spec.records[i].failover.as_ref().map_or(0, |f| f.tier()));
            let winner = order.iter().copied().find(|&i| evaluated[i].healthy);
            let (i, lr) = match winner {
                Some(i) => (i, false),
                // S4: both (all) unhealthy: the primary answers, unless it has nothing to
                // answer with (X3: a peer record that never had values takes no part in the
                // last resort); then the first tier that has (S6).
                None => (
                    order
                        .iter()
                        .copied()
                        .find(|&i| evaluated[i].answerable(true))
                        .unwrap_or(order[0]),
                    true,
                ),
            };
            for (j, note) in notes.iter_mut().enumerate() {
                let tier = spec.records[j].failover.as_ref().map_or(0, |f| f.tier());
                *note = if j == i {
                    format!(
                        "answers (tier {tier}{})",
                        if lr { ", last resort" } else { "" }
                    )
                } else if evaluated[j].healthy {
                    format!("standby (tier {tier}): a higher tier is healthy")
                } else {
                    format!("not a candidate (tier {tier}, unhealthy)")
                };
            }
            Selection::Fixed(answer(i, lr))
        }
        RoutingPolicy::MultiValue => {
            let mut pool: Vec<Value> = Vec::new();
            let mut owners: Vec<u32> = Vec::new();
            let mut ids = Vec::new();
            for (i, e) in evaluated.iter().enumerate() {
                let values = if last_resort {
                    &e.all_values
                } else {
                    &e.healthy_values
                };
                if (e.healthy || last_resort) && !values.is_empty() {
                    let owner = ids.len() as u32;
                    ids.push(spec.records[i].set_identifier.as_str().into());
                    for v in values {
                        if !pool.contains(v) {
                            pool.push(v.clone());
                            owners.push(owner);
                        }
                    }
                    notes[i] = format!("contributes {} value(s)", values.len());
                } else {
                    notes[i] = "not a candidate (unhealthy)".into();
                }
            }
            if pool.is_empty() {
                empty()
            } else {
                Selection::MultiValue {
                    set_identifiers: ids,
                    pool,
                    owners,
                }
            }
        }
    };
    (selection, last_resort, notes)
}
