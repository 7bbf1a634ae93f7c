//! The serving form of a routing table: everything a query needs, built once per table.
//!
//! ```text
//!   RoutingTable<Value> ──build──▶ ServingTable
//!                                   ├─ zones: apex, SOA and NS records (D1)
//!                                   ├─ names: name ─▶ [(type, group)], plus empty non-terminals (D2)
//!                                   └─ groups: CompiledGroup<Record> (answers pre-built as records,
//!                                      alias targets copied under the alias's own name, R4)
//!   query ──▶ ServingTable::lookup ──▶ Outcome (borrowed records; no allocation but ANY)
//! ```
//!
//! A new table replaces the old one atomically (`ArcSwap` in the handler); a query only
//! reads. Per-record answer counters live here too and are carried over to the next table.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use healthroute_table::{
    CompiledGroup, RecordType as TableType, ResolvedValues, RoutingTable, Sample, Selection,
    Target, Value, resolve_with,
};
use hickory_proto::rr::rdata::{A, AAAA, CNAME, HINFO, NS, SOA, TXT};
use hickory_proto::rr::{LowerName, Name, RData, Record, RecordType};

use crate::metrics::Tally;

/// One served zone: its apex and the records only the apex has.
#[derive(Debug, Clone)]
pub struct ZoneConfig {
    /// Lower-case FQDN with the trailing dot.
    pub apex: String,
    /// Name servers announced at the apex; default `ns.<zone>`.
    pub nameservers: Vec<String>,
    /// TTL of answers without their own, and the SOA minimum (negative TTL, D1, D7).
    pub default_ttl: u32,
}

struct ServedZone {
    apex: LowerName,
    soa: Record,
    ns: Vec<Record>,
    /// Lower-case wire form of the apex, and the SOA RR after its owner name.
    apex_wire: Box<[u8]>,
    soa_tail: SoaTail,
}

/// The zone's SOA record after its owner name, pre-encoded for the fast path. Names in its
/// RDATA that end in the apex are compressed to a pointer at the apex, which every negative
/// answer has as the tail of its question name; [`SoaTail::apex_pointers`] says where those
/// pointers go, and the fast path writes them per reply (the question's length varies).
/// Uncompressed, the SOA made NODATA and NXDOMAIN answers about 20 bytes longer than other
/// servers'.
#[derive(Debug)]
pub struct SoaTail {
    /// TYPE, CLASS, TTL, RDLENGTH and RDATA, with zeros where the pointers go.
    pub bytes: Box<[u8]>,
    /// Offsets in `bytes` of the 2-byte pointers to the apex (0, 1 or 2 of them).
    pub apex_pointers: Box<[usize]>,
}

/// What a group answered, for metrics: per set identifier, and last-resort answers.
#[derive(Debug, Default)]
pub struct GroupCounters {
    pub by_set_identifier: Vec<(Arc<str>, AtomicU64)>,
    pub last_resort: AtomicU64,
}

/// One group, ready to answer.
pub struct ServingGroup {
    pub compiled: CompiledGroup<Record>,
    /// The same answers as wire-format RRs whose owner is a pointer to the question (0xC00C),
    /// for the UDP fast path; alias targets are found through `ServingTable::by_key`.
    wire: CompiledGroup<Box<[u8]>>,
    /// Alias targets reachable from this group, renamed to this group's name.
    aliases: HashMap<Arc<str>, CompiledGroup<Record>>,
    pub counters: GroupCounters,
}

#[derive(Default)]
struct NameEntry {
    /// Record types served at this name, and their group. Empty for an empty non-terminal.
    types: Vec<(RecordType, usize)>,
}

