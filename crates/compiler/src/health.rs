//! The health of a HealthCheck from its checkers' views (SEMANTICS H6–H10).
//!
//! Checkers threshold their own observations (H5) and report a view per check; this module
//! only counts. It is pure: the views, the checkers' heartbeats and the time come in, a
//! [`CheckHealth`] goes out.

use std::collections::{BTreeMap, HashMap};

use jiff::Timestamp;

use healthroute_api::{CheckType, HealthCheckSpec};

use healthroute_api::{CheckerView, DENIED_BY_POLICY, ObjectKey, PeerValue};

/// A check as the compiler sees it: its spec, the views reported so far, and the status it
/// had (kept when no checker is reachable, H7).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckInput {
    pub spec: HealthCheckSpec,
    pub views: Vec<CheckerView>,
    pub last_healthy: Option<bool>,
}

impl CheckInput {
    pub fn new(spec: HealthCheckSpec) -> Self {
        CheckInput {
            spec,
            views: Vec::new(),
            last_healthy: None,
        }
    }
}

/// The final status of a check and how it was reached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckHealth {
    pub healthy: bool,
    /// Checkers whose view is healthy, and reachable checkers (probe checks only).
    pub healthy_checkers: u32,
    pub reachable_checkers: u32,
    /// Reachable checkers that refuse to probe the target (their policy denies it, H12).
    pub denied_checkers: u32,
    /// Why, in words: "2/3 checkers healthy (> 18% needed)", "disabled", ...
    pub reason: String,
    /// Peer checks (X4): the values reported by the most healthy reachable checkers (ties:
    /// the first checker by name); with none healthy, by the most reachable ones (their last
    /// values, for a last resort, X3). Empty for other checks.
    pub values: Vec<PeerValue>,
}

/// How long a heartbeat keeps a checker reachable (H7): 3 request intervals.
fn reachable_window(interval_seconds: u32) -> i64 {
    3 * 1000 * i64::from(interval_seconds.max(1))
}

/// When a checker's heartbeat is fresh enough to count (H7): no older than 3 intervals.
pub fn is_reachable(heartbeat: Option<Timestamp>, interval_seconds: u32, now: Timestamp) -> bool {
    heartbeat.is_some_and(|hb| {
        now.as_millisecond() - hb.as_millisecond() <= reachable_window(interval_seconds)
    })
}

/// The first moment a checker whose last heartbeat is `heartbeat` no longer counts for
/// checks of `interval_seconds` (H7).
pub fn unreachable_at(heartbeat: Timestamp, interval_seconds: u32) -> Timestamp {
    heartbeat + jiff::SignedDuration::from_millis(reachable_window(interval_seconds) + 1)
}

/// H7 quorum over reachable views, then H8 and H9. Not for calculated checks.
pub fn probe_health(
    check: &CheckInput,
    heartbeats: &HashMap<String, Timestamp>,
    now: Timestamp,
) -> CheckHealth {
    let spec = &check.spec;
    let mut healthy = 0u32;
    let mut reachable = 0u32;
    let mut denied = 0u32;
    for view in &check.views {
        if is_reachable(
            heartbeats.get(&view.checker).copied(),
            spec.request_interval_seconds,
            now,
        ) {
            reachable += 1;
            healthy += u32::from(view.healthy);
            denied += u32::from(
                !view.healthy
                    && view
                        .message
                        .as_deref()
                        .is_some_and(|m| m.contains(DENIED_BY_POLICY)),
            );
        }
    }
    let (raw, reason) = if reachable == 0 {
        match check.last_healthy {
            Some(last) => (
                last,
                format!("no reachable checker: keeps last status ({})", word(last)),
            ),
            // H6: a new check is healthy until it has enough observations.
            None => (true, "no data yet".to_owned()),
        }
    } else {
        // "More than N%": healthy * 100 > N * reachable, in integers.
        let ok = u64::from(healthy) * 100
            > u64::from(spec.healthy_checker_percent) * u64::from(reachable);
        // H14: a Metric check has one evaluator; its last evaluation says more than a count.
        let evaluation = (spec.check_type == CheckType::Metric && reachable == 1)
            .then(|| {
                check
                    .views
                    .iter()
                    .find(|v| {
                        is_reachable(
                            heartbeats.get(&v.checker).copied(),
                            spec.request_interval_seconds,
                            now,
                        )
                    })
                    .and_then(|v| v.message.clone())
            })
            .flatten();
        (
            ok,
            match evaluation {
                Some(message) => format!("metric {message}"),
                None => format!(
                    "{healthy}/{reachable} checkers healthy (more than {}% needed)",
                    spec.healthy_checker_percent
                ),
            },
        )
    };
    let mut h = finish(spec, raw, reason, healthy, reachable);
    h.denied_checkers = denied;
    if spec.check_type == CheckType::Peer {
        h.values = peer_values(check, heartbeats, now);
    }
    h
}

