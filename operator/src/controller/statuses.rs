//! What each object's status says, judged against the published table (P5), and when it is
//! handed to the status writer.

use std::sync::Arc;

use healthroute_table::{CompiledGroup, Value};
use jiff::Timestamp;
use kube::Resource;
use serde_json::{Value as Json, json};

use super::control::Control;
use crate::index::Index;
use crate::status::{self, Publication};
use crate::status_writer::StatusUpdate;
use healthroute_api::RecordGroupStatus;
use healthroute_compiler::ObjectKey;

impl Control {
    /// Writes the status of every awaiting group whose version the publisher has caught up
    /// with, or that a failing publish leaves behind (those stay awaiting until published).
    pub(super) fn settle_groups(&mut self) {
        if self.term == 0 || !self.seeded {
            return;
        }
        let now = Timestamp::now();
        let table = self.index.compiler.table();
        let error = self.publish_error.clone();
        for key in std::mem::take(&mut self.awaiting) {
            let gk = key.to_string();
            let wanted = table.groups.get(gk.as_str());
            let published = self.published.groups.get(gk.as_str());
            let in_sync = match (wanted, published) {
                (None, None) => true,
                (Some(a), Some(b)) => same(a, b),
                _ => false,
            };
            let since = published.map(|_| {
                self.served_since
                    .get(gk.as_str())
                    .copied()
                    .unwrap_or(self.published.generation)
            });
            let publication = match (in_sync, error.as_deref()) {
                (true, _) => Publication::InSync { since },
                (false, Some(error)) => {
                    self.awaiting.insert(key.clone());
                    Publication::Failed {
                        error,
                        serving_since: since,
                    }
                }
                (false, None) => {
                    self.awaiting.insert(key);
                    continue;
                }
            };
            if !self.index.groups.contains_key(&key) {
                self.sent.remove(&("RecordGroup", key));
                continue;
            }
            let old = self.sent_status(&key);
            if let Some(update) = group_update(&self.index, &key, publication, old, now) {
                let watched =
                    watched_status(self.index.groups.get(&key).and_then(|g| g.status.as_ref()));
                self.push(update, watched);
            }
        }
    }

    /// The status last sent for a RecordGroup this term, else the one on the server.
    pub(super) fn sent_status(&self, key: &ObjectKey) -> Option<RecordGroupStatus> {
        match self.sent.get(&("RecordGroup", key.clone())) {
            Some(j) => serde_json::from_value(j.clone()).ok(),
            None => self.index.groups.get(key).and_then(|g| g.status.clone()),
        }
    }

    pub(super) fn check_status(&mut self, key: &ObjectKey, now: Timestamp) {
        let Some(c) = self.index.checks.get(key) else {
            self.sent.remove(&("HealthCheck", key.clone()));
            return;
        };
        let Some(health) = self.index.compiler.check_health(key) else {
            return;
        };
        let old = match self.sent.get(&("HealthCheck", key.clone())) {
            Some(j) => serde_json::from_value(j.clone()).ok(),
            None => c.status.clone(),
        };
        let mut body = status::health_check(health, old.as_ref(), c.metadata.generation, now);
        if let (Some(m), Some(obj)) = (self.metric_status.get(key), body.as_object_mut()) {
            obj.insert(
                "metric".into(),
                serde_json::to_value(m).unwrap_or(Json::Null),
            );
        }
        let update = StatusUpdate {
            kind: "HealthCheck",
            key: key.clone(),
            status: body,
            events: Vec::new(),
            reference: c.object_ref(&()),
        };
        let watched = watched_status(c.status.as_ref());
        self.push(update, watched);
    }

