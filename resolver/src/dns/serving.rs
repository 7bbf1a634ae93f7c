//! The serving form of a routing table, and the one lookup every answer comes from.
//!
//! ```text
//!   RoutingTable<Value> ──build──▶ ServingTable
//!                                   ├─ zones: apex, SOA, NS and their glue, RFC 8482 answer (D1, D6,
//!                                   │         D12), in wire form
//!                                   ├─ names: name (by a hash of its labels) ─▶ [(type, group)],
//!                                   │         plus empty non-terminals (D2)
//!                                   └─ groups: the table's own compiled groups (the same `Arc`s,
//!                                             in key order) with their answer counters; after
//!                                             them, one fixed group per address type of each
//!                                             in-zone nameserver (D12)
//!   (question name, type) ──lookup──▶ Outcome: the chain of picks (D8), or NODATA / NXDOMAIN /
//!                                     apex records / not served; each pick counted once (M1)
//!        ├─ fastpath: writes the reply from the picked values (UDP, truncating to whole records)
//!        ├─ handler:  turns the same values into hickory records (TCP, the rest of UDP)
//!        └─ simulate: draws answers from it
//! ```
//!
//! The table is held in one form only: a serving group is the compiled group itself (the
//! `Arc` the routing table holds) and its counters, and an answer's RRs are written from its
//! values as the reply is written ([`crate::dns::wire::push_value_rr`]: an A record is 14 bytes
//! after its owner, as cheap to write from the address as to copy). The zone's own records
//! (SOA, NS, glue, the RFC 8482 answer) are wire RRs without their owner ([`crate::dns::wire`]).
//! The owner is written per reply: the question name for the first step of a chain, the
//! CNAME target of the step before for the others. A new table replaces the old one
//! atomically (an `ArcSwap` in the process state, `state::Shared`); a query only reads.
//!
//! A new table is built from the one it replaces ([`ServingTable::build_from`]): a group whose
//! compiled form is the very same `Arc` as the previous table's (or an equal one) is shared
//! with it (`Arc<ServingGroup>`, counters and all); and while no group is added, removed,
//! renamed or retyped, the name index (names, nameserver addresses) is shared too. The groups
//! are kept in chunks of 256 ([`Slots`]), and the groups that changed are found by comparing
//! the routing tables' trees, skipping what they share: a health change at 100,000 groups
//! finds the counters of the groups it changed and copies their chunks and the list of
//! chunks, without a walk over every group.
//!
//! Layer: above `wire` and `counters`, below everything that answers (fastpath, handler,
//! simulate); it knows nothing of sockets or of the process state.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::error::Error;
use hashbrown::{HashTable, hash_table};
use healthroute_table::{
    Answer, CompiledGroup, DiffItem, Groups, RecordType as TableType, ResolvedValues, RoutingTable,
    Selection, Target, Value, resolve_with,
};

use crate::dns::counters::{AnswerCounters, Tally};
use crate::dns::wire::{
    TYPE_ANY, TYPE_CNAME, TYPE_HINFO, TYPE_NS, TYPE_SOA, in_zone, is_label_prefix, rr, text_labels,
    value_rr, wire_labels, wire_name, wire_name_in, wire_type,
};

/// The longest CNAME chain followed inside the served zones (D8).
pub const MAX_CHAIN: usize = 8;

/// The SOA's REFRESH, RETRY and EXPIRE. No server transfers our zones (each resolver builds
/// them from the table), so they steer nothing; they are the values RIPE-203 recommends and
/// Zonemaster checks for (ZONE02-ZONE05: it warned about an EXPIRE of one day).
const SOA_REFRESH: u32 = 14_400;
const SOA_RETRY: u32 = 3_600;
const SOA_EXPIRE: u32 = 604_800;

/// One served zone: its apex and the records only the apex has.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZoneConfig {
    /// Lower-case FQDN with the trailing dot.
    pub apex: String,
    /// Name servers announced at the apex (D12); default `ns.<zone>`, without an address.
    pub nameservers: Vec<NameServer>,
    /// The SOA's MNAME; default the first nameserver (D12).
    pub mname: Option<String>,
    /// The SOA's RNAME; default `hostmaster.<zone>` (D12).
    pub rname: Option<String>,
    /// TTL of answers without their own, and the SOA minimum (negative TTL, D1, D7).
    pub default_ttl: u32,
}

/// A name server of a zone (D12): its name, and the addresses the resolver answers for that
/// name and gives as glue when the name lies in a served zone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NameServer {
    /// An FQDN; normalised when the table is built.
    pub name: String,
    pub addresses: Vec<IpAddr>,
}

impl From<&str> for NameServer {
    /// A name server known by name only (`--nameserver`): no address is served for it.
    fn from(name: &str) -> Self {
        NameServer {
            name: name.to_owned(),
            addresses: Vec::new(),
        }
    }
}

/// A served zone in wire form.
pub struct ServedZone {
    /// Lower-case wire form of the apex.
    pub apex: Box<[u8]>,
    /// The SOA RR (no owner), its RDATA names written in full.
    pub soa: Box<[u8]>,
    /// The same SOA with its RDATA names that end in the apex compressed (for replies).
    pub soa_compressed: SoaTail,
    /// The NS RRs (no owner).
    pub ns: Box<[Box<[u8]>]>,
    /// The addresses of the NS names the resolver serves, for the additional section of an
    /// NS answer (D12): one RRset per name and address type, in NS order.
    pub glue: Box<[Glue]>,
    /// The RFC 8482 answer to ANY: an HINFO RR (no owner).
    pub any: Box<[u8]>,
}

