//! The compiler's indexes of who depends on what, so that a change recompiles the groups it
//! touches and no others: which groups read a check, a Service or another group (an alias),
//! and which groups claim a name (a name conflict, S8, is decided among them).
//!
//! ```text
//!   a group's spec ──reindex──▶ DepIndex: (Dep, key) ─▶ groups that read it
//!   a group's name ──insert───▶ NameIndex: name ─▶ groups that claim it
//! ```
//!
//! Both are plain data over [`ObjectKey`]s; the compiler decides when to update and read them.

use std::collections::HashMap;

use healthroute_api::{ObjectKey, RecordGroupSpec};

/// What a group can read from outside itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Dep {
    Check,
    Service,
    Alias,
}

/// A small ordered set of keys: a sorted `Vec`. The compiler keeps one per name and per
/// dependency, and nearly all of them hold one key; a `BTreeSet` would allocate a whole
/// node (about 560 bytes) for it, a `Vec` 48 bytes.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct KeySet(Vec<ObjectKey>);

impl KeySet {
    fn insert(&mut self, key: ObjectKey) {
        if let Err(at) = self.0.binary_search(&key) {
            // One more slot, not the doubling a push would take: most sets hold one key.
            self.0.reserve_exact(1);
            self.0.insert(at, key);
        }
    }
    fn remove(&mut self, key: &ObjectKey) {
        if let Ok(at) = self.0.binary_search(key) {
            self.0.remove(at);
        }
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn iter(&self) -> std::slice::Iter<'_, ObjectKey> {
        self.0.iter()
    }
}

/// Which groups read a check, a Service, or another group, and the reverse (what each group
/// reads), kept in step by [`DepIndex::reindex`].
#[derive(Debug, Default)]
pub(crate) struct DepIndex {
    users: HashMap<(Dep, ObjectKey), KeySet>,
    deps_of: HashMap<ObjectKey, Vec<(Dep, ObjectKey)>>,
}

impl DepIndex {
    /// The groups that read `key` as a `dep`.
    pub(crate) fn users(&self, dep: Dep, key: &ObjectKey) -> impl Iterator<Item = &ObjectKey> {
        self.users
            .get(&(dep, key.clone()))
            .into_iter()
            .flat_map(KeySet::iter)
    }

    /// Records what group `key` reads now (`None`: it is gone, and reads nothing), so that a
    /// change there recompiles it.
    pub(crate) fn reindex(&mut self, key: &ObjectKey, spec: Option<&RecordGroupSpec>) {
        for dep in self.deps_of.remove(key).unwrap_or_default() {
            if let Some(users) = self.users.get_mut(&dep) {
                users.remove(key);
                if users.is_empty() {
                    self.users.remove(&dep);
                }
            }
        }
        let Some(spec) = spec else {
            return;
        };
        let deps: Vec<(Dep, ObjectKey)> = spec
            .records
            .iter()
            .flat_map(|r| {
                [
                    r.health_check_ref
                        .as_ref()
                        .map(|c| (Dep::Check, key.sibling(&c.name))),
                    r.service
                        .as_ref()
                        .map(|s| (Dep::Service, key.sibling(&s.name))),
                    r.alias
                        .as_ref()
                        .map(|a| (Dep::Alias, key.sibling(&a.record_group))),
                    // X4: a peer source reads its peer check.
                    r.peer
                        .as_ref()
                        .map(|p| (Dep::Check, key.sibling(&p.check_name()))),
                ]
            })
            .flatten()
            .collect();
        for dep in &deps {
            self.users
                .entry(dep.clone())
                .or_default()
                .insert(key.clone());
        }
        if !deps.is_empty() {
            self.deps_of.insert(key.clone(), deps);
        }
    }
}

/// Groups by normalised name: who claims a name, for name conflicts.
#[derive(Debug, Default)]
pub(crate) struct NameIndex(HashMap<String, KeySet>);

impl NameIndex {
    pub(crate) fn insert(&mut self, name: String, key: ObjectKey) {
        self.0.entry(name).or_default().insert(key);
    }

    pub(crate) fn remove(&mut self, name: &str, key: &ObjectKey) {
        if let Some(set) = self.0.get_mut(name) {
            set.remove(key);
            if set.is_empty() {
                self.0.remove(name);
            }
        }
    }

    /// The groups that claim `name`, in key order.
    pub(crate) fn claimants(&self, name: &str) -> impl Iterator<Item = &ObjectKey> {
        self.0.get(name).into_iter().flat_map(KeySet::iter)
    }
}