/// The answer to one query, borrowing from the table.
pub enum Outcome<'a> {
    /// NOERROR with these answer records (AA set).
    Answer(AnswerRecords<'a>),
    /// NOERROR, no answer, SOA in authority (D2).
    NoData(&'a Record),
    /// NXDOMAIN, SOA in authority (D2).
    NxDomain(&'a Record),
    /// Not in any served zone (D5): forward, or REFUSED.
    NotServed,
}

/// Records of an answer section.
pub enum AnswerRecords<'a> {
    Slice(&'a [Record]),
    Sample(Sample<'a, Record>),
    Owned(Vec<Record>),
}

impl AnswerRecords<'_> {
    pub fn iter(&self) -> Box<dyn Iterator<Item = &Record> + Send + '_> {
        match self {
            AnswerRecords::Slice(s) => Box::new(s.iter()),
            AnswerRecords::Sample(s) => Box::new(s.iter()),
            AnswerRecords::Owned(v) => Box::new(v.iter()),
        }
    }
    pub fn len(&self) -> usize {
        match self {
            AnswerRecords::Slice(s) => s.len(),
            AnswerRecords::Sample(s) => s.len(),
            AnswerRecords::Owned(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Everything the DNS handler reads, for one table generation.
pub struct ServingTable {
    pub generation: u64,
    zones: Vec<ServedZone>,
    /// Every served name (lower-case wire form) with its types, plus empty non-terminals;
    /// read by both paths.
    names: HashMap<Box<[u8]>, NameEntry>,
    groups: Vec<ServingGroup>,
    /// Groups by key, for alias targets on the fast path.
    by_key: HashMap<Arc<str>, usize>,
}

/// What the UDP fast path answers, borrowing pre-encoded bytes.
pub enum FastOutcome<'a> {
    Answer {
        zone: usize,
        records: ResolvedValues<'a, Box<[u8]>>,
    },
    NoData {
        zone: usize,
        apex_len: usize,
        soa: &'a SoaTail,
    },
    NxDomain {
        zone: usize,
        apex_len: usize,
        soa: &'a SoaTail,
    },
}

impl ServingTable {
    /// Builds the serving form of `table`. Counters of groups and records that are still
    /// there are carried over from `previous`, so that metrics stay monotonic.
    pub fn build(
        table: &RoutingTable<Value>,
        zones: &[ZoneConfig],
        previous: Option<&ServingTable>,
    ) -> Result<ServingTable, String> {
        let serial = (table.generation % u64::from(u32::MAX)) as u32;
        let mut served = Vec::with_capacity(zones.len());
        for z in zones {
            let apex = parse_name(&z.apex)?;
            let mname = z
                .nameservers
                .first()
                .cloned()
                .unwrap_or_else(|| format!("ns.{}", z.apex));
            let soa = SOA::new(
                parse_name(&mname)?,
                parse_name(&format!("hostmaster.{}", z.apex))?,
                serial,
                3600,
                600,
                86400,
                z.default_ttl,
            );
            let soa_tail = soa_tail(
                &z.apex,
                &mname,
                &format!("hostmaster.{}", z.apex),
                serial,
                z.default_ttl,
            );
            let ns_names: Vec<String> = if z.nameservers.is_empty() {
                vec![mname]
            } else {
                z.nameservers.clone()
            };
            let mut ns = Vec::new();
            for n in ns_names {
                ns.push(Record::from_rdata(
                    apex.clone(),
                    z.default_ttl,
                    RData::NS(NS(parse_name(&n)?)),
                ));
            }
            served.push(ServedZone {
                apex: LowerName::from(&apex),
                soa: Record::from_rdata(apex.clone(), z.default_ttl, RData::SOA(soa)),
                ns,
                apex_wire: wire_name(&z.apex).into(),
                soa_tail,
            });
        }
        // Most specific zone first.
        served.sort_by_key(|z| std::cmp::Reverse(z.apex.num_labels()));

        let mut groups = Vec::with_capacity(table.groups.len());
        let mut names: HashMap<Box<[u8]>, NameEntry> = HashMap::new();
        let mut by_key: HashMap<Arc<str>, usize> = HashMap::new();
        let old_counters: HashMap<&str, &GroupCounters> = previous
            .map(|p| {
                p.groups
                    .iter()
                    .map(|g| (&*g.compiled.key, &g.counters))
                    .collect()
            })
            .unwrap_or_default();
        for group in table.groups.values() {
            let name = parse_name(&group.name)?;
            let compiled = encode_group(group, &name);
            let mut aliases = HashMap::new();
            let mut pending: Vec<Arc<str>> = alias_targets(&group.selection);
            while let Some(key) = pending.pop() {
                if aliases.contains_key(&key) || aliases.len() > 64 {
                    continue;
                }
                let Some(target) = table.groups.get(&key) else {
                    continue;
                };
                pending.extend(alias_targets(&target.selection));
                aliases.insert(key, encode_group(target, &name));
            }
            let counters = GroupCounters {
                by_set_identifier: set_identifiers(&group.selection)
                    .into_iter()
                    .map(|id| {
                        let before = old_counters
                            .get(&*group.key)
                            .and_then(|c| c.by_set_identifier.iter().find(|(k, _)| *k == id))
                            .map_or(0, |(_, n)| n.load(Ordering::Relaxed));
                        (id, AtomicU64::new(before))
                    })
                    .collect(),
                last_resort: AtomicU64::new(
                    old_counters
                        .get(&*group.key)
                        .map_or(0, |c| c.last_resort.load(Ordering::Relaxed)),
                ),
            };
            let index = groups.len();
            let lower = LowerName::from(&name);
            names
                .entry(lower_wire(&lower))
                .or_default()
                .types
                .push((record_type(group.record_type), index));
            // Empty non-terminals between the name and its zone exist (NODATA, not NXDOMAIN).
            let mut parent = lower.base_name();
            while served.iter().any(|z| z.apex.zone_of(&parent)) && !parent.is_root() {
                names.entry(lower_wire(&parent)).or_default();
                if served.iter().any(|z| z.apex == parent) {
                    break;
                }
                parent = parent.base_name();
            }
            by_key.insert(group.key.clone(), index);
            groups.push(ServingGroup {
                wire: group.map(&mut |v: &Value| encode_wire(v, group.ttl)),
                compiled,
                aliases,
                counters,
            });
        }
        Ok(ServingTable {
            generation: table.generation,
            zones: served,
            names,
            groups,
            by_key,
        })
    }

    /// The zone a name is in, if any.
    fn zone_of(&self, name: &LowerName) -> Option<&ServedZone> {
        self.zones.iter().find(|z| z.apex.zone_of(name))
    }

    /// Index of the served zone holding `name`, for metrics labels.
    pub fn zone_index(&self, name: &LowerName) -> Option<usize> {
        self.zones.iter().position(|z| z.apex.zone_of(name))
    }

    pub fn zone_names(&self) -> Vec<String> {
        self.zones.iter().map(|z| z.apex.to_string()).collect()
    }

    pub fn groups(&self) -> &[ServingGroup] {
        &self.groups
    }

    /// Answers one question (D1, D2, D6; S-rules through the compiled selection).
    pub fn lookup(
        &self,
        name: &LowerName,
        qtype: RecordType,
        rng: &mut fastrand::Rng,
    ) -> Outcome<'_> {
        let Some(zone) = self.zone_of(name) else {
            return Outcome::NotServed;
        };
        let at_apex = zone.apex == *name;
        let entry = self.names.get(&lower_wire(name));
        if at_apex {
            match qtype {
                RecordType::SOA => {
                    return Outcome::Answer(AnswerRecords::Slice(std::slice::from_ref(&zone.soa)));
                }
                RecordType::NS => return Outcome::Answer(AnswerRecords::Slice(&zone.ns)),
                _ => {}
            }
        }
        let Some(entry) = entry else {
            return if at_apex {
                if qtype == RecordType::ANY {
                    return Outcome::Answer(AnswerRecords::Owned(vec![rfc8482(name, zone)]));
                }
                Outcome::NoData(&zone.soa)
            } else {
                Outcome::NxDomain(&zone.soa)
            };
        };
        if qtype == RecordType::ANY {
            // RFC 8482: a minimal answer instead of every RRset.
            return Outcome::Answer(AnswerRecords::Owned(vec![rfc8482(name, zone)]));
        }
        let found = entry
            .types
            .iter()
            .find(|(t, _)| *t == qtype)
            // A CNAME answers every type at its name.
            .or_else(|| entry.types.iter().find(|(t, _)| *t == RecordType::CNAME));
        match found {
            Some(&(_, index)) => self.answer_group(index, rng),
            None => Outcome::NoData(&zone.soa),
        }
    }

    /// Counts one answer of `group` into `add`.
    fn count<'a>(
        group: &'a ServingGroup,
        set_identifier: &Arc<str>,
        last_resort: bool,
        mut add: impl FnMut(&'a AtomicU64),
    ) {
        if let Some((_, n)) = group
            .counters
            .by_set_identifier
            .iter()
            .find(|(k, _)| Arc::ptr_eq(k, set_identifier) || k == set_identifier)
        {
            add(n);
        }
        if last_resort {
            add(&group.counters.last_resort);
        }
    }

    /// The fast path's lookup: `qname` is the lower-case wire-format question name. `None`
    /// when the name lies in no served zone (the full path forwards or refuses it). The
    /// answer is counted in `tally`.
    pub fn fast_lookup<'a>(
        &'a self,
        qname: &[u8],
        qtype: u16,
        rng: &mut fastrand::Rng,
        tally: &mut Tally<'a>,
    ) -> Option<FastOutcome<'a>> {
        let (zone_index, zone) = self
            .zones
            .iter()
            .enumerate()
            .find(|(_, z)| in_zone(qname, &z.apex_wire))?;
        let apex_len = zone.apex_wire.len();
        let soa = &zone.soa_tail;
        let Some(entry) = self.names.get(qname) else {
            return Some(if qname.len() == apex_len {
                FastOutcome::NoData {
                    zone: zone_index,
                    apex_len,
                    soa,
                }
            } else {
                FastOutcome::NxDomain {
                    zone: zone_index,
                    apex_len,
                    soa,
                }
            });
        };
        let want = RecordType::from(qtype);
        let found = entry
            .types
            .iter()
            .find(|(t, _)| *t == want)
            .or_else(|| entry.types.iter().find(|(t, _)| *t == RecordType::CNAME));
        let Some(&(_, index)) = found else {
            return Some(FastOutcome::NoData {
                zone: zone_index,
                apex_len,
                soa,
            });
        };
        let group = &self.groups[index];
        let resolved = resolve_with(&group.wire, rng, |key| {
            self.by_key.get(key).map(|&i| &self.groups[i].wire)
        })?;
        Self::count(group, resolved.set_identifier, resolved.last_resort, |c| {
            tally.add(c)
        });
        Some(FastOutcome::Answer {
            zone: zone_index,
            records: resolved.values,
        })
    }

    fn answer_group(&self, index: usize, rng: &mut fastrand::Rng) -> Outcome<'_> {
        let group = &self.groups[index];
        let Some(resolved) = resolve_with(&group.compiled, rng, |key| group.aliases.get(key))
        else {
            return Outcome::NoData(&self.zones[0].soa);
        };
        Self::count(group, resolved.set_identifier, resolved.last_resort, |c| {
            c.fetch_add(1, Ordering::Relaxed);
        });
        Outcome::Answer(match resolved.values {
            ResolvedValues::Slice(s) => AnswerRecords::Slice(s),
            ResolvedValues::Sample(s) => AnswerRecords::Sample(s),
        })
    }
}

