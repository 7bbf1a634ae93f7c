//! The serving table's own tests: builds from nothing and from a previous table answer alike.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use healthroute_table::{
    Answer, CompiledGroup, RecordType, RoutingTable, Selection, Target, Value, ZoneViews,
};

use super::*;
use crate::dns::counters::{AnswerCounters, Tally};
use crate::dns::wire::{
    TYPE_A, TYPE_AAAA, TYPE_ANY, TYPE_CNAME, TYPE_NS, TYPE_SOA, TYPE_TXT, wire_name,
};

fn a(last: u8) -> Value {
    Value::A(Ipv4Addr::new(192, 0, 2, last))
}

fn answer(id: &str, target: Target<Value>) -> Answer<Value> {
    Answer {
        set_identifier: id.into(),
        target,
    }
}

fn group(
    key: &str,
    name: &str,
    rtype: RecordType,
    selection: Selection<Value>,
) -> CompiledGroup<Value> {
    CompiledGroup {
        key: key.into(),
        name: name.into(),
        record_type: rtype,
        ttl: 30,
        last_resort: false,
        selection,
        zone_affinity: None,
    }
}

/// One group of each kind: weighted, MultiValue over more than eight values, a CNAME chain,
/// an alias, TXT, zone views, a name below another, and a RecordGroup at a nameserver's name.
fn table(generation: u64) -> RoutingTable<Value> {
    let weighted = Selection::weighted([
        (70, answer("blue", Target::Values(vec![a(1)]))),
        (30, answer("green", Target::Values(vec![a(2), a(3)]))),
    ])
    .expect("weights");
    let mut with_views = group(
        "t/zonal",
        "zonal.example.com.",
        RecordType::A,
        weighted.clone(),
    );
    with_views.zone_affinity = Some(Box::new(ZoneViews {
        zones: BTreeMap::from([(
            "zone-a".into(),
            Selection::Fixed(answer("blue", Target::Values(vec![a(1)]))),
        )]),
    }));
    let groups = [
        group("t/api", "api.example.com.", RecordType::A, weighted),
        group(
            "t/many",
            "many.example.com.",
            RecordType::A,
            Selection::MultiValue {
                set_identifiers: vec!["one".into(), "two".into()],
                pool: (10..22).map(a).collect(),
                owners: (0..12).map(|i| i % 2).collect(),
            },
        ),
        group(
            "t/www",
            "www.example.com.",
            RecordType::Cname,
            Selection::Fixed(answer(
                "x",
                Target::Values(vec![Value::Cname("api.example.com.".into())]),
            )),
        ),
        group(
            "t/alias",
            "b.deep.example.com.",
            RecordType::A,
            Selection::Fixed(answer("via", Target::Alias("t/api".into()))),
        ),
        group(
            "t/txt",
            "api.example.com.",
            RecordType::Txt,
            Selection::Fixed(answer(
                "x",
                Target::Values(vec![Value::Txt("hello".into())]),
            )),
        ),
        group(
            "t/ns2",
            "ns2.example.com.",
            RecordType::A,
            Selection::Fixed(answer("x", Target::Values(vec![a(53)]))),
        ),
        with_views,
    ];
    RoutingTable {
        generation,
        groups: groups
            .into_iter()
            .map(|g| (g.key.clone(), Arc::new(g)))
            .collect(),
    }
}

fn zones() -> Vec<ZoneConfig> {
    vec![ZoneConfig {
        apex: "example.com.".into(),
        nameservers: vec![
            NameServer {
                name: "ns1.example.com.".into(),
                addresses: vec![[198, 51, 100, 1].into()],
            },
            NameServer {
                name: "ns2.example.com.".into(),
                addresses: vec![[198, 51, 100, 2].into()],
            },
        ],
        default_ttl: 60,
        ..ZoneConfig::default()
    }]
}

/// What `t` answers to each question a table of [`table`]'s names can be asked, with the
/// same seeded draws, and its zones' records: equal texts answer alike.
fn answers(t: &ServingTable) -> String {
    let mut out = answers_at(t, &NAMES);
    for z in t.zones() {
        out += &format!("zone {:?} {:?} {:?} {:?}\n", z.apex, z.soa, z.ns, z.glue);
    }
    out += &format!("shadowed {:?}\n", t.shadowed_nameservers());
    out
}

const NAMES: [&str; 12] = [
    "example.com.",
    "api.example.com.",
    "many.example.com.",
    "www.example.com.",
    "b.deep.example.com.",
    "deep.example.com.",
    "zonal.example.com.",
    "ns1.example.com.",
    "ns2.example.com.",
    "new.example.com.",
    "nothing.example.com.",
    "elsewhere.org.",
];

