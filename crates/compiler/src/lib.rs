//! The routing compiler: from RecordGroups, HealthChecks (with their checkers' views),
//! ZonalShifts, Service endpoints, the served zones and the time, to a compiled
//! [`RoutingTable`] plus the status of every object.
//!
//! ```text
//!  upsert_* / delete_* ──▶ inputs ──▶ dirty groups ──┐
//!                                                    ▼
//!  compile(now): check health (H6–H10) ─▶ changed checks ─▶ their groups
//!                shift clocks (Z3, Z4)  ─▶ changed shifts ─▶ their groups
//!                dirty groups, alias targets first ─▶ group::compile ─▶ outcome
//!                      └─ a changed outcome dirties the groups that alias it
//!  table() ◀── Arc<RoutingTable>, rebuilt only from the groups that changed
//! ```
//!
//! The compiler is synchronous and owns no client: the operator's index and standalone mode
//! feed it, and read tables and statuses back. Recompiling after one change costs the groups
//! that depend on it, not the table.

mod error;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod group;
pub mod health;
pub mod manifests;
pub mod shift;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use healthroute_table::{CompiledGroup, RecordType, RoutingTable, Value, normalize_name};
use jiff::Timestamp;

use healthroute_api::{
    AppliedStatus, Labels, RecordGroupSpec, RecordGroupStatus, ShiftGroupStatus, ShiftState,
    ZonalShiftStatus,
};

pub use error::Error;
pub use group::{GroupOutcome, Rejection};
pub use health::{CheckHealth, CheckInput};
pub use healthroute_api::{CheckerView, ObjectKey};
pub use shift::{ShiftClock, ShiftInput};

/// Reasons of the `Compiled` condition, and of rejections (SEMANTICS S8).
pub mod reasons {
    pub const COMPILED: &str = "Compiled";
    pub const INVALID_SPEC: &str = "InvalidSpec";
    pub const ZONE_NOT_SERVED: &str = "ZoneNotServed";
    pub const NAME_CONFLICT: &str = "NameConflict";
    pub const ALIAS_CYCLE: &str = "AliasCycle";
    pub const MISSING_TARGET: &str = "MissingTarget";
    pub const TYPE_MISMATCH: &str = "TypeMismatch";
    pub const NO_PRIMARY: &str = "NoPrimary";
    /// Every rejection reason.
    pub const ALL: [&str; 7] = [
        INVALID_SPEC,
        ZONE_NOT_SERVED,
        NAME_CONFLICT,
        ALIAS_CYCLE,
        MISSING_TARGET,
        TYPE_MISMATCH,
        NO_PRIMARY,
    ];
}

/// The zone default TTL (SEMANTICS D7).
pub const DEFAULT_TTL: u32 = 60;

/// The zones the resolvers are authoritative for, normalised (lower case, trailing dot).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ServedZones(Vec<String>);

impl ServedZones {
    pub fn new<S: AsRef<str>>(zones: impl IntoIterator<Item = S>) -> Result<Self, Error> {
        let mut out = Vec::new();
        for z in zones {
            let z = normalize_name(z.as_ref())?;
            if !out.contains(&z) {
                out.push(z);
            }
        }
        // Longest first, so the most specific zone matches first.
        out.sort_by(|a: &String, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        Ok(ServedZones(out))
    }
    /// The most specific served zone that contains `name` (normalised).
    pub fn zone_of(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|z| name == z.as_str() || name.ends_with(&format!(".{z}")))
            .map(String::as_str)
    }
    pub fn names(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }
}

/// A RecordGroup as the compiler sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupInput {
    pub spec: RecordGroupSpec,
    pub labels: Labels,
    /// `metadata.creationTimestamp`: the older group wins a name conflict (S8).
    pub created: Option<Timestamp>,
}

/// The endpoints of one Service, merged from its EndpointSlices.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ServiceEndpoints {
    pub cluster_ips: Vec<IpAddr>,
    pub endpoints: Vec<EndpointInput>,
}