fn rfc8482(name: &LowerName, zone: &ServedZone) -> Record {
    let ttl = zone.soa.ttl;
    Record::from_rdata(
        Name::from(name.clone()),
        ttl,
        RData::HINFO(HINFO::new("RFC8482".into(), String::new())),
    )
}

fn parse_name(raw: &str) -> Result<Name, String> {
    Name::from_ascii(raw).map_err(|e| format!("{raw:?} is not a DNS name: {e}"))
}

fn record_type(t: TableType) -> RecordType {
    match t {
        TableType::A => RecordType::A,
        TableType::Aaaa => RecordType::AAAA,
        TableType::Cname => RecordType::CNAME,
        TableType::Txt => RecordType::TXT,
    }
}

/// Builds the answer records of `group` under `owner` (its own name, or an alias's).
fn encode_group(group: &CompiledGroup<Value>, owner: &Name) -> CompiledGroup<Record> {
    let ttl = group.ttl;
    group.map(&mut |v: &Value| {
        let rdata = match v {
            Value::A(a) => RData::A(A(*a)),
            Value::Aaaa(a) => RData::AAAA(AAAA(*a)),
            // Validated by the compiler; the root name is a harmless stand-in.
            Value::Cname(n) => {
                RData::CNAME(CNAME(Name::from_ascii(n).unwrap_or_else(|_| Name::root())))
            }
            Value::Txt(t) => RData::TXT(TXT::new(txt_strings(t))),
        };
        Record::from_rdata(owner.clone(), ttl, rdata)
    })
}

