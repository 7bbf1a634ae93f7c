//! One record's health and what it answers (SEMANTICS R1-R5): its health check, then its
//! source (static values, a Service's endpoints, a peer's values, an alias target), with the
//! winning shift's zone taken away (Z2), and, for groups a ZonalAutoshift targets, each
//! value's zone and health before any shift (AS2).
//!
//! ```text
//!   health check (R1) ─▶ static values (R2, Z2) | service endpoints (R3, H11)
//!                        | peer values (X2, X3) | alias target (R4, S6, S7) ─▶ Evaluated
//! ```

use std::net::IpAddr;
use std::sync::Arc;

use healthroute_api::{
    ObjectKey, PeerTarget, RecordGroupSpec, RecordSpec, RoutingPolicy, ServiceAddresses, ServiceRef,
};
use healthroute_table::{PeerValue, RecordType, Target, Value};

use super::env::{ActiveShift, GroupEnv};
use super::validate::ParsedRecord;
use crate::autoshift::detect::GroupZoneHealth;

/// One record after health: a candidate or not, and what it answers.
pub(super) struct Evaluated {
    pub(super) healthy: bool,
    /// Values answered while healthy (its healthy endpoints).
    pub(super) healthy_values: Vec<Value>,
    /// Values answered under last resort (all of them).
    pub(super) all_values: Vec<Value>,
    pub(super) alias: Option<ObjectKey>,
    /// An alias's target answers something (R4); false for other records.
    pub(super) alias_answers: bool,
    pub(super) reason: Option<String>,
    /// The zone of each value that has one (a static record's `zone`, an endpoint's zone).
    pub(super) zones: Vec<(Value, Arc<str>)>,
    /// Each value's zone and health as if no shift applied (AS2); filled only for groups a
    /// ZonalAutoshift targets.
    pub(super) unshifted: Vec<(Option<Arc<str>>, bool)>,
}

