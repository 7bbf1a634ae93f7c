//! What one change costs the published table, at 10 to 100,000 groups: the bytes a full
//! shard rewrite and a delta write, and the reader's time to take a delta in (decode, apply,
//! the table handed on) beside a full re-assembly, a new term's manifest on the same shards
//! with its catch-up delta, and a fold's manifest on the shards it rewrote (P11). Prints
//! figures; asserts nothing (machines here are shared: compare within one run).
//!
//! Run: `cargo bench -p healthroute-table --bench delta`

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use healthroute_table::published::{self, Assembler, Delta, Encoder, Manifest};
use healthroute_table::{
    Answer, CompiledGroup, GroupKey, RecordType, RoutingTable, Selection, Target, Value,
};

/// A weighted group of three records, about the size the compiler makes for a Service.
fn group(i: usize, last: u8) -> Arc<CompiledGroup<Value>> {
    let key: GroupKey = format!("ns{}/group-{i}", i % 7).into();
    let answer = |n: u8| Answer {
        set_identifier: format!("pods-{n}").into(),
        target: Target::Values(vec![
            Value::A([10, (i % 250) as u8, n, last].into()),
            Value::A([10, (i % 250) as u8, n, last.wrapping_add(1)].into()),
        ]),
    };
    Arc::new(CompiledGroup {
        key,
        name: format!("group-{i}.ns{}.example.com.", i % 7).into(),
        record_type: RecordType::A,
        ttl: 30,
        last_resort: false,
        zone_affinity: None,
        selection: Selection::Weighted {
            cumulative: vec![10, 20, 30],
            answers: (0..3).map(answer).collect(),
        },
    })
}

fn table(n: usize) -> RoutingTable<Value> {
    RoutingTable {
        generation: 1,
        groups: (0..n)
            .map(|i| {
                let g = group(i, 1);
                (g.key.clone(), g)
            })
            .collect(),
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    println!(
        "| groups | shards | shard rewritten (bytes) | delta (bytes) | writer: full encode | reader: full assembly | reader: one delta | ratio | reader: a new term on the same shards, 50 changes since | reader: a fold of those changes (shards rewritten) |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
    for n in [10, 1_000, 10_000, 100_000] {
        let t1 = table(n);
        // A new term's publisher encodes the whole table with nothing cached.
        let started = Instant::now();
        let mut encoder = Encoder::new(1);
        let enc = encoder.encode(&t1).expect("encodes");
        let encode_time = started.elapsed();
        let manifest = serde_json::to_vec(&enc.manifest).expect("json");
        let base_hash = published::content_hash(&manifest);

        // A reader that has the manifest's table.
        let mut reader = Assembler::default();
        for (_, _, json) in &enc.shards {
            reader.set_shard(json).expect("shard");
        }
        reader.set_manifest(&manifest).expect("manifest");
        let started = Instant::now();
        let mut full = Assembler::default();
        for (_, _, json) in &enc.shards {
            full.set_shard(json).expect("shard");
        }
        full.set_manifest(&manifest).expect("manifest");
        black_box(full.assemble_shared().expect("ok"));
        let full_time = started.elapsed();
        reader.assemble_shared().expect("ok").expect("table");

        // Changes of one group each, as deltas in a row.
        let rounds = 50;
        let mut served = Arc::new(t1.clone());
        let mut delta_bytes = 0;
        let mut shard_bytes = 0;
        let mut times = Vec::with_capacity(rounds);
        for r in 0..rounds {
            let mut next = (*served).clone();
            next.generation = served.generation + 1;
            let i = (r * 7919) % n;
            let g = group(i, 2 + (r % 200) as u8);
            next.groups.insert(g.key.clone(), g);
            let next = Arc::new(next);
            // What a shard rewrite would send: the shard holding the group.
            let enc = encoder.encode(&next).expect("encodes");
            let index = published::shard_of(&format!("ns{}/group-{i}", i % 7), enc.manifest.shards);
            shard_bytes = enc.shards[index as usize].2.len();
            let (groups, removed): (BTreeMap<_, _>, Vec<_>) =
                published::diff(&served.groups, &next.groups);
            let json = serde_json::to_vec(&Delta {
                base: 1,
                base_hash: base_hash.clone(),
                previous: served.generation,
                generation: next.generation,
                groups,
                removed,
            })
            .expect("json");
            delta_bytes = json.len();
            let started = Instant::now();
            reader.set_delta(&json).expect("delta");
            let got = reader.assemble_shared().expect("ok").expect("applied");
            times.push(started.elapsed());
            assert_eq!(got.generation, next.generation);
            served = next;
        }
        let one = median(times);

        // A new term: the same shards under a new manifest, with the 50 changes since them
        // as its catch-up delta.
        let next_term = Manifest {
            generation: served.generation + 1,
            ..enc.manifest.clone()
        };
        let next_manifest = serde_json::to_vec(&next_term).expect("json");
        let (groups, removed): (BTreeMap<_, _>, Vec<_>) =
            published::diff(&t1.groups, &served.groups);
        let catch_up = serde_json::to_vec(&Delta {
            base: next_term.generation,
            base_hash: published::content_hash(&next_manifest),
            previous: next_term.generation,
            generation: next_term.generation + 1,
            groups,
            removed,
        })
        .expect("json");
        let started = Instant::now();
        reader.set_manifest(&next_manifest).expect("manifest");
        reader.set_delta(&catch_up).expect("catch-up");
        let got = reader
            .assemble_shared()
            .expect("ok")
            .expect("the new term's table");
        let term_time = started.elapsed();
        assert_eq!(got.groups.len(), served.groups.len());

        // A fold: the changes written into the shards (those whose content changed) and a
        // new manifest on them, with no catch-up; what a resolver does to take it in.
        let fold_generation = next_term.generation + 2;
        let folded = RoutingTable {
            generation: fold_generation,
            groups: served.groups.clone(),
        };
        let enc2 = encoder.encode(&folded).expect("encodes");
        let rewritten: Vec<&Arc<[u8]>> = enc2
            .shards
            .iter()
            .filter(|(i, hash, _)| !enc.shards.iter().any(|(j, h, _)| i == j && h == hash))
            .map(|(_, _, json)| json)
            .collect();
        let fold_manifest = serde_json::to_vec(&enc2.manifest).expect("json");
        let started = Instant::now();
        for json in &rewritten {
            reader.set_shard(json).expect("shard");
        }
        reader.set_manifest(&fold_manifest).expect("manifest");
        let got = reader
            .assemble_shared()
            .expect("ok")
            .expect("the fold's table");
        let fold_time = started.elapsed();
        assert_eq!(got.generation, fold_generation);
        assert_eq!(got.groups.len(), served.groups.len());

        println!(
            "| {n} | {} | {shard_bytes} | {delta_bytes} | {:.2} ms | {:.2} ms | {:.3} ms | {:.0} | {:.3} ms | {:.2} ms ({} shards) |",
            enc.manifest.shards,
            encode_time.as_secs_f64() * 1e3,
            full_time.as_secs_f64() * 1e3,
            one.as_secs_f64() * 1e3,
            full_time.as_secs_f64() / one.as_secs_f64().max(1e-9),
            term_time.as_secs_f64() * 1e3,
            fold_time.as_secs_f64() * 1e3,
            rewritten.len(),
        );
    }
}