fn alias_targets<V>(selection: &Selection<V>) -> Vec<Arc<str>> {
    selection
        .answers()
        .into_iter()
        .filter_map(|a| match &a.target {
            Target::Alias(k) => Some(k.clone()),
            Target::Values(_) => None,
        })
        .collect()
}

fn set_identifiers<V>(selection: &Selection<V>) -> Vec<Arc<str>> {
    match selection {
        Selection::MultiValue {
            set_identifiers, ..
        } => set_identifiers.iter().take(1).cloned().collect(),
        s => s
            .answers()
            .into_iter()
            .map(|a| a.set_identifier.clone())
            .collect(),
    }
}

/// Splits a TXT value into character-strings of at most 255 bytes, on character boundaries.
fn txt_strings(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for c in text.chars() {
        if out.last().is_some_and(|s| s.len() + c.len_utf8() > 255) {
            out.push(String::new());
        }
        if let Some(last) = out.last_mut() {
            last.push(c);
        }
    }
    out
}

/// Lower-case wire form of a normalised name (`a.example.com.` → `\x01a\x07example\x03com\x00`).
fn wire_name(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 2);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    }
    out.push(0);
    out
}

/// The lower-case wire form of a name, the key of `ServingTable::names`.
fn lower_wire(name: &LowerName) -> Box<[u8]> {
    wire_name(&name.to_string()).into()
}

