//! The autoshift engines' shifts as ZonalShift objects (SEMANTICS AS13), so that `kubectl get
//! zs` lists every shift, of every type, in one place.
//!
//! ```text
//!  compile (leader) ──▶ each ZonalAutoshift's shifts (autoshift, practice run), with their status
//!       mirrors seen (ZonalShifts labelled healthroute.io/engine-shift, owned by a ZonalAutoshift)
//!                    ──▶ plan: apply the object, apply its status, delete what no engine holds
//!            ──watch (newest plan only, sent when it differs)──▶ writer task (crate::writes)
//! ```
//!
//! A mirror is a record, never an input: the index keeps it apart from the customers'
//! ZonalShifts and the compiler never sees it ([`healthroute_api::is_engine_shift`]). It is
//! owned by its ZonalAutoshift (garbage collection removes it with the configuration) and
//! deleted when its shift ends; the configuration's status keeps the outcome. A customer's
//! ZonalShift that already holds a mirror's name is left alone: that shift is then shown only
//! in the configuration's status.

use std::collections::BTreeMap;

use kube::api::{Patch, PatchParams};
use kube::{Api, Client, Resource};
use serde_json::{Value as Json, json};
use tokio::sync::watch;

use crate::writes::{ObjectWrite, delete_params};
use healthroute_api::{
    ENGINE_SHIFT_LABEL, EngineShiftStatus, ShiftType, ZonalAutoshift, ZonalShift, ZonalShiftStatus,
    engine_shift_object_name,
};
use healthroute_compiler::ObjectKey;

/// The field manager of the mirrors (apart from the statuses the status writer sends, so that
/// `kubectl get --show-managed-fields` tells them apart).
pub const ENGINE_SHIFT_FIELD_MANAGER: &str = "healthroute-operator/engine-shifts";

/// The longest `expiresIn` a ZonalShift accepts: an autoshift's mirror says it, as the autoshift
/// has no expiry of its own (it ends when its zone has stayed healthy for the hold time).
const AUTOSHIFT_EXPIRES_IN: &str = "72h";

/// One write the writer task sends.
#[derive(Debug, Clone, PartialEq)]
pub enum ShiftWrite {
    /// Server-side apply of the mirror's metadata and spec.
    Apply { key: ObjectKey, body: Json },
    /// Server-side apply of the mirror's status (the engine's shift status, AS5).
    ApplyStatus { key: ObjectKey, body: Json },
    /// Delete the mirror, only if it is still the object seen (its uid).
    Delete { key: ObjectKey, uid: Option<String> },
}

impl ObjectWrite for ShiftWrite {
    const WHAT: &'static str = "engine shift";

    fn key(&self) -> &ObjectKey {
        match self {
            ShiftWrite::Apply { key, .. }
            | ShiftWrite::ApplyStatus { key, .. }
            | ShiftWrite::Delete { key, .. } => key,
        }
    }

    async fn send(&self, client: &Client) -> Result<(), kube::Error> {
        let key = self.key();
        let api: Api<ZonalShift> = Api::namespaced(client.clone(), &key.namespace);
        let params = PatchParams::apply(ENGINE_SHIFT_FIELD_MANAGER).force();
        match self {
            ShiftWrite::Apply { body, .. } => api
                .patch(&key.name, &params, &Patch::Apply(body))
                .await
                .map(|_| ()),
            ShiftWrite::ApplyStatus { body, .. } => api
                .patch_status(&key.name, &params, &Patch::Apply(body))
                .await
                .map(|_| ()),
            ShiftWrite::Delete { uid, .. } => api
                .delete(&key.name, &delete_params(uid.clone()))
                .await
                .map(|_| ()),
        }
    }
}

/// One configuration's shifts, as the compiler reports them after a compile.
pub struct HeldShifts<'a> {
    pub config: &'a ZonalAutoshift,
    pub shifts: Vec<EngineShiftStatus>,
}

