//! The compiled routing table and the per-query choice.
//!
//! This crate is the contract between the control plane (the compiler,
//! `healthroute-compiler`, which the operator and standalone mode run to write tables) and the
//! data plane (the resolver, which reads them). It holds no Kubernetes types and does no I/O,
//! so the answering path never depends on client code.
//!
//! ```text
//!   compiler ──(health, last resort, shifts already applied)──▶ RoutingTable<Value>
//!                                                                   │ serde: ConfigMap shards
//!                                                                   │ (published), a file
//!   resolver ◀── the same Arc<CompiledGroup<Value>>s, served as they are ◀─┘
//!       │
//!       └─ per query: resolve_with(group, zone, rng, lookup) ─▶ Resolved { values, set_identifier }
//! ```
//!
//! Where the published table lives on the API server, and how each resolver tells the leader
//! what it serves and where it takes pushes, is [`contract`]: the operator and the resolver
//! both read it from there.
//!
//! Everything that depends on health was decided by the compiler: a [`Selection`] holds only
//! the records that are candidates *now*, with their weights and the values they answer. What
//! is left for a query is the random part of the rules (SEMANTICS S3 weighted pick, S5 random
//! subset, S9), which must cost a few nanoseconds and never allocate.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::sync::Arc;

pub mod contract;
mod error;
pub mod peer_value;
pub mod published;
pub mod push;
pub mod txt;

pub use error::{Error, TxtProblem};
pub use peer_value::PeerValue;

use serde::{Deserialize, Serialize};

/// The most values one multivalue answer carries (SEMANTICS S5).
pub const MULTIVALUE_MAX: usize = 8;

/// How many alias hops a query follows before giving up. The compiler rejects alias cycles
/// (S8), so a real table never comes close; the bound only keeps a corrupt table from hanging
/// a resolver.
pub const MAX_ALIAS_DEPTH: usize = 16;

/// The record types a RecordGroup can hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RecordType {
    A,
    #[serde(rename = "AAAA")]
    Aaaa,
    #[serde(rename = "CNAME")]
    Cname,
    #[serde(rename = "TXT")]
    Txt,
}

impl RecordType {
    pub fn as_str(self) -> &'static str {
        match self {
            RecordType::A => "A",
            RecordType::Aaaa => "AAAA",
            RecordType::Cname => "CNAME",
            RecordType::Txt => "TXT",
        }
    }
}

impl fmt::Display for RecordType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for RecordType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_uppercase().as_str() {
            "A" => Ok(RecordType::A),
            "AAAA" => Ok(RecordType::Aaaa),
            "CNAME" => Ok(RecordType::Cname),
            "TXT" => Ok(RecordType::Txt),
            other => Err(Error::UnsupportedType(other.to_owned())),
        }
    }
}

/// One answer value, already parsed and checked against its record type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "type", content = "value")]
pub enum Value {
    A(Ipv4Addr),
    #[serde(rename = "AAAA")]
    Aaaa(Ipv6Addr),
    /// A fully qualified, lower-case target name with its trailing dot.
    #[serde(rename = "CNAME")]
    Cname(String),
    #[serde(rename = "TXT")]
    Txt(String),
}

impl Value {
    /// Parses `raw` as a value of type `rtype`.
    pub fn parse(rtype: RecordType, raw: &str) -> Result<Value, Error> {
        match rtype {
            RecordType::A => raw.parse().map(Value::A).map_err(|_| Error::NotAnAddress {
                raw: raw.to_owned(),
                family: "IPv4",
            }),
            RecordType::Aaaa => raw
                .parse()
                .map(Value::Aaaa)
                .map_err(|_| Error::NotAnAddress {
                    raw: raw.to_owned(),
                    family: "IPv6",
                }),
            RecordType::Cname => normalize_name(raw).map(Value::Cname),
            RecordType::Txt => {
                if raw.len() > 4096 {
                    Err(Error::TxtTooLong(raw.len()))
                } else {
                    txt::character_strings(raw)?;
                    Ok(Value::Txt(raw.to_owned()))
                }
            }
        }
    }