/// Whether wire name `qname` is `apex` or below it (on a label boundary).
fn in_zone(qname: &[u8], apex: &[u8]) -> bool {
    let mut i = 0;
    while i < qname.len() {
        if qname.len() - i == apex.len() {
            return &qname[i..] == apex;
        }
        if qname.len() - i < apex.len() {
            return false;
        }
        i += usize::from(qname[i]) + 1;
    }
    false
}

/// One answer RR in wire form, its owner a pointer to the question name.
fn encode_wire(v: &Value, ttl: u32) -> Box<[u8]> {
    let (rtype, rdata): (u16, Vec<u8>) = match v {
        Value::A(a) => (1, a.octets().to_vec()),
        Value::Aaaa(a) => (28, a.octets().to_vec()),
        Value::Cname(n) => (5, wire_name(n)),
        Value::Txt(t) => (
            16,
            txt_strings(t)
                .iter()
                .flat_map(|s| std::iter::once(s.len() as u8).chain(s.bytes()))
                .collect(),
        ),
    };
    let mut rr = Vec::with_capacity(12 + rdata.len());
    rr.extend_from_slice(&[0xC0, 0x0C]);
    rr.extend_from_slice(&rtype.to_be_bytes());
    rr.extend_from_slice(&1u16.to_be_bytes());
    rr.extend_from_slice(&ttl.to_be_bytes());
    rr.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    rr.extend_from_slice(&rdata);
    rr.into()
}

/// A zone's SOA RR after the owner name: type, class, TTL, and RDATA (as the full path's).
fn soa_tail(apex: &str, mname: &str, rname: &str, serial: u32, minimum: u32) -> SoaTail {
    let apex_wire = wire_name(apex);
    let mut rdata = Vec::with_capacity(64);
    let mut apex_pointers = Vec::new();
    for name in [mname, rname] {
        let wire = wire_name(name);
        match wire.strip_suffix(&apex_wire[..]) {
            // A suffix on a label boundary: the labels before the apex, then the pointer.
            Some(prefix) if is_label_prefix(prefix) => {
                rdata.extend_from_slice(prefix);
                apex_pointers.push(10 + rdata.len());
                rdata.extend_from_slice(&[0xC0, 0]);
            }
            _ => rdata.extend(wire),
        }
    }
    for v in [serial, 3600, 600, 86400, minimum] {
        rdata.extend_from_slice(&v.to_be_bytes());
    }
    let mut tail = Vec::with_capacity(10 + rdata.len());
    tail.extend_from_slice(&6u16.to_be_bytes());
    tail.extend_from_slice(&1u16.to_be_bytes());
    tail.extend_from_slice(&minimum.to_be_bytes());
    tail.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    tail.extend_from_slice(&rdata);
    SoaTail {
        bytes: tail.into(),
        apex_pointers: apex_pointers.into(),
    }
}

/// Whether `prefix` is a whole number of wire labels (so what follows starts a label).
fn is_label_prefix(prefix: &[u8]) -> bool {
    let mut i = 0;
    while i < prefix.len() {
        i += usize::from(prefix[i]) + 1;
    }
    i == prefix.len()
}