/// What `t` answers at `names`, to every type, with the same seeded draws.
fn answers_at(t: &ServingTable, names: &[&str]) -> String {
    let mut out = String::new();
    for name in names {
        for qtype in [
            TYPE_A, TYPE_AAAA, TYPE_CNAME, TYPE_TXT, TYPE_SOA, TYPE_NS, TYPE_ANY,
        ] {
            let mut rng = fastrand::Rng::with_seed(7);
            for _ in 0..20 {
                let mut tally = Tally::default();
                let outcome = t.lookup(&wire_name(name), qtype, &mut rng, &mut tally);
                out += &format!("{name} {qtype}: {}\n", render(&outcome));
            }
        }
    }
    out
}

fn render(outcome: &Outcome<'_>) -> String {
    match outcome {
        Outcome::Answer { zone, chain, end } => {
            let mut s = format!("zone {zone}, {end:?}:");
            for step in chain.iter() {
                s += &format!(" {}", step.group.compiled.key);
                step.values.for_each(|rr| s += &format!(" {rr:?}"));
            }
            s
        }
        Outcome::Apex { zone, records } => format!("zone {zone}, apex {records:?}"),
        Outcome::NoData { zone } => format!("zone {zone}, NODATA"),
        Outcome::NxDomain { zone } => format!("zone {zone}, NXDOMAIN"),
        Outcome::NotServed => "not served".into(),
    }
}

fn replace(table: &mut RoutingTable<Value>, key: &str, g: CompiledGroup<Value>) {
    table.groups.insert(key.into(), Arc::new(g));
}

// SEM-P11 (a change costs what changed): a table that changes one group's answers takes
// in that group only; every other group, and the name index, is the previous table's; and
// it answers exactly as a table built from nothing.
#[test]
fn a_change_of_one_group_takes_in_that_group_only() {
    let counters = AnswerCounters::default();
    for local_zone in [None, Some("zone-a")] {
        let first_table = table(1);
        let first =
            ServingTable::build(&first_table, &zones(), local_zone, &counters).expect("builds");
        assert_eq!(first.new_groups(), first_table.groups.len());

        let mut next_table = RoutingTable {
            generation: 2,
            ..first_table.clone()
        };
        replace(
            &mut next_table,
            "t/api",
            group(
                "t/api",
                "api.example.com.",
                RecordType::A,
                Selection::Fixed(answer("green", Target::Values(vec![a(2), a(3)]))),
            ),
        );
        let next =
            ServingTable::build_from(Some(&first), &next_table, &zones(), local_zone, &counters)
                .expect("builds");
        assert_eq!(next.new_groups(), 1);
        assert!(
            Arc::ptr_eq(&first.index, &next.index),
            "the index is shared"
        );
        let shared = first
            .groups
            .range(0..first.groups.len())
            .zip(next.groups.range(0..next.groups.len()))
            .filter(|(a, b)| Arc::ptr_eq(a, b))
            .count();
        assert_eq!(shared, first.groups.len() - 1, "all but t/api");

        let full =
            ServingTable::build(&next_table, &zones(), local_zone, &counters).expect("builds");
        assert_eq!(answers(&next), answers(&full));
        let api = ["api.example.com.", "b.deep.example.com."];
        assert_ne!(
            answers_at(&next, &api),
            answers_at(&first, &api),
            "the change is served, through the alias too"
        );
    }
}

