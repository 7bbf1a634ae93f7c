//! What the compiler reads, and the calls that change it: each records the new input and marks
//! what must be evaluated again (dirty groups, dirty checks); nothing is compiled until
//! [`Compiler::compile`].
//!
//! ```text
//!   upsert_group / delete_group     ─▶ the group, and the groups that claim its name (S8)
//!   upsert_check* / set_check_view  ─▶ the check (its users follow when its health changes)
//!   upsert_service / delete_service ─▶ the groups that read the Service
//!   upsert_shift / delete_shift     ─▶ the groups it targets, before and after
//!   upsert_autoshift / delete_autoshift ─▶ the groups it targets (their zone health), the engines
//!   upsert_node / delete_node       ─▶ the engines (AS3 c)
//!   recover_served                  ─▶ last good versions from a published table (P6)
//! ```

use std::net::IpAddr;
use std::sync::Arc;

use healthroute_api::{CheckType, CheckerView, Labels, ObjectKey, RecordGroupSpec, ShiftTarget};
use healthroute_table::{CompiledGroup, Value, normalize_name};
use jiff::Timestamp;

use crate::Compiler;
use crate::autoshift::{AutoshiftInput, NodeInput};
use crate::deps::Dep;
use crate::health::CheckInput;
use crate::shift::{self, ShiftInput};

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

impl Compiler {
    /// Drops every output (outcomes, last good versions, check health, shift clocks, the
    /// engines' state, the table) and keeps the inputs: the next compile starts from them as a
    /// compiler that has just been fed them would. A standby operator holds its inputs only
    /// (it compiles once it leads); what a term found right comes back with the next one's
    /// read-back (P6) and the engines' resume (AS11).
    pub fn forget_outputs(&mut self) {
        let fresh = Compiler {
            zones: self.zones.clone(),
            default_ttl: self.default_ttl,
            explain: self.explain,
            no_statuses: self.no_statuses,
            ..Default::default()
        };
        let old = std::mem::replace(self, fresh);
        self.assume_impaired(old.assumed_impaired);
        for (key, endpoints) in old.services {
            self.upsert_service(key, endpoints);
        }
        for (key, check) in old.checks {
            self.upsert_check(key, check);
        }
        self.heartbeats = old.heartbeats;
        for (key, shift) in old.shifts {
            self.upsert_shift(key, shift);
        }
        for (key, autoshift) in old.autoshifts {
            self.upsert_autoshift(key, autoshift);
        }
        for (name, node) in old.nodes {
            self.upsert_node(name, node);
        }
        for (key, group) in old.groups {
            self.upsert_group(key, group);
        }
    }

    /// Takes in a group; false when it is the same as held (nothing to compile).
    pub fn upsert_group(&mut self, key: ObjectKey, input: GroupInput) -> bool {
        if self.groups.get(&key) == Some(&input) {
            return false;
        }
        self.unindex_name(&key);
        if let Ok(name) = normalize_name(&input.spec.name) {
            self.names.insert(name.clone(), key.clone());
            self.dirty_name(&name);
        }
        self.groups.insert(key.clone(), input);
        self.dirty.insert(key);
        true
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
        if check.spec.check_type == CheckType::Calculated {
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

    /// Whether a heartbeat of `checker` at `at` makes it reachable (H7) at `now` for other
    /// check intervals than the last compile counted. A renewal that does not changes no
    /// output, so no compile need follow it at once: the next compile reads it, and the time
    /// it goes stale ([`Compiler::next_deadline`]) moves with it.
    pub fn heartbeat_changes_reachability(
        &self,
        checker: &str,
        at: Timestamp,
        now: Timestamp,
    ) -> bool {
        self.reachable.get(checker) != Some(&self.reachable_intervals(at, now))
    }

    pub fn upsert_shift(&mut self, key: ObjectKey, input: ShiftInput) {
        if self.shifts.get(&key) == Some(&input) {
            return;
        }
        if let Some(old) = self.shifts.get(&key) {
            let old_target = old.spec.target.clone();
            self.dirty_targets(&key.namespace, &old_target);
        }
        self.dirty_targets(&key.namespace, &input.spec.target);
        self.shifts.insert(key, input);
    }

    pub fn delete_shift(&mut self, key: &ObjectKey) {
        if let Some(old) = self.shifts.remove(key) {
            self.shift_clocks.remove(key);
            self.dirty_targets(&key.namespace, &old.spec.target);
        }
    }

    /// Sets a ZonalAutoshift. Its engine starts from `input.status` the first time, and keeps
    /// its own state afterwards (as shift clocks do).
    pub fn upsert_autoshift(&mut self, key: ObjectKey, input: AutoshiftInput) {
        if self.autoshifts.get(&key) == Some(&input) {
            return;
        }
        if let Some(old) = self.autoshifts.get(&key) {
            let old_target = old.spec.target.clone();
            self.dirty_targets(&key.namespace, &old_target);
        }
        // Its groups count their zone health from now on (AS2).
        self.dirty_targets(&key.namespace, &input.spec.target);
        self.autoshifts.insert(key, input);
        self.autoshift_dirty = true;
    }

    /// Removes a ZonalAutoshift: its shifts end with it (AS4).
    pub fn delete_autoshift(&mut self, key: &ObjectKey) {
        if let Some(old) = self.autoshifts.remove(key) {
            self.engines.remove(key);
            self.dirty_targets(&key.namespace, &old.spec.target);
            self.autoshift_dirty = true;
        }
    }

    /// Sets a Node's zone and readiness (AS3 c).
    pub fn upsert_node(&mut self, name: impl Into<String>, input: NodeInput) {
        let name = name.into();
        if self.nodes.get(&name) != Some(&input) {
            self.nodes.insert(name, input);
            self.autoshift_dirty = true;
        }
    }

    pub fn delete_node(&mut self, name: &str) {
        if self.nodes.remove(name).is_some() {
            self.autoshift_dirty = true;
        }
    }

    /// The simulator's what-if: every ZonalAutoshift takes `zone` as impaired (AS11).
    pub fn assume_impaired(&mut self, zone: Option<String>) {
        if self.assumed_impaired != zone {
            self.assumed_impaired = zone;
            self.autoshift_dirty = true;
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
            let Some(key) = ObjectKey::parse_group_key(gk) else {
                continue;
            };
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

    fn unindex_name(&mut self, key: &ObjectKey) {
        let Some(old) = self.groups.get(key) else {
            return;
        };
        if let Ok(name) = normalize_name(&old.spec.name) {
            self.names.remove(&name, key);
            self.dirty_name(&name);
        }
    }

    /// Marks every group that claims `name`: one of them may win or lose a conflict now.
    fn dirty_name(&mut self, name: &str) {
        self.dirty.extend(self.names.claimants(name).cloned());
    }

    /// Marks the groups of `namespace` that `target` (a shift's, a ZonalAutoshift's) names.
    pub(crate) fn dirty_targets(&mut self, namespace: &str, target: &ShiftTarget) {
        let hit: Vec<ObjectKey> = self
            .groups
            .range(ObjectKey::new(namespace, "")..)
            .take_while(|(k, _)| &*k.namespace == namespace)
            .filter(|(k, g)| shift::target_matches(target, &k.name, &g.labels))
            .map(|(k, _)| k.clone())
            .collect();
        self.dirty.extend(hit);
    }

    /// Marks the groups that read `key` as a `dep`.
    pub(crate) fn dirty_users(&mut self, key: &ObjectKey, dep: Dep) {
        self.dirty.extend(self.deps.users(dep, key).cloned());
    }
}