impl Evaluated {
    pub(super) fn target(&self, last_resort: bool) -> Target<Value> {
        match &self.alias {
            Some(k) => Target::Alias(k.group_key()),
            None if last_resort => Target::Values(self.all_values.clone()),
            None => Target::Values(self.healthy_values.clone()),
        }
    }
    pub(super) fn answerable(&self, last_resort: bool) -> bool {
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

/// AS2: every value of the group with its zone and its health before any shift, and its
/// capacity as A3 counts it (a Weighted record's weight split evenly over its values).
pub(super) fn zone_health(spec: &RecordGroupSpec, evaluated: &[Evaluated]) -> GroupZoneHealth {
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

/// Each record's health and values, with `shift` applied (or none, Z6).
pub(super) fn evaluate(
    env: &GroupEnv<'_>,
    spec: &RecordGroupSpec,
    rtype: RecordType,
    parsed: &[ParsedRecord],
    shift: Option<&ActiveShift>,
) -> Vec<Evaluated> {
    spec.records
        .iter()
        .zip(parsed)
        .map(|(r, p)| evaluate_record(env, rtype, r, p, shift))
        .collect()
}

/// A record's evaluation while its source is read.
#[derive(Default)]
struct Draft {
    reasons_down: Vec<String>,
    healthy_values: Vec<Value>,
    all_values: Vec<Value>,
    alias_answers: bool,
    zones: Vec<(Value, Arc<str>)>,
    unshifted: Vec<(Option<Arc<str>>, bool)>,
    /// Why a healthy record answers what it does, when that needs saying (serving,
    /// terminating endpoints).
    note: Option<&'static str>,
}

fn evaluate_record(
    env: &GroupEnv<'_>,
    rtype: RecordType,
    r: &RecordSpec,
    p: &ParsedRecord,
    shift: Option<&ActiveShift>,
) -> Evaluated {
    let mut d = Draft::default();
    // R1: the health check, when there is one.
    if let Some(check) = &r.health_check_ref {
        let key = ObjectKey::new(&env.key.namespace, &check.name);
        match env.checks.get(&key) {
            Some(h) if h.healthy => {}
            Some(h) => d
                .reasons_down
                .push(format!("health check {}: {}", check.name, h.reason)),
            None => d
                .reasons_down
                .push(format!("health check {} does not exist", check.name)),
        }
    }
    // AS2: health before any shift, for detection; only the record's check so far.
    let check_ok = d.reasons_down.is_empty();
    if r.values.is_some() {
        static_values(env, r, p, shift, check_ok, &mut d);
    } else if let Some(service) = &r.service {
        service_endpoints(env, rtype, service, shift, check_ok, &mut d);
    } else if let (Some(check), Some(peer)) = (&p.peer, &r.peer) {
        peer_source(env, rtype, check, peer, &mut d);
    } else if let Some(target) = &p.alias {
        alias_target(env, r, target, &mut d);
    }
    if env.zone_health && (p.peer.is_some() || p.alias.is_some()) {
        // Peer values and aliases lie in no zone (A2, X3); shifts never touch them.
        let healthy = d.reasons_down.is_empty();
        d.unshifted = if p.alias.is_some() {
            vec![(None, healthy)]
        } else {
            d.all_values.iter().map(|_| (None, healthy)).collect()
        };
    }
    let reason = if d.reasons_down.is_empty() {
        d.note.map(String::from)
    } else {
        Some(d.reasons_down.join("; "))
    };
    Evaluated {
        healthy: d.reasons_down.is_empty(),
        healthy_values: d.healthy_values,
        all_values: d.all_values,
        alias: p.alias.clone(),
        alias_answers: d.alias_answers,
        reason,
        zones: d.zones,
        unshifted: d.unshifted,
    }
}

/// R2 / Z2: static values, in the record's zone if it names one.
fn static_values(
    env: &GroupEnv<'_>,
    r: &RecordSpec,
    p: &ParsedRecord,
    shift: Option<&ActiveShift>,
    check_ok: bool,
    d: &mut Draft,
) {
    let shifted_zone = shift.map(|s| s.away_from.as_str());
    // R2 / Z2: static values share the record's zone.
    d.all_values = p.values.clone();
    if let Some(zone) = &r.zone {
        let zone: Arc<str> = zone.as_str().into();
        d.zones = p.values.iter().map(|v| (v.clone(), zone.clone())).collect();
    }
    if env.zone_health {
        let zone: Option<Arc<str>> = r.zone.as_deref().map(Arc::from);
        d.unshifted = p.values.iter().map(|_| (zone.clone(), check_ok)).collect();
    }
    if let (Some(zone), Some(record_zone)) = (shifted_zone, &r.zone)
        && zone == record_zone
    {
        d.reasons_down.push(format!(
            "zone {zone} is shifted away ({})",
            shift.map(|s| s.key.to_string()).unwrap_or_default()
        ));
    }
    if d.reasons_down.is_empty() {
        d.healthy_values = p.values.clone();
    }
}

/// R3 / H11: the healthy endpoints of a Service (or its cluster IPs), those in the shifted
/// zone taken away.
fn service_endpoints(
    env: &GroupEnv<'_>,
    rtype: RecordType,
    service: &ServiceRef,
    shift: Option<&ActiveShift>,
    check_ok: bool,
    d: &mut Draft,
) {
    let shifted_zone = shift.map(|s| s.away_from.as_str());
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
        d.unshifted = match service.addresses.unwrap_or_default() {
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
        d.reasons_down
            .push(match (endpoints, eps.is_empty(), shifted_out) {
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
            d.zones = eps
                .iter()
                .filter_map(|e| Some((to_value(&e.address), e.zone.as_deref()?.into())))
                .collect();
            let mut all: Vec<IpAddr> = eps.iter().map(|e| e.address).collect();
            all.sort();
            all.dedup();
            d.all_values = all.iter().map(to_value).collect();
            d.healthy_values = usable.iter().map(to_value).collect();
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
                d.reasons_down.push(format!(
                    "service {} has no {rtype} cluster IP",
                    service.name
                ));
            }
            d.all_values = ips.clone();
            d.healthy_values = if usable.is_empty() { Vec::new() } else { ips };
        }
    }
    if !d.reasons_down.is_empty() {
        d.healthy_values.clear();
    } else {
        d.note = note;
    }
}

/// A peer's reported values (X6) that are of `rtype`, each once.
fn peer_values(rtype: RecordType, reported: &[PeerValue]) -> Vec<Value> {
    let mut values = Vec::new();
    for value in reported.iter().map(PeerValue::value) {
        if value.record_type() == rtype && !values.contains(value) {
            values.push(value.clone());
        }
    }
    values
}

/// X2, X3: a peer source, through its Peer check.
fn peer_source(
    env: &GroupEnv<'_>,
    rtype: RecordType,
    check: &ObjectKey,
    peer: &PeerTarget,
    d: &mut Draft,
) {
    // What the peer's checkers last heard, of this group's type; healthy while
    // the check is and it holds a value.
    let label = format!("peer {} {}", peer.cluster, peer.record_group);
    match env.checks.get(check) {
        None => d
            .reasons_down
            .push(format!("{label}: check {} does not exist", check.name)),
        Some(h) => {
            d.all_values = peer_values(rtype, &h.values);
            if !h.healthy {
                d.reasons_down.push(format!("{label}: {}", h.reason));
            } else if h.values.is_empty() {
                d.reasons_down
                    .push(format!("{label}: no value heard from the peer yet"));
            } else if d.all_values.is_empty() {
                d.reasons_down
                    .push(format!("{label} answers no {rtype} value"));
            } else if d.reasons_down.is_empty() {
                d.healthy_values = d.all_values.clone();
            }
        }
    }
}

/// R4: an alias, healthy when its target is (with evaluateTargetHealth).
fn alias_target(env: &GroupEnv<'_>, r: &RecordSpec, target: &ObjectKey, d: &mut Draft) {
    let evaluate = r.alias.as_ref().is_some_and(|a| a.evaluate_target_health);
    let state = (env.alias_target)(target);
    // S7: under the last resort the target answers by its own, so it takes part while it
    // has anything to answer with.
    d.alias_answers = state.as_ref().is_some_and(|t| t.answers);
    match state {
        // S6: a target with nothing to answer is never an answer, whatever the flag.
        Some(t) if !t.answers => d
            .reasons_down
            .push(format!("alias target {} answers nothing", target.name)),
        Some(t) if evaluate && !t.healthy => d.reasons_down.push(format!(
            "alias target {} has no healthy record",
            target.name
        )),
        Some(_) => {}
        None => d
            .reasons_down
            .push(format!("alias target {} is not served", target.name)),
    }
}