    pub fn record_type(&self) -> RecordType {
        match self {
            Value::A(_) => RecordType::A,
            Value::Aaaa(_) => RecordType::Aaaa,
            Value::Cname(_) => RecordType::Cname,
            Value::Txt(_) => RecordType::Txt,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::A(a) => a.fmt(f),
            Value::Aaaa(a) => a.fmt(f),
            Value::Cname(n) => f.write_str(n),
            Value::Txt(t) => write!(f, "{t:?}"),
        }
    }
}

/// Lower-cases a DNS name and adds the trailing dot; rejects what cannot be a host name.
pub fn normalize_name(raw: &str) -> Result<String, Error> {
    let trimmed = raw.trim_end_matches('.');
    if trimmed.is_empty() {
        return Err(Error::EmptyName(raw.to_owned()));
    }
    if trimmed.len() > 253 {
        return Err(Error::NameTooLong(raw.to_owned()));
    }
    for label in trimmed.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'*');
        if !ok {
            return Err(Error::BadLabel {
                name: raw.to_owned(),
                label: label.to_owned(),
            });
        }
    }
    let mut name = trimmed.to_ascii_lowercase();
    name.push('.');
    Ok(name)
}

/// A sequence read without its size known grows by doubling; a table read from JSON (the
/// published shards, the last-table file) is kept for long, so its vectors hold exactly
/// their elements (a one-value answer took 4 slots).
fn shrunk<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    let mut v = Vec::<T>::deserialize(d)?;
    v.shrink_to_fit();
    Ok(v)
}

/// Identifies a RecordGroup: `namespace/name`, the text of its key in the API
/// (`healthroute_api::ObjectKey`, whose `parse_group_key` reads this back; the table does not
/// depend on the API).
pub type GroupKey = Arc<str>;

/// What one candidate record answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "V: Deserialize<'de>"))]
pub enum Target<V> {
    /// These values, in this order.
    Values(#[serde(deserialize_with = "shrunk")] Vec<V>),
    /// Whatever the named group answers (SEMANTICS R4: flattened, never a CNAME to our zone).
    Alias(GroupKey),
}

/// One candidate record: its `setIdentifier` and what it answers.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Answer<V> {
    pub set_identifier: Arc<str>,
    pub target: Target<V>,
}

/// The candidates of one group after health, last resort and shifts, and how a query picks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "V: Deserialize<'de>"))]
pub enum Selection<V> {
    /// Every query gets the same answer (Simple, Failover, or a single candidate).
    Fixed(Answer<V>),
    /// One answer per query with probability weight / total (S3). `cumulative[i]` is the sum of
    /// the weights of answers `0..=i`; it is strictly increasing and its last entry is the total.
    Weighted {
        #[serde(deserialize_with = "shrunk")]
        cumulative: Vec<u32>,
        #[serde(deserialize_with = "shrunk")]
        answers: Vec<Answer<V>>,
    },
    /// Up to [`MULTIVALUE_MAX`] distinct values of `pool`, at random when there are more (S5).
    MultiValue {
        #[serde(deserialize_with = "shrunk")]
        set_identifiers: Vec<Arc<str>>,
        #[serde(deserialize_with = "shrunk")]
        pool: Vec<V>,
        /// For each value of `pool`, the index in `set_identifiers` of the first record that
        /// answers it (what an answer counts, M1). Empty in tables from before it existed.
        #[serde(
            default,
            skip_serializing_if = "Vec::is_empty",
            deserialize_with = "shrunk"
        )]
        owners: Vec<u32>,
    },
}

impl<V> Selection<V> {
    /// A weighted selection from `(weight, answer)` pairs; weights of zero are dropped. Returns
    /// `None` when no weight is positive.
    pub fn weighted(items: impl IntoIterator<Item = (u32, Answer<V>)>) -> Option<Selection<V>> {
        let mut cumulative = Vec::new();
        let mut answers = Vec::new();
        let mut total = 0u32;
        for (weight, answer) in items {
            if weight == 0 {
                continue;
            }
            total = total.saturating_add(weight);
            cumulative.push(total);
            answers.push(answer);
        }
        match answers.len() {
            0 => None,
            1 => answers.pop().map(Selection::Fixed),
            _ => Some(Selection::Weighted {
                cumulative,
                answers,
            }),
        }
    }

