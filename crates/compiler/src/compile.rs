//! The compile loop: brings every output up to date at a time, from what the inputs marked.
//!
//! ```text
//!   checks:  dirty ones and those of a checker whose reachability flipped (H7) ─▶ health
//!            a changed health ─▶ the groups that read the check
//!   shifts:  every clock advanced (Z3, Z4); a start or end ─▶ the groups it targets
//!   groups:  each dirty one, its alias targets first ─▶ validate, conflicts, aliases (S8)
//!            ─▶ group::compile ─▶ outcome; a changed outcome dirties its alias users
//!   engines: when what they read changed (or a wake-up is due), each ZonalAutoshift steps
//!            (AS); a change of its shifts dirties its groups, compiled again
//!   table:   a new generation from the groups whose served version changed
//! ```
//!
//! [`Compiler::next_deadline`] says when the outputs change with no input changing.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use healthroute_api::{ObjectKey, ShiftState, ShiftType};
use healthroute_table::{CompiledGroup, RecordType, RoutingTable, Value};
use jiff::Timestamp;

use crate::autoshift::detect::{GroupZoneHealth, NodeCount};
use crate::autoshift::{AutoshiftEvent, Engine, Observation};
use crate::deps::Dep;
use crate::group::{self, GroupOutcome, Rejection};
use crate::inputs::GroupInput;
use crate::{Compiler, health, reasons, shift};

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
    /// What the ZonalAutoshift engines did (AS11): for logs, metrics and Events.
    pub autoshift_events: Vec<AutoshiftEvent>,
}