/// One glue RRset of an NS answer: the A or AAAA RRs (no owner) of the name server whose
/// name is the RDATA of NS RR number `ns`.
#[derive(Debug)]
pub struct Glue {
    /// Index in [`ServedZone::ns`] of the NS RR naming the owner.
    pub ns: usize,
    /// Where that NS RR's RDATA (the owner's name, in full) starts, counted from the start of
    /// the NS RRset as the fast path writes it (each NS RR after a 2-byte owner pointer): the
    /// target of the glue's owner pointers.
    pub name_at: usize,
    pub rrs: Box<[Box<[u8]>]>,
}

/// The zone's SOA RR after its owner name, for replies. Names in its RDATA that end in the
/// apex are compressed to a pointer at the apex, which every negative answer has as the tail
/// of a name it already holds; [`SoaTail::apex_pointers`] says where those pointers go, and the
/// writer fills them in per reply. Uncompressed, the SOA made NODATA and NXDOMAIN answers about
/// 20 bytes longer than other servers'.
#[derive(Debug)]
pub struct SoaTail {
    /// TYPE, CLASS, TTL, RDLENGTH and RDATA, with zeros where the pointers go.
    pub bytes: Box<[u8]>,
    /// Offsets in `bytes` of the 2-byte pointers to the apex (0, 1 or 2 of them).
    pub apex_pointers: Box<[usize]>,
}

/// The counters one group's answers add to (M1): shared with [`AnswerCounters`], which keeps
/// them while the process lives, so they only go up across tables and health changes.
pub struct GroupCounters {
    /// By the index of the set identifier in the group's selection (answers, or MultiValue
    /// records).
    by_record: RecordCounters,
    /// Only while the group is in last resort (S6): a group that never was has no counter.
    pub last_resort: Option<Arc<AtomicU64>>,
    /// With zone affinity: the answers of this resolver's zone view (`same-zone`) or of every
    /// zone (`all-zones`), whichever this table serves (A5).
    pub locality: Option<Arc<AtomicU64>>,
}

/// The counters of a group's records, by index. Most groups have one record: it is held
/// inline, without an allocation of its own.
enum RecordCounters {
    One(Arc<AtomicU64>),
    Many(Box<[Arc<AtomicU64>]>),
}

impl RecordCounters {
    fn new(mut counters: Vec<Arc<AtomicU64>>) -> Self {
        match counters.pop() {
            Some(one) if counters.is_empty() => RecordCounters::One(one),
            Some(last) => {
                counters.push(last);
                RecordCounters::Many(counters.into())
            }
            None => RecordCounters::Many(Box::new([])),
        }
    }

    fn get(&self, index: usize) -> Option<&AtomicU64> {
        match self {
            RecordCounters::One(c) => (index == 0).then_some(&**c),
            RecordCounters::Many(cs) => cs.get(index).map(|c| &**c),
        }
    }
}

/// One group, ready to answer: the compiled group and the counters its answers add to.
pub struct ServingGroup {
    /// The routing table's own `Arc` of the group (a nameserver's addresses: one of their
    /// own): its values are what is answered, and a later table that holds the same `Arc`
    /// shares this serving group.
    pub compiled: Arc<CompiledGroup<Value>>,
    /// Counted by the set identifiers of the selection a query picks from here (its zone
    /// view for this resolver's zone, A1).
    pub counters: GroupCounters,
}

impl ServingGroup {
    /// Whether this group serves `group` itself (the same allocation).
    fn is_from(&self, group: &Arc<CompiledGroup<Value>>) -> bool {
        Arc::ptr_eq(&self.compiled, group)
    }

    /// Whether `group` has this group's key, name and type: in its place, it leaves the name
    /// index as it is.
    fn has_place_of(&self, group: &CompiledGroup<Value>) -> bool {
        self.compiled.key == group.key
            && self.compiled.name == group.name
            && self.compiled.record_type == group.record_type
    }
}

/// Where the name index finds a group by its place: the vector a table is built in, or the
/// [`Slots`] it is kept in.
trait Places: std::ops::Index<usize, Output = Arc<ServingGroup>> {}

impl Places for Vec<Arc<ServingGroup>> {}

impl Places for Slots {}

/// A table's serving groups by place, in chunks of [`Slots::CHUNK`]. A table that changes a few
/// groups in place copies the chunks that hold them and the list of chunks, and shares every
/// other chunk with the table before (P11): at 100,000 groups a flip copies about 650
/// pointers, not 100,000. A group is two indexings away.
#[derive(Clone, Default)]
struct Slots {
    chunks: Vec<Arc<[Arc<ServingGroup>]>>,
    len: usize,
}

impl Slots {
    const SHIFT: u32 = 8;
    const CHUNK: usize = 1 << Self::SHIFT;

    fn from_vec(groups: Vec<Arc<ServingGroup>>) -> Self {
        Slots {
            len: groups.len(),
            chunks: groups.chunks(Self::CHUNK).map(Arc::from).collect(),
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The groups in places `range`.
    fn range(&self, range: std::ops::Range<usize>) -> SlotsIter<'_> {
        SlotsIter {
            slots: self,
            next: range.start.min(self.len),
            end: range.end.min(self.len),
        }
    }

    /// These groups with `changes` (place, group; each place within them) made, sharing every
    /// chunk no change touches.
    fn with(&self, mut changes: Vec<(usize, Arc<ServingGroup>)>) -> Slots {
        let mut out = self.clone();
        changes.sort_unstable_by_key(|(place, _)| *place);
        let mut changes = changes.into_iter().peekable();
        while let Some((place, group)) = changes.next() {
            let chunk = place >> Self::SHIFT;
            let mut copy = out.chunks[chunk].to_vec();
            copy[place & (Self::CHUNK - 1)] = group;
            while let Some((place, group)) = changes.next_if(|(p, _)| p >> Self::SHIFT == chunk) {
                copy[place & (Self::CHUNK - 1)] = group;
            }
            out.chunks[chunk] = copy.into();
        }
        out
    }
}

impl std::ops::Index<usize> for Slots {
    type Output = Arc<ServingGroup>;

