//! One question to its answer: the chain of picks (D8), NODATA, NXDOMAIN (D2), the apex's own
//! records (D1, D6), or not served (D5), borrowing from the table and allocating nothing; each
//! pick counted once (M1).
//!
//! ```text
//!   (qname, qtype) ─▶ zone_of ─▶ apex records? ─▶ names ─▶ group ─▶ pick ─▶ CNAME target? ─┐
//!                                                          ▲                              │
//!                                                          └──────── next step ◀──────────┘
//! ```
//!
//! Layer: over `names` and `groups`; the fast path, the handler and the simulator read it.

use healthroute_table::{ResolvedValues, Selection, Value, resolve_with};

use super::ServingTable;
use super::groups::{ServingGroup, record_index};
use super::names::NameEntry;
use crate::dns::counters::Tally;
use crate::dns::wire::{TYPE_ANY, TYPE_CNAME, TYPE_NS, TYPE_SOA, wire_name_in};

/// The longest CNAME chain followed inside the served zones (D8).
pub const MAX_CHAIN: usize = 8;

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

impl ServingTable {
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

    /// The types at `qname` (lower-case wire form), for the NSEC of a signed denial (K3): the
    /// groups' there, and at an apex its SOA and NS; empty at an empty non-terminal, `None`
    /// where no name is.
    pub fn types_at(&self, qname: &[u8]) -> Option<Vec<u16>> {
        let zone = self.zone_of(qname)?;
        let at_apex = qname.len() == self.zones[zone].apex.len();
        let mut types: Vec<u16> = match self.index.names.get(&self.groups, qname) {
            Some(entry) => entry.types().collect(),
            None if at_apex => Vec::new(),
            None => return None,
        };
        if at_apex {
            types.extend([TYPE_NS, TYPE_SOA]);
        }
        Some(types)
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
