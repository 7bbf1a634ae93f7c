//! What the simulator prints of the answer: the groups that claim the name but are rejected,
//! the chain the resolver's own serving table answers with (D8), each group's zone affinity
//! seen from the asking zone (A1-A3), and the shares of the answers drawn.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use healthroute_compiler::manifests::Manifests;
use healthroute_compiler::{Compiler, ObjectKey, ServedZones};
use healthroute_table::{RoutingTable, Value, normalize_name};

use super::scenario::Scenario;
use crate::dns::counters::AnswerCounters;
use crate::dns::serving::{Chain, ChainEnd, Outcome, ServingTable, ZoneConfig};
use crate::dns::wire::{TYPE_A, TYPE_AAAA, TYPE_CNAME, value_rr};
use crate::error::Error;

/// Prints why each rejected RecordGroup that claims the asked name and type is rejected.
pub(super) fn rejected_claimants(
    compiler: &Compiler,
    manifests: &Manifests,
    scenario: &Scenario,
    out: &mut String,
) {
    let claimants: Vec<ObjectKey> = compiler
        .group_keys()
        .filter(|k| {
            manifests.groups.get(*k).is_some_and(|g| {
                normalize_name(&g.spec.name).ok().as_deref() == Some(scenario.name.as_str())
                    && healthroute_compiler::group::record_type(g.spec.record_type)
                        == scenario.record_type
            })
        })
        .cloned()
        .collect();
    for key in &claimants {
        if let Some(Err(rejection)) = compiler.outcome(key).map(|o| &o.compiled) {
            let _ = writeln!(
                out,
                "RecordGroup {key} is rejected ({}): {}",
                rejection.reason, rejection.message
            );
        }
    }
}

/// The serving table a resolver in `from_zone` would build from `table`, its answers counted
/// into `counters`.
pub(super) fn serving_table(
    table: &RoutingTable<Value>,
    zones: &ServedZones,
    ttl: u32,
    from_zone: Option<&str>,
    counters: &AnswerCounters,
) -> Result<ServingTable, Error> {
    let serving_zones: Vec<ZoneConfig> = zones
        .names()
        .iter()
        .map(|apex| ZoneConfig {
            apex: apex.to_string(),
            nameservers: Vec::new(),
            default_ttl: ttl,
            ..ZoneConfig::default()
        })
        .collect();
    ServingTable::build(table, &serving_zones, from_zone, counters)
}

/// Prints a NODATA answer, with the types the name does have.
pub(super) fn no_data(table: &RoutingTable<Value>, scenario: &Scenario, out: &mut String) {
    let Scenario {
        name,
        record_type: rtype,
        ..
    } = scenario;
    let others: Vec<String> = table
        .groups
        .values()
        .filter(|g| *g.name == **name)
        .map(|g| g.record_type.to_string())
        .collect();
    let _ = writeln!(
        out,
        "{name} {rtype}: NOERROR, no answer (NODATA; the name has {})",
        if others.is_empty() {
            "names below it".to_owned()
        } else {
            others.join(", ")
        }
    );
}

/// Prints the groups of the answer's chain, each with its policy and TTL; returns their keys
/// (read once from the table's), the asked name's group first.
pub(super) fn chain_lines(
    chain: &Chain<'_>,
    manifests: &Manifests,
    scenario: &Scenario,
    out: &mut String,
) -> Vec<ObjectKey> {
    let policy = |key: Option<&ObjectKey>| {
        key.and_then(|k| manifests.groups.get(k))
            .map(|g| format!("{:?}", g.spec.routing_policy))
            .unwrap_or_default()
    };
    let mut chained = Vec::new();
    for (i, step) in chain.iter().enumerate() {
        let key = &step.group.compiled.key;
        let parsed = ObjectKey::parse_group_key(key);
        if i == 0 {
            let _ = writeln!(
                out,
                "{} {}  (RecordGroup {key}, {}, TTL {})",
                scenario.name,
                scenario.record_type,
                policy(parsed.as_ref()),
                step.group.compiled.ttl
            );
        } else {
            let _ = writeln!(
                out,
                "  then {} {}  (RecordGroup {key}, {}, TTL {}; CNAME followed inside the zones)",
                step.group.compiled.name,
                step.group.compiled.record_type,
                policy(parsed.as_ref()),
                step.group.compiled.ttl
            );
        }
        chained.extend(parsed);
    }
    chained
}