    fn index(&self, place: usize) -> &Arc<ServingGroup> {
        &self.chunks[place >> Self::SHIFT][place & (Self::CHUNK - 1)]
    }
}

struct SlotsIter<'a> {
    slots: &'a Slots,
    next: usize,
    end: usize,
}

impl<'a> Iterator for SlotsIter<'a> {
    type Item = &'a Arc<ServingGroup>;

    fn next(&mut self) -> Option<Self::Item> {
        (self.next < self.end).then(|| {
            self.next += 1;
            &self.slots[self.next - 1]
        })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for SlotsIter<'_> {}

/// The groups served at one name, by record type. A name holds at most one group per type, of
/// four types (A, AAAA, CNAME, TXT; a nameserver's addresses only where no group is), so four
/// slots hold them inline: no allocation per name, and no pointer to follow on a lookup. No
/// slot used: an empty non-terminal.
#[derive(Default)]
struct NameEntry {
    /// Wire record types in the order they were added; 0 marks a free slot.
    types: [u16; 4],
    /// The group of each type.
    groups: [u32; 4],
}

impl NameEntry {
    /// No type at all: an empty non-terminal.
    fn is_empty(&self) -> bool {
        self.types[0] == 0
    }

    /// Serves `group` for `rtype` here. A second group of a type already held (a table that
    /// breaks its invariant) is left out: the first one answers, as it always did.
    fn add(&mut self, rtype: u16, group: u32) {
        if rtype == 0 || self.types.contains(&rtype) {
            return;
        }
        if let Some(slot) = self.types.iter().position(|&t| t == 0) {
            self.types[slot] = rtype;
            self.groups[slot] = group;
        }
    }

    /// The group of `rtype` here.
    fn get(&self, rtype: u16) -> Option<u32> {
        if rtype == 0 {
            return None;
        }
        let slot = self.types.iter().position(|&t| t == rtype)?;
        Some(self.groups[slot])
    }
}

/// Every served name with the groups served there, found by a hash of its labels. A name
/// with groups is not copied: it is checked against the name its first group holds (one
/// `Arc<str>` per group, the compiled group's). Empty non-terminals (D2), which have no group
/// to hold their name, are kept apart in wire form; there are few of them.
struct Names {
    with_groups: HashTable<NameEntry>,
    empty: HashSet<Box<[u8]>>,
    hasher: RandomState,
}

/// An empty non-terminal's entry: no type.
static EMPTY_NAME: NameEntry = NameEntry {
    types: [0; 4],
    groups: [0; 4],
};

impl Names {
    fn with_capacity(n: usize) -> Self {
        Names {
            with_groups: HashTable::with_capacity(n),
            empty: Default::default(),
            hasher: RandomState::new(),
        }
    }

    /// The entry of `wire` (a lower-case wire name), where `groups` are the groups the index
    /// was built over (or groups in the same places, with the same names).
    fn get(&self, groups: &impl Places, wire: &[u8]) -> Option<&NameEntry> {
        let hash = hash_labels(&self.hasher, wire_labels(wire));
        let found = self.with_groups.find(hash, |e| {
            wire_labels(wire).eq(text_labels(&groups[e.groups[0] as usize].compiled.name))
        });
        found.or_else(|| self.empty.contains(wire).then_some(&EMPTY_NAME))
    }

    /// Serves `groups[group]` (named `wire`) for `rtype` at its name.
    fn add(&mut self, groups: &impl Places, wire: &[u8], rtype: u16, group: u32) {
        let hasher = &self.hasher;
        let name_of = |e: &NameEntry| &groups[e.groups[0] as usize].compiled.name;
        let entry = self.with_groups.entry(
            hash_labels(hasher, wire_labels(wire)),
            |e| wire_labels(wire).eq(text_labels(name_of(e))),
            |e| hash_labels(hasher, text_labels(name_of(e))),
        );
        match entry {
            hash_table::Entry::Occupied(mut e) => e.get_mut().add(rtype, group),
            hash_table::Entry::Vacant(e) => {
                let mut new = NameEntry::default();
                new.add(rtype, group);
                if !new.is_empty() {
                    e.insert(new);
                }
            }
        }
    }

    /// `wire` exists, without a group of its own (unless one is added).
    fn add_empty(&mut self, wire: &[u8]) {
        if !self.empty.contains(wire) {
            self.empty.insert(wire.into());
        }
    }
}

/// The hash of a name by its labels, the same from its wire and its text form.
fn hash_labels<'a>(hasher: &RandomState, labels: impl Iterator<Item = &'a [u8]>) -> u64 {
    let mut h = hasher.build_hasher();
    for label in labels {
        h.write_u8(label.len() as u8);
        h.write(label);
    }
    h.finish()
}

/// One step of an answer: the values one group picked, owned by the question name (the first
/// step) or by the CNAME target of the step before.
pub struct Step<'a> {
    pub group: &'a ServingGroup,
    pub values: ResolvedValues<'a, Value>,
    /// What its RRs are written with: the TTL of the group the values are from (an alias's
    /// target's, R4, D7).
    pub ttl: u32,
}

impl<'a> Step<'a> {
    /// The CNAME target this step points to (a normalised name), if it is a CNAME.
    pub fn cname_target(&self) -> Option<&'a str> {
        let mut first = None;
        self.values.for_each(|value| {
            if let Value::Cname(target) = value {
                first.get_or_insert(target.as_str());
            }
        });
        first
    }
}