    pub(super) fn shift_status(&mut self, key: &ObjectKey, now: Timestamp) {
        let Some(s) = self.index.shifts.get(key) else {
            return;
        };
        let old: Option<healthroute_api::ZonalShiftStatus> =
            match self.sent.get(&("ZonalShift", key.clone())) {
                Some(j) => serde_json::from_value(j.clone()).ok(),
                None => s.status.clone(),
            };
        let body = match self.index.compiler.shift_status(key, now) {
            Some(Ok(st)) => serde_json::to_value(status::zonal_shift(
                st,
                old.as_ref(),
                s.metadata.generation,
                now,
            ))
            .unwrap_or(Json::Null),
            Some(Err(e)) => json!({"conditions": status::merge_conditions(
                old.as_ref().map_or(&[][..], |st| &st.conditions),
                vec![status::Desired { kind: status::types::APPLIED, status: false, reason: "InvalidSpec", message: e.to_string() }],
                now,
                s.metadata.generation,
            )}),
            None => return,
        };
        let events = serde_json::from_value(body.clone())
            .map(|new| status::shift_events(old.as_ref(), &new, &s.spec.away_from))
            .unwrap_or_default();
        let update = StatusUpdate {
            kind: "ZonalShift",
            key: key.clone(),
            status: body,
            events,
            reference: s.object_ref(&()),
        };
        let watched = watched_status(s.status.as_ref());
        self.push(update, watched);
    }

    /// Hands `update` to the writer unless it says what was last sent, or what the object
    /// already shows (a new leader rewrites nothing that is right).
    pub(super) fn push(&mut self, update: StatusUpdate, watched: Option<Json>) {
        let key = (update.kind, update.key.clone());
        let fingerprint = without_times(&update.status);
        let same_as = |j: &Json| without_times(&select_like(j, &update.status)) == fingerprint;
        if self.sent.get(&key).is_some_and(same_as) {
            return;
        }
        if !self.sent.contains_key(&key) && watched.as_ref().is_some_and(same_as) {
            self.sent.insert(key, update.status);
            return;
        }
        self.sent.insert(key, update.status.clone());
        self.queue.push(update);
    }
}

/// The RecordGroup's status update for `publication`, with its Events.
fn group_update(
    index: &Index,
    key: &ObjectKey,
    publication: Publication<'_>,
    old: Option<RecordGroupStatus>,
    now: Timestamp,
) -> Option<StatusUpdate> {
    let g = index.groups.get(key)?;
    let data = index.compiler.group_status(key)?;
    let outcome = index.compiler.outcome(key)?;
    let st = status::record_group(
        data,
        outcome,
        publication,
        old.as_ref(),
        g.metadata.generation,
        now,
    );
    let events = status::group_events(old.as_ref(), &st);
    Some(StatusUpdate {
        kind: "RecordGroup",
        key: key.clone(),
        status: serde_json::to_value(&st).unwrap_or(Json::Null),
        events,
        reference: g.object_ref(&()),
    })
}

/// Whether two compiled versions of a group are the same (cheaply when they are one `Arc`).
pub(super) fn same(a: &Arc<CompiledGroup<Value>>, b: &Arc<CompiledGroup<Value>>) -> bool {
    Arc::ptr_eq(a, b) || a == b
}

fn watched_status<T: serde::Serialize>(status: Option<&T>) -> Option<Json> {
    status.and_then(|s| serde_json::to_value(s).ok())
}

/// The fields of `have` that `like` sets: what another writer (a checker) owns is left out.
fn select_like(have: &Json, like: &Json) -> Json {
    match (have, like) {
        (Json::Object(h), Json::Object(l)) => Json::Object(
            l.keys()
                .filter_map(|k| h.get(k).map(|v| (k.clone(), v.clone())))
                .collect(),
        ),
        _ => have.clone(),
    }
}

/// A status without the times that change only on transitions, for comparing two.
fn without_times(v: &Json) -> Json {
    match v {
        Json::Object(map) => Json::Object(
            map.iter()
                .filter(|(k, v)| k.as_str() != "lastTransitionTime" && !v.is_null())
                .map(|(k, v)| (k.clone(), without_times(v)))
                .collect(),
        ),
        Json::Array(items) => Json::Array(items.iter().map(without_times).collect()),
        other => other.clone(),
    }
}