/// X4: the values most healthy reachable checkers agree on; with none healthy, those most
/// reachable checkers last had.
fn peer_values(
    check: &CheckInput,
    heartbeats: &HashMap<String, Timestamp>,
    now: Timestamp,
) -> Vec<PeerValue> {
    let interval = check.spec.request_interval_seconds;
    let mut reachable: Vec<&CheckerView> = check
        .views
        .iter()
        .filter(|v| is_reachable(heartbeats.get(&v.checker).copied(), interval, now))
        .filter(|v| !v.values.is_empty())
        .collect();
    if reachable.iter().any(|v| v.healthy) {
        reachable.retain(|v| v.healthy);
    }
    reachable.sort_by(|a, b| a.checker.cmp(&b.checker));
    let mut best: Option<(&[PeerValue], usize)> = None;
    for v in &reachable {
        let votes = reachable.iter().filter(|o| o.values == v.values).count();
        if best.is_none_or(|(_, n)| votes > n) {
            best = Some((&v.values, votes));
        }
    }
    best.map(|(values, _)| values.to_vec()).unwrap_or_default()
}

/// H10 over the children's final status, then H8 and H9. `child` answers a child's health by
/// name; `None` means the child does not exist (counts as unhealthy, and is reported).
pub fn calculated_health<'a>(
    spec: &HealthCheckSpec,
    child: impl Fn(&str) -> Option<&'a CheckHealth>,
    child_is_calculated: impl Fn(&str) -> bool,
) -> CheckHealth {
    let Some(calc) = &spec.calculated else {
        return finish(
            spec,
            false,
            "calculated check without children".into(),
            0,
            0,
        );
    };
    let mut healthy_children = 0u32;
    let mut problems = Vec::new();
    for name in &calc.children {
        if child_is_calculated(name) {
            problems.push(format!(
                "{name} is a calculated check (not allowed as a child)"
            ));
            continue;
        }
        match child(name) {
            Some(h) if h.healthy => healthy_children += 1,
            Some(_) => {}
            None => problems.push(format!("{name} does not exist")),
        }
    }
    let total = calc.children.len() as u32;
    let raw = healthy_children >= calc.health_threshold;
    let mut reason = format!(
        "{healthy_children}/{total} children healthy (at least {} needed)",
        calc.health_threshold
    );
    if !problems.is_empty() {
        reason.push_str("; ");
        reason.push_str(&problems.join("; "));
    }
    finish(spec, raw, reason, 0, 0)
}

fn finish(
    spec: &HealthCheckSpec,
    raw: bool,
    reason: String,
    healthy_checkers: u32,
    reachable_checkers: u32,
) -> CheckHealth {
    let (healthy, reason) = if spec.disabled {
        (true, "disabled: always healthy".to_owned())
    } else if spec.inverted {
        (!raw, format!("inverted: {reason} is {}", word(raw)))
    } else {
        (raw, reason)
    };
    CheckHealth {
        healthy,
        healthy_checkers,
        reachable_checkers,
        denied_checkers: 0,
        reason,
        values: Vec::new(),
    }
}

fn word(healthy: bool) -> &'static str {
    if healthy { "healthy" } else { "unhealthy" }
}