/// How a chain of CNAMEs ended (D8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChainEnd {
    /// The last step answers the question.
    Answered,
    /// The last CNAME points outside the served zones: the client follows it.
    OutOfZone,
    /// The last CNAME points to a served name without the type (NOERROR, SOA of `zone`).
    NoData { zone: usize },
    /// The last CNAME points to a name that does not exist (NXDOMAIN, SOA of `zone`).
    NxDomain { zone: usize },
    /// The chain loops, or is longer than [`MAX_CHAIN`]: answered as far as it went.
    Cut,
}

/// The steps of an answer, at most [`MAX_CHAIN`], without allocating.
pub struct Chain<'a> {
    steps: [Option<Step<'a>>; MAX_CHAIN],
    len: usize,
}

impl<'a> Chain<'a> {
    fn new() -> Self {
        Chain {
            steps: Default::default(),
            len: 0,
        }
    }
    fn push(&mut self, step: Step<'a>) {
        if self.len < MAX_CHAIN {
            self.steps[self.len] = Some(step);
            self.len += 1;
        }
    }
    pub fn iter(&self) -> impl Iterator<Item = &Step<'a>> {
        self.steps[..self.len].iter().flatten()
    }
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    fn contains(&self, group: &ServingGroup) -> bool {
        self.iter().any(|s| std::ptr::eq(s.group, group))
    }
}

/// The apex's own records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApexRecords {
    Soa,
    Ns,
    /// The RFC 8482 answer to ANY (D6).
    Any,
}

/// The answer to one question, borrowing from the table. It lives on the stack for one query:
/// a large `Answer` (the chain, up to eight picks) costs no allocation, which boxing would.
#[allow(clippy::large_enum_variant)]
pub enum Outcome<'a> {
    /// NOERROR (or NXDOMAIN at the end of a chain) with the chain's records (AA set).
    Answer {
        zone: usize,
        chain: Chain<'a>,
        end: ChainEnd,
    },
    /// NOERROR with the apex's SOA, NS, or the RFC 8482 record.
    Apex { zone: usize, records: ApexRecords },
    /// NOERROR, no answer, SOA in authority (D2).
    NoData { zone: usize },
    /// NXDOMAIN, SOA in authority (D2).
    NxDomain { zone: usize },
    /// Not in any served zone (D5): forward, or REFUSED.
    NotServed,
}

impl Outcome<'_> {
    /// The response code: NXDOMAIN for a missing name, also at the end of a chain (RFC 6604).
    pub fn rcode(&self) -> u8 {
        match self {
            Outcome::NxDomain { .. }
            | Outcome::Answer {
                end: ChainEnd::NxDomain { .. },
                ..
            } => 3,
            _ => 0,
        }
    }

    /// The served zone whose SOA goes in the authority section, if any (D1, D2).
    pub fn authority_zone(&self) -> Option<usize> {
        match self {
            Outcome::NoData { zone } | Outcome::NxDomain { zone } => Some(*zone),
            Outcome::Answer {
                end: ChainEnd::NoData { zone } | ChainEnd::NxDomain { zone },
                ..
            } => Some(*zone),
            _ => None,
        }
    }

    /// The zone the question is in, for metrics labels.
    pub fn zone(&self) -> Option<usize> {
        match self {
            Outcome::Answer { zone, .. }
            | Outcome::Apex { zone, .. }
            | Outcome::NoData { zone }
            | Outcome::NxDomain { zone } => Some(*zone),
            Outcome::NotServed => None,
        }
    }
}

/// Everything the DNS handler reads, for one table generation.
pub struct ServingTable {
    pub generation: u64,
    zones: Vec<ServedZone>,
    /// The table's groups in key order, then the nameservers' address groups (D12); each
    /// shared with the tables before and after it for as long as it does not change.
    groups: Slots,
    /// The routing table's groups this was built from (they share their tree with it): the
    /// next table is compared with them, skipping what the two share (P11).
    source: Groups<Value>,
    /// Where each group is found by name and by key.
    index: Arc<Index>,
    /// The zone the groups' answers were chosen for (A1).
    local_zone: Option<Box<str>>,
    /// How many of the table's groups are new to it, a serving group made for them (the
    /// others are shared with the table it was built from).
    new_groups: usize,
}

/// What the table's groups' keys, names and types decide (with the zones configured): the
/// same for every table until a group is added, removed, renamed or retyped, and then shared.
/// Groups are found by key without a map of their own: the table's are in key order.
struct Index {
    /// Every served name with its types, plus empty non-terminals.
    names: Names,
    /// How many of the table's groups are the table's own (the nameservers' follow).
    table_groups: usize,
    /// Nameserver names with addresses that a RecordGroup holds (it wins, D12): their
    /// configured addresses are neither served nor given as glue.
    shadowed: Vec<String>,
    /// The addresses of the nameservers served here, for glue (D12).
    hosts: Hosts,
    /// The zones it was built for.
    zones: Vec<ZoneConfig>,
}

impl ServingTable {
    /// Builds the serving form of `table` for a resolver in `local_zone`: each group serves
    /// its zone view when it has one for that zone (A1), chosen here, once, so that a query
    /// picks exactly as without affinity. Answers count into `counters`' counters.
    pub fn build(
        table: &RoutingTable<Value>,
        zones: &[ZoneConfig],
        local_zone: Option<&str>,
        counters: &AnswerCounters,
    ) -> Result<ServingTable, Error> {
        Self::build_from(None, table, zones, local_zone, counters)
    }