/// One endpoint address with its EndpointSlice conditions (SEMANTICS H11).
#[derive(Clone, Debug, PartialEq)]
pub struct EndpointInput {
    pub address: IpAddr,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    pub zone: Option<String>,
}

/// What one call to [`Compiler::compile`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CompileReport {
    /// Groups compiled again.
    pub recompiled: usize,
    /// Groups whose served entry changed (added, replaced or removed).
    pub table_changes: usize,
    /// The table generation after this compile.
    pub generation: u64,
    /// Groups whose outcome (and so status) changed, or that were removed.
    pub changed_groups: Vec<ObjectKey>,
    /// Checks whose health changed, or that were removed.
    pub changed_checks: Vec<ObjectKey>,
    /// Probe checks evaluated again (their inputs, or a checker's reachability, changed).
    pub evaluated_checks: usize,
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

/// The incremental compiler. See the module docs for the flow.
#[derive(Debug, Default)]
pub struct Compiler {
    zones: ServedZones,
    default_ttl: u32,
    groups: BTreeMap<ObjectKey, GroupInput>,
    checks: BTreeMap<ObjectKey, CheckInput>,
    shifts: BTreeMap<ObjectKey, ShiftInput>,
    services: BTreeMap<ObjectKey, ServiceEndpoints>,
    heartbeats: HashMap<String, Timestamp>,

    // Derived state.
    check_health: BTreeMap<ObjectKey, CheckHealth>,
    shift_clocks: BTreeMap<ObjectKey, Result<ShiftClock, Error>>,
    outcomes: BTreeMap<ObjectKey, GroupOutcome>,
    /// The last version of each group that compiled, served while a later one is rejected.
    last_good: BTreeMap<ObjectKey, Arc<CompiledGroup<Value>>>,
    /// Which groups read a check, a Service, or another group (alias): who to recompile.
    users: HashMap<(Dep, ObjectKey), KeySet>,
    /// The reverse: what each group reads.
    deps_of: HashMap<ObjectKey, Vec<(Dep, ObjectKey)>>,
    /// Groups by normalised name, for name conflicts.
    names: HashMap<String, KeySet>,
    dirty: BTreeSet<ObjectKey>,
    dirty_checks: BTreeSet<ObjectKey>,
    /// Probe checks by request interval: reachability (H7) is per checker and interval.
    intervals: BTreeMap<u32, usize>,
    /// Per checker, the intervals for which it counted as reachable at the last compile; only
    /// a change here re-evaluates the checks it affects (a heartbeat alone changes nothing).
    reachable: HashMap<String, BTreeSet<u32>>,
    table: Arc<RoutingTable<Value>>,
    table_dirty: BTreeSet<ObjectKey>,
    /// Groups whose served version came back from a published table: their status changes.
    recovered: BTreeSet<ObjectKey>,
    /// Whether outcomes carry their decision path ([`GroupOutcome::explain`]).
    explain: bool,
    /// Whether outcomes leave out the per-record status ([`GroupOutcome::records`]).
    no_statuses: bool,
}

impl Compiler {
    pub fn new(zones: ServedZones, default_ttl: u32) -> Self {
        Compiler {
            zones,
            default_ttl,
            ..Default::default()
        }
    }

    /// A compiler whose outcomes carry their decision path, for the simulator; the others
    /// leave it empty (at 10,000 groups the lines would take megabytes nobody reads).
    pub fn explaining(mut self) -> Self {
        self.explain = true;
        self
    }

    /// A compiler whose outcomes leave out the per-record status (standalone mode writes no
    /// status; at 10,000 groups the records' texts take over a megabyte).
    pub fn without_statuses(mut self) -> Self {
        self.no_statuses = true;
        self
    }

    pub fn zones(&self) -> &ServedZones {
        &self.zones
    }

    // --- inputs ------------------------------------------------------------------------------

