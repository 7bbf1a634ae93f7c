//! The serving groups: each compiled group of the table (the routing table's own `Arc`) with
//! the answer counters it adds to (M1), kept by place in shared chunks ([`Slots`]) so that a
//! table that changes a few groups copies only the chunks that hold them (P11); and the fixed
//! groups of the nameservers' addresses (D12).
//!
//! Layer: over `counters`; knows nothing of names or zones.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use healthroute_table::{Answer, CompiledGroup, RecordType as TableType, Selection, Target, Value};

use crate::dns::counters::AnswerCounters;

/// The counters one group's answers add to (M1): shared with [`AnswerCounters`], which keeps
/// them while the process lives, so they only go up across tables and health changes.
pub struct GroupCounters {
    /// By the index of the set identifier in the group's selection (answers, or MultiValue
    /// records).
    pub(super) by_record: RecordCounters,
    /// Only while the group is in last resort (S6): a group that never was has no counter.
    pub last_resort: Option<Arc<AtomicU64>>,
    /// With zone affinity: the answers of this resolver's zone view (`same-zone`) or of every
    /// zone (`all-zones`), whichever this table serves (A5).
    pub locality: Option<Arc<AtomicU64>>,
}

/// The counters of a group's records, by index. Most groups have one record: it is held
/// inline, without an allocation of its own.
pub(super) enum RecordCounters {
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

    pub(super) fn get(&self, index: usize) -> Option<&AtomicU64> {
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
    pub(super) fn is_from(&self, group: &Arc<CompiledGroup<Value>>) -> bool {
        Arc::ptr_eq(&self.compiled, group)
    }

    /// Whether `group` has this group's key, name and type: in its place, it leaves the name
    /// index as it is.
    pub(super) fn has_place_of(&self, group: &CompiledGroup<Value>) -> bool {
        self.compiled.key == group.key
            && self.compiled.name == group.name
            && self.compiled.record_type == group.record_type
    }
}

/// Where the name index finds a group by its place: the vector a table is built in, or the
/// [`Slots`] it is kept in.
pub(super) trait Places: std::ops::Index<usize, Output = Arc<ServingGroup>> {}

impl Places for Vec<Arc<ServingGroup>> {}

impl Places for Slots {}

/// A table's serving groups by place, in chunks of [`Slots::CHUNK`]. A table that changes a few
/// groups in place copies the chunks that hold them and the list of chunks, and shares every
/// other chunk with the table before (P11): at 100,000 groups a flip copies about 650
/// pointers, not 100,000. A group is two indexings away.
#[derive(Clone, Default)]
pub(super) struct Slots {
    pub(super) chunks: Vec<Arc<[Arc<ServingGroup>]>>,
    len: usize,
}

impl Slots {
    const SHIFT: u32 = 8;
    pub(super) const CHUNK: usize = 1 << Self::SHIFT;

    pub(super) fn from_vec(groups: Vec<Arc<ServingGroup>>) -> Self {
        Slots {
            len: groups.len(),
            chunks: groups.chunks(Self::CHUNK).map(Arc::from).collect(),
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The groups in places `range`.
    pub(super) fn range(&self, range: std::ops::Range<usize>) -> SlotsIter<'_> {
        SlotsIter {
            slots: self,
            next: range.start.min(self.len),
            end: range.end.min(self.len),
        }
    }

    /// These groups with `changes` (place, group; each place within them) made, sharing every
    /// chunk no change touches.
    pub(super) fn with(&self, mut changes: Vec<(usize, Arc<ServingGroup>)>) -> Slots {
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

pub(super) struct SlotsIter<'a> {
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

/// `group` ready to answer for a resolver in `local_zone` (A1), its answers counted into
/// `counters`' counters for it (M1).
pub(super) fn serving_group(
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

/// A nameserver's addresses of one type as a group: every query gets them all. Its counters
/// belong to no RecordGroup, so no metric shows them (M1 counts RecordGroups' answers).
pub(super) fn address_group(
    name: &str,
    rtype: TableType,
    ttl: u32,
    values: Vec<Value>,
) -> ServingGroup {
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
pub(super) fn record_index<V>(selection: &Selection<V>, id: &Arc<str>) -> Option<usize> {
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
