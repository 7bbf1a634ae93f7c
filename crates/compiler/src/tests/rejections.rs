//! Rejections (SEMANTICS S8): what never reaches the table, who wins a name, and the last
//! good version a rejected group keeps serving, across a failover too (P6).

use super::*;

// SEM-S8: bad configuration is rejected with a reason and never reaches the table.
#[test]
fn rejections() {
    let mut c = mk_compiler();
    // Alias cycle.
    c.upsert_group(
        key("a"),
        group_input(mk_group(
            "a",
            RoutingPolicy::Simple,
            vec![mk_alias_record("x", "b", false)],
        )),
    );
    c.upsert_group(
        key("b"),
        group_input(mk_group(
            "b",
            RoutingPolicy::Simple,
            vec![mk_alias_record("x", "a", false)],
        )),
    );
    // Missing target.
    c.upsert_group(
        key("m"),
        group_input(mk_group(
            "m",
            RoutingPolicy::Simple,
            vec![mk_alias_record("x", "nope", false)],
        )),
    );
    // Outside the served zones.
    let mut out = mk_group(
        "out",
        RoutingPolicy::Simple,
        vec![mk_record("x", &["192.0.2.1"])],
    );
    out.name = "www.other.org.".into();
    c.upsert_group(key("out"), group_input(out));
    // Failover without primary.
    c.upsert_group(
        key("f"),
        group_input(mk_group(
            "f",
            RoutingPolicy::Failover,
            vec![failover(
                mk_record("s", &["192.0.2.1"]),
                FailoverRole::Secondary,
                None,
            )],
        )),
    );
    // Bad value for the type.
    c.upsert_group(
        key("bad"),
        group_input(mk_group(
            "bad",
            RoutingPolicy::Simple,
            vec![mk_record("x", &["not-an-ip"])],
        )),
    );
    c.compile(t0());
    assert_eq!(rejection(&c, "a"), Some(reasons::ALIAS_CYCLE));
    assert_eq!(rejection(&c, "b"), Some(reasons::ALIAS_CYCLE));
    assert_eq!(rejection(&c, "m"), Some(reasons::MISSING_TARGET));
    assert_eq!(rejection(&c, "out"), Some(reasons::ZONE_NOT_SERVED));
    assert_eq!(rejection(&c, "f"), Some(reasons::NO_PRIMARY));
    assert_eq!(rejection(&c, "bad"), Some(reasons::INVALID_SPEC));
    assert!(c.table().groups.is_empty(), "nothing rejected is served");
    assert!(!c.group_status(&key("a")).expect("status").served);
}

// SEM-S8: two groups claiming one name and type: the older wins; the younger is rejected.
// CNAME conflicts with any other type at the same name.
#[test]
fn name_conflict_older_wins() {
    let mut c = mk_compiler();
    let mut young = group_input(mk_group(
        "www",
        RoutingPolicy::Simple,
        vec![mk_record("y", &["192.0.2.2"])],
    ));
    young.created = Some(at(100));
    c.upsert_group(key("young"), young);
    c.upsert_group(
        key("old"),
        group_input(mk_group(
            "www",
            RoutingPolicy::Simple,
            vec![mk_record("o", &["192.0.2.1"])],
        )),
    );
    c.compile(t0());
    assert_eq!(rejection(&c, "young"), Some(reasons::NAME_CONFLICT));
    assert_eq!(answer(&c, "old"), "192.0.2.1");
    // The winner goes away: the other one is served.
    c.delete_group(&key("old"));
    c.compile(t0());
    assert_eq!(rejection(&c, "young"), None);
    assert_eq!(answer(&c, "young"), "192.0.2.2");
}

// SEM-S8: an edit that breaks a group keeps the last good version of it served.
#[test]
fn last_good_version_is_kept() {
    let mut c = mk_compiler();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Simple,
            vec![mk_record("x", &["192.0.2.1"])],
        )),
    );
    c.compile(t0());
    let before = c.table();
    c.upsert_group(
        key("api"),
        group_input(mk_group(
            "api",
            RoutingPolicy::Simple,
            vec![mk_record("x", &["bad"])],
        )),
    );
    c.compile(t0());
    assert_eq!(rejection(&c, "api"), Some(reasons::INVALID_SPEC));
    assert_eq!(answer(&c, "api"), "192.0.2.1");
    assert_eq!(c.table().groups, before.groups);
    let st = c.group_status(&key("api")).expect("status");
    assert!(st.served);
    // SEM-P5: the status tells the health of what is served, not the rejected version's 0.
    assert_eq!(
        st.healthy_records.as_deref(),
        Some("last good version, 1 answering")
    );
    assert!(!st.last_resort);
    // What the written status says of it: healthroute-operator, status::tests.
}

// SEM-S8 SEM-P6: a group that this process only ever saw rejected serves the version an
// earlier leader published; a group that compiles here, or that is gone, is not affected.
#[test]
fn recovered_versions_serve_while_a_group_is_rejected() {
    let mut c = mk_compiler();
    let simple = |name: &str, ip: &str| {
        group_input(mk_group(
            name,
            RoutingPolicy::Simple,
            vec![mk_record("x", &[ip])],
        ))
    };
    // What an earlier leader published.
    let mut earlier = mk_compiler();
    for name in ["api", "web", "gone"] {
        earlier.upsert_group(key(name), simple(name, "192.0.2.1"));
    }
    earlier.compile(t0());
    let published = earlier.table();

    let mut renamed = simple("api", "192.0.2.2");
    renamed.spec.name = "api.elsewhere.org.".into();
    c.upsert_group(key("api"), renamed);
    c.upsert_group(key("web"), simple("web", "192.0.2.3"));
    c.compile(t0());
    assert_eq!(rejection(&c, "api"), Some(reasons::ZONE_NOT_SERVED));
    assert!(
        !c.table().groups.contains_key("shop/api"),
        "nothing to serve yet"
    );

    let recovered = c.recover_served(published.groups.iter().map(|(k, g)| (&**k, g)));
    assert_eq!(recovered, 1, "only api: web compiled here, gone is gone");
    let report = c.compile(at(1));
    assert!(
        report.changed_groups.contains(&key("api")),
        "its status changes"
    );
    assert_eq!(answer(&c, "api"), "192.0.2.1", "the published version");
    assert_eq!(answer(&c, "web"), "192.0.2.3", "the version compiled here");
    assert!(!c.table().groups.contains_key("shop/gone"));
    assert!(c.group_status(&key("api")).expect("status").served);
}