    pub fn upsert_group(&mut self, key: ObjectKey, input: GroupInput) {
        if self.groups.get(&key) == Some(&input) {
            return;
        }
        self.unindex_name(&key);
        if let Ok(name) = normalize_name(&input.spec.name) {
            self.names
                .entry(name.clone())
                .or_default()
                .insert(key.clone());
            self.dirty_name(&name);
        }
        self.groups.insert(key.clone(), input);
        self.dirty.insert(key);
    }

    pub fn delete_group(&mut self, key: &ObjectKey) {
        if !self.groups.contains_key(key) {
            return;
        }
        self.unindex_name(key);
        self.groups.remove(key);
        self.dirty.insert(key.clone());
    }

    pub fn upsert_check(&mut self, key: ObjectKey, input: CheckInput) {
        self.dirty_checks.insert(key.clone());
        self.count_interval(&input, 1);
        if let Some(old) = self.checks.insert(key, input) {
            self.count_interval(&old, -1);
        }
    }

    /// Keeps [`Compiler::intervals`] in step with the probe checks.
    fn count_interval(&mut self, check: &CheckInput, by: isize) {
        if check.spec.check_type == healthroute_api::CheckType::Calculated {
            return;
        }
        let interval = check.spec.request_interval_seconds;
        let n = self.intervals.entry(interval).or_default();
        *n = n.saturating_add_signed(by);
        if *n == 0 {
            self.intervals.remove(&interval);
            for intervals in self.reachable.values_mut() {
                intervals.remove(&interval);
            }
        }
    }

    /// Sets a check's spec (and the status it had), keeping the views already reported.
    pub fn upsert_check_spec(&mut self, key: ObjectKey, input: CheckInput) {
        let merged = match self.checks.get(&key) {
            Some(existing) => CheckInput {
                spec: input.spec,
                views: existing.views.clone(),
                last_healthy: existing.last_healthy.or(input.last_healthy),
            },
            None => input,
        };
        self.upsert_check(key, merged);
    }

    pub fn delete_check(&mut self, key: &ObjectKey) {
        self.dirty_checks.insert(key.clone());
        if let Some(old) = self.checks.remove(key) {
            self.count_interval(&old, -1);
        }
    }

    /// Replaces one checker's view of a check (as a checker's status entry arrives).
    pub fn set_check_view(&mut self, key: &ObjectKey, view: CheckerView) -> bool {
        let Some(check) = self.checks.get_mut(key) else {
            return false;
        };
        self.dirty_checks.insert(key.clone());
        match check.views.iter_mut().find(|v| v.checker == view.checker) {
            Some(v) => *v = view,
            None => check.views.push(view),
        }
        true
    }

    /// Records a checker's heartbeat. Checks are evaluated again only when it makes the
    /// checker reachable where it was not (H7); the next compile finds out.
    pub fn set_heartbeat(&mut self, checker: impl Into<String>, at: Timestamp) {
        self.heartbeats.insert(checker.into(), at);
    }

    pub fn upsert_shift(&mut self, key: ObjectKey, input: ShiftInput) {
        if self.shifts.get(&key) == Some(&input) {
            return;
        }
        if let Some(old) = self.shifts.get(&key) {
            let old_spec = old.spec.clone();
            self.dirty_targets(&key.namespace, &old_spec);
        }
        self.dirty_targets(&key.namespace, &input.spec);
        self.shifts.insert(key, input);
    }

    pub fn delete_shift(&mut self, key: &ObjectKey) {
        if let Some(old) = self.shifts.remove(key) {
            self.shift_clocks.remove(key);
            self.dirty_targets(&key.namespace, &old.spec);
        }
    }

    pub fn upsert_service(&mut self, key: ObjectKey, endpoints: ServiceEndpoints) {
        if self.services.get(&key) == Some(&endpoints) {
            return;
        }
        self.services.insert(key.clone(), endpoints);
        self.dirty_users(&key, Dep::Service);
    }

