//! Zone affinity (SEMANTICS A1-A5): for each zone that holds enough of a group's
//! candidates, the part of its selection a resolver in that zone answers from.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use healthroute_api::{DEFAULT_MINIMUM_ZONE_CAPACITY_PERCENT, RecordGroupSpec};
use healthroute_table::{Answer, Selection, Target, Value};

use super::env::Explain;
use super::evaluate::Evaluated;

/// Zone affinity (A1–A5): for each zone that holds candidates of `selection`, the part of it
/// in that zone, when the zone holds at least `minimumZoneCapacityPercent` of an even split of
/// the candidates' capacity. Capacity is weight for a weighted choice (a record's weight split
/// evenly over its values), one per value otherwise; values without a zone and alias
/// targets count in the total and lie in no zone.
pub(super) fn zone_views(
    spec: &RecordGroupSpec,
    evaluated: &[Evaluated],
    selection: &Selection<Value>,
    explain: &mut Explain,
) -> BTreeMap<Arc<str>, Selection<Value>> {
    let zone_of: HashMap<&Value, &Arc<str>> = evaluated
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
        let view = in_zone_only(selection, in_zone);
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

/// The part of `selection` whose values `in_zone` keeps; `None` when nothing is left.
/// Alias targets lie in no zone.
fn in_zone_only(
    selection: &Selection<Value>,
    in_zone: impl Fn(&Value) -> bool,
) -> Option<Selection<Value>> {
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
    match selection {
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
    }
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