    /// [`build`](Self::build), sharing with `previous` (built with the same `counters`) every
    /// group whose compiled form is the same `Arc` in both tables (or, when only groups in
    /// place changed, an equal one): only the groups that changed are new (their counters
    /// looked up), and the name index is reused while the groups' keys, names and types are
    /// the same. When they are, the cost is that of the changes; else one walk over the
    /// table's groups. The result answers exactly as a build from nothing.
    pub fn build_from(
        previous: Option<&ServingTable>,
        table: &RoutingTable<Value>,
        zones: &[ZoneConfig],
        local_zone: Option<&str>,
        counters: &AnswerCounters,
    ) -> Result<ServingTable, Error> {
        let serial = (table.generation % u64::from(u32::MAX)) as u32;
        let mut served = Vec::with_capacity(zones.len());
        for z in zones {
            served.push(served_zone(z, serial)?);
        }
        // Most specific zone first.
        served.sort_by_key(|z| std::cmp::Reverse(z.apex.len()));

        // Groups answer per zone (A1) and the index follows the zones: another zone or
        // another zone configuration shares nothing.
        let previous =
            previous.filter(|p| p.local_zone.as_deref() == local_zone && p.index.zones == zones);
        let take = |group: &Arc<CompiledGroup<Value>>| {
            Arc::new(serving_group(group.clone(), local_zone, counters))
        };
        if let Some(p) = previous
            && let Some((groups, new_groups)) = p.changed_in_place(&table.groups, take)
        {
            return Ok(p.with(served, groups, table, new_groups));
        }
        let mut new_groups = 0;
        let mut take = |group: &Arc<CompiledGroup<Value>>| {
            new_groups += 1;
            take(group)
        };
        // One pass: each group is the previous table's at the same place while the groups keep
        // their keys, names and types in order (the index then holds too), else the previous
        // table's of the same key; reused when it serves the very same Arc.
        let mut layout_kept = previous.is_some_and(|p| p.index.table_groups == table.groups.len());
        let mut groups = Vec::with_capacity(previous.map_or(table.groups.len(), |p| {
            table.groups.len() + p.groups.len() - p.index.table_groups
        }));
        for (place, group) in table.groups.values().enumerate() {
            let old = previous.and_then(|p| {
                if layout_kept {
                    let old = &p.groups[place];
                    if old.is_from(group) || old.has_place_of(group) {
                        return Some(old);
                    }
                    layout_kept = false;
                }
                Some(&p.groups[p.position(&group.key)?])
            });
            groups.push(match old.filter(|old| old.is_from(group)) {
                Some(old) => old.clone(),
                None => take(group),
            });
        }
        match previous.filter(|_| layout_kept) {
            Some(p) => {
                groups.extend(
                    p.groups
                        .range(p.index.table_groups..p.groups.len())
                        .cloned(),
                );
                Ok(p.with(served, Slots::from_vec(groups), table, new_groups))
            }
            None => {
                let index = Arc::new(Index::build(zones, &served, &mut groups)?);
                Ok(ServingTable::new(
                    served,
                    Slots::from_vec(groups),
                    index,
                    table,
                    local_zone,
                    new_groups,
                ))
            }
        }
    }

    /// A table of `groups` and `index`, the zones' glue taken from the index.
    fn new(
        mut zones: Vec<ServedZone>,
        groups: Slots,
        index: Arc<Index>,
        table: &RoutingTable<Value>,
        local_zone: Option<&str>,
        new_groups: usize,
    ) -> ServingTable {
        for zone in &mut zones {
            zone.glue = glue(&zone.ns, &index.hosts);
        }
        ServingTable {
            generation: table.generation,
            zones,
            groups,
            source: table.groups.clone(),
            index,
            local_zone: local_zone.map(Into::into),
            new_groups,
        }
    }

    /// The next table after this one, with the same index: its groups are in the same places,
    /// with the same names and types.
    fn with(
        &self,
        zones: Vec<ServedZone>,
        groups: Slots,
        table: &RoutingTable<Value>,
        new_groups: usize,
    ) -> ServingTable {
        Self::new(
            zones,
            groups,
            self.index.clone(),
            table,
            self.local_zone.as_deref(),
            new_groups,
        )
    }

    /// This table's groups with the changes of `next` made, when every change is a group that
    /// keeps its key, name and type (so its place, and the index): the groups `take` made, and
    /// how many. Found by comparing `next` with the groups this table was built from, which
    /// skips the parts of the tree the two share: the cost is that of the changes, not of the
    /// table (P11). `None` when a group was added, removed, renamed or retyped.
    fn changed_in_place(
        &self,
        next: &Groups<Value>,
        take: impl Fn(&Arc<CompiledGroup<Value>>) -> Arc<ServingGroup>,
    ) -> Option<(Slots, usize)> {
        let mut changes = Vec::new();
        for item in self.source.diff(next) {
            let DiffItem::Update {
                new: (key, group), ..
            } = item
            else {
                return None;
            };
            let place = self.position(key)?;
            let old = &self.groups[place];
            if old.is_from(group) {
                continue;
            }
            if !old.has_place_of(group) {
                return None;
            }
            changes.push((place, group));
        }
        let new_groups = changes.len();
        let changes = changes
            .into_iter()
            .map(|(place, group)| (place, take(group)))
            .collect();
        Some((self.groups.with(changes), new_groups))
    }

    /// How many of the table's groups are new to it (their counters found, a serving group
    /// made); the others were shared with the table it was built from.
    pub fn new_groups(&self) -> usize {
        self.new_groups
    }