impl Compiler {
    /// Brings every output up to date at `now`.
    pub fn compile(&mut self, now: Timestamp) -> CompileReport {
        let mut report = CompileReport::default();
        self.compiled_at = Some(now);

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
        let mut shifts_changed = false;
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
                let target = shift.spec.target.clone();
                self.dirty_targets(&key.namespace, &target);
                shifts_changed = true;
            }
            self.shift_clocks.insert(key, clock);
        }

        // Groups: alias targets before the groups that alias them.
        while let Some(key) = self.dirty.pop_first() {
            self.ensure(&key, now, &mut BTreeSet::new(), &mut report);
        }

        // Engines: after the groups, whose zone health they read (health before any shift,
        // AS2, so what they decide cannot change what they read); the groups whose shifts
        // changed compile again.
        let engines_read_changes = self.autoshift_dirty
            || shifts_changed
            || !report.changed_groups.is_empty()
            || !report.changed_checks.is_empty()
            || self
                .engines
                .values()
                .filter_map(Engine::wake)
                .any(|t| t <= now);
        if !self.autoshifts.is_empty() && engines_read_changes {
            // A configuration's shifts can hold another back (AS7) or end its run (AS9): when
            // one changed, the others step once more on the new shifts.
            for _ in 0..2 {
                let shifted = self.step_engines(now, &mut report);
                while let Some(key) = self.dirty.pop_first() {
                    self.ensure(&key, now, &mut BTreeSet::new(), &mut report);
                }
                if !shifted || self.autoshifts.len() < 2 {
                    break;
                }
            }
        }
        self.autoshift_dirty = false;

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
                let gk = key.group_key();
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

    /// The check intervals in use for which a checker whose last heartbeat is `heartbeat`
    /// counts as reachable at `now` (H7).
    pub(crate) fn reachable_intervals(
        &self,
        heartbeat: Timestamp,
        now: Timestamp,
    ) -> BTreeSet<u32> {
        self.intervals
            .keys()
            .copied()
            .filter(|i| health::is_reachable(Some(heartbeat), *i, now))
            .collect()
    }

    /// Compares every checker's reachability for every interval in use with the last compile's
    /// and marks the probe checks that read a checker whose reachability changed.
    fn dirty_reachability_changes(&mut self, now: Timestamp) {
        let mut flipped: HashMap<&str, Vec<u32>> = HashMap::new();
        for (checker, hb) in &self.heartbeats {
            let now_reachable = self.reachable_intervals(*hb, now);
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

    /// The time at which the outputs of the last compile change without any input changing:
    /// the next shift expiry, a reachable checker's heartbeat going stale, an autoshift
    /// engine's next step. The caller compiles again then. A deadline the clock has passed
    /// since that compile is still returned (Z3): the compile that acts on it is due at once,
    /// wherever the clock was when it was asked. None before the first compile.
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let compiled_at = self.compiled_at?;
        let expiries = self
            .shift_clocks
            .values()
            .filter_map(|c| c.as_ref().ok())
            .filter(|c| c.state(compiled_at) == ShiftState::Active)
            .map(|c| c.expiry);
        let stale = self.heartbeats.iter().flat_map(|(checker, hb)| {
            self.reachable
                .get(checker)
                .into_iter()
                .flatten()
                .map(|i| health::unreachable_at(*hb, *i))
        });
        let engines = self.engines.values().filter_map(Engine::wake);
        expiries
            .chain(stale)
            .chain(engines)
            .filter(|t| *t > compiled_at)
            .min()
    }

    /// One step of every ZonalAutoshift's engine (AS3-AS10), with what it reads: its targeted
    /// groups' zone health, the Nodes, its namespace's alarms, the shifts on its groups.
    /// Returns whether any configuration's shifts changed.
    fn step_engines(&mut self, now: Timestamp, report: &mut CompileReport) -> bool {
        let mut shifted = false;
        let mut nodes: BTreeMap<String, NodeCount> = BTreeMap::new();
        for node in self.nodes.values() {
            if let Some(zone) = &node.zone {
                let n = nodes.entry(zone.clone()).or_default();
                n.nodes += 1;
                n.not_ready += u32::from(!node.ready);
            }
        }
        let keys: Vec<ObjectKey> = self.autoshifts.keys().cloned().collect();
        for key in keys {
            let input = &self.autoshifts[&key];
            let targeted: Vec<&ObjectKey> = self
                .groups
                .range(key.sibling("")..)
                .take_while(|(k, _)| k.namespace == key.namespace)
                .filter(|(k, g)| shift::target_matches(&input.spec.target, &k.name, &g.labels))
                .map(|(k, _)| k)
                .collect();
            let groups: Vec<(&ObjectKey, &GroupZoneHealth)> = targeted
                .iter()
                .filter_map(|k| {
                    let health = self.outcomes.get(*k)?.zone_health.as_deref()?;
                    Some((*k, health))
                })
                .collect();
            let customer_shift = self
                .shifts
                .range(key.sibling("")..)
                .take_while(|(k, _)| k.namespace == key.namespace)
                .find(|(k, s)| {
                    let active = self
                        .shift_clocks
                        .get(*k)
                        .and_then(|c| c.as_ref().ok())
                        .is_some_and(|c| c.state(now) == ShiftState::Active);
                    active
                        && targeted.iter().any(|g| {
                            self.groups
                                .get(*g)
                                .is_some_and(|gi| shift::targets(&s.spec, &g.name, &gi.labels))
                        })
                })
                .map(|(k, _)| k.clone());
            let other_autoshift = self
                .autoshifts
                .range(key.sibling("")..)
                .take_while(|(k, _)| k.namespace == key.namespace)
                .filter(|(k, _)| **k != key)
                .find(|(k, other)| {
                    self.engines
                        .get(*k)
                        .is_some_and(|e| e.autoshift_zone().is_some())
                        && targeted.iter().any(|g| {
                            self.groups.get(*g).is_some_and(|gi| {
                                shift::target_matches(&other.spec.target, &g.name, &gi.labels)
                            })
                        })
                })
                .map(|(k, _)| k.clone());
            let namespace = key.namespace.clone();
            let check_health = &self.check_health;
            let alarm = |name: &str| {
                check_health
                    .get(&ObjectKey::new(&namespace, name))
                    .map(|h| !h.healthy)
            };
            let obs = Observation {
                groups,
                nodes: &nodes,
                alarm: &alarm,
                customer_shift,
                other_autoshift,
                assumed_impaired: self.assumed_impaired.as_deref(),
            };
            // An engine created now may start from a status that holds a shift (a new leader,
            // the simulator): its groups have not seen that shift yet.
            let created = !self.engines.contains_key(&key);
            let engine = self
                .engines
                .entry(key.clone())
                .or_insert_with(|| Engine::new(input, now));
            let before = if created {
                Vec::new()
            } else {
                engine.shifts(&key)
            };
            let events = engine.step(&key, input, &obs, now);
            let after = engine.shifts(&key);
            report.autoshift_events.extend(events);
            if before != after {
                let target = input.spec.target.clone();
                self.dirty_targets(&key.namespace, &target);
                shifted = true;
            }
        }
        shifted
    }

    /// How long from `now` until [`Compiler::next_deadline`], for a caller's timer: zero
    /// when it has passed, never rounded down (a timer that fires early finds it still ahead).
    pub fn time_to_deadline(&self, now: Timestamp) -> Option<std::time::Duration> {
        self.next_deadline()
            .map(|t| std::time::Duration::try_from(t.duration_since(now)).unwrap_or_default())
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
        self.deps
            .reindex(key, self.groups.get(key).map(|g| &g.spec));
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
            let users = self.deps.users(Dep::Alias, key);
            self.dirty
                .extend(users.filter(|u| !visiting.contains(*u)).cloned());
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
                answers: answers_something(&g.selection),
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
            zone_health: self.targeted_by_autoshift(key, input),
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
            .claimants(name)
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

    /// The active shifts on a group: its ZonalShifts (type Customer) and the shifts of the
    /// ZonalAutoshifts that target it (AS5).
    fn active_shifts_for(
        &self,
        key: &ObjectKey,
        input: &GroupInput,
        now: Timestamp,
    ) -> Vec<group::ActiveShift> {
        let customer = self
            .shifts
            .range(key.sibling("")..)
            .take_while(|(k, _)| k.namespace == key.namespace)
            .filter(|(_, s)| shift::targets(&s.spec, &key.name, &input.labels))
            .filter_map(|(k, s)| {
                let clock = self.shift_clocks.get(k)?.as_ref().ok()?;
                (clock.state(now) == ShiftState::Active).then(|| group::ActiveShift {
                    key: k.clone(),
                    shift_type: ShiftType::Customer,
                    away_from: s.spec.away_from.clone(),
                    start: clock.start,
                })
            });
        let engines = self
            .autoshifts
            .range(key.sibling("")..)
            .take_while(|(k, _)| k.namespace == key.namespace)
            .filter(|(_, c)| shift::target_matches(&c.spec.target, &key.name, &input.labels))
            .filter_map(|(k, _)| Some(self.engines.get(k)?.shifts(k)))
            .flatten()
            .map(|s| group::ActiveShift {
                key: s.key,
                shift_type: s.shift_type,
                away_from: s.away_from,
                start: s.start,
            });
        customer.chain(engines).collect()
    }

    /// Whether a ZonalAutoshift targets the group: then it counts its zone health (AS2).
    fn targeted_by_autoshift(&self, key: &ObjectKey, input: &GroupInput) -> bool {
        self.autoshifts
            .range(key.sibling("")..)
            .take_while(|(k, _)| k.namespace == key.namespace)
            .any(|(_, c)| shift::target_matches(&c.spec.target, &key.name, &input.labels))
    }

    /// What the table serves for `key`: its compiled version, or its last good one while it is
    /// rejected for a reason other than losing a name conflict.
    pub(crate) fn served(&self, key: &ObjectKey) -> Option<Arc<CompiledGroup<Value>>> {
        let outcome = self.outcomes.get(key)?;
        match &outcome.compiled {
            Ok(g) => Some(g.clone()),
            Err(r) if r.reason == reasons::NAME_CONFLICT => None,
            Err(_) => self.last_good.get(key).cloned(),
        }
    }
}

/// Whether a compiled selection answers anything: a value, or an alias (whose own target is
/// not looked through, so that a change further down a chain never has to recompile the
/// groups at its top).
fn answers_something(selection: &healthroute_table::Selection<healthroute_table::Value>) -> bool {
    use healthroute_table::{Selection, Target};
    match selection {
        Selection::MultiValue { pool, .. } => !pool.is_empty(),
        other => other.answers().iter().any(|a| match &a.target {
            Target::Values(values) => !values.is_empty(),
            Target::Alias(_) => true,
        }),
    }
}