    /// Converts every value, keeping the shape: how the resolver pre-encodes a table once.
    pub fn map<W>(&self, f: &mut impl FnMut(&V) -> W) -> Selection<W> {
        let map_answer = |a: &Answer<V>, f: &mut dyn FnMut(&V) -> W| Answer {
            set_identifier: a.set_identifier.clone(),
            target: match &a.target {
                Target::Values(vs) => Target::Values(vs.iter().map(f).collect()),
                Target::Alias(k) => Target::Alias(k.clone()),
            },
        };
        match self {
            Selection::Fixed(a) => Selection::Fixed(map_answer(a, f)),
            Selection::Weighted {
                cumulative,
                answers,
            } => Selection::Weighted {
                cumulative: cumulative.clone(),
                answers: answers.iter().map(|a| map_answer(a, f)).collect(),
            },
            Selection::MultiValue {
                set_identifiers,
                pool,
                owners,
            } => Selection::MultiValue {
                set_identifiers: set_identifiers.clone(),
                pool: pool.iter().map(f).collect(),
                owners: owners.clone(),
            },
        }
    }

    /// Every answer this selection can give, for inspection and tests.
    pub fn answers(&self) -> Vec<&Answer<V>> {
        match self {
            Selection::Fixed(a) => vec![a],
            Selection::Weighted { answers, .. } => answers.iter().collect(),
            Selection::MultiValue { .. } => Vec::new(),
        }
    }

    /// The per-query choice: the random part of S3 and S5.
    pub fn pick(&self, rng: &mut fastrand::Rng) -> Picked<'_, V> {
        match self {
            Selection::Fixed(answer) => Picked::Answer(answer),
            Selection::Weighted {
                cumulative,
                answers,
            } => {
                let total = cumulative.last().copied().unwrap_or(0);
                let r = rng.u32(0..total.max(1));
                // First answer whose cumulative weight exceeds r.
                let i = cumulative.partition_point(|&c| c <= r);
                Picked::Answer(&answers[i.min(answers.len() - 1)])
            }
            Selection::MultiValue {
                set_identifiers,
                pool,
                ..
            } => {
                let set_identifier = set_identifiers.first();
                if pool.len() <= MULTIVALUE_MAX {
                    return Picked::Sample(Sample {
                        pool,
                        indices: [0, 1, 2, 3, 4, 5, 6, 7],
                        len: pool.len() as u8,
                        set_identifier,
                    });
                }
                // Eight distinct indices, uniformly (Floyd's algorithm needs no allocation).
                let n = pool.len() as u32;
                let mut indices = [0u32; MULTIVALUE_MAX];
                for (filled, j) in ((n - MULTIVALUE_MAX as u32)..n).enumerate() {
                    let t = rng.u32(0..=j);
                    indices[filled] = if indices[..filled].contains(&t) { j } else { t };
                }
                Picked::Sample(Sample {
                    pool,
                    indices,
                    len: MULTIVALUE_MAX as u8,
                    set_identifier,
                })
            }
        }
    }
}

/// The outcome of [`Selection::pick`].
#[derive(Debug)]
pub enum Picked<'a, V> {
    Answer(&'a Answer<V>),
    Sample(Sample<'a, V>),
}

/// A multivalue answer: up to eight values of a pool, chosen by index.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a, V> {
    pool: &'a [V],
    indices: [u32; MULTIVALUE_MAX],
    len: u8,
    set_identifier: Option<&'a Arc<str>>,
}