    fn table_groups(&self) -> SlotsIter<'_> {
        self.groups.range(0..self.index.table_groups)
    }

    /// Where the table's group `key` is (the table's groups are in key order).
    fn position(&self, key: &str) -> Option<usize> {
        let (mut low, mut high) = (0, self.index.table_groups);
        while low < high {
            let mid = low + (high - low) / 2;
            match (*self.groups[mid].compiled.key).cmp(key) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(mid),
            }
        }
        None
    }

    pub fn zones(&self) -> &[ServedZone] {
        &self.zones
    }

    /// The table's groups (the nameservers' address groups left out: they are configuration,
    /// not RecordGroups, and have no metrics).
    pub fn groups(&self) -> impl ExactSizeIterator<Item = &ServingGroup> {
        self.table_groups().map(|g| &**g)
    }

    /// Nameserver names given addresses in the configuration that a RecordGroup holds: the
    /// RecordGroup answers for the name, and no glue is given for it (D12).
    pub fn shadowed_nameservers(&self) -> &[String] {
        &self.index.shadowed
    }

    /// The served zone holding `qname` (lower-case wire form), most specific first.
    pub fn zone_of(&self, qname: &[u8]) -> Option<usize> {
        self.zones.iter().position(|z| in_zone(qname, &z.apex))
    }

    /// Answers one question: `qname` in lower-case wire form, `qtype` as on the wire. Each
    /// group picked is counted into `tally` (M1). D1, D2, D6, D8; the S rules through each
    /// group's compiled selection.
    pub fn lookup<'a>(
        &'a self,
        qname: &[u8],
        qtype: u16,
        rng: &mut fastrand::Rng,
        tally: &mut Tally<'a>,
    ) -> Outcome<'a> {
        let Some(zone) = self.zone_of(qname) else {
            return Outcome::NotServed;
        };
        let at_apex = qname.len() == self.zones[zone].apex.len();
        if at_apex {
            match qtype {
                TYPE_SOA => {
                    return Outcome::Apex {
                        zone,
                        records: ApexRecords::Soa,
                    };
                }
                TYPE_NS => {
                    return Outcome::Apex {
                        zone,
                        records: ApexRecords::Ns,
                    };
                }
                _ => {}
            }
        }
        let Some(entry) = self.index.names.get(&self.groups, qname) else {
            return match (at_apex, qtype) {
                (true, TYPE_ANY) => Outcome::Apex {
                    zone,
                    records: ApexRecords::Any,
                },
                (true, _) => Outcome::NoData { zone },
                (false, _) => Outcome::NxDomain { zone },
            };
        };
        if qtype == TYPE_ANY {
            // RFC 8482: a minimal answer instead of every RRset.
            return Outcome::Apex {
                zone,
                records: ApexRecords::Any,
            };
        }
        let Some(mut index) = Self::find(entry, qtype) else {
            return Outcome::NoData { zone };
        };
        let mut chain = Chain::new();
        let end = loop {
            let group: &ServingGroup = &self.groups[index as usize];
            if chain.contains(group) || chain.len() == MAX_CHAIN {
                break ChainEnd::Cut;
            }
            let Some(step) = self.pick(group, rng, tally) else {
                // A broken alias chain: a table the compiler would not write.
                break ChainEnd::Cut;
            };
            let target = if qtype == TYPE_CNAME {
                None
            } else {
                step.cname_target()
            };
            chain.push(step);
            let mut buf = [0u8; 256];
            let Some(target) = target.and_then(|t| wire_name_in(t, &mut buf)) else {
                break ChainEnd::Answered;
            };
            let Some(target_zone) = self.zone_of(target) else {
                break ChainEnd::OutOfZone;
            };
            match self.index.names.get(&self.groups, target) {
                None if target.len() == self.zones[target_zone].apex.len() => {
                    break ChainEnd::NoData { zone: target_zone };
                }
                None => break ChainEnd::NxDomain { zone: target_zone },
                Some(entry) => match Self::find(entry, qtype) {
                    Some(next) => index = next,
                    None => break ChainEnd::NoData { zone: target_zone },
                },
            }
        };
        if chain.is_empty() {
            return Outcome::NoData { zone };
        }
        Outcome::Answer { zone, chain, end }
    }

    /// The group answering `qtype` at a name: the type itself, else a CNAME (which answers
    /// every type at its name).
    fn find(entry: &NameEntry, qtype: u16) -> Option<u32> {
        entry.get(qtype).or_else(|| entry.get(TYPE_CNAME))
    }

    /// One group's pick for one query, counted (M1).
    fn pick<'a>(
        &'a self,
        group: &'a ServingGroup,
        rng: &mut fastrand::Rng,
        tally: &mut Tally<'a>,
    ) -> Option<Step<'a>> {
        let zone = self.local_zone.as_deref();
        let resolved = resolve_with(&group.compiled, zone, rng, |key| {
            self.position(key).map(|i| &*self.groups[i].compiled)
        })?;
        let counters = &group.counters;
        match (resolved.selection, &resolved.values) {
            // MultiValue: every record with a value in the answer, once.
            (Selection::MultiValue { owners, .. }, ResolvedValues::Sample(sample))
                if !owners.is_empty() =>
            {
                let mut counted = [u32::MAX; healthroute_table::MULTIVALUE_MAX];
                for (k, &i) in sample.indices().iter().enumerate() {
                    let owner = owners.get(i as usize).copied().unwrap_or(0);
                    if !counted[..k].contains(&owner)
                        && let Some(c) = counters.by_record.get(owner as usize)
                    {
                        tally.add(c);
                    }
                    counted[k] = owner;
                }
            }
            (selection, _) => {
                if let Some(c) = record_index(selection, resolved.set_identifier)
                    .and_then(|i| counters.by_record.get(i))
                {
                    tally.add(c);
                }
            }
        }
        if resolved.last_resort
            && let Some(c) = &counters.last_resort
        {
            tally.add(c);
        }
        if let Some(c) = &counters.locality {
            tally.add(c);
        }
        Some(Step {
            group,
            values: resolved.values,
            ttl: resolved.ttl,
        })
    }
}