    pub fn delete_service(&mut self, key: &ObjectKey) {
        if self.services.remove(key).is_some() {
            self.dirty_users(key, Dep::Service);
        }
    }

    // --- compiling ---------------------------------------------------------------------------

    /// Brings every output up to date at `now`.
    pub fn compile(&mut self, now: Timestamp) -> CompileReport {
        let mut report = CompileReport::default();

        // Checks: those whose inputs changed, and those that read a checker whose
        // reachability changed since the last compile (a heartbeat arrived after it went stale,
        // or one went stale). Only changed results cost a recompile.
        self.dirty_reachability_changes(now);
        let dirty = std::mem::take(&mut self.dirty_checks);
        report.evaluated_checks = dirty.len();
        let mut changed = Vec::new();
        health::evaluate_into(
            &self.checks,
            &self.heartbeats,
            now,
            &dirty,
            &mut self.check_health,
            &mut changed,
        );
        for key in &changed {
            self.dirty_users(key, Dep::Check);
        }
        report.changed_checks = changed;

        // Shifts: advance each clock; a state change dirties the targets.
        let keys: Vec<ObjectKey> = self.shifts.keys().cloned().collect();
        for key in keys {
            let shift = &self.shifts[&key];
            let previous = self.shift_clocks.get(&key).and_then(|c| c.as_ref().ok());
            // A stored clock is active until advance_clock marks it ended.
            let was_active = previous.map(|c| c.ended.is_none());
            let clock = shift::advance_clock(shift, previous, now);
            let is_active = clock.as_ref().ok().map(|c| c.ended.is_none());
            let start_changed = previous.map(|c| c.start) != clock.as_ref().ok().map(|c| c.start);
            if was_active != is_active || start_changed {
                let spec = shift.spec.clone();
                self.dirty_targets(&key.namespace, &spec);
            }
            self.shift_clocks.insert(key, clock);
        }

        // Groups: alias targets before the groups that alias them.
        while let Some(key) = self.dirty.pop_first() {
            self.ensure(&key, now, &mut BTreeSet::new(), &mut report);
        }

        for key in std::mem::take(&mut self.recovered) {
            if !report.changed_groups.contains(&key) {
                report.changed_groups.push(key);
            }
        }
        report.table_changes = self.table_dirty.len();
        if !self.table_dirty.is_empty() {
            let mut table = RoutingTable {
                generation: self.table.generation + 1,
                groups: self.table.groups.clone(),
            };
            for key in std::mem::take(&mut self.table_dirty) {
                let gk: Arc<str> = key.to_string().into();
                match self.served(&key) {
                    Some(g) => table.groups.insert(gk, g),
                    None => table.groups.remove(&gk),
                };
            }
            self.table = Arc::new(table);
        }
        report.generation = self.table.generation;
        report
    }

    /// Compares every checker's reachability for every interval in use with the last compile's
    /// and marks the probe checks that read a checker whose reachability changed.
    fn dirty_reachability_changes(&mut self, now: Timestamp) {
        let mut flipped: HashMap<&str, Vec<u32>> = HashMap::new();
        for (checker, hb) in &self.heartbeats {
            let now_reachable: BTreeSet<u32> = self
                .intervals
                .keys()
                .copied()
                .filter(|i| health::is_reachable(Some(*hb), *i, now))
                .collect();
            let before = self.reachable.get(checker);
            if before != Some(&now_reachable) {
                let empty = BTreeSet::new();
                let before = before.unwrap_or(&empty);
                flipped.insert(
                    checker.as_str(),
                    before
                        .symmetric_difference(&now_reachable)
                        .copied()
                        .collect(),
                );
                self.reachable.insert(checker.clone(), now_reachable);
            }
        }
        if flipped.is_empty() {
            return;
        }
        for (key, check) in &self.checks {
            let interval = check.spec.request_interval_seconds;
            let reads_flipped = check.views.iter().any(|v| {
                flipped
                    .get(v.checker.as_str())
                    .is_some_and(|intervals| intervals.contains(&interval))
            });
            if reads_flipped {
                self.dirty_checks.insert(key.clone());
            }
        }
    }

