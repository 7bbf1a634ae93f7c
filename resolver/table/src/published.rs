//! The published form of a routing table: shards that fit in ConfigMaps, and a manifest that
//! names a consistent set of them.
//!
//! ```text
//!   RoutingTable ──split by hash(group key) % N──▶ shard 0..N  (JSON, one ConfigMap each)
//!                └─────────────────────────────────▶ manifest  (generation + hash of every shard)
//!   reader: keep the newest copy of every shard; when each hash the manifest names is present,
//!           assemble the table. A half-written set is never assembled.
//! ```
//!
//! Both sides live here so that the writer (operator) and the reader (resolver) can never
//! disagree on the format.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{CompiledGroup, GroupKey, RoutingTable, Value};

/// Label on every table ConfigMap; resolvers watch this selector.
pub const TABLE_LABEL: &str = "healthroute.io/table";
/// Value of [`TABLE_LABEL`] on the manifest; shards carry `shard`.
pub const MANIFEST: &str = "manifest";
pub const SHARD: &str = "shard";
/// The data key holding the JSON in each ConfigMap.
pub const DATA_KEY: &str = "table.json";
/// A ConfigMap holds at most 1 MiB; a shard larger than this is an error the writer reports.
pub const MAX_SHARD_BYTES: usize = 900 * 1024;

/// Which shard a group belongs to (FNV-1a: stable across processes and versions).
pub fn shard_of(key: &str, shards: u32) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in key.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h % shards.max(1)
}

/// A 64-bit content hash (FNV-1a) of a shard's JSON, as hex.
pub fn content_hash(bytes: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// One shard: the groups whose key hashes to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shard {
    pub index: u32,
    pub groups: BTreeMap<GroupKey, Arc<CompiledGroup<Value>>>,
}

/// Names a consistent set of shards.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub generation: u64,
    pub shards: u32,
    /// Content hash of every shard, by index.
    pub hashes: Vec<String>,
}

/// The encoded shards of a table, and its manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct Encoded {
    pub shards: Vec<(u32, String, Arc<[u8]>)>,
    pub manifest: Manifest,
}

/// Splits and encodes a table into `shards` shards.
pub fn encode(table: &RoutingTable<Value>, shards: u32) -> Result<Encoded, String> {
    let shards = shards.max(1);
    let mut split: Vec<Shard> = (0..shards)
        .map(|index| Shard {
            index,
            groups: BTreeMap::new(),
        })
        .collect();
    for (key, group) in &table.groups {
        split[shard_of(key, shards) as usize]
            .groups
            .insert(key.clone(), group.clone());
    }
    let mut out = Vec::with_capacity(split.len());
    let mut hashes = Vec::with_capacity(split.len());
    for shard in &split {
        let json = serde_json::to_vec(shard).map_err(|e| e.to_string())?;
        if json.len() > MAX_SHARD_BYTES {
            return Err(format!(
                "table shard {} is {} KiB, over the {} KiB a ConfigMap can hold: raise --table-shards",
                shard.index,
                json.len() / 1024,
                MAX_SHARD_BYTES / 1024
            ));
        }
        let hash = content_hash(&json);
        hashes.push(hash.clone());
        out.push((shard.index, hash, Arc::from(json)));
    }
    Ok(Encoded {
        shards: out,
        manifest: Manifest {
            generation: table.generation,
            shards,
            hashes,
        },
    })
}

/// One encoded shard: its groups, content hash and JSON.
type CachedShard = (
    BTreeMap<GroupKey, Arc<CompiledGroup<Value>>>,
    String,
    Arc<[u8]>,
);

/// Encodes tables again and again, re-serialising only the shards whose groups changed
/// (groups are compared by `Arc` identity: the compiler keeps it for unchanged groups).
#[derive(Debug, Default)]
pub struct Encoder {
    shards: u32,
    /// Per shard: its groups as last encoded, its hash and JSON.
    cache: Vec<CachedShard>,
}

impl Encoder {
    pub fn new(shards: u32) -> Self {
        Encoder {
            shards: shards.max(1),
            cache: Vec::new(),
        }
    }

    /// Like [`encode`], for a table that differs from the last one in a few groups.
    pub fn encode(&mut self, table: &RoutingTable<Value>) -> Result<Encoded, String> {
        let n = self.shards;
        let mut split: Vec<BTreeMap<GroupKey, Arc<CompiledGroup<Value>>>> =
            vec![BTreeMap::new(); n as usize];
        for (key, group) in &table.groups {
            split[shard_of(key, n) as usize].insert(key.clone(), group.clone());
        }
        let mut shards = Vec::with_capacity(n as usize);
        let mut hashes = Vec::with_capacity(n as usize);
        for (index, groups) in split.into_iter().enumerate() {
            let same = self.cache.get(index).is_some_and(|(old, _, _)| {
                old.len() == groups.len()
                    && old
                        .iter()
                        .zip(groups.iter())
                        .all(|((ka, a), (kb, b))| ka == kb && Arc::ptr_eq(a, b))
            });
            if !same {
                let shard = Shard {
                    index: index as u32,
                    groups,
                };
                let json = serde_json::to_vec(&shard).map_err(|e| e.to_string())?;
                if json.len() > MAX_SHARD_BYTES {
                    return Err(format!(
                        "table shard {index} is {} KiB, over the {} KiB a ConfigMap can hold: raise --table-shards",
                        json.len() / 1024,
                        MAX_SHARD_BYTES / 1024
                    ));
                }
                let hash = content_hash(&json);
                let entry = (shard.groups, hash, Arc::from(json));
                if index < self.cache.len() {
                    self.cache[index] = entry;
                } else {
                    self.cache.push(entry);
                }
            }
            let (_, hash, json) = &self.cache[index];
            hashes.push(hash.clone());
            shards.push((index as u32, hash.clone(), json.clone()));
        }
        Ok(Encoded {
            shards,
            manifest: Manifest {
                generation: table.generation,
                shards: n,
                hashes,
            },
        })
    }
}