/// `group` ready to answer for a resolver in `local_zone` (A1), its answers counted into
/// `counters`' counters for it (M1).
fn serving_group(
    group: Arc<CompiledGroup<Value>>,
    local_zone: Option<&str>,
    counters: &AnswerCounters,
) -> ServingGroup {
    let (selection, same_zone) = group.selection_for(local_zone);
    let group_counters = GroupCounters {
        by_record: RecordCounters::new(
            set_identifiers(selection)
                .iter()
                .map(|id| counters.record(&group.key, id))
                .collect(),
        ),
        last_resort: group.last_resort.then(|| counters.last_resort(&group.key)),
        locality: group
            .zone_affinity
            .is_some()
            .then(|| counters.locality(&group.key, same_zone)),
    };
    ServingGroup {
        compiled: group,
        counters: group_counters,
    }
}

impl Index {
    /// The index of `groups` (the table's, in key order), served in `served` (built from
    /// `zones`); appends the nameservers' address groups to `groups` (D12).
    fn build(
        zones: &[ZoneConfig],
        served: &[ServedZone],
        groups: &mut Vec<Arc<ServingGroup>>,
    ) -> Result<Index, Error> {
        let mut names = Names::with_capacity(groups.len());
        for index in 0..groups.len() {
            let group = &groups[index].compiled;
            let name = wire_name(&group.name);
            add_empty_non_terminals(&mut names, served, &name);
            names.add(groups, &name, wire_type(group.record_type), index as u32);
        }
        let table_groups = groups.len();
        let (hosts, shadowed) = add_nameserver_addresses(zones, served, &mut names, groups)?;
        Ok(Index {
            names,
            table_groups,
            shadowed,
            hosts,
            zones: zones.to_vec(),
        })
    }
}

/// Names between `name` and the apex of its zone (empty non-terminals) exist: NODATA, not
/// NXDOMAIN (D2).
fn add_empty_non_terminals(names: &mut Names, served: &[ServedZone], name: &[u8]) {
    if let Some(zone) = served.iter().find(|z| in_zone(name, &z.apex)) {
        let mut at = 0;
        while name.len() - at > zone.apex.len() {
            at += usize::from(name[at]) + 1;
            if name.len() - at > zone.apex.len() {
                names.add_empty(&name[at..]);
            }
        }
    }
}

/// A name server's address RRsets (A, then AAAA; the empty ones left out), by wire name.
type Hosts = HashMap<Box<[u8]>, Vec<Box<[Box<[u8]>]>>>;

/// D12: the addresses of each nameserver whose name lies in a served zone become fixed groups
/// at that name, after the table's own, unless a RecordGroup holds the name: then the
/// RecordGroup answers, and the name is returned among the shadowed ones. A name listed by
/// several zones is served once, with the first listing's addresses (the configuration
/// checks that they agree).
fn add_nameserver_addresses(
    zones: &[ZoneConfig],
    served: &[ServedZone],
    names: &mut Names,
    groups: &mut Vec<Arc<ServingGroup>>,
) -> Result<(Hosts, Vec<String>), Error> {
    let mut hosts = Hosts::new();
    let mut shadowed = Vec::new();
    for z in zones {
        for ns in z.nameservers.iter().filter(|ns| !ns.addresses.is_empty()) {
            let name = normalize(&ns.name)?;
            let wire = wire_name(&name);
            if hosts.contains_key(wire.as_slice())
                || !served.iter().any(|s| in_zone(&wire, &s.apex))
            {
                continue;
            }
            if names.get(groups, &wire).is_some_and(|e| !e.is_empty()) {
                if !shadowed.contains(&name) {
                    shadowed.push(name);
                }
                continue;
            }
            add_empty_non_terminals(names, served, &wire);
            let mut sets = Vec::with_capacity(2);
            for rtype in [TableType::A, TableType::Aaaa] {
                let mut values: Vec<Value> = Vec::new();
                for address in &ns.addresses {
                    let value = match (rtype, address) {
                        (TableType::A, IpAddr::V4(a)) => Value::A(*a),
                        (TableType::Aaaa, IpAddr::V6(a)) => Value::Aaaa(*a),
                        _ => continue,
                    };
                    if !values.contains(&value) {
                        values.push(value);
                    }
                }
                if values.is_empty() {
                    continue;
                }
                let index = groups.len() as u32;
                sets.push(values.iter().map(|v| value_rr(v, z.default_ttl)).collect());
                groups.push(Arc::new(address_group(&name, rtype, z.default_ttl, values)));
                names.add(groups, &wire, wire_type(rtype), index);
            }
            hosts.insert(wire.into(), sets);
        }
    }
    Ok((hosts, shadowed))
}

/// A nameserver's addresses of one type as a group: every query gets them all. Its counters
/// belong to no RecordGroup, so no metric shows them (M1 counts RecordGroups' answers).
fn address_group(name: &str, rtype: TableType, ttl: u32, values: Vec<Value>) -> ServingGroup {
    let key: Arc<str> = format!("nameserver {name}").into();
    ServingGroup {
        compiled: Arc::new(CompiledGroup {
            key,
            name: name.into(),
            record_type: rtype,
            ttl,
            last_resort: false,
            selection: Selection::Fixed(Answer {
                set_identifier: "address".into(),
                target: Target::Values(values),
            }),
            zone_affinity: None,
        }),
        counters: GroupCounters {
            by_record: RecordCounters::One(Arc::new(AtomicU64::new(0))),
            last_resort: None,
            locality: None,
        },
    }
}

