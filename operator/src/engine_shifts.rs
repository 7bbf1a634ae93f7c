//! The autoshift engines' shifts as ZonalShift objects (SEMANTICS AS13), so that `kubectl get
//! zs` lists every shift, of every type, in one place.
//!
//! ```text
//!  compile (leader) ──▶ each ZonalAutoshift's shifts (autoshift, practice run), with their status
//!       mirrors seen (ZonalShifts labelled healthroute.io/engine-shift, owned by a ZonalAutoshift)
//!                    ──▶ plan: apply the object (a typed ZonalShift) and/or its status, delete
//!                        what no engine holds ──▶ Handover (only the writes that changed)
//!            ──▶ WriteQueue ──▶ the one writer (crate::writes) ──▶ SSA / DELETE
//!  the status re-check (status::Ledger) ──▶ wanted: the same plan against the mirrors as
//!       watched; what another writer changed or deleted is queued again
//! ```
//!
//! A mirror is a record, never an input: the index keeps it apart from the customers'
//! ZonalShifts and the compiler never sees it ([`healthroute_api::is_engine_shift`]). It is
//! owned by its ZonalAutoshift (garbage collection removes it with the configuration) and
//! deleted when its shift ends; the configuration's status keeps the outcome. A customer's
//! ZonalShift that already holds a mirror's name is left alone: that shift is then shown only
//! in the configuration's status.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};

use crate::index::Index;
use crate::status::OwnStatus;
use crate::writes::{Handover, WriteKind, WriteQueue};
use healthroute_api::{
    ENGINE_SHIFT_LABEL, EngineShiftStatus, ShiftType, ZonalAutoshift, ZonalShift, ZonalShiftSpec,
    ZonalShiftStatus, engine_shift_object_name,
};
use healthroute_compiler::ObjectKey;

pub use crate::writes::{ENGINE_SHIFT_FIELD_MANAGER, ShiftWrite};

/// The longest `expiresIn` a ZonalShift accepts: an autoshift's mirror says it, as the autoshift
/// has no expiry of its own (it ends when its zone has stayed healthy for the hold time).
const AUTOSHIFT_EXPIRES_IN: &str = "72h";

/// One configuration's shifts, as the compiler reports them after a compile.
pub struct HeldShifts<'a> {
    pub config: &'a ZonalAutoshift,
    pub shifts: Vec<EngineShiftStatus>,
}

/// The writes that bring the mirrors seen (`mirrors`) to the shifts the engines hold
/// (`held`, by configuration): a missing or changed mirror is applied (compared typed: spec,
/// label, owner), its status applied when it differs, a mirror no engine holds is deleted.
/// `customer` are the customers' ZonalShifts: a mirror's name one of them holds is not written.
pub fn plan(
    held: &BTreeMap<ObjectKey, HeldShifts<'_>>,
    mirrors: &BTreeMap<ObjectKey, ZonalShift>,
    customer: &BTreeMap<ObjectKey, ZonalShift>,
) -> Vec<ShiftWrite> {
    let mut writes = Vec::new();
    let mut wanted = BTreeSet::new();
    for (config_key, h) in held {
        let Some(uid) = h.config.metadata.uid.as_deref() else {
            continue; // not created on the server yet: nothing to own the mirror
        };
        for shift in &h.shifts {
            let key = config_key.sibling(&engine_shift_object_name(&shift.name));
            if customer.contains_key(&key) {
                continue;
            }
            wanted.insert(key.clone());
            let object = desired_mirror(&key, config_key, uid, h.config, shift);
            let seen = mirrors.get(&key);
            let object = seen
                .is_none_or(|s| !same_object(s, &object))
                .then_some(object);
            let status = seen.is_none_or(|s| !same_status(s, &shift.status));
            if object.is_some() || status {
                writes.push(ShiftWrite::Apply {
                    key: key.clone(),
                    object: object.map(Box::new),
                    status: status.then(|| Box::new(shift.status.clone())),
                });
            }
        }
    }
    for (key, seen) in mirrors {
        if !wanted.contains(key) {
            writes.push(ShiftWrite::Delete {
                key: key.clone(),
                uid: seen.metadata.uid.clone(),
            });
        }
    }
    writes
}