/// The writes that bring the mirrors seen (`mirrors`) to the shifts the engines hold
/// (`held`, by configuration): a missing or changed mirror is applied, its status applied when
/// it differs, a mirror no engine holds is deleted. `customer` are the customers' ZonalShifts:
/// a mirror's name one of them holds is not written.
pub fn plan(
    held: &BTreeMap<ObjectKey, HeldShifts<'_>>,
    mirrors: &BTreeMap<ObjectKey, ZonalShift>,
    customer: &BTreeMap<ObjectKey, ZonalShift>,
) -> Vec<ShiftWrite> {
    let mut writes = Vec::new();
    let mut wanted = std::collections::BTreeSet::new();
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
            let object = object_body(&key, config_key, uid, h.config, shift);
            let seen = mirrors.get(&key);
            if seen.is_none_or(|s| !same_object(s, &object)) {
                writes.push(ShiftWrite::Apply {
                    key: key.clone(),
                    body: object,
                });
            }
            if seen.is_none_or(|s| !same_status(s, &shift.status)) {
                writes.push(ShiftWrite::ApplyStatus {
                    key: key.clone(),
                    body: status_body(&key, &shift.status),
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

/// The mirror's metadata and spec: the label, the owner, the zone, the configuration's target,
/// how long it lasts and a comment that says what holds it and what ends it.
fn object_body(
    key: &ObjectKey,
    config_key: &ObjectKey,
    uid: &str,
    config: &ZonalAutoshift,
    shift: &EngineShiftStatus,
) -> Json {
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
    json!({
        "apiVersion": ZonalShift::api_version(&()),
        "kind": ZonalShift::kind(&()),
        "metadata": {
            "name": key.name.to_string(),
            "namespace": key.namespace.to_string(),
            "labels": {
                ENGINE_SHIFT_LABEL: config_name,
                "app.kubernetes.io/managed-by": "healthroute-operator",
            },
            "ownerReferences": [{
                "apiVersion": ZonalAutoshift::api_version(&()),
                "kind": ZonalAutoshift::kind(&()),
                "name": config_name,
                "uid": uid,
                "controller": true,
            }],
        },
        "spec": {
            "awayFrom": shift.away_from,
            "target": config.spec.target,
            "expiresIn": expires_in,
            "comment": comment,
        },
    })
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

fn status_body(key: &ObjectKey, status: &ZonalShiftStatus) -> Json {
    json!({
        "apiVersion": ZonalShift::api_version(&()),
        "kind": ZonalShift::kind(&()),
        "metadata": {"name": key.name.to_string()},
        "status": status,
    })
}

/// Whether the mirror seen already says what `object` says (the fields this writer sets;
/// another manager's fields are not compared: they would make every plan write again).
fn same_object(seen: &ZonalShift, object: &Json) -> bool {
    let spec = &object["spec"];
    let label = object["metadata"]["labels"][ENGINE_SHIFT_LABEL].as_str();
    let owner_uid = object["metadata"]["ownerReferences"][0]["uid"].as_str();
    seen.spec.away_from == spec["awayFrom"].as_str().unwrap_or_default()
        && serde_json::to_value(&seen.spec.target).ok().as_ref() == Some(&spec["target"])
        && Some(seen.spec.expires_in.as_str()) == spec["expiresIn"].as_str()
        && seen.spec.comment.as_deref() == spec["comment"].as_str()
        && seen
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(ENGINE_SHIFT_LABEL))
            .map(String::as_str)
            == label
        && seen
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|o| Some(o.uid.as_str()) == owner_uid && o.controller == Some(true))
}

/// Whether the status seen is the engine's, compared as the API server keeps it (times to the
/// second).
fn same_status(seen: &ZonalShift, want: &ZonalShiftStatus) -> bool {
    let as_json = |s: &ZonalShiftStatus| serde_json::to_value(s).ok();
    seen.status.as_ref().and_then(as_json) == as_json(want)
}

/// The control loop's side: the channel to the writer, and the last plan sent.
pub struct EngineShifts {
    plans: watch::Sender<Vec<ShiftWrite>>,
}

impl EngineShifts {
    pub fn new(plans: watch::Sender<Vec<ShiftWrite>>) -> Self {
        EngineShifts { plans }
    }

    /// A follower sends nothing (its plan is emptied).
    pub fn new_term(&mut self, leading: bool) {
        if !leading {
            self.plans.send_if_modified(|p| {
                let had = !p.is_empty();
                p.clear();
                had
            });
        }
    }

    /// After a compile of a complete index, as the leader: hands the plan to the writer when
    /// it differs from the last one.
    pub fn after_compile(&mut self, index: &crate::index::Index) {
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
        let writes = plan(&held, &index.engine_shifts, &index.shifts);
        self.plans.send_if_modified(|p| {
            let changed = *p != writes;
            if changed {
                *p = writes;
            }
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use healthroute_api::{ShiftState, ZonalAutoshiftSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube::ResourceExt;

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
                ShiftWrite::Apply { key, body } => {
                    let mut s: ZonalShift = serde_json::from_value(body.clone()).expect("object");
                    s.metadata.uid = Some(format!("uid-{}", key.name));
                    out.insert(key.clone(), s);
                }
                ShiftWrite::ApplyStatus { key, body } => {
                    let status = serde_json::from_value(body["status"].clone()).expect("status");
                    out.get_mut(key).expect("applied first").status = Some(status);
                }
                ShiftWrite::Delete { key, .. } => {
                    out.remove(key);
                }
            }
        }
        out
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
        assert_eq!(writes.len(), 4, "{writes:#?}");
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
            matches!(writes.as_slice(), [ShiftWrite::ApplyStatus { key, .. }] if key.name.as_ref() == "app-autoshift"),
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
