//! The incremental compiler: a change recompiles the groups that depend on it and no
//! others, and what a lighter compiler leaves out never changes the table.

use super::*;

// Incremental: a health flip recompiles the groups that read the check (and their alias
// users), not the others.
#[test]
fn recompile_touches_only_dependents() {
    let mut c = mk_compiler();
    for i in 0..100 {
        let name = format!("g{i}");
        c.upsert_group(
            key(&name),
            group_input(mk_group(
                &name,
                RoutingPolicy::Simple,
                vec![checked(mk_record("x", &["192.0.2.1"]), &format!("hc{i}"))],
            )),
        );
        set_check(&mut c, &format!("hc{i}"), true);
    }
    c.upsert_group(
        key("alias"),
        group_input(mk_group(
            "alias",
            RoutingPolicy::Simple,
            vec![mk_alias_record("x", "g7", true)],
        )),
    );
    let first = c.compile(t0());
    assert_eq!(first.recompiled, 101);
    set_check(&mut c, "hc7", false);
    let report = c.compile(t0());
    assert_eq!(report.recompiled, 2, "g7 and the alias to it");
    assert_eq!(report.table_changes, 2);
    assert_eq!(report.generation, first.generation + 1);
    let idle = c.compile(t0());
    assert_eq!((idle.recompiled, idle.table_changes), (0, 0));
    assert_eq!(idle.generation, report.generation);
}

// What a compiler leaves out (the decision path, the record statuses) never changes the table.
#[test]
fn lighter_compilers_serve_the_same_table() {
    let mut full = mk_compiler();
    let mut light = mk_compiler().without_statuses();
    for c in [&mut full, &mut light] {
        weighted_10_20_20(c);
        set_check(c, "hc-a", false);
        c.compile(t0());
    }
    assert_eq!(full.table().groups, light.table().groups);
    assert_eq!(
        full.group_status(&key("api"))
            .expect("status")
            .records
            .len(),
        3
    );
    assert!(
        light
            .outcome(&key("api"))
            .expect("outcome")
            .records
            .is_empty()
    );
}

// SEM-P3: a standby operator keeps its inputs only. Forgetting the outputs leaves no outcome
// and an empty table, and the next compile gives back the same table and statuses as before.
#[test]
fn forgotten_outputs_compile_back_the_same() {
    let mut c = mk_compiler();
    weighted_10_20_20(&mut c);
    set_check(&mut c, "hc-a", false);
    c.upsert_group(
        key("alias"),
        group_input(mk_group(
            "alias",
            RoutingPolicy::Simple,
            vec![mk_alias_record("x", "api", true)],
        )),
    );
    c.compile(t0());
    let table = c.table().groups.clone();
    let status = c.group_status(&key("api")).expect("status");
    assert_eq!(table.len(), 2);

    c.forget_outputs();
    assert!(c.group_status(&key("api")).is_none(), "no outcome kept");
    assert!(c.table().groups.is_empty(), "no table kept");

    let report = c.compile(t0());
    assert_eq!(report.recompiled, 2, "every group compiled again");
    assert_eq!(c.table().groups, table);
    assert_eq!(c.group_status(&key("api")).expect("status"), status);
}
