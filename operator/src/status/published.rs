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
use std::ops::Bound;
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
    /// The read-back was taken in and nothing published since: the next table published is
    /// compared with it in steps ([`FirstPublish`]).
    fresh_read_back: bool,
    /// The term's first table, still being compared with what was read back.
    first: Option<FirstPublish>,
}

/// A term's first table and the table it read back share no tree (one was decoded, the other
/// compiled), so their diff walks every group: 0.5 s at 100,000 groups, which held the change
/// that came next. They are compared in steps instead ([`Published::compare_step`]), and
/// until a group's turn comes its generation is found by comparing its two versions.
#[derive(Debug)]
struct FirstPublish {
    read_back: Arc<RoutingTable<Value>>,
    published: Arc<RoutingTable<Value>>,
    generation: u64,
    /// The last key compared.
    after: Option<GroupKey>,
}

impl FirstPublish {
    /// Whether `gk`'s version changed from the read-back to the term's first table.
    fn changed(&self, gk: &str) -> bool {
        match (self.read_back.groups.get(gk), self.published.groups.get(gk)) {
            (Some(a), Some(b)) => !same(a, b),
            (None, None) => false,
            _ => true,
        }
    }
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
        self.fresh_read_back = true;
        true
    }

    /// `table` is what the resolvers can assemble now, as `generation`.
    pub fn take_published(&mut self, generation: u64, table: Arc<RoutingTable<Value>>) {
        let before = std::mem::replace(&mut self.table, table.clone());
        self.error = None;
        if std::mem::take(&mut self.fresh_read_back) {
            self.first = Some(FirstPublish {
                read_back: before,
                published: table,
                generation,
                after: None,
            });
            return;
        }
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
    }

    /// Whether the term's first table is still being compared with the read-back.
    pub fn comparing(&self) -> bool {
        self.first.is_some()
    }

    /// Compares up to `budget` more groups of the term's first table with the read-back
    /// (in key order, then the groups only the read-back holds): each that changed was first
    /// carried by that table, unless a later table changed it again. Returns how many.
    pub fn compare_step(&mut self, budget: usize) -> usize {
        let Some(first) = self.first.as_mut() else {
            return 0;
        };
        let budget = budget.max(1);
        let from = first
            .after
            .clone()
            .map_or(Bound::Unbounded, Bound::Excluded);
        let later = |since: Option<&u64>| since.is_some_and(|g| *g > first.generation);
        let mut judged = 0;
        let mut last = None;
        for (gk, _) in first
            .published
            .groups
            .range((from.clone(), Bound::Unbounded))
            .take(budget)
        {
            judged += 1;
            last = Some(gk);
            if first.changed(gk) && !later(self.served_since.get(gk)) {
                self.served_since.insert(gk.clone(), first.generation);
            }
        }
        // Up to the same key, the groups only the read-back holds; all the rest at the end.
        let upto = last.filter(|_| judged == budget).cloned();
        let to = upto.clone().map_or(Bound::Unbounded, Bound::Included);
        for (gk, _) in first.read_back.groups.range((from, to)) {
            if !first.published.groups.contains_key(gk) && !later(self.served_since.get(gk)) {
                judged += 1;
                self.served_since.remove(gk);
            }
        }
        match upto {
            Some(last) => first.after = Some(last),
            // The read-back is a decoded table of its own: freeing its 100,000 groups took
            // 64 ms of the last step. Off the loop instead.
            None => drop_aside(self.first.take()),
        }
        judged
    }

    /// The generation that first carried `gk`'s published version.
    fn since(&self, gk: &str) -> u64 {
        let known = self.served_since.get(gk).copied();
        if let Some(first) = &self.first
            && known.is_none_or(|g| g <= first.generation)
            && first.changed(gk)
        {
            // Not compared yet, and changed by the term's first table.
            return first.generation;
        }
        known.unwrap_or(self.table.generation)
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
        let since = published.map(|_| self.since(&gk));
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

/// Drops `value` on a blocking thread when there is a runtime to run one (a table of 100,000
/// groups takes tens of milliseconds to free), else here.
fn drop_aside<T: Send + 'static>(value: T) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn_blocking(move || drop(value))),
        Err(_) => drop(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use healthroute_compiler::ServedZones;
    use healthroute_table::{Answer, RecordType, Selection, Target};

    fn group(i: usize, last: u8) -> (GroupKey, Arc<CompiledGroup<Value>>) {
        let key: GroupKey = format!("shop/g{i}").into();
        let group = CompiledGroup {
            key: key.clone(),
            name: format!("g{i}.example.com.").into(),
            record_type: RecordType::A,
            ttl: 60,
            last_resort: false,
            zone_affinity: None,
            selection: Selection::Fixed(Answer {
                set_identifier: "x".into(),
                target: Target::Values(vec![Value::A([192, 0, 2, last].into())]),
            }),
        };
        (key, Arc::new(group))
    }

    fn since(p: &Published, i: usize, table: &RoutingTable<Value>) -> Option<u64> {
        match p.publication(&ObjectKey::new("shop", format!("g{i}")), table)? {
            Publication::InSync { since } => since,
            other => panic!("g{i}: {other:?}"),
        }
    }

    // SEM-P5 SEM-P7: the term's first table is compared with the read-back in steps; a status
    // judged before or after its group's turn names the same generation: the first table's
    // for a group it changed or added, the read-back's for one it left alone, and a later
    // table's for a group that one changed again.
    #[test]
    fn a_terms_first_table_is_compared_with_the_read_back_in_steps() {
        let mut index = Index::new(ServedZones::new(["example.com"]).expect("zone"), 60);
        let read_back: healthroute_table::Groups = (0..10).map(|i| group(i, 1)).collect();
        let mut p = Published::default();
        p.hold_read_back(ReadBack {
            generation: 7,
            groups: read_back.clone(),
        });
        assert!(p.take_read_back(&mut index));
        // Compiled anew, every group its own allocation: g2 changed, g9 gone, g10 added.
        let mut first: healthroute_table::Groups = (0..9).map(|i| group(i, 1)).collect();
        first.insert(group(2, 2).0, group(2, 2).1);
        first.insert(group(10, 1).0, group(10, 1).1);
        let first = Arc::new(RoutingTable {
            generation: 8,
            groups: first,
        });
        p.take_published(8, first.clone());
        assert!(p.comparing(), "compared in steps, not at once");
        let expect = |p: &Published, table: &RoutingTable<Value>, g3: u64| {
            assert_eq!(since(p, 0, table), Some(7), "left alone");
            assert_eq!(since(p, 2, table), Some(8), "changed");
            assert_eq!(since(p, 3, table), Some(g3));
            assert_eq!(since(p, 10, table), Some(8), "added");
        };
        expect(&p, &first, 7);
        // A later table changes g3 before the comparison reaches it.
        let mut second = (*first).clone();
        second.generation = 9;
        second.groups.insert(group(3, 3).0, group(3, 3).1);
        let second = Arc::new(second);
        p.take_published(9, second.clone());
        expect(&p, &second, 9);
        let mut steps = 0;
        while p.comparing() {
            assert!(p.compare_step(3) <= 4);
            steps += 1;
            expect(&p, &second, 9);
        }
        assert_eq!(
            steps, 4,
            "the first table's 10 groups in steps of 3, g9 (the read-back's only) with the last"
        );
        assert!(
            !p.served_since.contains_key("shop/g9"),
            "gone with its group"
        );
        assert!(p.first.is_none(), "the read-back is let go");
    }
}
