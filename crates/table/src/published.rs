//! The published form of a routing table: shards that fit in ConfigMaps, a manifest that
//! names a consistent set of them, and deltas: the changes since that manifest, one object
//! per change, so that a change costs what changed.
//!
//! ```text
//!   RoutingTable ──split by hash(group key) % N──▶ shard 0..N  (JSON, one ConfigMap each)
//!                └─────────────────────────────────▶ manifest  (generation + hash of every shard)
//!   a change ──diff against what is served──▶ delta g: {base: the manifest's hash,
//!                                               previous: g-1, groups changed, groups removed}
//!   reader: keep the newest copy of every shard; when each hash the manifest names is present,
//!           assemble the base; then apply the deltas on that base in order, each once. A
//!           half-written set is never assembled, and a delta never lands on another base.
//! ```
//!
//! Both sides live here so that the writer (operator) and the reader (resolver) can never
//! disagree on the format.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use imbl::ordmap::DiffItem;
use serde::{Deserialize, Serialize};

use crate::{CompiledGroup, Error, GroupKey, Groups, RoutingTable, SharedNames, Value};

/// Where the table lives on the API server (names, labels, keys): the contract's.
pub use crate::contract::{BASE_LABEL, DATA_KEY, DELTA, MANIFEST, SHARD, TABLE_LABEL};
/// A ConfigMap holds at most 1 MiB; no shard is written larger than this.
pub const MAX_SHARD_BYTES: usize = 900 * 1024;
/// The size a shard is aimed at: the shard count follows the table so that shards hold
/// about this much, leaving room to grow before any shard nears [`MAX_SHARD_BYTES`].
pub const TARGET_SHARD_BYTES: usize = 256 * 1024;
/// A change larger than this as a delta is published as a full table (P11); no delta, on a
/// ConfigMap or pushed (P12), is larger.
pub const MAX_DELTA_BYTES: usize = 128 * 1024;
/// Pushed deltas a reader serves beyond its committed table before it waits for its watch.
const MAX_PUSHED: usize = 64;

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

/// The changes from one table generation to the next, on top of a manifest's table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Delta {
    /// The manifest it applies to: its generation and [`content_hash`] of its JSON.
    pub base: u64,
    pub base_hash: String,
    /// The generation it follows: the manifest's, or the delta before it.
    pub previous: u64,
    pub generation: u64,
    /// Groups added or changed, whole.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub groups: BTreeMap<GroupKey, Arc<CompiledGroup<Value>>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<GroupKey>,
}

/// Groups changed or added from `from` to `to`, and groups removed. The map's nodes the two
/// tables share are skipped whole (a table made from another by a change shares all but the
/// paths to what changed); in a node they do not share, an entry counts as changed unless it
/// is the same `Arc` or the same content.
pub fn diff(
    from: &Groups<Value>,
    to: &Groups<Value>,
) -> (BTreeMap<GroupKey, Arc<CompiledGroup<Value>>>, Vec<GroupKey>) {
    let mut changed = BTreeMap::new();
    let mut removed = Vec::new();
    for item in from.diff(to) {
        match item {
            DiffItem::Add(key, group)
            | DiffItem::Update {
                new: (key, group), ..
            } => {
                changed.insert(key.clone(), group.clone());
            }
            DiffItem::Remove(key, _) => removed.push(key.clone()),
        }
    }
    (changed, removed)
}

/// Splits and encodes a table into exactly `shards` shards (an error if one does not fit).
pub fn encode(table: &RoutingTable<Value>, shards: u32) -> Result<Encoded, Error> {
    let mut encoder = Encoder::new(shards);
    encoder.fixed = true;
    encoder.encode(table)
}

/// One encoded shard: its groups, content hash and JSON.
type CachedShard = (
    BTreeMap<GroupKey, Arc<CompiledGroup<Value>>>,
    String,
    Arc<[u8]>,
);

/// Encodes tables again and again, re-serialising only the shards whose groups changed
/// (groups are compared by `Arc` identity: the compiler keeps it for unchanged groups).
///
/// The shard count follows the table: it starts at the minimum and doubles (at least) when
/// a shard outgrows twice [`TARGET_SHARD_BYTES`], and shrinks back when the shards hold on
/// average under a quarter of it, never below the minimum. Readers assemble any count.
/// A clone shares every cached shard's groups and JSON (`Arc`s): a fold encodes with one,
/// off the publisher's task.
#[derive(Clone, Debug, Default)]
pub struct Encoder {
    min_shards: u32,
    shards: u32,
    /// Keep `shards` whatever the sizes (for tests and fixed layouts).
    fixed: bool,
    /// Per shard: its groups as last encoded, its hash and JSON.
    cache: Vec<CachedShard>,
}

impl Encoder {
    /// An encoder with at least `min_shards` shards.
    pub fn new(min_shards: u32) -> Self {
        Encoder {
            min_shards: min_shards.max(1),
            shards: min_shards.max(1),
            fixed: false,
            cache: Vec::new(),
        }
    }