/// The reader's side: collects shards and manifests as they arrive, in any order, and
/// assembles a table only from a complete, consistent set.
#[derive(Debug, Default)]
pub struct Assembler {
    manifest: Option<Manifest>,
    /// Shards seen, by index, with their hash.
    shards: HashMap<u32, (String, Shard)>,
    assembled: Option<u64>,
}

impl Assembler {
    pub fn set_manifest(&mut self, json: &[u8]) -> Result<(), String> {
        let manifest: Manifest =
            serde_json::from_slice(json).map_err(|e| format!("manifest: {e}"))?;
        self.manifest = Some(manifest);
        Ok(())
    }

    pub fn set_shard(&mut self, json: &[u8]) -> Result<(), String> {
        let shard: Shard = serde_json::from_slice(json).map_err(|e| format!("shard: {e}"))?;
        self.shards.insert(shard.index, (content_hash(json), shard));
        Ok(())
    }

    /// The table named by the manifest, once every shard it names has arrived with the right
    /// content, and only once per manifest generation.
    pub fn assemble(&mut self) -> Option<RoutingTable<Value>> {
        let manifest = self.manifest.as_ref()?;
        if self.assembled == Some(manifest.generation) {
            return None;
        }
        let mut groups = BTreeMap::new();
        for (index, want) in manifest.hashes.iter().enumerate() {
            let (hash, shard) = self.shards.get(&(index as u32))?;
            if hash != want {
                return None;
            }
            groups.extend(shard.groups.iter().map(|(k, g)| (k.clone(), g.clone())));
        }
        self.assembled = Some(manifest.generation);
        Some(RoutingTable {
            generation: manifest.generation,
            groups,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Answer, RecordType, Selection, Target};

    fn table(generation: u64, n: usize, ip_last: u8) -> RoutingTable<Value> {
        let mut t = RoutingTable {
            generation,
            ..Default::default()
        };
        for i in 0..n {
            let key: GroupKey = format!("ns/g{i}").into();
            t.groups.insert(
                key.clone(),
                Arc::new(CompiledGroup {
                    key,
                    name: format!("g{i}.example.com.").into(),
                    record_type: RecordType::A,
                    ttl: 60,
                    last_resort: false,
                    selection: Selection::Fixed(Answer {
                        set_identifier: "x".into(),
                        target: Target::Values(vec![Value::A([192, 0, 2, ip_last].into())]),
                    }),
                }),
            );
        }
        t
    }

    #[test]
    fn round_trip_in_any_order() {
        let t = table(7, 50, 1);
        let enc = encode(&t, 4).expect("encodes");
        let mut a = Assembler::default();
        a.set_manifest(&serde_json::to_vec(&enc.manifest).expect("json"))
            .expect("manifest");
        for (_, _, json) in enc.shards.iter().rev() {
            assert!(a.assemble().is_none() || enc.shards.len() == 1);
            a.set_shard(json).expect("shard");
        }
        assert_eq!(a.assemble(), Some(t));
        assert_eq!(a.assemble(), None, "once per generation");
    }

    // SEM-P1 SEM-S8: a reader never assembles a mix of two generations.
    #[test]
    fn never_a_half_written_set() {
        let old = encode(&table(1, 50, 1), 4).expect("encodes");
        let new = encode(&table(2, 50, 2), 4).expect("encodes");
        let mut a = Assembler::default();
        for (_, _, json) in &old.shards {
            a.set_shard(json).expect("shard");
        }
        a.set_manifest(&serde_json::to_vec(&old.manifest).expect("json"))
            .expect("manifest");
        assert_eq!(a.assemble().map(|t| t.generation), Some(1));
        // The new manifest arrives before all its shards: nothing is assembled until they do.
        a.set_manifest(&serde_json::to_vec(&new.manifest).expect("json"))
            .expect("manifest");
        for (i, (_, _, json)) in new.shards.iter().enumerate() {
            assert!(a.assemble().is_none(), "after {i} of 4 new shards");
            a.set_shard(json).expect("shard");
        }
        let t = a.assemble().expect("complete");
        assert_eq!(t, table(2, 50, 2));
    }

    #[test]
    fn shard_assignment_is_stable_and_spread() {
        assert_eq!(shard_of("shop/api", 16), shard_of("shop/api", 16));
        let mut counts = [0; 8];
        for i in 0..8000 {
            counts[shard_of(&format!("ns{}/group-{i}", i % 13), 8) as usize] += 1;
        }
        assert!(counts.iter().all(|c| (800..1200).contains(c)), "{counts:?}");
    }

    #[test]
    fn incremental_encoder_matches_a_full_encode() {
        let mut enc = Encoder::new(4);
        let t1 = table(1, 40, 1);
        assert_eq!(
            enc.encode(&t1).expect("encodes"),
            encode(&t1, 4).expect("encodes")
        );
        let mut t2 = t1.clone();
        t2.generation = 2;
        let changed = table(2, 1, 9).groups.into_iter().next().expect("one");
        t2.groups.insert(changed.0, changed.1);
        assert_eq!(
            enc.encode(&t2).expect("encodes"),
            encode(&t2, 4).expect("encodes")
        );
    }

    #[test]
    fn oversized_shards_are_refused() {
        let big = table(1, 12_000, 1);
        let err = encode(&big, 1).expect_err("too big for one ConfigMap");
        assert!(err.contains("--table-shards"), "{err}");
        assert!(encode(&big, 8).is_ok());
    }
}