    /// The time at which the outputs change without any input changing: the next shift expiry
    /// or a reachable checker's heartbeat going stale. The caller compiles again then.
    pub fn next_deadline(&self, now: Timestamp) -> Option<Timestamp> {
        let expiries = self
            .shift_clocks
            .values()
            .filter_map(|c| c.as_ref().ok())
            .filter(|c| c.state(now) == ShiftState::Active)
            .map(|c| c.expiry);
        let stale = self.heartbeats.iter().flat_map(|(checker, hb)| {
            self.reachable
                .get(checker)
                .into_iter()
                .flatten()
                .map(|i| health::unreachable_at(*hb, *i))
        });
        expiries.chain(stale).filter(|t| *t > now).min()
    }

    /// How long from `now` until [`Compiler::next_deadline`], for a caller's timer.
    pub fn time_to_deadline(&self, now: Timestamp) -> Option<std::time::Duration> {
        self.next_deadline(now).map(|t| {
            let ms = (t.as_millisecond() - now.as_millisecond()).max(0) as u64;
            std::time::Duration::from_millis(ms)
        })
    }

    fn ensure(
        &mut self,
        key: &ObjectKey,
        now: Timestamp,
        visiting: &mut BTreeSet<ObjectKey>,
        report: &mut CompileReport,
    ) {
        if !visiting.insert(key.clone()) {
            return;
        }
        // Compile the alias targets first if they are waiting.
        if let Some(input) = self.groups.get(key) {
            let targets: Vec<ObjectKey> = input
                .spec
                .records
                .iter()
                .filter_map(|r| r.alias.as_ref())
                .map(|a| key.sibling(&a.record_group))
                .collect();
            for t in targets {
                if self.dirty.remove(&t) {
                    self.ensure(&t, now, visiting, report);
                }
            }
        }
        self.dirty.remove(key);
        report.recompiled += 1;
        let before = self
            .outcomes
            .get(key)
            .map(|o| (o.compiled.clone(), o.healthy));
        let outcome = self.compile_group(key, now);
        if self.outcomes.get(key) != outcome.as_ref() {
            report.changed_groups.push(key.clone());
        }
        self.reindex_deps(key);
        match outcome {
            Some(outcome) => {
                if let Ok(g) = &outcome.compiled {
                    self.last_good.insert(key.clone(), g.clone());
                }
                self.outcomes.insert(key.clone(), outcome);
            }
            None => {
                self.outcomes.remove(key);
                self.last_good.remove(key);
            }
        }
        let after = self
            .outcomes
            .get(key)
            .map(|o| (o.compiled.clone(), o.healthy));
        if before != after {
            self.table_dirty.insert(key.clone());
            if let Some(users) = self.users.get(&(Dep::Alias, key.clone())) {
                self.dirty
                    .extend(users.iter().filter(|u| !visiting.contains(*u)).cloned());
            }
        }
        visiting.remove(key);
    }

