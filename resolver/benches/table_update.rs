//! What a new table costs the resolver at 100,000 groups: a build from nothing (what every
//! table cost before issue #27), a build from the table served when one group changed, when
//! one group was added, and one write of the last-table file. Prints figures; asserts nothing
//! (machines here are shared).
//!
//! Run: `cargo bench -p healthroute-resolver --bench table_update [-- GROUPS]`

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use healthroute_resolver::dns::counters::AnswerCounters;
use healthroute_resolver::dns::serving::{ServingTable, ZoneConfig};
use healthroute_table::{
    Answer, CompiledGroup, GroupKey, RecordType, RoutingTable, Selection, Target, Value,
};

/// A weighted group of two one-address records, as most RecordGroups are.
fn group(i: usize, last: u8) -> Arc<CompiledGroup<Value>> {
    let key: Arc<str> = format!("bench/g{i}").into();
    let answer = |id: &str, b: u8| Answer {
        set_identifier: id.into(),
        target: Target::Values(vec![Value::A([10, (i >> 8) as u8, i as u8, b].into())]),
    };
    Arc::new(CompiledGroup {
        key,
        name: format!("g{i}.example.com.").into(),
        record_type: RecordType::A,
        ttl: 30,
        last_resort: false,
        selection: Selection::weighted([(70, answer("blue", last)), (30, answer("green", 2))])
            .expect("weights"),
        zone_affinity: None,
    })
}

fn mean(runs: u32, mut f: impl FnMut()) -> Duration {
    let start = Instant::now();
    for _ in 0..runs {
        f();
    }
    start.elapsed() / runs
}

fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100_000);
    let zones = [ZoneConfig {
        apex: "example.com.".into(),
        default_ttl: 60,
        ..ZoneConfig::default()
    }];
    let counters = AnswerCounters::default();
    let table = RoutingTable {
        generation: 1,
        groups: (0..n)
            .map(|i| (GroupKey::from(format!("bench/g{i}")), group(i, 1)))
            .collect(),
    };
    let served = ServingTable::build(&table, &zones, None, &counters).expect("builds");

    let full = mean(3, || {
        black_box(ServingTable::build(&table, &zones, None, &counters).expect("builds"));
    });
    let mut changed = table.clone();
    changed.generation = 2;
    changed.groups.insert("bench/g7".into(), group(7, 9));
    let mut new_groups = 0;
    let one_changed = mean(20, || {
        let t = ServingTable::build_from(Some(&served), &changed, &zones, None, &counters)
            .expect("builds");
        new_groups = t.new_groups();
        black_box(t);
    });
    let mut added = table.clone();
    added.generation = 2;
    added.groups.insert("bench/new".into(), group(n, 1));
    let one_added = mean(3, || {
        black_box(
            ServingTable::build_from(Some(&served), &added, &zones, None, &counters)
                .expect("builds"),
        );
    });
    let path = std::env::temp_dir().join(format!("hr-bench-table-{}.json", std::process::id()));
    let write = mean(1, || {
        healthroute_resolver::sources::table_file::write(&path, &table).expect("writes");
    });
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    let _ = std::fs::remove_file(&path);

    println!("{n} groups:");
    println!("  build from nothing (every table before #27): {full:>10.1?}");
    println!(
        "  one group changed, from the table served:    {one_changed:>10.1?} ({new_groups} new to it)"
    );
    println!("  one group added, from the table served:      {one_added:>10.1?}");
    println!(
        "  last-table file write ({:.1} MB):            {write:>10.1?}",
        bytes as f64 / 1e6
    );
}