impl<'a, V> Sample<'a, V> {
    /// The positions in the pool of the values chosen.
    pub fn indices(&self) -> &[u32] {
        &self.indices[..self.len as usize]
    }
    pub fn iter(&self) -> impl Iterator<Item = &'a V> + '_ {
        self.indices[..self.len as usize]
            .iter()
            .map(|&i| &self.pool[i as usize])
    }
    pub fn len(&self) -> usize {
        self.len as usize
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// One group as the resolver serves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "V: Deserialize<'de>"))]
pub struct CompiledGroup<V> {
    /// `namespace/name` of the RecordGroup.
    pub key: GroupKey,
    /// Lower-case FQDN with the trailing dot.
    pub name: Arc<str>,
    pub record_type: RecordType,
    pub ttl: u32,
    /// True while no record is healthy and SEMANTICS S6 chose among all of them.
    pub last_resort: bool,
    pub selection: Selection<V>,
    /// `zoneAffinity: PreferSameZone` (SEMANTICS A1); `None` without it. Boxed: most groups
    /// have none, and each one costs a pointer, not a map.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone_affinity: Option<Box<ZoneViews<V>>>,
}

/// A group's zone views (A1-A3): a resolver whose zone is a key of `zones` answers from that
/// selection, every other one from the group's own.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "V: Deserialize<'de>"))]
pub struct ZoneViews<V> {
    /// Per zone, the candidates of the group's selection that lie in it, for the zones that
    /// hold enough of them. Empty under the last resort (A4).
    #[serde(default = "BTreeMap::new", skip_serializing_if = "BTreeMap::is_empty")]
    pub zones: BTreeMap<Arc<str>, Selection<V>>,
}

impl<V> Default for ZoneViews<V> {
    fn default() -> Self {
        ZoneViews {
            zones: BTreeMap::new(),
        }
    }
}

/// One copy of each short name that many groups hold (set identifiers, zones): what a reader
/// decodes gets a new allocation for every occurrence, and a table of Services holds the same
/// identifier in every group.
pub type SharedNames = std::collections::HashSet<Arc<str>>;

/// `name`, replaced by the copy `names` holds (which it holds from now on).
fn share(names: &mut SharedNames, name: &mut Arc<str>) {
    match names.get(name) {
        Some(shared) => *name = shared.clone(),
        None => {
            names.insert(name.clone());
        }
    }
}

impl<V> Selection<V> {
    /// Replaces its set identifiers by the copies in `names` ([`SharedNames`]).
    pub fn share_names(&mut self, names: &mut SharedNames) {
        match self {
            Selection::Fixed(answer) => share(names, &mut answer.set_identifier),
            Selection::Weighted { answers, .. } => answers
                .iter_mut()
                .for_each(|a| share(names, &mut a.set_identifier)),
            Selection::MultiValue {
                set_identifiers, ..
            } => set_identifiers.iter_mut().for_each(|id| share(names, id)),
        }
    }
}

impl<V> CompiledGroup<V> {
    /// Replaces its set identifiers and zone names by the copies in `names`: the same group,
    /// with one allocation per distinct name across every group decoded with `names`.
    pub fn share_names(&mut self, names: &mut SharedNames) {
        self.selection.share_names(names);
        if let Some(views) = self.zone_affinity.as_mut() {
            let zones = std::mem::take(&mut views.zones);
            views.zones = zones
                .into_iter()
                .map(|(mut zone, mut selection)| {
                    share(names, &mut zone);
                    selection.share_names(names);
                    (zone, selection)
                })
                .collect();
        }
    }

    /// The selection a resolver in `zone` answers from (A1: its zone's, else every zone's),
    /// and whether it is its zone's.
    pub fn selection_for(&self, zone: Option<&str>) -> (&Selection<V>, bool) {
        match zone.and_then(|z| self.zone_affinity.as_ref()?.zones.get(z)) {
            Some(s) => (s, true),
            None => (&self.selection, false),
        }
    }
}

/// The whole compiled routing table: every served group, by key.
///
/// Invariant (kept by the compiler): at most one group per (name, type); CNAME never shares a
/// name with another type; every alias target is a key of `groups` of the same type; the
/// alias graph has no cycle.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoutingTable<V = Value> {
    /// Grows with every compiled change; lets a reader tell tables apart.
    pub generation: u64,
    pub groups: Groups<V>,
}

/// A table's groups by key: a persistent ordered map. A table made from another by a change
/// shares every group and every node of the map that the change did not touch, so the next
/// table costs what changed (a path of the tree per group), not a copy of the whole map, and
/// two tables are compared by skipping what they share (P11).
pub type Groups<V = Value> = imbl::OrdMap<GroupKey, Arc<CompiledGroup<V>>>;

/// One difference between two [`Groups`] (`old.diff(&new)`), which skips what they share.
pub use imbl::ordmap::DiffItem;

impl<V: PartialEq> RoutingTable<V> {
    /// Every value a query of `group` can be answered with now: its candidates' values, alias
    /// targets followed (at most [`MAX_ALIAS_DEPTH`] deep), each once, in selection order.
    /// What a peer is told a group answers (SEMANTICS X2); the caller leaves out a group in
    /// its last resort.
    pub fn candidate_values<'a>(&'a self, group: &'a CompiledGroup<V>) -> Vec<&'a V> {
        let mut out: Vec<&V> = Vec::new();
        self.collect_values(group, 0, &mut out);
        out
    }