    fn compile_group(&self, key: &ObjectKey, now: Timestamp) -> Option<GroupOutcome> {
        let input = self.groups.get(key)?;
        let (name, parsed) = match group::validate(key, &input.spec, &self.zones) {
            Ok(v) => v,
            Err(rejection) => return Some(GroupOutcome::rejected(rejection)),
        };
        if let Some(winner) = self.conflict_winner(key, &name, input) {
            return Some(GroupOutcome::rejected(Rejection::new(
                reasons::NAME_CONFLICT,
                format!(
                    "{name} {} is already served by the older RecordGroup {winner}",
                    input.spec.record_type.as_str()
                ),
            )));
        }
        let rtype = group::record_type(input.spec.record_type);
        for target in parsed.iter().filter_map(|p| p.alias.as_ref()) {
            if self.alias_reaches(target, key) {
                return Some(GroupOutcome::rejected(Rejection::new(
                    reasons::ALIAS_CYCLE,
                    format!("alias to {} leads back to {}", target.name, key.name),
                )));
            }
            match self.groups.get(target) {
                None => {
                    return Some(GroupOutcome::rejected(Rejection::new(
                        reasons::MISSING_TARGET,
                        format!("alias target RecordGroup {target} does not exist"),
                    )));
                }
                Some(t) if group::record_type(t.spec.record_type) != rtype => {
                    return Some(GroupOutcome::rejected(Rejection::new(
                        reasons::TYPE_MISMATCH,
                        format!(
                            "alias target {} is {}, not {rtype}",
                            target.name,
                            t.spec.record_type.as_str()
                        ),
                    )));
                }
                Some(_) if self.served(target).is_none() => {
                    return Some(GroupOutcome::rejected(Rejection::new(
                        reasons::MISSING_TARGET,
                        format!("alias target {target} is not served (it was rejected)"),
                    )));
                }
                Some(_) => {}
            }
        }
        let shifts = self.active_shifts_for(key, input, now);
        let alias_target = |t: &ObjectKey| {
            self.served(t).map(|g| group::AliasTargetState {
                record_type: g.record_type,
                healthy: self.outcomes.get(t).is_some_and(|o| o.healthy),
            })
        };
        let env = group::GroupEnv {
            key,
            zones: &self.zones,
            checks: &self.check_health,
            services: &self.services,
            alias_target: &alias_target,
            shifts: &shifts,
            explain: self.explain,
            statuses: !self.no_statuses,
        };
        Some(group::compile(
            &env,
            &input.spec,
            &name,
            &parsed,
            self.default_ttl,
        ))
    }

    /// The oldest group that claims `name` with a conflicting type, when it is not `key`.
    fn conflict_winner(
        &self,
        key: &ObjectKey,
        name: &str,
        input: &GroupInput,
    ) -> Option<&ObjectKey> {
        let mine = group::record_type(input.spec.record_type);
        let conflicts = |other: RecordType| {
            other == mine || other == RecordType::Cname || mine == RecordType::Cname
        };
        let age = |k: &ObjectKey| {
            let g = &self.groups[k];
            (g.created.is_none(), g.created, k.clone())
        };
        self.names
            .get(name)?
            .iter()
            .filter(|k| {
                self.groups
                    .get(*k)
                    .is_some_and(|g| conflicts(group::record_type(g.spec.record_type)))
            })
            .min_by_key(|k| age(k))
            .filter(|w| *w != key)
    }

    /// Whether following aliases from `from` reaches `to`, by the specs.
    fn alias_reaches(&self, from: &ObjectKey, to: &ObjectKey) -> bool {
        let mut stack = vec![from.clone()];
        let mut seen = BTreeSet::new();
        while let Some(k) = stack.pop() {
            if &k == to {
                return true;
            }
            if !seen.insert(k.clone()) {
                continue;
            }
            if let Some(g) = self.groups.get(&k) {
                stack.extend(
                    g.spec
                        .records
                        .iter()
                        .filter_map(|r| r.alias.as_ref())
                        .map(|a| k.sibling(&a.record_group)),
                );
            }
        }
        false
    }

    fn active_shifts_for(
        &self,
        key: &ObjectKey,
        input: &GroupInput,
        now: Timestamp,
    ) -> Vec<group::ActiveShift> {
        self.shifts
            .range(key.sibling("")..)
            .take_while(|(k, _)| k.namespace == key.namespace)
            .filter(|(_, s)| shift::targets(&s.spec, &key.name, &input.labels))
            .filter_map(|(k, s)| {
                let clock = self.shift_clocks.get(k)?.as_ref().ok()?;
                (clock.state(now) == ShiftState::Active).then(|| group::ActiveShift {
                    key: k.clone(),
                    away_from: s.spec.away_from.clone(),
                    start: clock.start,
                })
            })
            .collect()
    }