/// Prints, for each group of the chain with zone affinity, which zone's answers a resolver in
/// `from_zone` gives (A1-A3).
pub(super) fn zone_affinity_lines(
    chain: &Chain<'_>,
    table: &RoutingTable<Value>,
    from_zone: Option<&str>,
    out: &mut String,
) {
    for step in chain.iter() {
        if step.group.compiled.zone_affinity.is_none() {
            continue;
        }
        let compiled = table.groups.get(&step.group.compiled.key);
        let zone_line = match (from_zone, compiled) {
            (None, _) => {
                "asked from no zone (--from-zone ZONE): answers from every zone".to_owned()
            }
            (Some(z), Some(g)) if g.selection_for(Some(z)).1 => {
                format!("asked from {z}: answers from {z} only")
            }
            (Some(z), _) => format!(
                "asked from {z}: {z} holds no candidate, or too few (A2, A3): answers from every zone"
            ),
        };
        let _ = writeln!(
            out,
            "zone affinity ({}): {zone_line}",
            step.group.compiled.key
        );
    }
}

/// Draws `queries` answers and prints each distinct answer's share, or, when there are too
/// many distinct answers to read, each value's share.
pub(super) fn answer_shares(queries: usize, mut draw: impl FnMut() -> String, out: &mut String) {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..queries {
        *counts.entry(draw()).or_default() += 1;
    }
    let mut by_share: Vec<(String, usize)> = counts.into_iter().collect();
    by_share.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let _ = writeln!(out, "answers over {queries} queries:");
    const SHOWN: usize = 20;
    if by_share.len() > SHOWN {
        // Many distinct sets (multivalue over a large pool): each value's share is clearer.
        let mut per_value: BTreeMap<&str, usize> = BTreeMap::new();
        let mut sizes: BTreeMap<usize, usize> = BTreeMap::new();
        for (answer, n) in &by_share {
            *sizes.entry(answer.split(' ').count()).or_default() += n;
            for v in answer.split(' ') {
                *per_value.entry(v).or_default() += n;
            }
        }
        let sizes: Vec<String> = sizes
            .iter()
            .map(|(k, n)| format!("{k} values in {n}"))
            .collect();
        let _ = writeln!(
            out,
            "  {} distinct answers ({}); each value appears in:",
            by_share.len(),
            sizes.join(", ")
        );
        for (v, n) in per_value {
            let _ = writeln!(out, "  {:>6.2}%  {v}", 100.0 * n as f64 / queries as f64);
        }
    } else {
        for (answer, n) in &by_share {
            let _ = writeln!(
                out,
                "  {:>6.2}%  {answer}",
                100.0 * *n as f64 / queries as f64
            );
        }
    }
}

/// One answer as the simulator prints it: each step's values (sorted), steps joined by
/// `→`, and how a chain that does not answer ended.
pub(super) fn describe(outcome: &Outcome<'_>) -> String {
    let Outcome::Answer { chain, end, .. } = outcome else {
        return "(no answer)".to_owned();
    };
    let mut parts = Vec::new();
    for step in chain.iter() {
        // Sorted as the wire sorts them (addresses by number).
        let mut rrs: Vec<Box<[u8]>> = Vec::new();
        step.values.for_each(|v| rrs.push(value_rr(v, step.ttl)));
        rrs.sort();
        parts.push(if rrs.is_empty() {
            "(no values)".to_owned()
        } else {
            rrs.iter().map(|rr| show(rr)).collect::<Vec<_>>().join(" ")
        });
    }
    let mut text = parts.join(" → ");
    match end {
        ChainEnd::Answered => {}
        ChainEnd::OutOfZone => text.push_str(" (outside the served zones: the client follows it)"),
        ChainEnd::NoData { .. } => text.push_str(" → NODATA (the target has no such record)"),
        ChainEnd::NxDomain { .. } => text.push_str(" → NXDOMAIN (the target does not exist)"),
        ChainEnd::Cut => text.push_str(" (chain cut: a loop, or over 8 steps)"),
    }
    text
}

/// One wire RR's value in presentation form.
fn show(rr: &[u8]) -> String {
    let rtype = u16::from_be_bytes([rr[0], rr[1]]);
    let rdata = rr.get(10..).unwrap_or_default();
    match rtype {
        TYPE_A if rdata.len() == 4 => {
            std::net::Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3]).to_string()
        }
        TYPE_AAAA if rdata.len() == 16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(rdata);
            std::net::Ipv6Addr::from(octets).to_string()
        }
        TYPE_CNAME => {
            let mut name = String::new();
            let mut i = 0;
            while let Some(&len) = rdata.get(i) {
                if len == 0 {
                    break;
                }
                let label = rdata
                    .get(i + 1..i + 1 + usize::from(len))
                    .unwrap_or_default();
                name.push_str(&String::from_utf8_lossy(label));
                name.push('.');
                i += 1 + usize::from(len);
            }
            name
        }
        _ => {
            // TXT: each character-string quoted, as a zone file writes it.
            let mut parts = Vec::new();
            let mut i = 0;
            while let Some(&len) = rdata.get(i) {
                let s = rdata
                    .get(i + 1..i + 1 + usize::from(len))
                    .unwrap_or_default();
                parts.push(format!("{:?}", String::from_utf8_lossy(s)));
                i += 1 + usize::from(len);
            }
            parts.join(" ")
        }
    }
}