    fn collect_values<'a>(
        &'a self,
        group: &'a CompiledGroup<V>,
        depth: usize,
        out: &mut Vec<&'a V>,
    ) {
        if depth >= MAX_ALIAS_DEPTH {
            return;
        }
        let add = |v: &'a V, out: &mut Vec<&'a V>| {
            if !out.contains(&v) {
                out.push(v);
            }
        };
        let answers: &[Answer<V>] = match &group.selection {
            Selection::Fixed(answer) => std::slice::from_ref(answer),
            Selection::Weighted { answers, .. } => answers,
            Selection::MultiValue { pool, .. } => {
                pool.iter().for_each(|v| add(v, out));
                return;
            }
        };
        for answer in answers {
            match &answer.target {
                Target::Values(values) => values.iter().for_each(|v| add(v, out)),
                Target::Alias(key) => {
                    if let Some(target) = self.groups.get(key) {
                        self.collect_values(target, depth + 1, out);
                    }
                }
            }
        }
    }
}

impl<V> Default for RoutingTable<V> {
    fn default() -> Self {
        RoutingTable {
            generation: 0,
            groups: Groups::new(),
        }
    }
}

/// Follows aliases from `group`, looking each target up with `lookup`, and picks one answer
/// as a resolver in `zone` does: from each group's zone view for `zone` where it has one (A1,
/// [`CompiledGroup::selection_for`]). The resolver's serving table and tests over a
/// [`RoutingTable`] share it. `None` only for a table that breaks its invariant (a missing
/// alias target, or an alias chain deeper than [`MAX_ALIAS_DEPTH`]).
pub fn resolve_with<'a, V>(
    group: &'a CompiledGroup<V>,
    zone: Option<&str>,
    rng: &mut fastrand::Rng,
    lookup: impl Fn(&str) -> Option<&'a CompiledGroup<V>>,
) -> Option<Resolved<'a, V>> {
    let outer_selection = group.selection_for(zone).0;
    let mut current = group;
    let mut selection = outer_selection;
    let mut set_identifier = None;
    for _ in 0..MAX_ALIAS_DEPTH {
        match selection.pick(rng) {
            Picked::Answer(answer) => {
                // The outermost record is what a user configured for this name.
                let outer = *set_identifier.get_or_insert(&answer.set_identifier);
                match &answer.target {
                    Target::Values(values) => {
                        return Some(Resolved {
                            values: ResolvedValues::Slice(values),
                            set_identifier: outer,
                            last_resort: group.last_resort,
                            ttl: current.ttl,
                            selection: outer_selection,
                        });
                    }
                    Target::Alias(key) => {
                        current = lookup(key)?;
                        selection = current.selection_for(zone).0;
                    }
                }
            }
            Picked::Sample(sample) => {
                return Some(Resolved {
                    set_identifier: set_identifier.or(sample.set_identifier)?,
                    values: ResolvedValues::Sample(sample),
                    last_resort: group.last_resort,
                    ttl: current.ttl,
                    selection: outer_selection,
                });
            }
        }
    }
    None
}

