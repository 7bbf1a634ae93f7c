//! Rule-by-rule tests of the compiler, citing the rule ids of docs/semantics.md, plus property
//! tests: one file per family of rules, and here the helpers they share.
//!
//! ```text
//!   routing.rs        S1–S7, D7: policies, last resort, TTL; the property test
//!   records.rs        R1–R5, H11: checks, Service endpoints and aliases on records
//!   shifts.rs         Z1–Z6: zonal shifts
//!   rejections.rs     S8, P5, P6: rejections, name conflicts, last good versions
//!   checks.rs         H1, H7–H14: stale checkers, heartbeats, Metric checks
//!   zone_affinity.rs  A1–A5
//!   incremental.rs    what a change recompiles, and lighter compilers
//!   invariants.rs     the generated search over every combination (S1-S6, X2-X3, Z6, A4)
//!   peers.rs          X2-X5: peer sources
//!   autoshift.rs      AS1–AS12: zonal autoshift and practice runs, on a driven clock
//! ```

mod autoshift;
mod checks;
mod incremental;
mod invariants;
mod peers;
mod records;
mod rejections;
mod routing;
mod shifts;
mod zone_affinity;

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::testing::*;
use super::*;
use healthroute_api::{
    AppliedStatus, FailoverRole, RecordGroupSpec, RecordSpec, RoutingPolicy, ServiceAddresses,
    ShiftState,
};
use healthroute_table::{Resolved, resolve_with};

/// Resolves `group` `draws` times and returns each distinct answer's share.
fn shares(c: &Compiler, group: &str, draws: usize) -> BTreeMap<String, f64> {
    let table = c.table();
    let g = table
        .groups
        .get(key(group).to_string().as_str())
        .unwrap_or_else(|| panic!("{group} is not served"));
    let mut rng = fastrand::Rng::with_seed(1);
    let mut counts = BTreeMap::<String, usize>::new();
    for _ in 0..draws {
        let r = resolve(&table, g, &mut rng).expect("resolves");
        let mut vals = Vec::new();
        r.values.for_each(|v| vals.push(v.to_string()));
        vals.sort();
        *counts.entry(vals.join(",")).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(k, n)| (k, n as f64 / draws as f64))
        .collect()
}

fn answer(c: &Compiler, group: &str) -> String {
    let s = shares(c, group, 1);
    assert_eq!(s.len(), 1);
    s.into_keys().next().expect("one answer")
}

fn set_check(c: &mut Compiler, name: &str, healthy: bool) {
    let mut input = CheckInput::new(mk_check(name));
    input.views = vec![mk_view("checker-a", healthy)];
    c.upsert_check(key(name), input);
    c.set_heartbeat("checker-a", t0());
}

fn lr(c: &Compiler, group: &str) -> bool {
    c.outcome(&key(group)).expect("compiled").last_resort()
}

fn rejection(c: &Compiler, group: &str) -> Option<&'static str> {
    c.outcome(&key(group))
        .and_then(|o| o.compiled.as_ref().err())
        .map(|r| r.reason)
}

fn weighted_10_20_20(c: &mut Compiler) {
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Weighted,
            vec![
                checked(weighted(mk_record("a", &["192.0.2.1"]), 10), "hc-a"),
                checked(weighted(mk_record("b", &["192.0.2.2"]), 20), "hc-b"),
                checked(weighted(mk_record("c", &["192.0.2.3"]), 20), "hc-c"),
            ],
        )),
    );
    for hc in ["hc-a", "hc-b", "hc-c"] {
        set_check(c, hc, true);
    }
}

fn mk_failover(c: &mut Compiler, secondary_checked: bool) {
    let mut secondary = failover(
        mk_record("dr", &["198.51.100.1"]),
        FailoverRole::Secondary,
        None,
    );
    if secondary_checked {
        secondary = checked(secondary, "hc-dr");
    }
    c.upsert_group(
        key("www"),
        group_input(mk_group(
            "www",
            RoutingPolicy::Failover,
            vec![
                checked(
                    failover(
                        mk_record("main", &["192.0.2.1"]),
                        FailoverRole::Primary,
                        None,
                    ),
                    "hc-main",
                ),
                secondary,
            ],
        )),
    );
}

/// A query over a whole table: alias targets looked up among its groups.
fn resolve<'a, V>(
    table: &'a RoutingTable<V>,
    group: &'a CompiledGroup<V>,
    rng: &mut fastrand::Rng,
) -> Option<Resolved<'a, V>> {
    resolve_with(group, None, rng, |key| table.groups.get(key).map(|g| &**g))
}