    /// Encodes `table`, choosing the shard count first if the table's size calls for another.
    pub fn encode(&mut self, table: &RoutingTable<Value>) -> Result<Encoded, Error> {
        // Each round at least doubles or shrinks to fit, so a few rounds always settle.
        for _ in 0..8 {
            let encoded = self.encode_with_current(table)?;
            let sizes: Vec<usize> = encoded.shards.iter().map(|(_, _, j)| j.len()).collect();
            let total: usize = sizes.iter().sum();
            let largest = sizes.iter().copied().max().unwrap_or(0);
            let wanted = total.div_ceil(TARGET_SHARD_BYTES).max(1) as u32;
            let next = if largest > 2 * TARGET_SHARD_BYTES {
                wanted.max(self.shards.saturating_mul(2))
            } else if total < self.shards as usize * TARGET_SHARD_BYTES / 4 {
                wanted.max(self.min_shards)
            } else {
                self.shards
            };
            if self.fixed || next == self.shards {
                if largest > MAX_SHARD_BYTES {
                    return Err(self.too_large(&encoded, largest));
                }
                return Ok(encoded);
            }
            if next > self.shards && table.groups.len() <= self.shards as usize {
                // More shards cannot help: one group alone is too large.
                return Err(self.too_large(&encoded, largest));
            }
            self.shards = next;
            self.cache.clear();
        }
        Err(Error::ShardCountUnsettled)
    }

    fn too_large(&self, encoded: &Encoded, largest: usize) -> Error {
        let index = encoded
            .shards
            .iter()
            .position(|(_, _, j)| j.len() == largest)
            .unwrap_or(0);
        let biggest_group = self.cache.get(index).and_then(|(groups, _, _)| {
            groups
                .iter()
                .map(|(k, g)| (serde_json::to_vec(g).map_or(0, |j| j.len()), k))
                .max()
        });
        match biggest_group {
            Some((bytes, key)) if bytes > MAX_SHARD_BYTES / 2 => Error::GroupTooLarge {
                group: key.clone(),
                kib: bytes / 1024,
                max_kib: MAX_SHARD_BYTES / 1024,
            },
            _ => Error::ShardTooLarge {
                index,
                kib: largest / 1024,
                max_kib: MAX_SHARD_BYTES / 1024,
            },
        }
    }