/// The mirror as the leader wants it (metadata and spec): the label, the owner, the zone, the
/// configuration's target, how long it lasts and a comment that says what holds it and what
/// ends it.
fn desired_mirror(
    key: &ObjectKey,
    config_key: &ObjectKey,
    uid: &str,
    config: &ZonalAutoshift,
    shift: &EngineShiftStatus,
) -> ZonalShift {
    let config_name = config_key.name.to_string();
    let (expires_in, comment) = match shift.status.shift_type {
        Some(ShiftType::PracticeRun) => (
            practice_expires_in(&shift.status),
            format!(
                "practice run of ZonalAutoshift {config_name}; cancel it with `kubectl healthroute practice cancel {config_name}`"
            ),
        ),
        _ => (
            AUTOSHIFT_EXPIRES_IN.to_owned(),
            format!(
                "autoshift of ZonalAutoshift {config_name}: it ends when {} has stayed healthy for the hold time",
                shift.away_from
            ),
        ),
    };
    let spec = ZonalShiftSpec {
        away_from: shift.away_from.clone(),
        target: config.spec.target.clone(),
        expires_in,
        comment: Some(comment),
        cancel: false,
    };
    let mut mirror = ZonalShift::new(&key.name, spec);
    mirror.metadata.namespace = Some(key.namespace.to_string());
    let labels = mirror.labels_mut();
    labels.insert(ENGINE_SHIFT_LABEL.into(), config_name.clone());
    labels.insert(
        "app.kubernetes.io/managed-by".into(),
        "healthroute-operator".into(),
    );
    mirror.metadata.owner_references = Some(vec![OwnerReference {
        api_version: ZonalAutoshift::api_version(&()).into_owned(),
        kind: ZonalAutoshift::kind(&()).into_owned(),
        name: config_name,
        uid: uid.to_owned(),
        controller: Some(true),
        ..OwnerReference::default()
    }]);
    mirror
}

/// A practice run's length as a ZonalShift's `expiresIn` (at least the 1m a ZonalShift
/// accepts; its real end is the status's `expiryTime`).
fn practice_expires_in(status: &ZonalShiftStatus) -> String {
    let seconds = match (&status.start_time, &status.expiry_time) {
        (Some(start), Some(end)) => end.0.duration_since(start.0).as_secs(),
        _ => 0,
    };
    let seconds = seconds.clamp(60, 72 * 3600);
    healthroute_api::format_duration(jiff::SignedDuration::from_secs(seconds))
}

/// Whether the mirror seen already says what `want` says (the fields this writer sets;
/// another manager's fields, `cancel` among them, are not compared: they would make every
/// plan write again).
fn same_object(seen: &ZonalShift, want: &ZonalShift) -> bool {
    let label = |s: &ZonalShift| s.labels().get(ENGINE_SHIFT_LABEL).cloned();
    let owner = want.owner_references().first();
    seen.spec.away_from == want.spec.away_from
        && seen.spec.target == want.spec.target
        && seen.spec.expires_in == want.spec.expires_in
        && seen.spec.comment == want.spec.comment
        && label(seen) == label(want)
        && seen
            .owner_references()
            .iter()
            .any(|o| owner.is_some_and(|w| o.uid == w.uid) && o.controller == Some(true))
}

/// Whether the status seen is the engine's, compared as every status the operator writes is
/// ([`OwnStatus::shown_by`]: the fields it sets, times to the second).
fn same_status(seen: &ZonalShift, want: &ZonalShiftStatus) -> bool {
    seen.status.as_ref().is_some_and(|seen| want.shown_by(seen))
}

/// The writes that bring the mirrors as watched to the shifts the engines hold after the
/// index's last compile.
pub fn wanted(index: &Index) -> Vec<ShiftWrite> {
    let compiler = &index.compiler;
    let held: BTreeMap<ObjectKey, HeldShifts<'_>> = index
        .autoshifts
        .iter()
        .map(|(key, config)| {
            let shifts = compiler
                .autoshift_status(key)
                .map(|s| s.shifts)
                .unwrap_or_default();
            (key.clone(), HeldShifts { config, shifts })
        })
        .collect();
    plan(&held, &index.engine_shifts, &index.shifts)
}

/// The control loop's side: what was last handed to the writer.
pub struct EngineShifts {
    queue: WriteQueue,
    handed: Handover<ShiftWrite>,
}

impl EngineShifts {
    /// With the queue of the one writer.
    pub fn new(queue: WriteQueue) -> Self {
        EngineShifts {
            queue,
            handed: Handover::new(WriteKind::EngineShift),
        }
    }