    /// What the table serves for `key`: its compiled version, or its last good one while it is
    /// rejected for a reason other than losing a name conflict.
    fn served(&self, key: &ObjectKey) -> Option<Arc<CompiledGroup<Value>>> {
        let outcome = self.outcomes.get(key)?;
        match &outcome.compiled {
            Ok(g) => Some(g.clone()),
            Err(r) if r.reason == reasons::NAME_CONFLICT => None,
            Err(_) => self.last_good.get(key).cloned(),
        }
    }

    fn unindex_name(&mut self, key: &ObjectKey) {
        let Some(old) = self.groups.get(key) else {
            return;
        };
        if let Ok(name) = normalize_name(&old.spec.name) {
            if let Some(set) = self.names.get_mut(&name) {
                set.remove(key);
                if set.is_empty() {
                    self.names.remove(&name);
                }
            }
            self.dirty_name(&name);
        }
    }

    fn dirty_name(&mut self, name: &str) {
        if let Some(set) = self.names.get(name) {
            self.dirty.extend(set.iter().cloned());
        }
    }

    fn dirty_targets(&mut self, namespace: &str, spec: &healthroute_api::ZonalShiftSpec) {
        let hit: Vec<ObjectKey> = self
            .groups
            .range(ObjectKey::new(namespace, "")..)
            .take_while(|(k, _)| &*k.namespace == namespace)
            .filter(|(k, g)| shift::targets(spec, &k.name, &g.labels))
            .map(|(k, _)| k.clone())
            .collect();
        self.dirty.extend(hit);
    }

    fn dirty_users(&mut self, key: &ObjectKey, dep: Dep) {
        if let Some(users) = self.users.get(&(dep, key.clone())) {
            self.dirty.extend(users.iter().cloned());
        }
    }

    /// Records what group `key` reads, so that a change there recompiles it.
    fn reindex_deps(&mut self, key: &ObjectKey) {
        for dep in self.deps_of.remove(key).unwrap_or_default() {
            if let Some(users) = self.users.get_mut(&dep) {
                users.remove(key);
                if users.is_empty() {
                    self.users.remove(&dep);
                }
            }
        }
        let Some(input) = self.groups.get(key) else {
            return;
        };
        let deps: Vec<(Dep, ObjectKey)> = input
            .spec
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

    /// Takes in what an earlier leader published (S8 across a failover, P6): a group that has
    /// no good version in this process serves the published one while it is rejected, exactly
    /// as if this process had compiled it. Groups that no longer exist are not brought back,
    /// and a version compiled here always wins. Takes effect on the next compile; returns how
    /// many groups were recovered.
    pub fn recover_served<'a>(
        &mut self,
        published: impl IntoIterator<Item = (&'a str, &'a Arc<CompiledGroup<Value>>)>,
    ) -> usize {
        let mut recovered = 0;
        for (gk, group) in published {
            let Some((namespace, name)) = gk.split_once('/') else {
                continue;
            };
            let key = ObjectKey::new(namespace, name);
            if !self.groups.contains_key(&key) || self.last_good.contains_key(&key) {
                continue;
            }
            self.last_good.insert(key.clone(), group.clone());
            recovered += 1;
            if self.outcomes.get(&key).is_some_and(|o| o.compiled.is_err()) {
                // Already compiled (and rejected): serve the recovered version now, and let
                // the groups that alias it see it.
                self.table_dirty.insert(key.clone());
                self.recovered.insert(key.clone());
                self.dirty_users(&key, Dep::Alias);
            }
        }
        recovered
    }

    // --- outputs -----------------------------------------------------------------------------

    /// The current table: cheap to clone, shared with readers.
    pub fn table(&self) -> Arc<RoutingTable<Value>> {
        self.table.clone()
    }

