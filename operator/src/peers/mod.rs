//! Peer sources in a cluster (SEMANTICS X4): the leader creates the HealthCheck of type Peer
//! that each peer target of a namespace's records needs (`peer.<cluster>.<namespace>.<name>`),
//! owned by every RecordGroup that names it, and deletes the ones no group needs any more.
//! The resolvers' checkers run those checks like any other; the compiler reads their views
//! back from the watched checks.
//!
//! ```text
//!  compile (leader) ──▶ PeerChecks::after_compile: only when a group or a check changed
//!       desired(specs, uids) (recomputed when a group changed) ─┐
//!       watched HealthChecks ───────────────────────────────────┴▶ plan ──▶ the writes
//!            ──watch (newest plan only, sent when it differs)──▶ writer task ──▶ SSA / DELETE
//! ```
//!
//! A check of that name without the label [`PEER_CHECK_LABEL`] is the user's (to tune its
//! interval or thresholds): it is used as it is, never changed or deleted.
//!
//! ```text
//!   plan.rs     desired checks and the writes that reach them, pure
//!   writer.rs   how one write is sent (the leader-only task is crate::writes)
//! ```

mod plan;
mod writer;

pub use plan::{
    DesiredCheck, Owner, PEER_CHECK_LABEL, PEER_FIELD_MANAGER, PeerWrite, desired, desired_of,
    is_operators, plan,
};

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::watch;

use crate::index::Index;
use crate::metrics::PeerMetrics;
use healthroute_compiler::ObjectKey;

/// The control loop's side of the Peer checks: what changed since the last plan, the checks
/// the groups need, and the channel to the writer.
pub struct PeerChecks {
    /// A RecordGroup changed: the desired checks must be derived again.
    groups_changed: bool,
    /// A HealthCheck changed: the plan must be made again.
    checks_changed: bool,
    desired: BTreeMap<ObjectKey, DesiredCheck>,
    plans: watch::Sender<Vec<PeerWrite>>,
    metrics: Arc<PeerMetrics>,
}

impl PeerChecks {
    /// With the channel the writer task reads.
    pub fn new(plans: watch::Sender<Vec<PeerWrite>>, metrics: Arc<PeerMetrics>) -> Self {
        PeerChecks {
            groups_changed: true,
            checks_changed: true,
            desired: BTreeMap::new(),
            plans,
            metrics,
        }
    }

    pub fn group_changed(&mut self) {
        self.groups_changed = true;
    }

    pub fn check_changed(&mut self) {
        self.checks_changed = true;
    }

    /// A new term plans from scratch; a follower sends nothing (its plan is emptied).
    pub fn new_term(&mut self, leading: bool) {
        self.groups_changed = true;
        self.checks_changed = true;
        if !leading {
            self.plans.send_if_modified(|p| {
                let had = !p.is_empty();
                p.clear();
                had
            });
        }
    }

    /// After a compile of a complete index, as the leader: plans again when something changed,
    /// and hands the plan to the writer when it differs from the last one.
    pub fn after_compile(&mut self, index: &Index) {
        if self.groups_changed {
            self.desired = desired_of(index.compiler.group_specs(), |key| {
                index.groups.get(key)?.uid.clone()
            });
            self.metrics
                .checks
                .store(self.desired.len() as u64, Ordering::Relaxed);
        }
        if !(self.groups_changed || self.checks_changed) {
            return;
        }
        self.groups_changed = false;
        self.checks_changed = false;
        let writes = plan(&self.desired, &index.checks);
        self.plans.send_if_modified(|p| {
            let changed = *p != writes;
            if changed {
                *p = writes;
            }
            changed
        });
    }
}