    /// A new term plans from scratch (the queue starts it empty); a follower sends nothing.
    pub fn new_term(&mut self, _leading: bool) {
        self.handed.clear();
    }

    /// After a compile of a complete index, as the leader: queues the writes of the plan that
    /// differ from those last handed over.
    pub fn after_compile(&mut self, index: &Index) {
        let plan = wanted(index)
            .into_iter()
            .map(|w| (w.key().clone(), w))
            .collect();
        self.handed.plan(&self.queue, plan);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use healthroute_api::{ShiftState, ZonalAutoshiftSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;

    fn config(uid: &str) -> ZonalAutoshift {
        let mut a = ZonalAutoshift::new(
            "app",
            serde_json::from_value::<ZonalAutoshiftSpec>(json!({
                "target": {"selector": {"matchLabels": {"app": "shop"}}},
                "autoshift": "Enabled",
                "practiceRun": {"outcomeAlarms": [{"name": "slo"}]},
            }))
            .expect("spec"),
        );
        a.metadata.namespace = Some("shop".into());
        a.metadata.uid = Some(uid.into());
        a
    }

    fn held(shift_type: ShiftType, zone: &str) -> EngineShiftStatus {
        let start: jiff::Timestamp = "2026-12-01T10:00:00Z".parse().expect("time");
        let practice = shift_type == ShiftType::PracticeRun;
        EngineShiftStatus {
            name: format!(
                "app:{}",
                if practice {
                    "practice-run"
                } else {
                    "autoshift"
                }
            ),
            away_from: zone.into(),
            status: ZonalShiftStatus {
                shift_type: Some(shift_type),
                status: Some(ShiftState::Active),
                start_time: Some(Time(start)),
                expiry_time: practice.then(|| Time(start + jiff::SignedDuration::from_mins(30))),
                applied_groups: Some("2/3".into()),
                ..Default::default()
            },
        }
    }

    /// The mirror as the API server would return it after the plan's writes.
    fn as_written(writes: &[ShiftWrite]) -> BTreeMap<ObjectKey, ZonalShift> {
        let mut out: BTreeMap<ObjectKey, ZonalShift> = BTreeMap::new();
        for w in writes {
            match w {
                ShiftWrite::Apply {
                    key,
                    object,
                    status,
                } => {
                    if let Some(object) = object {
                        let mut s = object.as_ref().clone();
                        s.metadata.uid = Some(format!("uid-{}", key.name));
                        out.insert(key.clone(), s);
                    }
                    if let Some(status) = status {
                        let applied = out.get_mut(key).expect("applied first");
                        applied.status = Some(status.as_ref().clone());
                    }
                }
                ShiftWrite::Delete { key, .. } => {
                    out.remove(key);
                }
            }
        }
        out
    }

    /// Whether `write` applies the mirror's status and nothing else.
    fn status_only(write: &ShiftWrite) -> bool {
        matches!(
            write,
            ShiftWrite::Apply {
                object: None,
                status: Some(_),
                ..
            }
        )
    }

    // SEM-AS13: every shift an engine holds is a ZonalShift of its type, owned by its
    // configuration, that the plan leaves alone once written, and deletes when the shift ends.
    #[test]
    fn mirrors_follow_the_engines_shifts() {
        let cfg = config("u-1");
        let key = ObjectKey::new("shop", "app");
        let mut held_now = BTreeMap::new();
        held_now.insert(
            key.clone(),
            HeldShifts {
                config: &cfg,
                shifts: vec![
                    held(ShiftType::Autoshift, "zone-a"),
                    held(ShiftType::PracticeRun, "zone-b"),
                ],
            },
        );
        let none = BTreeMap::new();
        let writes = plan(&held_now, &none, &none);
        assert_eq!(writes.len(), 2, "{writes:#?}");
        assert!(
            writes.iter().all(|w| matches!(
                w,
                ShiftWrite::Apply {
                    object: Some(_),
                    status: Some(_),
                    ..
                }
            )),
            "each mirror's object, then its status: {writes:#?}"
        );
        // The body the JSON-built writer sent, field for field (the same fields owned).
        let ShiftWrite::Apply {
            object: Some(first),
            ..
        } = &writes[0]
        else {
            panic!("an apply: {writes:#?}");
        };
        assert_eq!(
            serde_json::to_value(first.as_ref()).expect("encodes"),
            json!({
                "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalShift",
                "metadata": {
                    "name": "app-autoshift", "namespace": "shop",
                    "labels": {ENGINE_SHIFT_LABEL: "app",
                               "app.kubernetes.io/managed-by": "healthroute-operator"},
                    "ownerReferences": [{"apiVersion": "healthroute.io/v1alpha1",
                        "kind": "ZonalAutoshift", "name": "app", "uid": "u-1", "controller": true}],
                },
                "spec": {
                    "awayFrom": "zone-a", "target": cfg.spec.target, "expiresIn": "72h",
                    "comment": "autoshift of ZonalAutoshift app: it ends when zone-a has stayed healthy for the hold time",
                },
            })
        );
        let mirrors = as_written(&writes);
        let auto = &mirrors[&ObjectKey::new("shop", "app-autoshift")];
        let practice = &mirrors[&ObjectKey::new("shop", "app-practice-run")];
        for m in [auto, practice] {
            assert!(healthroute_api::is_engine_shift(m), "{m:?}");
            assert_eq!(m.labels()[ENGINE_SHIFT_LABEL], "app");
            let owner = &m.metadata.owner_references.as_ref().expect("owner")[0];
            assert_eq!(
                (owner.kind.as_str(), owner.uid.as_str()),
                ("ZonalAutoshift", "u-1")
            );
            assert_eq!(m.spec.target, cfg.spec.target);
        }
        assert_eq!(auto.spec.away_from, "zone-a");
        assert_eq!(
            auto.status.as_ref().and_then(|s| s.shift_type),
            Some(ShiftType::Autoshift)
        );
        assert_eq!(practice.spec.expires_in, "30m");
        assert_eq!(
            practice.status.as_ref().and_then(|s| s.shift_type),
            Some(ShiftType::PracticeRun)
        );
        // Level-triggered: written once, then nothing to do.
        assert_eq!(plan(&held_now, &mirrors, &none), Vec::new());
        // A status change (another group applied) is one status write.
        let mut moved = held(ShiftType::Autoshift, "zone-a");
        moved.status.applied_groups = Some("3/3".into());
        held_now.get_mut(&key).expect("held").shifts[0] = moved;
        let writes = plan(&held_now, &mirrors, &none);
        assert!(
            matches!(writes.as_slice(), [w @ ShiftWrite::Apply { key, .. }] if key.name.as_ref() == "app-autoshift" && status_only(w)),
            "{writes:#?}"
        );
        // The practice run ends: its mirror goes, only that one, by its uid.
        held_now.get_mut(&key).expect("held").shifts.truncate(1);
        let writes = plan(&held_now, &mirrors, &none);
        assert!(writes.contains(&ShiftWrite::Delete {
            key: ObjectKey::new("shop", "app-practice-run"),
            uid: Some("uid-app-practice-run".into()),
        }));
        assert!(!writes.iter().any(
            |w| matches!(w, ShiftWrite::Delete { key, .. } if key.name.as_ref() == "app-autoshift")
        ));
    }

    // SEM-AS13: a customer's ZonalShift that holds a mirror's name is never written over.
    #[test]
    fn a_customer_shift_of_that_name_is_left_alone() {
        let cfg = config("u-1");
        let mut held_now = BTreeMap::new();
        held_now.insert(
            ObjectKey::new("shop", "app"),
            HeldShifts {
                config: &cfg,
                shifts: vec![held(ShiftType::Autoshift, "zone-a")],
            },
        );
        let mut customer = BTreeMap::new();
        let theirs = ZonalShift::new(
            "app-autoshift",
            serde_json::from_value(json!({
                "awayFrom": "zone-c", "target": {"recordGroup": "web"}, "expiresIn": "1h",
            }))
            .expect("spec"),
        );
        customer.insert(ObjectKey::new("shop", "app-autoshift"), theirs);
        assert_eq!(plan(&held_now, &BTreeMap::new(), &customer), Vec::new());
    }

    #[test]
    fn a_practice_run_length_reads_as_expires_in() {
        let mut s = held(ShiftType::PracticeRun, "zone-a").status;
        assert_eq!(practice_expires_in(&s), "30m");
        let start = s.start_time.clone().expect("start").0;
        s.expiry_time = Some(Time(start + jiff::SignedDuration::from_secs(5)));
        assert_eq!(
            practice_expires_in(&s),
            "1m",
            "a ZonalShift lasts at least 1m"
        );
        s.expiry_time = Some(Time(start + jiff::SignedDuration::from_secs(5430)));
        assert_eq!(practice_expires_in(&s), "1h30m30s");
    }
}
