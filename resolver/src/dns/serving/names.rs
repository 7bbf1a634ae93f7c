//! The name index: every served name with the groups served there by type, found by a hash
//! of its labels without a copy of the name, plus the empty non-terminals (D2); and what else
//! the groups' keys, names and types decide (the nameservers' address groups and glue, D12),
//! shared by every table until a group is added, removed, renamed or retyped.
//!
//! Layer: over `zones` and `groups`.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::IpAddr;
use std::sync::Arc;

use hashbrown::{HashTable, hash_table};
use healthroute_table::{RecordType as TableType, Value};

use super::groups::{Places, ServingGroup, address_group};
use super::zones::{Hosts, ServedZone, ZoneConfig, normalize};
use crate::dns::wire::{in_zone, text_labels, value_rr, wire_labels, wire_name, wire_type};
use crate::error::Error;

/// The groups served at one name, by record type. A name holds at most one group per type, of
/// four types (A, AAAA, CNAME, TXT; a nameserver's addresses only where no group is), so four
/// slots hold them inline: no allocation per name, and no pointer to follow on a lookup. No
/// slot used: an empty non-terminal.
#[derive(Default)]
pub(super) struct NameEntry {
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

    /// The types served here.
    pub(super) fn types(&self) -> impl Iterator<Item = u16> + '_ {
        self.types.iter().copied().filter(|&t| t != 0)
    }

    /// The group of `rtype` here.
    pub(super) fn get(&self, rtype: u16) -> Option<u32> {
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
pub(super) struct Names {
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
    pub(super) fn get(&self, groups: &impl Places, wire: &[u8]) -> Option<&NameEntry> {
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

/// What the table's groups' keys, names and types decide (with the zones configured): the
/// same for every table until a group is added, removed, renamed or retyped, and then shared.
/// Groups are found by key without a map of their own: the table's are in key order.
pub(super) struct Index {
    /// Every served name with its types, plus empty non-terminals.
    pub(super) names: Names,
    /// How many of the table's groups are the table's own (the nameservers' follow).
    pub(super) table_groups: usize,
    /// Nameserver names with addresses that a RecordGroup holds (it wins, D12): their
    /// configured addresses are neither served nor given as glue.
    pub(super) shadowed: Vec<String>,
    /// The addresses of the nameservers served here, for glue (D12).
    pub(super) hosts: Hosts,
    /// The zones it was built for.
    pub(super) zones: Vec<ZoneConfig>,
}

impl Index {
    /// The index of `groups` (the table's, in key order), served in `served` (built from
    /// `zones`); appends the nameservers' address groups to `groups` (D12).
    pub(super) fn build(
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
