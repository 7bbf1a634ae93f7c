//! Why the answer is what it is: the zonal shifts and ZonalAutoshifts that target the asked
//! group (their state, and what each does to it), and, with `--explain`, each group's
//! decision path, its alias targets' indented under it.

use std::fmt::Write as _;

use healthroute_compiler::manifests::Manifests;
use healthroute_compiler::shift::targets;
use healthroute_compiler::{Compiler, ObjectKey};
use jiff::Timestamp;

/// Prints every ZonalShift that targets the group: its state and whether it applies.
pub(super) fn shift_lines(
    compiler: &Compiler,
    manifests: &Manifests,
    key: &ObjectKey,
    now: Timestamp,
    out: &mut String,
) {
    let Some(group) = manifests.groups.get(key) else {
        return;
    };
    let labels = group.metadata.labels.clone().unwrap_or_default();
    for (skey, shift) in manifests
        .shifts
        .iter()
        .filter(|(k, _)| k.namespace == key.namespace)
    {
        if !targets(&shift.spec, &key.name, &labels) {
            continue;
        }
        let line = match compiler.shift_status(skey, now) {
            Some(Ok(status)) => {
                let state = status.status.map(|s| format!("{s:?}")).unwrap_or_default();
                let applied = status
                    .groups
                    .iter()
                    .find(|g| *g.record_group == *key.name)
                    .map(|g| match g.reason {
                        Some(reason) => format!(", {:?} ({reason:?})", g.applied_status),
                        None => format!(", {:?}", g.applied_status),
                    })
                    .unwrap_or_default();
                let expiry = status
                    .expiry_time
                    .map(|t| format!(", expires {}", t.0))
                    .unwrap_or_default();
                format!("{state}{applied}{expiry}")
            }
            Some(Err(e)) => format!("invalid: {e}"),
            None => "unknown".into(),
        };
        let _ = writeln!(
            out,
            "zonal shift {skey} (away from {}): {line}",
            shift.spec.away_from
        );
    }
}

/// Prints every ZonalAutoshift that targets the group: its autoshift, the shifts it holds and
/// what each does to the group, and its last practice run or why one did not start.
pub(super) fn autoshift_lines(
    compiler: &Compiler,
    manifests: &Manifests,
    key: &ObjectKey,
    out: &mut String,
) {
    let Some(group) = manifests.groups.get(key) else {
        return;
    };
    let labels = group.metadata.labels.clone().unwrap_or_default();
    for (akey, autoshift) in manifests
        .autoshifts
        .iter()
        .filter(|(k, _)| k.namespace == key.namespace)
    {
        if !healthroute_compiler::shift::target_matches(&autoshift.spec.target, &key.name, &labels)
        {
            continue;
        }
        let Some(status) = compiler.autoshift_status(akey) else {
            continue;
        };
        // As the operator's status: why it cannot be used (AS1), else the autoshift and why.
        let line = match (compiler.autoshift_invalid(akey), &status.active_zone) {
            (Some(why), _) => format!(
                "the configuration cannot be used ({}): {why}",
                why.reason.as_str()
            ),
            (None, Some(zone)) => format!(
                "autoshift Active away from {zone}: {}",
                status.message.as_deref().unwrap_or("")
            ),
            (None, None) => format!(
                "autoshift Inactive: {}",
                status.message.as_deref().unwrap_or("")
            ),
        };
        let _ = writeln!(out, "zonal autoshift {akey}: {line}");
        for shift in &status.shifts {
            let applied = shift
                .status
                .groups
                .iter()
                .find(|g| *g.record_group == *key.name)
                .map(|g| match g.reason {
                    Some(reason) => format!("{:?} ({reason:?})", g.applied_status),
                    None => format!("{:?}", g.applied_status),
                })
                .unwrap_or_default();
            let ends = shift
                .status
                .expiry_time
                .as_ref()
                .map(|t| format!(", ends {}", t.0))
                .unwrap_or_default();
            let kind = match shift.status.shift_type {
                Some(healthroute_api::ShiftType::PracticeRun) => "practice run",
                _ => "autoshift",
            };
            let _ = writeln!(
                out,
                "  {kind} {}/{} (away from {}): {applied}{ends}",
                akey.namespace, shift.name, shift.away_from,
            );
        }
        if let Some(refused) = &status.not_started {
            let _ = writeln!(
                out,
                "  practice run not started ({}): {}",
                refused.reason.as_str(),
                refused.message
            );
        } else if let Some(last) = status
            .outcomes
            .first()
            .filter(|o| o.outcome != healthroute_api::PracticeRunOutcome::Pending)
        {
            let _ = writeln!(
                out,
                "  last practice run away from {}: {}: {}",
                last.zone,
                last.outcome.as_str(),
                last.message.as_deref().unwrap_or("")
            );
        }
        if let (None, Some(next)) = (&status.practice_run, &status.next_practice_run) {
            let _ = writeln!(out, "  next practice run: {}", next.0);
        }
    }
}

/// Prints a group's decision path, then its alias targets' (indented).
pub(super) fn explain(
    compiler: &Compiler,
    manifests: &Manifests,
    key: &ObjectKey,
    out: &mut String,
    depth: usize,
) {
    let Some(group) = manifests.groups.get(key) else {
        return;
    };
    let indent = "  ".repeat(depth + 1);
    if let Some(outcome) = compiler.outcome(key) {
        for line in &outcome.explain {
            let _ = writeln!(out, "{indent}{key}: {line}");
        }
    }
    if depth < 4 {
        for r in &group.spec.records {
            if let Some(alias) = &r.alias {
                let target = key.sibling(&alias.record_group);
                explain(compiler, manifests, &target, out, depth + 1);
            }
        }
    }
}