/// Evaluates the probe checks named by `keys` (removing those that no longer exist) and every
/// calculated check into `health`, pushing the keys whose result changed onto `changed`.
pub fn evaluate_into<'k>(
    checks: &BTreeMap<ObjectKey, CheckInput>,
    heartbeats: &HashMap<String, Timestamp>,
    now: Timestamp,
    keys: impl IntoIterator<Item = &'k ObjectKey>,
    health: &mut BTreeMap<ObjectKey, CheckHealth>,
    changed: &mut Vec<ObjectKey>,
) {
    fn set(
        key: &ObjectKey,
        h: CheckHealth,
        health: &mut BTreeMap<ObjectKey, CheckHealth>,
        changed: &mut Vec<ObjectKey>,
    ) {
        if health.get(key) != Some(&h) {
            changed.push(key.clone());
            health.insert(key.clone(), h);
        }
    }
    for key in keys {
        match checks.get(key) {
            Some(check) if check.spec.check_type != CheckType::Calculated => {
                set(key, probe_health(check, heartbeats, now), health, changed);
            }
            Some(_) => {}
            None => {
                if health.remove(key).is_some() {
                    changed.push(key.clone());
                }
            }
        }
    }
    for (key, check) in checks {
        if check.spec.check_type == CheckType::Calculated {
            let sibling = |name: &str| key.sibling(name);
            let h = calculated_health(
                &check.spec,
                |name| health.get(&sibling(name)),
                |name| {
                    checks
                        .get(&sibling(name))
                        .is_some_and(|c| c.spec.check_type == CheckType::Calculated)
                },
            );
            set(key, h, health, changed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{mk_check, mk_view};
    use healthroute_api::CalculatedCheck;

    /// Evaluates every check: probe checks first, then calculated ones over them.
    fn evaluate_all(
        checks: &BTreeMap<ObjectKey, CheckInput>,
        heartbeats: &HashMap<String, Timestamp>,
        now: Timestamp,
    ) -> BTreeMap<ObjectKey, CheckHealth> {
        let mut health = BTreeMap::new();
        evaluate_into(
            checks,
            heartbeats,
            now,
            checks.keys(),
            &mut health,
            &mut Vec::new(),
        );
        health
    }

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).expect("valid")
    }

    fn fresh(names: &[&str]) -> HashMap<String, Timestamp> {
        names.iter().map(|n| (n.to_string(), now())).collect()
    }

    // SEM-H6: no observation yet, no previous status: healthy.
    #[test]
    fn new_check_is_healthy() {
        let check = CheckInput::new(mk_check("web"));
        let h = probe_health(&check, &HashMap::new(), now());
        assert!(h.healthy, "{h:?}");
        assert_eq!(h.reason, "no data yet");
    }

    // SEM-H7: more than 18% of reachable checkers: 1 of 3 is 33% > 18%.
    #[test]
    fn quorum_table() {
        let cases: &[(&[bool], u32, bool)] = &[
            (&[true, false, false], 18, true),
            (&[false, false, false], 18, false),
            (&[true, false, false, false, false, false], 18, false), // 16.7% is not > 18%
            (&[true, false, false, false, false], 18, true),         // 20%
            (&[true, true, false, false], 50, false),                // 50% is not > 50%
            (&[true, true, true], 100, false),                       // never > 100%
            (&[false], 0, false),
            (&[true], 0, true),
        ];
        for (views, percent, want) in cases {
            let mut spec = mk_check("web");
            spec.healthy_checker_percent = *percent;
            let mut check = CheckInput::new(spec);
            let names: Vec<String> = (0..views.len()).map(|i| format!("c{i}")).collect();
            check.views = names
                .iter()
                .zip(views.iter())
                .map(|(n, h)| mk_view(n, *h))
                .collect();
            let hb = names.iter().map(|n| (n.clone(), now())).collect();
            let got = probe_health(&check, &hb, now());
            assert_eq!(got.healthy, *want, "{views:?} at {percent}%: {got:?}");
        }
    }

    // SEM-H7: a checker whose heartbeat is older than 3 intervals drops out of the count.
    #[test]
    fn stale_checkers_drop_out() {
        let mut spec = mk_check("web");
        spec.request_interval_seconds = 10;
        let mut check = CheckInput::new(spec);
        check.views = vec![mk_view("a", true), mk_view("b", false), mk_view("c", false)];
        let mut hb = fresh(&["b", "c"]);
        // "a" reported 31 s ago: stale. Only b and c count: 0/2 healthy.
        hb.insert("a".into(), now() - jiff::SignedDuration::from_secs(31));
        let h = probe_health(&check, &hb, now());
        assert!(!h.healthy, "{h:?}");
        assert_eq!((h.healthy_checkers, h.reachable_checkers), (0, 2));
        // Exactly 30 s old is still fresh.
        hb.insert("a".into(), now() - jiff::SignedDuration::from_secs(30));
        assert!(probe_health(&check, &hb, now()).healthy);
    }

    // SEM-H7: with no reachable checker the check keeps its last known status.
    #[test]
    fn no_reachable_checker_keeps_last_status() {
        let mut check = CheckInput::new(mk_check("web"));
        check.views = vec![mk_view("a", true)];
        check.last_healthy = Some(false);
        let h = probe_health(&check, &HashMap::new(), now());
        assert!(!h.healthy, "{h:?}");
        check.last_healthy = Some(true);
        assert!(probe_health(&check, &HashMap::new(), now()).healthy);
    }

    // SEM-H8 SEM-H9: inverted negates; disabled wins over inverted.
    #[test]
    fn inverted_and_disabled() {
        let cases = [
            // (raw view healthy, inverted, disabled, final)
            (true, false, false, true),
            (false, false, false, false),
            (true, true, false, false),
            (false, true, false, true),
            (false, false, true, true),
            (true, true, true, true),
            (false, true, true, true),
        ];
        for (raw, inverted, disabled, want) in cases {
            let mut spec = mk_check("web");
            spec.inverted = inverted;
            spec.disabled = disabled;
            let mut check = CheckInput::new(spec);
            check.views = vec![mk_view("a", raw)];
            let h = probe_health(&check, &fresh(&["a"]), now());
            assert_eq!(
                h.healthy, want,
                "raw {raw} inverted {inverted} disabled {disabled}"
            );
        }
    }

    fn calc(children: &[&str], threshold: u32) -> HealthCheckSpec {
        let mut spec = mk_check("calc");
        spec.check_type = CheckType::Calculated;
        spec.target = None;
        spec.calculated = Some(CalculatedCheck {
            children: children.iter().map(|s| s.to_string()).collect(),
            health_threshold: threshold,
        });
        spec
    }

    // SEM-H10: at least healthThreshold children; 0 always healthy; above the count never;
    // a missing child counts as unhealthy and is reported.
    #[test]
    fn calculated_thresholds() {
        let up = CheckHealth {
            healthy: true,
            healthy_checkers: 1,
            reachable_checkers: 1,
            denied_checkers: 0,
            reason: String::new(),
            values: Vec::new(),
        };
        let down = CheckHealth {
            healthy: false,
            ..up.clone()
        };
        let lookup = |name: &str| match name {
            "a" | "b" => Some(&up),
            "c" => Some(&down),
            _ => None,
        };
        let none_calculated = |_: &str| false;
        let cases: &[(&[&str], u32, bool)] = &[
            (&["a", "b", "c"], 2, true),
            (&["a", "b", "c"], 3, false),
            (&["c"], 0, true),
            (&["a", "b"], 3, false),
            (&["a", "missing"], 2, false),
        ];
        for (children, threshold, want) in cases {
            let h = calculated_health(&calc(children, *threshold), lookup, none_calculated);
            assert_eq!(h.healthy, *want, "{children:?} >= {threshold}: {h:?}");
        }
        let h = calculated_health(&calc(&["a", "missing"], 1), lookup, none_calculated);
        assert!(h.reason.contains("missing does not exist"), "{}", h.reason);
    }

    // SEM-H10: a calculated child of a calculated check does not count, and is reported.
    #[test]
    fn calculated_children_cannot_nest() {
        let mut checks = BTreeMap::new();
        checks.insert(ObjectKey::new("ns", "inner"), CheckInput::new(calc(&[], 0)));
        checks.insert(
            ObjectKey::new("ns", "outer"),
            CheckInput::new(calc(&["inner"], 1)),
        );
        let all = evaluate_all(&checks, &HashMap::new(), now());
        let outer = &all[&ObjectKey::new("ns", "outer")];
        assert!(!outer.healthy);
        assert!(outer.reason.contains("not allowed"), "{}", outer.reason);
    }

    // SEM-H8: inversion applies after a calculation too.
    #[test]
    fn calculated_then_inverted() {
        let mut checks = BTreeMap::new();
        let mut child = CheckInput::new(mk_check("a"));
        child.views = vec![mk_view("x", true)];
        checks.insert(ObjectKey::new("ns", "a"), child);
        let mut spec = calc(&["a"], 1);
        spec.inverted = true;
        checks.insert(ObjectKey::new("ns", "calc"), CheckInput::new(spec));
        let all = evaluate_all(&checks, &fresh(&["x"]), now());
        assert!(all[&ObjectKey::new("ns", "a")].healthy);
        assert!(!all[&ObjectKey::new("ns", "calc")].healthy);
    }
}
