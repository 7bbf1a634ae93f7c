//! Peer sources in a cluster (SEMANTICS X4): the leader creates the HealthCheck of type Peer
//! that each peer target of a namespace's records needs (`peer.<cluster>.<namespace>.<name>`),
//! owned by every RecordGroup that names it, and deletes the ones no group needs any more.
//! The resolvers' checkers run those checks like any other; the compiler reads their views
//! back from the watched checks.
//!
//! ```text
//!  compile (leader) ──▶ PeerChecks::after_compile: only when a group or a check changed
//!       Desired (the checks of the groups that changed derived again) ─┐
//!       watched HealthChecks ──────────────────────────────────────────┴▶ plan: typed
//!            HealthChecks to apply, uids to delete ──▶ Handover (only the writes that
//!            changed) ──▶ WriteQueue ──▶ the one writer (crate::writes) ──▶ SSA / DELETE
//!  the status re-check (status::Ledger) ──▶ PeerChecks::wanted: the same plan, against the
//!       checks as watched; what another writer changed or deleted is queued again
//! ```
//!
//! A check of that name without the label [`PEER_CHECK_LABEL`] is the user's (to tune its
//! interval or thresholds): it is used as it is, never changed or deleted.
//!
//! The plan is pure (`plan.rs`: the desired checks and the writes that reach them); this
//! file keeps what the control loop needs between compiles.

mod plan;

pub use crate::writes::{PEER_FIELD_MANAGER, PeerWrite};
pub use plan::{Desired, DesiredCheck, Owner, PEER_CHECK_LABEL, is_operators, plan};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::index::Index;
use crate::metrics::PeerMetrics;
use crate::writes::{Handover, WriteKind, WriteQueue};
use healthroute_compiler::ObjectKey;

/// The control loop's side of the Peer checks: what changed since the last plan, the checks
/// the groups need, and what was handed to the writer.
pub struct PeerChecks {
    /// The RecordGroups that changed since the last plan: their checks are derived again.
    groups_changed: Changed,
    /// A HealthCheck changed: the plan must be made again.
    checks_changed: bool,
    desired: Desired,
    queue: WriteQueue,
    handed: Handover<PeerWrite>,
    metrics: Arc<PeerMetrics>,
}

impl PeerChecks {
    /// With the queue of the one writer.
    pub fn new(queue: WriteQueue, metrics: Arc<PeerMetrics>) -> Self {
        PeerChecks {
            groups_changed: Changed::All,
            checks_changed: true,
            desired: Desired::default(),
            queue,
            handed: Handover::new(WriteKind::PeerCheck),
            metrics,
        }
    }

    /// The writes that bring the checks as watched to what the groups need now (the
    /// re-check's side: nothing is queued here).
    pub fn wanted(&self, index: &Index) -> Vec<PeerWrite> {
        plan(self.desired.checks(), &index.checks)
    }

    /// A RecordGroup changed what is compiled of it (or its uid): that one, by its key, or
    /// any number of them (`None`: a relist).
    pub fn group_changed(&mut self, key: Option<ObjectKey>) {
        match (&mut self.groups_changed, key) {
            (Changed::All, _) => {}
            (changed, None) => *changed = Changed::All,
            (Changed::Some(keys), Some(key)) => {
                keys.insert(key);
            }
        }
    }

    pub fn check_changed(&mut self) {
        self.checks_changed = true;
    }

    /// A new term plans from scratch (the queue starts it empty); a follower sends nothing.
    pub fn new_term(&mut self, _leading: bool) {
        self.groups_changed = Changed::All;
        self.checks_changed = true;
        self.handed.clear();
    }

    /// After a compile of a complete index, as the leader: plans again when something changed,
    /// and queues the writes that differ from those last handed over.
    pub fn after_compile(&mut self, index: &Index) {
        let uid = |key: &ObjectKey| index.groups.get(key)?.uid.clone();
        let groups_changed = match std::mem::take(&mut self.groups_changed) {
            Changed::All => {
                self.desired = Desired::of(index.compiler.group_specs(), uid);
                true
            }
            Changed::Some(keys) => {
                let spec = |key: &ObjectKey| index.compiler.group_spec(key);
                for key in &keys {
                    self.desired.group_changed(key, spec, uid);
                }
                !keys.is_empty()
            }
        };
        if groups_changed {
            self.metrics
                .checks
                .store(self.desired.checks().len() as u64, Ordering::Relaxed);
        }
        if !(groups_changed || self.checks_changed) {
            return;
        }
        self.checks_changed = false;
        let writes = self.wanted(index);
        let plan = writes.into_iter().map(|w| (w.key().clone(), w)).collect();
        self.handed.plan(&self.queue, plan);
    }
}

/// Which groups changed since the last plan.
#[derive(Debug)]
enum Changed {
    Some(BTreeSet<ObjectKey>),
    /// Every group may have (a new term, a relist).
    All,
}

impl Default for Changed {
    fn default() -> Self {
        Changed::Some(BTreeSet::new())
    }
}
