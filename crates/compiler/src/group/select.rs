//! The routing policy over a group's evaluated records (SEMANTICS S2-S6): which records are
//! candidates and what they answer, the last resort when none is healthy, and a note per
//! record for the explanation.

use healthroute_api::RecordGroupSpec;
use healthroute_api::RoutingPolicy;
use healthroute_table::{Answer, Selection, Target, Value};

use super::evaluate::Evaluated;

/// The policy over evaluated records (S2–S6): the selection, whether it is the last resort,
/// and a note per record for the explanation.
pub(super) fn select(
    spec: &RecordGroupSpec,
    evaluated: &[Evaluated],
) -> (Selection<Value>, bool, Vec<String>) {
    let any_healthy = evaluated.iter().any(|e| e.healthy);
    let last_resort = !any_healthy;
    let mut notes: Vec<String> = vec![String::new(); evaluated.len()];
    let selection = match spec.routing_policy {
        RoutingPolicy::Simple => {
            notes[0] = if last_resort {
                "answers all its values (last resort)".into()
            } else {
                "answers its healthy values".into()
            };
            Selection::Fixed(answer(spec, evaluated, 0, last_resort))
        }
        RoutingPolicy::Weighted => weighted(spec, evaluated, last_resort, &mut notes),
        RoutingPolicy::Failover => failover(spec, evaluated, &mut notes),
        RoutingPolicy::MultiValue => multivalue(spec, evaluated, last_resort, &mut notes),
    };
    (selection, last_resort, notes)
}

/// Record `i`'s answer, under the last resort or not.
fn answer(spec: &RecordGroupSpec, evaluated: &[Evaluated], i: usize, lr: bool) -> Answer<Value> {
    Answer {
        set_identifier: spec.records[i].set_identifier.as_str().into(),
        target: evaluated[i].target(lr),
    }
}

/// No candidate answers anything: the first record, with no value.
fn empty(spec: &RecordGroupSpec) -> Selection<Value> {
    Selection::Fixed(Answer {
        set_identifier: spec.records[0].set_identifier.as_str().into(),
        target: Target::Values(Vec::new()),
    })
}

/// S3: the records that can answer, by weight; weight-0 ones only when no other can.
fn weighted(
    spec: &RecordGroupSpec,
    evaluated: &[Evaluated],
    last_resort: bool,
    notes: &mut [String],
) -> Selection<Value> {
    let weight = |i: usize| spec.records[i].weight.unwrap_or(0);
    let usable = |i: usize, lr: bool| evaluated[i].answerable(lr) && (lr || evaluated[i].healthy);
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
            None if !evaluated[i].healthy && !last_resort => "not a candidate (unhealthy)".into(),
            None if weight(i) == 0 => {
                "not a candidate (weight 0: used only when no weighted record can answer)".into()
            }
            None => "not a candidate (no values)".into(),
        };
    }
    Selection::weighted(
        chosen
            .iter()
            .map(|&(i, w)| (w, answer(spec, evaluated, i, last_resort))),
    )
    .unwrap_or_else(|| empty(spec))
}

/// S4: the first healthy tier; with none, the primary (or the first tier that has something
/// to answer) under the last resort.
fn failover(
    spec: &RecordGroupSpec,
    evaluated: &[Evaluated],
    notes: &mut [String],
) -> Selection<Value> {
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
    Selection::Fixed(answer(spec, evaluated, i, lr))
}

/// S5: the values of every candidate record in one pool, each once, with its owner.
fn multivalue(
    spec: &RecordGroupSpec,
    evaluated: &[Evaluated],
    last_resort: bool,
    notes: &mut [String],
) -> Selection<Value> {
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
        empty(spec)
    } else {
        Selection::MultiValue {
            set_identifiers: ids,
            pool,
            owners,
        }
    }
}
