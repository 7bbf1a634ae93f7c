//! What the resolvers can assemble, as the leader knows it: the table last published (or
//! read back at the start of the term), since which generation each group's version is in
//! it, and the error while publishing fails. A RecordGroup's status is judged against this,
//! never against what the compiler wants to serve (SEMANTICS P5).
//!
//! ```text
//!  publisher ── ReadBack ──▶ hold_read_back ─(watches listed)─▶ take_read_back: recover the
//!            ── Published ─▶ take_published                     last good versions (P6)
//!            ── Failed ────▶ fail
//!  publication(group) ──▶ InSync { since } | Failed { error, serving_since } | not yet
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use healthroute_table::contract::ReadBack;
use healthroute_table::{CompiledGroup, DiffItem, GroupKey, RoutingTable, Value};

use super::build::Publication;
use crate::index::Index;
use healthroute_compiler::ObjectKey;

#[derive(Debug, Default)]
pub struct Published {
    /// What the term's publisher read back, until the watches have listed everything.
    read_back: Option<ReadBack>,
    /// The term's read-back has been taken in: tables may be sent, statuses judged.
    seeded: bool,
    table: Arc<RoutingTable<Value>>,
    /// The last publish error of the term, until a publish succeeds.
    error: Option<String>,
    /// The generation that first carried each group's published version.
    served_since: HashMap<GroupKey, u64>,
}

impl Published {
    /// Keeps what the publisher read back until [`Published::take_read_back`].
    pub fn hold_read_back(&mut self, found: ReadBack) {
        self.read_back = Some(found);
    }

    pub fn seeded(&self) -> bool {
        self.seeded
    }

    /// Takes in the read-back held, if any (call once every watch has listed: a group listed
    /// later would miss its last good version): the compiler serves the last good version of
    /// every rejected group from it (P6), and unchanged versions keep the generation an
    /// earlier leader's status gave them. True when one was taken in.
    pub fn take_read_back(&mut self, index: &mut Index) -> bool {
        let Some(found) = self.read_back.take() else {
            return false;
        };
        let recovered = index
            .compiler
            .recover_served(found.groups.iter().map(|(k, g)| (&**k, g)));
        tracing::info!(
            generation = found.generation,
            groups = found.groups.len(),
            recovered,
            "read back the published table"
        );
        for gk in found.groups.keys() {
            let Some(key) = ObjectKey::parse_group_key(gk) else {
                continue;
            };
            let since = index
                .groups
                .get(&key)
                .and_then(|g| g.status.as_ref())
                .and_then(|s| s.served_generation)
                .filter(|g| *g <= found.generation)
                .unwrap_or(found.generation);
            self.served_since.insert(gk.clone(), since);
        }
        self.table = Arc::new(RoutingTable {
            generation: found.generation,
            groups: found.groups,
        });
        self.seeded = true;
        true
    }

    /// `table` is what the resolvers can assemble now, as `generation`.
    pub fn take_published(&mut self, generation: u64, table: Arc<RoutingTable<Value>>) {
        let before = std::mem::replace(&mut self.table, table.clone());
        // What the two tables share is skipped: this costs the groups that changed.
        for item in before.groups.diff(&table.groups) {
            match item {
                DiffItem::Add(gk, _) | DiffItem::Update { new: (gk, _), .. } => {
                    self.served_since.insert(gk.clone(), generation);
                }
                DiffItem::Remove(gk, _) => {
                    self.served_since.remove(gk);
                }
            }
        }
        self.error = None;
    }

    pub fn fail(&mut self, error: String) {
        self.error = Some(error);
    }

    /// Where the group `key` stands, when the compiler's table is `wanted`: `None` while the
    /// publisher has yet to catch up with it (its status waits).
    pub fn publication(
        &self,
        key: &ObjectKey,
        wanted: &RoutingTable<Value>,
    ) -> Option<Publication<'_>> {
        let gk = key.to_string();
        let wanted = wanted.groups.get(gk.as_str());
        let published = self.table.groups.get(gk.as_str());
        let in_sync = match (wanted, published) {
            (None, None) => true,
            (Some(a), Some(b)) => same(a, b),
            _ => false,
        };
        let since = published.map(|_| {
            self.served_since
                .get(gk.as_str())
                .copied()
                .unwrap_or(self.table.generation)
        });
        match (in_sync, self.error.as_deref()) {
            (true, _) => Some(Publication::InSync { since }),
            (false, Some(error)) => Some(Publication::Failed {
                error,
                serving_since: since,
            }),
            (false, None) => None,
        }
    }
}

/// Whether two compiled versions of a group are the same (cheaply when they are one `Arc`).
fn same(a: &Arc<CompiledGroup<Value>>, b: &Arc<CompiledGroup<Value>>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}
