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
//! ```text
//!   zones    the zones' own records in wire form (SOA, NS, glue, the RFC 8482 answer)
//!   groups   serving groups (compiled group + counters) in shared chunks; nameserver addresses
//!   names    the name index (names, empty non-terminals, nameservers' addresses and glue)
//!   build    RoutingTable ─▶ ServingTable, sharing with the table it replaces (P11)
//!   lookup   (question name, type) ─▶ Outcome
//! ```
//!
//! Layer: above `wire` and `counters`, below everything that answers (fastpath, handler,
//! simulate); it knows nothing of sockets or of the process state.

use std::sync::Arc;

use healthroute_table::{Groups, Value};

use crate::dns::wire::in_zone;

mod build;
mod groups;
mod lookup;
mod names;
mod zones;

pub use groups::{GroupCounters, ServingGroup};
pub use lookup::{ApexRecords, Chain, ChainEnd, MAX_CHAIN, Outcome, Step};
pub use zones::{Glue, NameServer, ServedZone, SoaTail, ZoneConfig};

use groups::{Slots, SlotsIter};
use names::Index;

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

impl ServingTable {
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
}

#[cfg(test)]
mod tests;