/// The glue of an NS RRset: the address RRsets of each NS name in `hosts`, in NS order.
fn glue(ns: &[Box<[u8]>], hosts: &Hosts) -> Box<[Glue]> {
    let mut out = Vec::new();
    let mut at = 0;
    for (k, record) in ns.iter().enumerate() {
        // The RR after its 2-byte owner pointer; its RDATA after TYPE..RDLENGTH.
        let name_at = at + 2 + 10;
        at += 2 + record.len();
        let Some(sets) = record.get(10..).and_then(|name| hosts.get(name)) else {
            continue;
        };
        out.extend(sets.iter().map(|rrs| Glue {
            ns: k,
            name_at,
            rrs: rrs.clone(),
        }));
    }
    out.into()
}

fn served_zone(z: &ZoneConfig, serial: u32) -> Result<ServedZone, Error> {
    let apex_name = normalize(&z.apex)?;
    let apex = wire_name(&apex_name);
    let ns_names: Vec<String> = if z.nameservers.is_empty() {
        vec![format!("ns.{apex_name}")]
    } else {
        z.nameservers
            .iter()
            .map(|n| normalize(&n.name))
            .collect::<Result<_, _>>()?
    };
    let mname = match &z.mname {
        Some(n) => normalize(n)?,
        None => ns_names
            .first()
            .cloned()
            .unwrap_or_else(|| format!("ns.{apex_name}")),
    };
    let rname = match &z.rname {
        Some(n) => normalize(n)?,
        None => format!("hostmaster.{apex_name}"),
    };
    let ttl = z.default_ttl;
    let mut soa_rdata = Vec::with_capacity(64);
    soa_rdata.extend(wire_name(&mname));
    soa_rdata.extend(wire_name(&rname));
    for v in [serial, SOA_REFRESH, SOA_RETRY, SOA_EXPIRE, ttl] {
        soa_rdata.extend_from_slice(&v.to_be_bytes());
    }
    Ok(ServedZone {
        soa: rr(TYPE_SOA, ttl, &soa_rdata),
        soa_compressed: soa_tail(&apex, &mname, &rname, serial, ttl),
        ns: ns_names
            .iter()
            .map(|n| rr(TYPE_NS, ttl, &wire_name(n)))
            .collect(),
        // Filled in once the table's names are known (a RecordGroup may hold an NS name).
        glue: Box::new([]),
        // HINFO "RFC8482" "".
        any: rr(TYPE_HINFO, ttl, b"\x07RFC8482\x00"),
        apex: apex.into(),
    })
}

fn normalize(raw: &str) -> Result<String, Error> {
    Ok(healthroute_table::normalize_name(raw)?)
}

/// The set identifiers answers are counted under, in selection order.
fn set_identifiers<V>(selection: &Selection<V>) -> Vec<Arc<str>> {
    match selection {
        Selection::MultiValue {
            set_identifiers, ..
        } => set_identifiers.clone(),
        s => s
            .answers()
            .into_iter()
            .map(|a| a.set_identifier.clone())
            .collect(),
    }
}

/// Where the record whose set identifier is `id` (a reference into `selection` itself, as a
/// pick returns it) stands in [`set_identifiers`] order: found by address, no string compare.
fn record_index<V>(selection: &Selection<V>, id: &Arc<str>) -> Option<usize> {
    match selection {
        Selection::Fixed(_) => Some(0),
        Selection::Weighted { answers, .. } => answers
            .iter()
            .position(|a| std::ptr::eq(&a.set_identifier, id)),
        Selection::MultiValue {
            set_identifiers, ..
        } => set_identifiers.iter().position(|s| std::ptr::eq(s, id)),
    }
}

/// A zone's SOA RR after the owner name, its RDATA names compressed against the apex.
fn soa_tail(apex_wire: &[u8], mname: &str, rname: &str, serial: u32, minimum: u32) -> SoaTail {
    let mut rdata = Vec::with_capacity(64);
    let mut apex_pointers = Vec::new();
    for name in [mname, rname] {
        let wire = wire_name(name);
        match wire.strip_suffix(apex_wire) {
            // A suffix on a label boundary: the labels before the apex, then the pointer.
            Some(prefix) if is_label_prefix(prefix) => {
                rdata.extend_from_slice(prefix);
                apex_pointers.push(10 + rdata.len());
                rdata.extend_from_slice(&[0xC0, 0]);
            }
            _ => rdata.extend(wire),
        }
    }
    for v in [serial, SOA_REFRESH, SOA_RETRY, SOA_EXPIRE, minimum] {
        rdata.extend_from_slice(&v.to_be_bytes());
    }
    SoaTail {
        bytes: rr(TYPE_SOA, minimum, &rdata),
        apex_pointers: apex_pointers.into(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::Ipv4Addr;

    use healthroute_table::{RecordType, ZoneViews};

    use super::*;
    use crate::dns::wire::{TYPE_A, TYPE_AAAA, TYPE_TXT};

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
            let next = ServingTable::build_from(
                Some(&first),
                &next_table,
                &zones(),
                local_zone,
                &counters,
            )
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
            let next =
                ServingTable::build_from(Some(&first), next_table, &zones(), None, &counters)
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
        let third = ServingTable::build_from(Some(&next), &added, &zones(), None, &counters)
            .expect("builds");
        assert_eq!(third.new_groups(), 1);
        assert!(!Arc::ptr_eq(&next.index, &third.index));
        let full = ServingTable::build(&added, &zones(), None, &counters).expect("builds");
        let mut names = names.clone();
        names.push("new.example.com.");
        assert_eq!(answers_at(&third, &names), answers_at(&full, &names));
        assert_eq!(answers(&third), answers(&full));
    }
}
