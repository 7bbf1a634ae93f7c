//! Building a serving table from a routing table, from nothing or from the table it replaces
//! (P11): groups whose compiled form did not change are shared with it, and while no group is
//! added, removed, renamed or retyped the name index is shared too.
//!
//! ```text
//!   previous + next ─▶ changed_in_place (a diff of the two trees: only the groups that changed)
//!                      └─ None (a group added, removed, renamed or retyped) ─▶ one walk over
//!                         the groups, the index reused or built again (Index::build)
//! ```

use std::sync::Arc;

use healthroute_table::{CompiledGroup, DiffItem, Groups, RoutingTable, Value};

use super::ServingTable;
use super::groups::{ServingGroup, Slots, serving_group};
use super::names::Index;
use super::zones::{ServedZone, ZoneConfig, glue, served_zone};
use crate::dns::counters::AnswerCounters;
use crate::error::Error;

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
}