/// What one query answers: values plus the record that chose them (for metrics).
#[derive(Debug)]
pub struct Resolved<'a, V> {
    pub values: ResolvedValues<'a, V>,
    pub set_identifier: &'a Arc<str>,
    /// The outer group was in last resort (S6).
    pub last_resort: bool,
    /// The TTL of the group whose values these are: an alias's target's (R4, D7).
    pub ttl: u32,
    /// The selection of the outer group that was picked from (its zone view, A1): what its
    /// answers are counted by, without looking the view up again.
    pub selection: &'a Selection<V>,
}

#[derive(Debug)]
pub enum ResolvedValues<'a, V> {
    Slice(&'a [V]),
    Sample(Sample<'a, V>),
}

impl<'a, V> ResolvedValues<'a, V> {
    pub fn len(&self) -> usize {
        match self {
            ResolvedValues::Slice(s) => s.len(),
            ResolvedValues::Sample(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Calls `f` on every value, in answer order.
    pub fn for_each(&self, mut f: impl FnMut(&'a V)) {
        match self {
            ResolvedValues::Slice(s) => s.iter().for_each(f),
            ResolvedValues::Sample(s) => {
                for v in s.iter() {
                    f(v)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query over a whole table: alias targets looked up among its groups.
    fn resolve<'a, V>(
        table: &'a RoutingTable<V>,
        group: &'a CompiledGroup<V>,
        rng: &mut fastrand::Rng,
    ) -> Option<Resolved<'a, V>> {
        resolve_with(group, None, rng, |key| table.groups.get(key).map(|g| &**g))
    }

    // SEM-D9: a TXT value with broken quoting is refused where it is written, not served.
    #[test]
    fn txt_values_with_broken_quoting_are_refused() {
        assert!(Value::parse(RecordType::Txt, r#""v=spf1 -all""#).is_ok());
        let e = Value::parse(RecordType::Txt, r#""v=spf1 -all"#).expect_err("open quote");
        assert!(e.to_string().contains("not closed"), "{e}");
    }

    fn mk_answer(id: &str, values: &[u32]) -> Answer<u32> {
        Answer {
            set_identifier: id.into(),
            target: Target::Values(values.to_vec()),
        }
    }

    fn mk_group(selection: Selection<u32>) -> CompiledGroup<u32> {
        CompiledGroup {
            key: "ns/g".into(),
            name: "g.example.com.".into(),
            record_type: RecordType::A,
            ttl: 60,
            last_resort: false,
            zone_affinity: None,
            selection,
        }
    }

    fn shares(group: &CompiledGroup<u32>, draws: usize, seed: u64) -> BTreeMap<String, f64> {
        let table = RoutingTable::<u32>::default();
        let mut rng = fastrand::Rng::with_seed(seed);
        let mut counts = BTreeMap::<String, usize>::new();
        for _ in 0..draws {
            let r = resolve(&table, group, &mut rng).expect("resolves");
            *counts.entry(r.set_identifier.to_string()).or_default() += 1;
        }
        counts
            .into_iter()
            .map(|(k, c)| (k, c as f64 / draws as f64))
            .collect()
    }

    // SEM-S9 SEM-S3 SEM-S1: over 100,000 seeded draws, each share is within one point of
    // weight / total, before and after the third record is removed.
    #[test]
    fn weighted_distribution_within_one_point() {
        let all = Selection::weighted([
            (10, mk_answer("a", &[1])),
            (20, mk_answer("b", &[2])),
            (20, mk_answer("c", &[3])),
        ])
        .expect("weights");
        let s = shares(&mk_group(all), 100_000, 7);
        assert!((s["a"] - 0.20).abs() < 0.01, "{s:?}");
        assert!((s["b"] - 0.40).abs() < 0.01, "{s:?}");
        assert!((s["c"] - 0.40).abs() < 0.01, "{s:?}");

        let without_c =
            Selection::weighted([(10, mk_answer("a", &[1])), (20, mk_answer("b", &[2]))])
                .expect("weights");
        let s = shares(&mk_group(without_c), 100_000, 8);
        assert!((s["a"] - 1.0 / 3.0).abs() < 0.01, "{s:?}");
        assert!((s["b"] - 2.0 / 3.0).abs() < 0.01, "{s:?}");
    }

    #[test]
    fn weighted_drops_zero_weights_and_collapses_single() {
        assert!(Selection::<u32>::weighted([(0, mk_answer("a", &[1]))]).is_none());
        let one = Selection::weighted([(0, mk_answer("a", &[1])), (5, mk_answer("b", &[2]))]);
        assert_eq!(one, Some(Selection::Fixed(mk_answer("b", &[2]))));
    }

    // SEM-S5 SEM-S9: eight distinct values from a larger pool, each value equally likely.
    #[test]
    fn multivalue_samples_eight_distinct_uniformly() {
        let group = mk_group(Selection::MultiValue {
            set_identifiers: vec!["mv".into()],
            pool: (0..20).collect(),
            owners: vec![0; 20],
        });
        let table = RoutingTable::<u32>::default();
        let mut rng = fastrand::Rng::with_seed(42);
        let mut seen = [0usize; 20];
        let draws = 100_000;
        for _ in 0..draws {
            let r = resolve(&table, &group, &mut rng).expect("resolves");
            assert_eq!(r.values.len(), 8);
            let mut vals = Vec::new();
            r.values.for_each(|v| vals.push(*v));
            vals.sort();
            vals.dedup();
            assert_eq!(vals.len(), 8, "values are distinct");
            for v in vals {
                seen[v as usize] += 1;
            }
        }
        for (v, c) in seen.iter().enumerate() {
            let share = *c as f64 / draws as f64;
            assert!((share - 0.4).abs() < 0.01, "value {v}: {share}");
        }
    }

    // SEM-S5: with eight or fewer values, all of them.
    #[test]
    fn multivalue_small_pool_answers_all() {
        let group = mk_group(Selection::MultiValue {
            set_identifiers: vec!["mv".into()],
            pool: vec![1, 2, 3],
            owners: vec![0; 3],
        });
        let table = RoutingTable::<u32>::default();
        let r = resolve(&table, &group, &mut fastrand::Rng::with_seed(1)).expect("resolves");
        let mut vals = Vec::new();
        r.values.for_each(|v| vals.push(*v));
        assert_eq!(vals, vec![1, 2, 3]);
    }

    #[test]
    fn alias_is_followed_and_outer_set_identifier_kept() {
        let mut table = RoutingTable::<u32>::default();
        let target = mk_group(Selection::Fixed(mk_answer("inner", &[9])));
        table.groups.insert("ns/target".into(), Arc::new(target));
        let outer = mk_group(Selection::Fixed(Answer {
            set_identifier: "outer".into(),
            target: Target::Alias("ns/target".into()),
        }));
        let r = resolve(&table, &outer, &mut fastrand::Rng::with_seed(1)).expect("resolves");
        assert_eq!(&**r.set_identifier, "outer");
        assert!(matches!(r.values, ResolvedValues::Slice([9])));
    }

    #[test]
    fn alias_loop_in_a_corrupt_table_ends() {
        let mut table = RoutingTable::<u32>::default();
        let looped = mk_group(Selection::Fixed(Answer {
            set_identifier: "x".into(),
            target: Target::Alias("ns/g".into()),
        }));
        table.groups.insert("ns/g".into(), Arc::new(looped.clone()));
        assert!(resolve(&table, &looped, &mut fastrand::Rng::with_seed(1)).is_none());
    }

    #[test]
    fn names_are_normalized() {
        assert_eq!(
            normalize_name("API.Example.COM").as_deref(),
            Ok("api.example.com.")
        );
        assert!(normalize_name("bad name.com").is_err());
        assert!(normalize_name("").is_err());
    }

    #[test]
    fn table_round_trips_through_json() {
        let mut table = RoutingTable {
            generation: 3,
            ..Default::default()
        };
        table.groups.insert(
            "ns/g".into(),
            Arc::new(CompiledGroup {
                key: "ns/g".into(),
                name: "g.example.com.".into(),
                record_type: RecordType::A,
                zone_affinity: None,
                ttl: 30,
                last_resort: true,
                selection: Selection::Fixed(Answer {
                    set_identifier: "a".into(),
                    target: Target::Values(vec![Value::A(Ipv4Addr::new(192, 0, 2, 1))]),
                }),
            }),
        );
        let json = serde_json::to_string(&table).expect("serializes");
        let back: RoutingTable = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, table);
    }

    // SEM-A5 SEM-A1: the zone views travel in the published table (a table without them, as
    // older operators wrote it, reads as no affinity); a resolver picks its zone's view, one
    // in another zone or in none the group's selection.
    #[test]
    fn zone_views_round_trip_and_are_chosen_by_zone() {
        let fixed = |id: &str, ip: u8| {
            Selection::Fixed(Answer {
                set_identifier: id.into(),
                target: Target::Values(vec![Value::A(Ipv4Addr::new(192, 0, 2, ip))]),
            })
        };
        let group = CompiledGroup {
            key: "ns/g".into(),
            name: "g.example.com.".into(),
            record_type: RecordType::A,
            ttl: 30,
            last_resort: false,
            selection: Selection::weighted([
                (1, mk_answer_value("a", 1)),
                (1, mk_answer_value("b", 2)),
            ])
            .expect("weighted"),
            zone_affinity: Some(Box::new(ZoneViews {
                zones: [("zone-a".into(), fixed("a", 1))].into_iter().collect(),
            })),
        };
        let json = serde_json::to_string(&group).expect("serializes");
        assert!(
            json.contains(r#""zoneAffinity":{"zones":{"zone-a""#),
            "{json}"
        );
        let back: CompiledGroup<Value> = serde_json::from_str(&json).expect("parses");
        assert_eq!(back, group);
        assert_eq!(back.selection_for(Some("zone-a")), (&fixed("a", 1), true));
        assert_eq!(
            back.selection_for(Some("zone-b")),
            (&group.selection, false)
        );
        assert_eq!(back.selection_for(None), (&group.selection, false));

        let old = json.replace(
            &json[json.find(r#","zoneAffinity""#).expect("zoneAffinity")..json.len() - 1],
            "",
        );
        let old: CompiledGroup<Value> = serde_json::from_str(&old).expect("parses");
        assert!(old.zone_affinity.is_none());
    }

    // SEM-X2: what a peer is told: every candidate's values, aliases followed, each once.
    #[test]
    fn candidate_values_follow_aliases() {
        let mut table = RoutingTable::<u32>::default();
        let target = CompiledGroup {
            key: "ns/t".into(),
            ..mk_group(Selection::MultiValue {
                set_identifiers: vec!["m".into()],
                pool: vec![7, 8],
                owners: Vec::new(),
            })
        };
        table.groups.insert("ns/t".into(), Arc::new(target));
        let outer = mk_group(
            Selection::weighted(vec![
                (3, mk_answer("a", &[1, 2])),
                (1, mk_answer("b", &[2, 3])),
                (
                    1,
                    Answer {
                        set_identifier: "c".into(),
                        target: Target::Alias("ns/t".into()),
                    },
                ),
            ])
            .expect("weights"),
        );
        let values: Vec<u32> = table
            .candidate_values(&outer)
            .into_iter()
            .copied()
            .collect();
        assert_eq!(values, [1, 2, 3, 7, 8]);
    }

    fn mk_answer_value(id: &str, ip: u8) -> Answer<Value> {
        Answer {
            set_identifier: id.into(),
            target: Target::Values(vec![Value::A(Ipv4Addr::new(192, 0, 2, ip))]),
        }
    }
}
