//! The periodic re-check: every object the leader writes, as last watched, against what this
//! term would write of it; what differs and nothing queued or just written explains (another
//! writer changed or deleted it) is queued again and counted
//! (`healthroute_operator_status_repairs_total`).
//!
//! ```text
//!  start_recheck ──▶ Recheck { next phase and key, settling: written but not seen yet }
//!  recheck_step(budget) ──▶ statuses: RecordGroup ─▶ HealthCheck ─▶ ZonalShift ─▶ ZonalAutoshift
//!                           (in key order, `budget` objects a step)
//!                       ──▶ Peer checks (PeerChecks::wanted) ─▶ mirrors (engine_shifts::wanted)
//!                           (each a whole plan against the watched objects)
//! ```

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use jiff::Timestamp;

use super::of_index::{autoshift_status, check_status, group_status, shift_status};
use super::{Ledger, Sent, api_time};
use crate::engine_shifts;
use crate::index::Index;
use crate::metrics::StatusMetrics;
use crate::peers::PeerChecks;
use crate::status::{OwnStatus, StatusKind};
use crate::writes::{StatusUpdate, Write, WriteKey, status_key};
use healthroute_compiler::ObjectKey;

/// What a re-check pass judges, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The statuses of one kind, in key order.
    Statuses(StatusKind),
    /// The Peer checks (X4), whole: the plan against the checks as watched.
    PeerChecks,
    /// The mirrors of the engines' shifts (AS13), whole.
    EngineShifts,
}

impl Phase {
    fn next(self) -> Option<Phase> {
        match self {
            Phase::Statuses(StatusKind::RecordGroup) => {
                Some(Phase::Statuses(StatusKind::HealthCheck))
            }
            Phase::Statuses(StatusKind::HealthCheck) => {
                Some(Phase::Statuses(StatusKind::ZonalShift))
            }
            Phase::Statuses(StatusKind::ZonalShift) => {
                Some(Phase::Statuses(StatusKind::ZonalAutoshift))
            }
            Phase::Statuses(StatusKind::ZonalAutoshift) => Some(Phase::PeerChecks),
            Phase::PeerChecks => Some(Phase::EngineShifts),
            Phase::EngineShifts => None,
        }
    }
}

/// A re-check pass under way (see [`Ledger::recheck_step`]).
pub(super) struct Recheck {
    /// The phase and the last key judged in it (None: from its first); None once done.
    next: Option<(Phase, Option<ObjectKey>)>,
    /// The writes done before the pass began that no watch event had shown yet.
    settling: HashSet<WriteKey>,
    /// How many were queued again so far.
    repaired: usize,
}

impl Ledger {
    /// Compares every object's status as last watched with what this term would write (then
    /// every Peer check and mirror with what the leader wants of it), and writes again each
    /// one that differs (changed or deleted by another writer since), unless a write of it is
    /// still queued or being written. Groups waiting for the publisher are
    /// left alone (P5). Returns how many were queued again. The whole pass at once: the
    /// control loop runs it in steps ([`Ledger::start_recheck`], [`Ledger::recheck_step`]).
    #[cfg(test)]
    pub fn recheck(&mut self, index: &Index, peers: &PeerChecks, now: Timestamp) -> usize {
        self.start_recheck();
        let mut repaired = 0;
        while let Some(step) = self.recheck_step(index, peers, now, usize::MAX) {
            repaired += step;
        }
        repaired
    }

    /// Begins a re-check pass, unless one is under way. Nothing is judged until the term's
    /// read-back is taken in.
    pub fn start_recheck(&mut self) {
        if self.recheck.is_none() && self.published.seeded() {
            // Written since the last pass and not seen by the watch since: the write may not
            // be back yet, so a difference says nothing until the next pass (a first start's
            // burst had hundreds of statuses written twice for that, logged as another
            // writer's).
            self.recheck = Some(Recheck {
                next: Some((Phase::Statuses(StatusKind::RecordGroup), None)),
                settling: self.queue.take_written(),
                repaired: 0,
            });
        }
    }

    /// Whether a re-check pass is under way.
    pub fn rechecking(&self) -> bool {
        self.recheck.is_some()
    }

    /// Judges up to `budget` more objects of the pass under way, in the order of their kind
    /// and key (the Peer checks and the mirrors each a whole plan, outside the budget);
    /// returns how many of them were queued again, or None once the pass is done (or there
    /// was none). At 100,000 groups a whole pass took 0.6-0.9 s: in steps, a change that
    /// arrives meanwhile is compiled and published after one step, not after the pass.
    pub fn recheck_step(
        &mut self,
        index: &Index,
        peers: &PeerChecks,
        now: Timestamp,
        budget: usize,
    ) -> Option<usize> {
        let mut pass = self.recheck.take()?;
        if !self.published.seeded() {
            return None;
        }
        let now = api_time(now);
        let mut left = budget;
        let mut repaired = 0;
        while left > 0 {
            let Some((phase, after)) = pass.next.take() else {
                break;
            };
            let settling = &pass.settling;
            let last = match phase {
                Phase::Statuses(kind) => {
                    let mut judged = Judged {
                        left: &mut left,
                        repaired: &mut repaired,
                    };
                    self.judge_kind(kind, index, after, now, settling, &mut judged)
                }
                // Few objects (one per peer target and namespace, one per engine shift): a
                // whole plan, outside the budget.
                Phase::PeerChecks => {
                    repaired += self.repair_objects(peers.wanted(index), settling);
                    None
                }
                Phase::EngineShifts => {
                    repaired += self.repair_objects(engine_shifts::wanted(index), settling);
                    None
                }
            };
            pass.next = match last {
                Some(last) => Some((phase, Some(last))),
                None => phase.next().map(|phase| (phase, None)),
            };
        }
        StatusMetrics::add(&self.metrics.repairs, repaired as u64);
        self.set_backlog();
        pass.repaired += repaired;
        if pass.next.is_some() {
            self.recheck = Some(pass);
        } else if pass.repaired > 0 {
            tracing::info!(
                repaired = pass.repaired,
                "statuses or objects changed by another writer since written; writing them again"
            );
        }
        Some(repaired)
    }