    /// Encodes with the current shard count, reusing the cached JSON of unchanged shards.
    fn encode_with_current(&mut self, table: &RoutingTable<Value>) -> Result<Encoded, Error> {
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
                let json = serde_json::to_vec(&shard).map_err(|e| Error::Unreadable {
                    what: "shard",
                    reason: e.to_string(),
                })?;
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

/// The groups of one shard as the reader keeps them: the table's `Arc`s, in key order.
type ShardGroups = Box<[Arc<CompiledGroup<Value>>]>;

/// The reader's side: collects shards, manifests and deltas as they arrive, in any order, and
/// assembles a table only from a complete, consistent set.
#[derive(Debug, Default)]
pub struct Assembler {
    /// The newest manifest, with the content hash of its JSON (its identity).
    manifest: Option<(Manifest, String)>,
    /// Shards seen, by index, with their hash: each one's groups in key order, without a map
    /// (a group holds its key; a map of them cost 35-70 bytes a group beside the table's).
    shards: HashMap<u32, (String, ShardGroups)>,
    /// Deltas not applied yet: on the manifest served, or on one still to come.
    deltas: Vec<Delta>,
    /// The hash of the manifest the table served is built on.
    base: Option<String>,
    /// The shards that manifest names (their hashes, by index), and every key a delta on it
    /// changed or removed since: the committed table is those shards' groups but for these.
    /// A new manifest naming the same shards (a new term's, P11) is then the committed table
    /// with these keys taken back to the shards' content, not a walk over every group.
    base_shards: Vec<String>,
    touched: BTreeSet<GroupKey>,
    /// The committed table: the base with the deltas the watch brought applied.
    current: Option<Arc<RoutingTable<Value>>>,
    /// Pushed deltas served beyond `current` (P12), in order, each with the table it made.
    /// The watch's equal delta commits one (its table becomes `current`: nothing is built
    /// again); anything else the watch brings drops them.
    pushed: Vec<(Delta, Arc<RoutingTable<Value>>)>,
}

impl Assembler {
    pub fn set_manifest(&mut self, json: &[u8]) -> Result<(), Error> {
        let manifest: Manifest = serde_json::from_slice(json).map_err(|e| Error::Unreadable {
            what: "manifest",
            reason: e.to_string(),
        })?;
        self.manifest = Some((manifest, content_hash(json)));
        Ok(())
    }

    pub fn set_shard(&mut self, json: &[u8]) -> Result<(), Error> {
        let mut shard: Shard = serde_json::from_slice(json).map_err(|e| Error::Unreadable {
            what: "shard",
            reason: e.to_string(),
        })?;
        // A fold re-sends every shard, nearly all of it unchanged: each group the table holds
        // already takes its `Arc` now, and the copy just decoded is freed before the next
        // shard is decoded into the same room (not when the table is assembled, after all
        // of them, with the blocks of the next table in between).
        let old = self.served().map(|t| &t.groups);
        let groups = kept(std::mem::take(&mut shard.groups), old)
            .into_iter()
            .map(|(key, mut group)| {
                // Its own key, as every writer publishes it; under another, the map's wins.
                if group.key != key {
                    Arc::make_mut(&mut group).key = key;
                }
                group
            })
            .collect();
        self.shards
            .insert(shard.index, (content_hash(json), groups));
        Ok(())
    }

    pub fn set_delta(&mut self, json: &[u8]) -> Result<(), Error> {
        let delta = decode_delta(json)?;
        // Applied already (a relist), or on a base older than the manifest: nothing to keep.
        let served = self
            .current
            .as_ref()
            .map(|t| (t.generation, self.base.as_ref()));
        let done =
            served.is_some_and(|(g, base)| base == Some(&delta.base_hash) && delta.generation <= g);
        let stale = self
            .manifest
            .as_ref()
            .is_some_and(|(m, _)| delta.base < m.generation);
        if !done && !stale && !self.deltas.contains(&delta) {
            self.deltas.push(delta);
        }
        Ok(())
    }

    /// A delta the leader pushed (P12): served at once when it follows the table served (the
    /// same manifest, `previous` its generation), else left to the watch (`Ok(None)`). What
    /// it makes is not committed: the watch's copy of the delta commits it, and anything
    /// else the watch brings replaces it.
    pub fn push_delta(&mut self, json: &[u8]) -> Result<Option<Arc<RoutingTable<Value>>>, Error> {
        let delta = decode_delta(json)?;
        let Some(mut table) = self.served().cloned() else {
            return Ok(None);
        };
        if self.base.as_ref() != Some(&delta.base_hash)
            || delta.previous != table.generation
            || self.pushed.len() >= MAX_PUSHED
        {
            return Ok(None);
        }
        apply(&mut table, &delta);
        self.pushed.push((delta, table.clone()));
        Ok(Some(table))
    }

    /// The table served (the last one returned): the last pushed delta's, else the committed
    /// one.
    fn served(&self) -> Option<&Arc<RoutingTable<Value>>> {
        self.pushed.last().map(|(_, t)| t).or(self.current.as_ref())
    }

    /// One object as its [`TABLE_LABEL`] value says: [`MANIFEST`], [`DELTA`], else a shard.
    pub fn set(&mut self, role: Option<&str>, json: &[u8]) -> Result<(), Error> {
        match role {
            Some(MANIFEST) => self.set_manifest(json),
            Some(DELTA) => self.set_delta(json),
            _ => self.set_shard(json),
        }
    }

    /// [`Assembler::assemble_shared`], as a table of its own.
    pub fn assemble(&mut self) -> Result<Option<RoutingTable<Value>>, Error> {
        Ok(self.assemble_shared()?.map(Arc::unwrap_or_clone))
    }

    /// The newest table the objects seen make: the manifest's, once every shard it names has
    /// arrived with the right content, then each delta on that manifest in order. A table is
    /// returned once (a manifest's identity is its generation and every shard hash, so a new
    /// writer reusing a number is not mistaken for the table already served), and the
    /// generation served only moves forward: a complete set whose generation is not above
    /// the one served is refused with [`Error::NotNewer`].
    ///
    /// Groups whose content did not change keep the `Arc` of the table served before, so that
    /// whoever reads the tables can tell what changed by identity, as the writer does.
    pub fn assemble_shared(&mut self) -> Result<Option<Arc<RoutingTable<Value>>>, Error> {
        let Some((manifest, hash)) = self.manifest.as_ref() else {
            return Ok(None);
        };
        let serving = self.current.as_ref().map(|t| t.generation);
        // Returned again only when it changed.
        let before = self.served().cloned();
        let mut table = if self.base.as_ref() == Some(hash) {
            match &self.current {
                Some(t) => t.clone(),
                None => return Ok(None),
            }
        } else {
            for (index, want) in manifest.hashes.iter().enumerate() {
                match self.shards.get(&(index as u32)) {
                    Some((hash, _)) if hash == want => {}
                    _ => return Ok(None),
                }
            }
            if let Some(serving) = serving
                && manifest.generation <= serving
            {
                // Refused once; a newer manifest replaces it.
                let refused = Error::NotNewer {
                    generation: manifest.generation,
                    serving,
                };
                self.manifest = None;
                return Err(refused);
            }
            let old = before.as_ref().map(|t| &t.groups);
            let generation = manifest.generation;
            let groups = match &self.current {
                Some(current) if manifest.hashes == self.base_shards => {
                    let touched = std::mem::take(&mut self.touched);
                    on_the_same_shards(&mut self.shards, manifest.shards, current, touched, old)
                }
                _ => {
                    self.touched.clear();
                    from_the_shards(&mut self.shards, manifest.shards, old)
                }
            };
            // Shards beyond the manifest's count are left over from a larger table.
            let count = manifest.shards;
            self.shards.retain(|i, _| *i < count);
            self.base = Some(hash.clone());
            self.base_shards = manifest.hashes.clone();
            self.pushed.clear();
            Arc::new(RoutingTable { generation, groups })
        };
        // The deltas on this base, in order; those of older bases are dropped.
        let (base_generation, base_hash) = (manifest.generation, hash.clone());
        self.deltas.retain(|d| d.base >= base_generation);
        while let Some(i) = self
            .deltas
            .iter()
            .position(|d| d.base_hash == base_hash && d.previous == table.generation)
        {
            let delta = self.deltas.swap_remove(i);
            self.touched
                .extend(delta.groups.keys().chain(&delta.removed).cloned());
            if self
                .pushed
                .first()
                .is_some_and(|(pushed, _)| *pushed == delta)
            {
                // Pushed before: its table is served already, and now committed.
                table = self.pushed.remove(0).1;
            } else {
                self.pushed.clear();
                apply(&mut table, &delta);
            }
        }
        self.deltas
            .retain(|d| !(d.base_hash == base_hash && d.generation <= table.generation));
        // What was pushed and not committed yet follows the committed table, or goes.
        if self
            .pushed
            .first()
            .is_some_and(|(d, _)| d.base_hash != base_hash || d.previous != table.generation)
        {
            self.pushed.clear();
        }
        self.current = Some(table);
        let served = self.served().cloned();
        if served
            .as_ref()
            .zip(before.as_ref())
            .is_some_and(|(s, b)| Arc::ptr_eq(s, b))
        {
            return Ok(None);
        }
        Ok(served)
    }
}

/// The groups of a manifest's shards, all of them: each one `old` (the table served before)
/// holds with the same content keeps its `Arc`, in the groups and in the shard it came from
/// (a shard holding copies of groups the table holds too would keep a second table alive after
/// every fold).
fn from_the_shards(
    shards: &mut HashMap<u32, (String, ShardGroups)>,
    count: u32,
    old: Option<&Groups<Value>>,
) -> Groups<Value> {
    let mut groups = Groups::new();
    for index in 0..count {
        let Some((_, shard)) = shards.get_mut(&index) else {
            continue;
        };
        for group in shard.iter_mut() {
            *group = unchanged(old, &group.key, group);
            groups.insert(group.key.clone(), group.clone());
        }
    }
    groups
}

/// The groups of a manifest naming the very shards `current` was built on: `current`'s, with
/// each key `touched` (what deltas on the old manifest changed or removed) as its shard holds
/// it, or gone when no shard does. Costs what the deltas touched, and the result shares
/// `current`'s tree, so the table built from it finds what changed without a walk either.
fn on_the_same_shards(
    shards: &mut HashMap<u32, (String, ShardGroups)>,
    count: u32,
    current: &RoutingTable<Value>,
    touched: BTreeSet<GroupKey>,
    old: Option<&Groups<Value>>,
) -> Groups<Value> {
    let mut groups = current.groups.clone();
    for key in touched {
        // Its shard by the writer's hash; a writer that filed it elsewhere is looked for too.
        let home = shard_of(&key, count);
        let place = std::iter::once(home)
            .chain((0..count).filter(|i| *i != home))
            .find_map(|index| {
                let (_, shard) = shards.get(&index)?;
                Some((index, shard.binary_search_by(|g| g.key.cmp(&key)).ok()?))
            });
        let found = place.and_then(|(index, at)| Some(&mut shards.get_mut(&index)?.1[at]));
        match found {
            Some(group) => {
                *group = unchanged(old, &key, group);
                if !groups.get(&key).is_some_and(|g| Arc::ptr_eq(g, group)) {
                    groups.insert(key, group.clone());
                }
            }
            None => {
                groups.remove(&key);
            }
        }
    }
    groups
}

/// A delta's JSON, checked, its groups as the assembler keeps them ([`kept`]).
fn decode_delta(json: &[u8]) -> Result<Delta, Error> {
    let mut delta: Delta = serde_json::from_slice(json).map_err(|e| Error::Unreadable {
        what: "delta",
        reason: e.to_string(),
    })?;
    delta.groups = kept(std::mem::take(&mut delta.groups), None);
    if delta.generation <= delta.previous {
        return Err(Error::Unreadable {
            what: "delta",
            reason: format!(
                "generation {} does not follow {}",
                delta.generation, delta.previous
            ),
        });
    }
    Ok(delta)
}

/// `delta` applied to `table` (copied first if it is shared: the nodes of its map that the
/// delta does not touch stay shared).
fn apply(table: &mut Arc<RoutingTable<Value>>, delta: &Delta) {
    let next = Arc::make_mut(table);
    next.generation = delta.generation;
    for key in &delta.removed {
        next.groups.remove(key);
    }
    for (key, group) in &delta.groups {
        let same = next.groups.get(key).is_some_and(|old| **old == **group);
        if !same {
            next.groups.insert(key.clone(), group.clone());
        }
    }
}

/// Decoded groups as the assembler keeps them: each one `old` holds with the same content
/// takes `old`'s `Arc` ([`unchanged`]); the others share their set identifiers and zone names
/// ([`SharedNames`]) within `decoded`. Every entry's key is its group's own when it is the same
/// text (it always is in what a writer publishes), so that the map's key, the table's and the
/// group's field are one allocation, not two per group (0.5 MB at 10,000 groups).
fn kept(
    decoded: BTreeMap<GroupKey, Arc<CompiledGroup<Value>>>,
    old: Option<&Groups<Value>>,
) -> BTreeMap<GroupKey, Arc<CompiledGroup<Value>>> {
    let mut names = SharedNames::new();
    decoded
        .into_iter()
        .map(|(key, decoded)| {
            let mut group = unchanged(old, &key, &decoded);
            drop(decoded); // so that a group not in `old` is this map's alone
            if let Some(new) = Arc::get_mut(&mut group) {
                new.share_names(&mut names);
            }
            let key = if group.key == key {
                group.key.clone()
            } else {
                key
            };
            (key, group)
        })
        .collect()
}

/// `old`'s `Arc` of the group when it holds the same content, else `group`.
fn unchanged(
    old: Option<&Groups<Value>>,
    key: &GroupKey,
    group: &Arc<CompiledGroup<Value>>,
) -> Arc<CompiledGroup<Value>> {
    match old.and_then(|old| old.get(key)) {
        Some(before) if Arc::ptr_eq(before, group) || **before == **group => before.clone(),
        _ => group.clone(),
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
                    zone_affinity: None,
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
            assert_eq!(a.assemble(), Ok(None));
            a.set_shard(json).expect("shard");
        }
        assert_eq!(a.assemble(), Ok(Some(t)));
        assert_eq!(a.assemble(), Ok(None), "once per manifest");
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
        assert_eq!(a.assemble().ok().flatten().map(|t| t.generation), Some(1));
        // The new manifest arrives before all its shards: nothing is assembled until they do.
        a.set_manifest(&serde_json::to_vec(&new.manifest).expect("json"))
            .expect("manifest");
        for (i, (_, _, json)) in new.shards.iter().enumerate() {
            assert_eq!(a.assemble(), Ok(None), "after {i} of 4 new shards");
            a.set_shard(json).expect("shard");
        }
        let t = a.assemble().expect("newer").expect("complete");
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
    fn a_fixed_count_that_cannot_hold_the_table_is_an_error() {
        let big = table(1, 12_000, 1);
        let err = encode(&big, 1).expect_err("too big for one ConfigMap");
        assert!(
            err.to_string()
                .contains("over the 900 KiB a ConfigMap can hold"),
            "{err}"
        );
        assert!(encode(&big, 8).is_ok());
    }

    fn fits(enc: &Encoded) -> bool {
        enc.shards
            .iter()
            .all(|(_, _, j)| j.len() <= MAX_SHARD_BYTES)
    }

    // SEM-P10: the shard count follows the table, from one shard to 100,000 groups and back.
    #[test]
    fn the_shard_count_follows_the_table() {
        let mut enc = Encoder::new(1);
        let small = enc.encode(&table(1, 100, 1)).expect("encodes");
        assert_eq!(small.manifest.shards, 1);

        let big = table(2, 100_000, 1);
        let encoded = enc.encode(&big).expect("a table of 100,000 groups fits");
        assert!(fits(&encoded));
        let total: usize = encoded.shards.iter().map(|(_, _, j)| j.len()).sum();
        assert!(
            encoded.manifest.shards as usize > total / MAX_SHARD_BYTES,
            "{} shards for {total} bytes",
            encoded.manifest.shards
        );
        // What the reader assembles is the table, whatever the count.
        let mut a = Assembler::default();
        for (_, _, json) in &encoded.shards {
            a.set_shard(json).expect("shard");
        }
        a.set_manifest(&serde_json::to_vec(&encoded.manifest).expect("json"))
            .expect("manifest");
        assert_eq!(a.assemble(), Ok(Some(big)));

        // Much smaller again: back down, never below the minimum.
        let shrunk = enc.encode(&table(3, 100, 1)).expect("encodes");
        assert_eq!(shrunk.manifest.shards, 1);
        let mut at_least_8 = Encoder::new(8);
        assert_eq!(
            at_least_8
                .encode(&table(1, 10, 1))
                .expect("encodes")
                .manifest
                .shards,
            8
        );
    }

    // SEM-P4: a new manifest with the generation already served but other content (a new
    // leader counting from its own start) is not skipped silently: it is refused as not
    // newer, and the next generation is served.
    #[test]
    fn generations_only_move_forward() {
        let mut a = Assembler::default();
        let feed = |a: &mut Assembler, t: &RoutingTable<Value>| {
            let enc = encode(t, 2).expect("encodes");
            for (_, _, json) in &enc.shards {
                a.set_shard(json).expect("shard");
            }
            a.set_manifest(&serde_json::to_vec(&enc.manifest).expect("json"))
                .expect("manifest");
        };
        feed(&mut a, &table(2, 10, 1));
        assert_eq!(a.assemble().expect("first").map(|t| t.generation), Some(2));
        // The same manifest again (a watch relist): nothing new, no complaint.
        feed(&mut a, &table(2, 10, 1));
        assert_eq!(a.assemble(), Ok(None));
        // Generation 2 again with other content, then 1: refused, loudly.
        feed(&mut a, &table(2, 10, 7));
        assert_eq!(
            a.assemble(),
            Err(Error::NotNewer {
                generation: 2,
                serving: 2
            })
        );
        feed(&mut a, &table(1, 10, 8));
        assert_eq!(
            a.assemble(),
            Err(Error::NotNewer {
                generation: 1,
                serving: 2
            })
        );
        feed(&mut a, &table(3, 10, 7));
        assert_eq!(a.assemble().expect("newer"), Some(table(3, 10, 7)));
    }

    /// A delta from `from` to `to` on the manifest `base` (its JSON).
    fn delta_between(
        base: &[u8],
        previous: u64,
        generation: u64,
        from: &RoutingTable<Value>,
        to: &RoutingTable<Value>,
    ) -> Vec<u8> {
        let manifest: Manifest = serde_json::from_slice(base).expect("manifest");
        let (groups, removed) = diff(&from.groups, &to.groups);
        serde_json::to_vec(&Delta {
            base: manifest.generation,
            base_hash: content_hash(base),
            previous,
            generation,
            groups,
            removed,
        })
        .expect("json")
    }

    fn with_group(
        t: &RoutingTable<Value>,
        generation: u64,
        i: usize,
        ip: u8,
    ) -> RoutingTable<Value> {
        let mut next = t.clone();
        next.generation = generation;
        let key: GroupKey = format!("ns/g{i}").into();
        let g = table(0, i + 1, ip).groups.remove(&key).expect("group i");
        next.groups.insert(key, g);
        next
    }

    fn fed(t: &RoutingTable<Value>, shards: u32) -> (Assembler, Vec<u8>) {
        let enc = encode(t, shards).expect("encodes");
        let mut a = Assembler::default();
        for (_, _, json) in &enc.shards {
            a.set_shard(json).expect("shard");
        }
        let manifest = serde_json::to_vec(&enc.manifest).expect("json");
        a.set_manifest(&manifest).expect("manifest");
        (a, manifest)
    }

    // A shard that files a group under another key than the group's own (no writer does) is
    // read as its map says: the group is served under the map's key, and names it.
    #[test]
    fn a_group_filed_under_another_key_takes_the_maps() {
        let t = table(1, 2, 1);
        let mut enc = encode(&t, 1).expect("encodes");
        let json = String::from_utf8(enc.shards[0].2.to_vec())
            .expect("utf-8")
            .replacen(r#""key":"ns/g1""#, r#""key":"ns/elsewhere""#, 1);
        assert!(json.contains("ns/elsewhere"), "{json}");
        enc.manifest.hashes[0] = content_hash(json.as_bytes());
        let mut a = Assembler::default();
        a.set_shard(json.as_bytes()).expect("shard");
        a.set_manifest(&serde_json::to_vec(&enc.manifest).expect("json"))
            .expect("manifest");
        let got = a.assemble().expect("newer").expect("a table");
        assert_eq!(got.groups.len(), 2);
        assert_eq!(&*got.groups["ns/g1"].key, "ns/g1");
    }

    // SEM-P11: a new term's manifest naming the shards the table served is built on is that
    // table with what the old manifest's deltas touched taken back to the shards (a change
    // undone, a group added removed, a group removed back), then its catch-up delta: the same
    // table as assembling every shard again, the groups untouched keeping their identity.
    #[test]
    fn a_new_terms_manifest_on_the_same_shards_starts_from_the_table_served() {
        let t1 = table(1, 40, 1);
        let (mut a, base1) = fed(&t1, 4);
        let first = a.assemble_shared().expect("ok").expect("t1");
        // The old term's deltas: g5 changed; g40 added; g7 removed and g9 changed.
        let t2 = with_group(&t1, 2, 5, 7);
        let t3 = with_group(&t2, 3, 40, 8);
        let mut t4 = with_group(&t3, 4, 9, 9);
        t4.groups.remove("ns/g7");
        for (prev, next) in [(&t1, &t2), (&t2, &t3), (&t3, &t4)] {
            a.set_delta(&delta_between(
                &base1,
                prev.generation,
                next.generation,
                prev,
                next,
            ))
            .expect("delta");
        }
        assert_eq!(a.assemble_shared().expect("ok").expect("t4").generation, 4);
        // The new term: the same shards under a new manifest, and a catch-up delta with what
        // differs from them now (g9 as the old term left it, g12 changed at the takeover).
        let mut manifest: Manifest = serde_json::from_slice(&base1).expect("manifest");
        manifest.generation = 10;
        let base10 = serde_json::to_vec(&manifest).expect("json");
        let now = with_group(&with_group(&t1, 10, 9, 9), 11, 12, 12);
        a.set_manifest(&base10).expect("manifest");
        a.set_delta(&delta_between(&base10, 10, 11, &t1, &now))
            .expect("catch-up");
        let got = a
            .assemble_shared()
            .expect("ok")
            .expect("the new term's table");
        assert_eq!(*got, now);
        for (k, g) in &got.groups {
            let same = Arc::ptr_eq(g, &first.groups[k]);
            assert_eq!(same, !["ns/g9", "ns/g12"].contains(&k.as_ref()), "{k}");
        }
        // What every shard assembled again makes.
        let (mut fresh, _) = fed(&t1, 4);
        fresh.set_manifest(&base10).expect("manifest");
        fresh
            .set_delta(&delta_between(&base10, 10, 11, &t1, &now))
            .expect("catch-up");
        assert_eq!(fresh.assemble().expect("ok").expect("table"), *got);
        // And the next term on them again: only the catch-up's keys are touched now.
        manifest.generation = 20;
        let base20 = serde_json::to_vec(&manifest).expect("json");
        a.set_manifest(&base20).expect("manifest");
        let mut back = t1.clone();
        back.generation = 20;
        assert_eq!(*a.assemble_shared().expect("ok").expect("t20"), back);
    }

    // SEM-P11: the diff is the groups that changed, by identity, and those removed.
    #[test]
    fn diff_finds_what_changed() {
        let t1 = table(1, 10, 1);
        let mut t2 = with_group(&t1, 2, 3, 9);
        t2.groups.remove("ns/g7");
        let extra = with_group(&t2, 2, 11, 5);
        t2 = extra;
        let (changed, removed) = diff(&t1.groups, &t2.groups);
        let keys: Vec<&str> = changed.keys().map(|k| k.as_ref()).collect();
        assert_eq!(keys, ["ns/g11", "ns/g3"]);
        assert_eq!(removed, vec![GroupKey::from("ns/g7")]);
        assert_eq!(
            diff(&t2.groups, &t2.clone().groups),
            (BTreeMap::new(), Vec::new())
        );
    }

    // SEM-P11 SEM-P1: deltas apply on their manifest in order, each once, whatever order they
    // arrive in; a delta whose predecessor is missing waits for it; the result is the table.
    #[test]
    fn deltas_apply_in_order_on_their_base() {
        let t1 = table(1, 20, 1);
        let t2 = with_group(&t1, 2, 4, 7);
        let t3 = with_group(&t2, 3, 9, 8);
        let (mut a, base) = fed(&t1, 2);
        assert_eq!(a.assemble(), Ok(Some(t1.clone())));
        let d2 = delta_between(&base, 1, 2, &t1, &t2);
        let d3 = delta_between(&base, 2, 3, &t2, &t3);
        a.set_delta(&d3).expect("delta");
        assert_eq!(a.assemble(), Ok(None), "3 waits for 2");
        a.set_delta(&d2).expect("delta");
        assert_eq!(a.assemble(), Ok(Some(t3.clone())));
        // A relist brings every object again: nothing new.
        a.set_delta(&d2).expect("delta");
        a.set_delta(&d3).expect("delta");
        assert_eq!(a.assemble(), Ok(None));
    }

    // SEM-P11 SEM-P4: a delta on another manifest (a fold's catch-up, or an older writer's) is
    // never applied to this one; the fold's catch-up delta, arriving before its manifest,
    // lands with it, so the new manifest never serves less than was served.
    #[test]
    fn a_delta_lands_only_on_its_own_manifest() {
        let t1 = table(1, 20, 1);
        let t2 = with_group(&t1, 2, 4, 7);
        let (mut a, base1) = fed(&t1, 2);
        a.assemble().expect("first").expect("t1");
        a.set_delta(&delta_between(&base1, 1, 2, &t1, &t2))
            .expect("delta");
        assert_eq!(a.assemble().expect("t2").map(|t| t.generation), Some(2));
        // A fold of t2 as generation 3, and a change made during it (t4) as its catch-up.
        let mut folded = t2.clone();
        folded.generation = 3;
        let t4 = with_group(&t2, 4, 11, 6);
        let enc = encode(&folded, 2).expect("encodes");
        let base3 = serde_json::to_vec(&enc.manifest).expect("json");
        a.set_delta(&delta_between(&base3, 3, 4, &folded, &t4))
            .expect("catch-up");
        for (_, _, json) in &enc.shards {
            a.set_shard(json).expect("shard");
            assert_eq!(a.assemble(), Ok(None), "nothing until the manifest");
        }
        // A delta that names the old manifest but follows generation 2 is not for this base.
        a.set_delta(&delta_between(&base1, 2, 3, &t2, &table(3, 20, 9)))
            .expect("delta");
        a.set_manifest(&base3).expect("manifest");
        let served = a.assemble().expect("newer").expect("t4");
        assert_eq!(served, t4);
        assert_eq!(a.assemble(), Ok(None));
    }

    // SEM-P11: unchanged groups keep the Arc of the table served before, across deltas and
    // across a new manifest, so that a reader re-encodes only what changed.
    #[test]
    fn unchanged_groups_keep_their_identity() {
        let t1 = table(1, 30, 1);
        let t2 = with_group(&t1, 2, 5, 7);
        let (mut a, base1) = fed(&t1, 3);
        let first = a.assemble_shared().expect("ok").expect("t1");
        // One allocation per set identifier in a shard: every group here answers as "x".
        let id = |g: &CompiledGroup<Value>| match &g.selection {
            Selection::Fixed(a) => a.set_identifier.clone(),
            _ => unreachable!("the test's groups are Fixed"),
        };
        for (_, shard) in a.shards.values() {
            let ids: Vec<_> = shard.iter().map(|g| id(g)).collect();
            assert!(ids.len() > 1 && ids.iter().all(|i| Arc::ptr_eq(i, &ids[0])));
        }
        a.set_delta(&delta_between(&base1, 1, 2, &t1, &t2))
            .expect("delta");
        let second = a.assemble_shared().expect("ok").expect("t2");
        for (k, g) in &second.groups {
            let same = Arc::ptr_eq(g, &first.groups[k]);
            assert_eq!(same, k.as_ref() != "ns/g5", "{k}");
        }
        // The same content under a new manifest (a fold): every group keeps its Arc.
        let mut folded = t2.clone();
        folded.generation = 3;
        let enc = encode(&folded, 3).expect("encodes");
        for (_, _, json) in &enc.shards {
            a.set_shard(json).expect("shard");
        }
        // Shared as each shard is read, before the table is assembled: the copies decoded
        // are gone already.
        for (_, shard) in a.shards.values() {
            for g in shard.iter() {
                assert!(
                    Arc::ptr_eq(g, &second.groups[&g.key]),
                    "{}: a copy until assembled",
                    g.key
                );
            }
        }
        a.set_manifest(&serde_json::to_vec(&enc.manifest).expect("json"))
            .expect("manifest");
        let third = a.assemble_shared().expect("ok").expect("t3");
        assert_eq!(third.generation, 3);
        assert!(
            third
                .groups
                .iter()
                .all(|(k, g)| Arc::ptr_eq(g, &second.groups[k]))
        );
        // One allocation per key: each table's map holds its group's own key.
        for t in [&first, &second, &third] {
            assert!(t.groups.iter().all(|(k, g)| Arc::ptr_eq(k, &g.key)));
        }
        // The shards read for it hold those same Arcs, not copies: no second table is kept.
        let in_shards: Vec<_> = a
            .shards
            .values()
            .flat_map(|(_, shard)| shard.iter())
            .collect();
        assert_eq!(in_shards.len(), third.groups.len());
        for g in in_shards {
            let k = &g.key;
            assert!(Arc::ptr_eq(g, &third.groups[k]), "{k}: a copy in its shard");
        }
    }

    // SEM-P12: a pushed delta that follows the table served is served at once; the watch's
    // copy of it commits that very table (nothing is returned, nothing built again).
    #[test]
    fn a_pushed_delta_is_served_at_once_and_committed_by_the_watch() {
        let t1 = table(1, 20, 1);
        let t2 = with_group(&t1, 2, 5, 7);
        let (mut a, base1) = fed(&t1, 2);
        a.assemble().expect("t1").expect("t1");
        let d2 = delta_between(&base1, 1, 2, &t1, &t2);
        let pushed = a.push_delta(&d2).expect("readable").expect("served");
        assert_eq!(*pushed, t2);
        assert_eq!(
            a.current.as_ref().map(|t| t.generation),
            Some(1),
            "not committed"
        );
        // The same delta again (pushed twice) is not a table of its own.
        assert_eq!(a.push_delta(&d2), Ok(None));
        a.set_delta(&d2).expect("watched");
        assert_eq!(a.assemble_shared(), Ok(None), "served already");
        let committed = a.current.clone().expect("committed");
        assert!(
            Arc::ptr_eq(&committed, &pushed),
            "the pushed table, committed"
        );
        // The next one chains on it, pushed or watched.
        let t3 = with_group(&t2, 3, 6, 8);
        a.set_delta(&delta_between(&base1, 2, 3, &t2, &t3))
            .expect("watched");
        assert_eq!(a.assemble().expect("t3"), Some(t3));
    }

    // SEM-P12: a pushed delta that does not follow the table served waits for the watch,
    // and an unreadable one is an error, not a table.
    #[test]
    fn a_pushed_delta_that_does_not_follow_is_left_to_the_watch() {
        let t1 = table(1, 20, 1);
        let t2 = with_group(&t1, 2, 5, 7);
        let t3 = with_group(&t2, 3, 6, 8);
        let (mut a, base1) = fed(&t1, 2);
        // Nothing served yet: nothing to follow.
        assert_eq!(
            a.push_delta(&delta_between(&base1, 1, 2, &t1, &t2)),
            Ok(None)
        );
        a.assemble().expect("t1").expect("t1");
        // A gap (3 follows 2, which this reader does not have).
        assert_eq!(
            a.push_delta(&delta_between(&base1, 2, 3, &t2, &t3)),
            Ok(None)
        );
        // Another manifest.
        let other = encode(&table(1, 3, 9), 1).expect("encodes");
        let other = serde_json::to_vec(&other.manifest).expect("json");
        assert_eq!(
            a.push_delta(&delta_between(&other, 1, 2, &t1, &t2)),
            Ok(None)
        );
        assert!(matches!(
            a.push_delta(b"{\"shards\": 3}"),
            Err(Error::Unreadable { what: "delta", .. })
        ));
        assert_eq!(a.assemble(), Ok(None), "still generation 1");
    }

    // SEM-P12 SEM-P4: a pushed delta never written (its writer lost the lease) is replaced by
    // the next table from the watch: another delta for that generation, or a new leader's
    // manifest numbered as the pushed one, which is above the committed generation.
    #[test]
    fn what_the_watch_brings_replaces_a_pushed_delta_it_does_not_commit() {
        let t1 = table(1, 20, 1);
        let t2 = with_group(&t1, 2, 5, 7);
        let other2 = with_group(&t1, 2, 5, 9);
        let (mut a, base1) = fed(&t1, 2);
        a.assemble().expect("t1").expect("t1");
        a.push_delta(&delta_between(&base1, 1, 2, &t1, &t2))
            .expect("readable")
            .expect("served");
        a.set_delta(&delta_between(&base1, 1, 2, &t1, &other2))
            .expect("watched");
        assert_eq!(a.assemble().expect("replaced"), Some(other2.clone()));

        let (mut a, base1) = fed(&t1, 2);
        a.assemble().expect("t1").expect("t1");
        a.push_delta(&delta_between(&base1, 1, 2, &t1, &t2))
            .expect("readable")
            .expect("served");
        // A new leader's term starts with a manifest numbered 2, with other content.
        let enc = encode(&other2, 2).expect("encodes");
        for (_, _, json) in &enc.shards {
            a.set_shard(json).expect("shard");
        }
        a.set_manifest(&serde_json::to_vec(&enc.manifest).expect("json"))
            .expect("manifest");
        assert_eq!(a.assemble().expect("not refused"), Some(other2.clone()));
        // Its deltas follow, on its manifest.
        let t3 = with_group(&other2, 3, 6, 8);
        let base2 = serde_json::to_vec(&enc.manifest).expect("json");
        assert_eq!(
            a.push_delta(&delta_between(&base2, 2, 3, &other2, &t3))
                .expect("readable"),
            Some(Arc::new(t3))
        );
    }
}