    pub fn outcome(&self, key: &ObjectKey) -> Option<&GroupOutcome> {
        self.outcomes.get(key)
    }

    pub fn group_keys(&self) -> impl Iterator<Item = &ObjectKey> {
        self.groups.keys()
    }

    pub fn check_health(&self, key: &ObjectKey) -> Option<&CheckHealth> {
        self.check_health.get(key)
    }

    /// One checker's view of a check, as last set.
    pub fn check_view(&self, key: &ObjectKey, checker: &str) -> Option<&CheckerView> {
        self.checks
            .get(key)?
            .views
            .iter()
            .find(|v| v.checker == checker)
    }

    /// The status of a RecordGroup as data (conditions are the status writer's).
    pub fn group_status(&self, key: &ObjectKey) -> Option<RecordGroupStatus> {
        let outcome = self.outcomes.get(key)?;
        let served = self.served(key);
        let (healthy_records, last_resort) = match (&outcome.compiled, &served) {
            // A rejected group that still serves its last good version: the health of what it
            // serves, not the 0 of a version that compiled to nothing.
            (Err(_), Some(g)) => {
                let answering = match &g.selection {
                    healthroute_table::Selection::MultiValue {
                        set_identifiers, ..
                    } => set_identifiers.len(),
                    s => s.answers().len(),
                };
                let text = if g.last_resort {
                    "last good version, last resort".to_owned()
                } else {
                    format!("last good version, {answering} answering")
                };
                (text, g.last_resort)
            }
            (Err(_), None) => ("not served".to_owned(), false),
            (Ok(_), _) => {
                let healthy = outcome.records.iter().filter(|r| r.healthy).count();
                (
                    format!("{healthy}/{}", self.groups.get(key)?.spec.records.len()),
                    outcome.last_resort(),
                )
            }
        };
        Some(RecordGroupStatus {
            served: served.is_some(),
            served_generation: None,
            healthy_records: Some(healthy_records),
            records: outcome.records.clone(),
            last_resort,
            conditions: Vec::new(),
            observed_generation: None,
        })
    }

    /// The status of a ZonalShift at `now`: its clock and what it does to each targeted group.
    pub fn shift_status(
        &self,
        key: &ObjectKey,
        now: Timestamp,
    ) -> Option<Result<ZonalShiftStatus, Error>> {
        let shift = self.shifts.get(key)?;
        let clock = match self.shift_clocks.get(key)? {
            Ok(c) => c,
            Err(e) => return Some(Err(e.clone())),
        };
        let state = clock.state(now);
        let mut groups = Vec::new();
        for (gk, g) in self
            .groups
            .range(key.sibling("")..)
            .take_while(|(k, _)| k.namespace == key.namespace)
        {
            if !shift::targets(&shift.spec, &gk.name, &g.labels) || state != ShiftState::Active {
                continue;
            }
            let outcome = self
                .outcomes
                .get(gk)
                .and_then(|o| o.shifts.iter().find(|s| &s.shift == key));
            groups.push(ShiftGroupStatus {
                record_group: gk.name.to_string(),
                applied_status: outcome.map_or(AppliedStatus::NotApplied, |o| o.applied),
                reason: outcome.and_then(|o| o.reason),
            });
        }
        let applied = groups
            .iter()
            .filter(|g| g.applied_status == AppliedStatus::Applied)
            .count();
        Some(Ok(ZonalShiftStatus {
            status: Some(state),
            start_time: Some(clock.start.into()),
            expiry_time: Some(clock.expiry.into()),
            expires_in: Some(clock.expires_in.clone()),
            applied_groups: Some(format!("{applied}/{}", groups.len())),
            groups,
            conditions: Vec::new(),
            observed_generation: None,
        }))
    }
}

/// What a group can read from outside itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Dep {
    Check,
    Service,
    Alias,
}