    /// Judges the statuses of `kind` after `after`, as many as `judged` has left; returns the
    /// last one judged while more may follow, None once the kind is done.
    fn judge_kind(
        &mut self,
        kind: StatusKind,
        index: &Index,
        after: Option<ObjectKey>,
        now: Timestamp,
        settling: &HashSet<WriteKey>,
        judged: &mut Judged<'_>,
    ) -> Option<ObjectKey> {
        match kind {
            StatusKind::RecordGroup => {
                let table = index.compiler.table();
                self.judge_range(&index.groups, after, judged, |ledger, key, g| {
                    if ledger.awaiting.contains(key) {
                        return 0;
                    }
                    ledger.judge(key, g.status.as_deref(), settling, |ledger, old| {
                        let publication = ledger.published.publication(key, &table)?;
                        group_status(index, key, publication, old, now).map(|(s, _)| s)
                    })
                })
            }
            StatusKind::HealthCheck => {
                self.judge_range(&index.checks, after, judged, |ledger, key, c| {
                    ledger.judge(key, c.status.as_ref(), settling, |ledger, old| {
                        check_status(index, key, ledger.evaluations.get(key), old, now)
                    })
                })
            }
            StatusKind::ZonalShift => {
                self.judge_range(&index.shifts, after, judged, |ledger, key, s| {
                    ledger.judge(key, s.status.as_ref(), settling, |_, old| {
                        shift_status(index, key, old, now).map(|(s, _)| s)
                    })
                })
            }
            StatusKind::ZonalAutoshift => {
                self.judge_range(&index.autoshifts, after, judged, |ledger, key, a| {
                    ledger.judge(key, a.status.as_ref(), settling, |_, old| {
                        autoshift_status(index, key, old, now)
                    })
                })
            }
        }
    }

    /// Queues again each write of a plan (the Peer checks', the mirrors') whose object nothing
    /// queued or just written explains: another writer changed or deleted it since.
    fn repair_objects<W: Into<Write>>(
        &mut self,
        writes: Vec<W>,
        settling: &HashSet<WriteKey>,
    ) -> usize {
        let mut repaired = 0;
        for write in writes {
            let write = write.into();
            let key = write.key();
            if self.queue.holds(&key) || settling.contains(&key) {
                continue;
            }
            tracing::debug!(kind = key.0.name(), object = %key.1, "differs from what was written");
            self.queue.push(write);
            repaired += 1;
        }
        repaired
    }

    /// One object of a re-check: the status this term would write, built from the last one
    /// sent (else the watched one), is queued again when the object does not show it
    /// ([`Ledger::repair`]). `build` gives None when nothing would be written.
    fn judge<S: OwnStatus>(
        &mut self,
        key: &ObjectKey,
        watched: Option<&S>,
        settling: &HashSet<WriteKey>,
        build: impl FnOnce(&Self, Option<S>) -> Option<S>,
    ) -> usize {
        let old = self.last(key, watched);
        build(self, old).map_or(0, |status| self.repair(key, status, watched, settling))
    }

    /// Judges the objects of `map` after `after`, at most `left` of them (counted down);
    /// returns the last one judged while more may follow, None once the map is done.
    fn judge_range<V>(
        &mut self,
        map: &BTreeMap<ObjectKey, V>,
        after: Option<ObjectKey>,
        judged: &mut Judged<'_>,
        mut judge: impl FnMut(&mut Self, &ObjectKey, &V) -> usize,
    ) -> Option<ObjectKey> {
        use std::ops::Bound::{Excluded, Unbounded};
        let (left, repaired) = (&mut *judged.left, &mut *judged.repaired);
        let range = match &after {
            Some(after) => map.range::<ObjectKey, _>((Excluded(after), Unbounded)),
            None => map.range::<ObjectKey, _>(..),
        };
        let mut last: Option<&ObjectKey> = None;
        for (key, value) in range {
            if *left == 0 {
                return last.cloned();
            }
            *left -= 1;
            *repaired += judge(self, key, value);
            last = Some(key);
        }
        None
    }

    /// Queues `status` again when the object does not show it. Not while a status of the
    /// object is queued or in flight: the object cannot show it yet. Without Events: they
    /// went out with the transition.
    fn repair<S: OwnStatus>(
        &mut self,
        key: &ObjectKey,
        status: S,
        watched: Option<&S>,
        settling: &HashSet<WriteKey>,
    ) -> usize {
        let skey = (S::KIND, key.clone());
        let wkey = status_key(skey.clone());
        if watched.is_some_and(|w| status.shown_by(w))
            || self.queue.holds(&wkey)
            || settling.contains(&wkey)
        {
            return 0;
        }
        tracing::debug!(kind = %S::KIND, object = %key, "status differs from what was written");
        let status = Arc::new(status.into_status());
        self.sent.insert(skey, Sent::Own(status.clone()));
        self.queue.push(StatusUpdate::quiet(key.clone(), status));
        1
    }
}

/// How many objects a step may still judge, and how many it queued again.
struct Judged<'a> {
    left: &'a mut usize,
    repaired: &'a mut usize,
}