// SEM-P11 SEM-D12: adding, removing and renaming groups rebuilds the name index but takes
// in only the groups that are new or changed; the answers (nameserver addresses and glue
// included) are a full build's. Another zone, or a table from elsewhere, shares nothing.
#[test]
fn added_removed_and_renamed_groups_rebuild_the_index_only() {
    let counters = AnswerCounters::default();
    let first_table = table(1);
    let first = ServingTable::build(&first_table, &zones(), None, &counters).expect("builds");
    let total = first_table.groups.len();

    let check = |next_table: &RoutingTable<Value>, new_groups: usize| {
        let next = ServingTable::build_from(Some(&first), next_table, &zones(), None, &counters)
            .expect("builds");
        let full = ServingTable::build(next_table, &zones(), None, &counters).expect("builds");
        assert_eq!(next.new_groups(), new_groups);
        assert_eq!(answers(&next), answers(&full));
        next
    };

    // Only the generation moves: nothing is new, the SOA serial follows.
    let same = check(
        &RoutingTable {
            generation: 9,
            ..first_table.clone()
        },
        0,
    );
    assert!(Arc::ptr_eq(&first.index, &same.index));
    assert_ne!(first.zones()[0].soa, same.zones()[0].soa);

    let mut added = first_table.clone();
    replace(
        &mut added,
        "t/new",
        group(
            "t/new",
            "new.example.com.",
            RecordType::A,
            Selection::Fixed(answer("x", Target::Values(vec![a(99)]))),
        ),
    );
    let next = check(&added, 1);
    assert!(
        !Arc::ptr_eq(&first.index, &next.index),
        "a new name: a new index"
    );

    let mut removed = first_table.clone();
    removed.groups.remove("t/ns2");
    let next = check(&removed, 0);
    assert!(
        next.shadowed_nameservers().is_empty(),
        "ns2's configured address is served again"
    );

    let mut renamed = first_table.clone();
    replace(
        &mut renamed,
        "t/txt",
        group(
            "t/txt",
            "nothing.example.com.",
            RecordType::Txt,
            Selection::Fixed(answer(
                "x",
                Target::Values(vec![Value::Txt("moved".into())]),
            )),
        ),
    );
    check(&renamed, 1);

    let elsewhere = ServingTable::build_from(
        Some(&first),
        &first_table,
        &zones(),
        Some("zone-a"),
        &counters,
    )
    .expect("builds");
    assert_eq!(elsewhere.new_groups(), total, "another zone's answers");
    // Equal groups from another allocation answer as the ones they replace: kept.
    let fresh = ServingTable::build_from(Some(&first), &table(1), &zones(), None, &counters)
        .expect("builds");
    assert_eq!(fresh.new_groups(), 0, "equal groups are not new");
    assert_eq!(answers(&fresh), answers(&first));
}

fn fixed(key: &str, name: &str, last: u8) -> CompiledGroup<Value> {
    group(
        key,
        name,
        RecordType::A,
        Selection::Fixed(answer("x", Target::Values(vec![a(last)]))),
    )
}

// SEM-P11: at a size of several chunks, changes in place copy only the chunks that hold
// them: every other chunk is the previous table's, and the index too; the answers are a
// full build's. An added group goes the full way, and still takes in only itself.
#[test]
fn changes_in_place_copy_only_their_chunks() {
    let counters = AnswerCounters::default();
    let n = Slots::CHUNK * 3 + 17;
    let mut first_table = RoutingTable::<Value> {
        generation: 1,
        groups: Default::default(),
    };
    for i in 0..n {
        let key = format!("t/g{i:04}");
        replace(
            &mut first_table,
            &key,
            fixed(&key, &format!("g{i}.example.com."), 1),
        );
    }
    let first = ServingTable::build(&first_table, &zones(), None, &counters).expect("builds");
    let names: Vec<String> = (0..n).map(|i| format!("g{i}.example.com.")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();

    // Two changes in the second chunk, one in the last.
    let mut next_table = RoutingTable {
        generation: 2,
        ..first_table.clone()
    };
    let changed = [Slots::CHUNK + 3, Slots::CHUNK + 200, n - 1];
    for i in changed {
        let key = format!("t/g{i:04}");
        replace(
            &mut next_table,
            &key,
            fixed(&key, &format!("g{i}.example.com."), 7),
        );
    }
    let next = ServingTable::build_from(Some(&first), &next_table, &zones(), None, &counters)
        .expect("builds");
    assert_eq!(next.new_groups(), changed.len());
    assert!(
        Arc::ptr_eq(&first.index, &next.index),
        "the index is shared"
    );
    let shared: Vec<bool> = first
        .groups
        .chunks
        .iter()
        .zip(&next.groups.chunks)
        .map(|(a, b)| Arc::ptr_eq(a, b))
        .collect();
    assert_eq!(
        shared,
        [true, false, true, false],
        "chunks 1 and 3 are copies"
    );
    let full = ServingTable::build(&next_table, &zones(), None, &counters).expect("builds");
    assert_eq!(answers_at(&next, &names), answers_at(&full, &names));
    assert_eq!(answers(&next), answers(&full));
    assert_ne!(answers_at(&next, &names), answers_at(&first, &names));

    // A new name: the index is built again, and only the new group is taken in.
    let mut added = next_table.clone();
    added.generation = 3;
    replace(
        &mut added,
        "t/g0000a",
        fixed("t/g0000a", "new.example.com.", 9),
    );
    let third =
        ServingTable::build_from(Some(&next), &added, &zones(), None, &counters).expect("builds");
    assert_eq!(third.new_groups(), 1);
    assert!(!Arc::ptr_eq(&next.index, &third.index));
    let full = ServingTable::build(&added, &zones(), None, &counters).expect("builds");
    let mut names = names.clone();
    names.push("new.example.com.");
    assert_eq!(answers_at(&third, &names), answers_at(&full, &names));
    assert_eq!(answers(&third), answers(&full));
}
