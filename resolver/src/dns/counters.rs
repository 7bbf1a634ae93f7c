//! Answer counters (M1): the per-record, last-resort and zone-affinity counters a serving
//! table's groups add to, and [`Tally`], which gathers a batch's increments. It knows nothing
//! of the handler or of the process state: the serving table borrows these counters, and the
//! metrics export them.
//!
//! A counter is created when its record first appears in a table (a group's last-resort
//! counter: when the group is first in last resort, S6; until then it reads zero) and kept
//! while the process lives, so it only goes up across tables and health changes; each serving
//! table holds references to its groups' counters, so a query counts without a lock.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use healthroute_admin::metrics::Exposition;

/// Counter increments gathered over one receive batch and added when the tally is dropped:
/// one atomic add per distinct counter per batch instead of one per query, so that receive
/// loops on different cores do not trade the counters' cache lines query by query. It
/// borrows the counters (the query counters of the metrics, the answer counters of the table
/// snapshot), so it ends before the snapshot does.
#[derive(Default)]
pub struct Tally<'a> {
    counts: [(Option<&'a AtomicU64>, u64); Tally::CAPACITY],
    len: usize,
}

impl<'a> Tally<'a> {
    /// Distinct counters held; beyond them an increment is added at once (never lost).
    pub const CAPACITY: usize = 16;

    pub fn add(&mut self, counter: &'a AtomicU64) {
        let held = &mut self.counts[..self.len];
        if let Some(entry) = held
            .iter_mut()
            .find(|(c, _)| c.is_some_and(|c| std::ptr::eq(c, counter)))
        {
            entry.1 += 1;
        } else if self.len < Self::CAPACITY {
            self.counts[self.len] = (Some(counter), 1);
            self.len += 1;
        } else {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Tally<'_> {
    /// Drops the increments held, uncounted: a query the fast path picked for and then left
    /// to the handler, which counts its own picks (M1).
    pub fn discard(mut self) {
        self.len = 0;
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        for (counter, n) in &self.counts[..self.len] {
            if let Some(counter) = counter {
                counter.fetch_add(*n, Ordering::Relaxed);
            }
        }
    }
}

/// (record group, set identifier).
type RecordKey = (Arc<str>, Arc<str>);

/// A group with zone affinity, and whether its answers come from the resolver's zone.
type LocalityKey = (Arc<str>, bool);

/// Every answer counter this process has had, by (record group, set identifier), every
/// group's last-resort counter and its zone-affinity counters. Only table builds and the
/// exporter lock it.
#[derive(Default)]
pub struct AnswerCounters {
    records: Mutex<BTreeMap<RecordKey, Arc<AtomicU64>>>,
    last_resort: Mutex<BTreeMap<Arc<str>, Arc<AtomicU64>>>,
    /// By group and whether the answer came from this resolver's zone (A5).
    locality: Mutex<BTreeMap<LocalityKey, Arc<AtomicU64>>>,
}

impl AnswerCounters {
    /// The counter of answers from `set_identifier` of `group`, created at zero the first time.
    pub fn record(&self, group: &Arc<str>, set_identifier: &Arc<str>) -> Arc<AtomicU64> {
        let mut map = self.records.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((group.clone(), set_identifier.clone()))
            .or_default()
            .clone()
    }

    /// The counter of last-resort answers of `group` (S6): asked for once the group is in last
    /// resort, so that the groups that never were (nearly all) hold none.
    pub fn last_resort(&self, group: &Arc<str>) -> Arc<AtomicU64> {
        let mut map = self.last_resort.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(group.clone()).or_default().clone()
    }

    /// The counter of answers of a group with zone affinity, from this resolver's zone
    /// (`same_zone`) or from every zone (A5).
    pub fn locality(&self, group: &Arc<str>, same_zone: bool) -> Arc<AtomicU64> {
        let mut map = self.locality.lock().unwrap_or_else(|p| p.into_inner());
        map.entry((group.clone(), same_zone)).or_default().clone()
    }

    /// The count of zone-affinity answers of `group` (tests).
    pub fn locality_count(&self, group: &str, same_zone: bool) -> u64 {
        let map = self.locality.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .find(|((g, s), _)| &**g == group && *s == same_zone)
            .map_or(0, |(_, n)| n.load(Ordering::Relaxed))
    }

    /// The count of last-resort answers of `group`, if it ever was in last resort (tests).
    pub fn last_resort_count(&self, group: &str) -> Option<u64> {
        let map = self.last_resort.lock().unwrap_or_else(|p| p.into_inner());
        map.get(group).map(|n| n.load(Ordering::Relaxed))
    }

    /// The count of one record (tests and the simulator).
    pub fn get(&self, group: &str, set_identifier: &str) -> u64 {
        let map = self.records.lock().unwrap_or_else(|p| p.into_inner());
        map.iter()
            .find(|((g, s), _)| &**g == group && &**s == set_identifier)
            .map_or(0, |(_, n)| n.load(Ordering::Relaxed))
    }

    /// Writes every answer counter (M1, A5, S6) into a scrape; `groups` (the groups served)
    /// have a last-resort counter, zero unless one was made for them.
    pub fn encode<'g>(
        &self,
        out: &mut Exposition,
        groups: impl Iterator<Item = &'g str>,
    ) -> fmt::Result {
        fn read<K: Clone>(map: &Mutex<BTreeMap<K, Arc<AtomicU64>>>) -> Vec<(K, u64)> {
            let map = map.lock().unwrap_or_else(|p| p.into_inner());
            map.iter()
                .map(|(k, n)| (k.clone(), n.load(Ordering::Relaxed)))
                .collect()
        }
        out.counters(
            "healthroute_answers_total",
            "Answers, by record group and set identifier (M1).",
            read(&self.records).iter().map(|((group, id), n)| {
                ([("record_group", &**group), ("set_identifier", &**id)], *n)
            }),
        )?;
        out.counters(
            "healthroute_zone_affinity_answers_total",
            "Answers of groups with zone affinity, from this resolver's zone (same-zone) or from every zone (all-zones) (A5).",
            read(&self.locality).iter().map(|((group, same), n)| {
                let locality = if *same { "same-zone" } else { "all-zones" };
                ([("record_group", &**group), ("locality", locality)], *n)
            }),
        )?;
        let counted = read(&self.last_resort);
        let mut last_resort: BTreeMap<&str, u64> = groups.map(|g| (g, 0)).collect();
        last_resort.extend(counted.iter().map(|(group, n)| (&**group, *n)));
        out.counters(
            "healthroute_last_resort_answers_total",
            "Answers given while no record of the group was healthy (S6).",
            last_resort
                .iter()
                .map(|(group, n)| ([("record_group", *group)], *n)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_adds_every_increment_once() {
        let counters: Vec<AtomicU64> = (0..40).map(|_| AtomicU64::new(0)).collect();
        {
            let mut tally = Tally::default();
            for _ in 0..3 {
                for c in &counters {
                    tally.add(c);
                }
            }
            // The first CAPACITY counters are held until the end; the rest were added at once.
            assert_eq!(counters[0].load(Ordering::Relaxed), 0);
            assert_eq!(counters[Tally::CAPACITY].load(Ordering::Relaxed), 3);
        }
        assert!(counters.iter().all(|c| c.load(Ordering::Relaxed) == 3));
    }
}
