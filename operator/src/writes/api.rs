//! Where a typed write meets the API server, and the only place in the operator where one
//! becomes JSON: the body of a server-side apply (an object, or its `/status`) under the
//! write's field manager, or a delete of only the object seen; then a status's Events.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde_json::Value as Json;

use super::{
    ENGINE_SHIFT_FIELD_MANAGER, PEER_FIELD_MANAGER, PeerWrite, ShiftWrite, StatusUpdate, Write,
};
use crate::FIELD_MANAGER;
use crate::error::Error;
use crate::status::{Related, Status};
use healthroute_api::{HealthCheck, RecordGroup, ZonalShift, ZonalShiftStatus};
use healthroute_compiler::ObjectKey;

/// A delete of only the object seen (its uid): one re-made meanwhile is someone else's.
pub fn delete_params(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Sends one write within `timeout` per request; returns how many Events were recorded.
pub(super) async fn send(
    client: &Client,
    recorder: &Recorder,
    write: &Write,
    timeout: Duration,
) -> Result<u64, Error> {
    let within = |what: String| {
        move |_| Error::Timeout {
            what,
            after: timeout,
        }
    };
    match write {
        Write::Status(update) => {
            tokio::time::timeout(timeout, apply_status(client, update))
                .await
                .map_err(within("status patch".into()))??;
            Ok(record_events(recorder, update, timeout).await)
        }
        Write::PeerCheck(w) => {
            let what = format!("writing peer check {}", w.key());
            tokio::time::timeout(timeout, peer_check(client, w))
                .await
                .map_err(within(what))?
                .map_err(Error::Api)?;
            Ok(0)
        }
        Write::EngineShift(w) => {
            let what = format!("writing engine shift {}", w.key());
            tokio::time::timeout(timeout, engine_shift(client, w))
                .await
                .map_err(within(what))??;
            Ok(0)
        }
    }
}

/// The body of a server-side apply of a status: the kind's apiVersion and kind, the object's
/// name when given, and the status (nothing else, so that no other field is claimed).
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusApply<'a, S> {
    api_version: &'a str,
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<NameOnly<'a>>,
    status: &'a S,
}

#[derive(Serialize)]
struct NameOnly<'a> {
    name: &'a str,
}

fn status_body<S: Serialize>(
    resource: &ApiResource,
    name: Option<&str>,
    status: &S,
) -> Result<Json, Error> {
    let body = StatusApply {
        api_version: &resource.api_version,
        kind: &resource.kind,
        metadata: name.map(|name| NameOnly { name }),
        status,
    };
    serde_json::to_value(body).map_err(Error::EncodeStatus)
}

/// The status body of any kind the operator writes.
fn any_status_body(resource: &ApiResource, status: &Status) -> Result<Json, Error> {
    match status {
        Status::HealthCheck(s) => status_body(resource, None, s),
        Status::RecordGroup(s) => status_body(resource, None, s),
        Status::ZonalShift(s) => status_body(resource, None, s),
        Status::ZonalAutoshift(s) => status_body(resource, None, s.as_ref()),
    }
}

/// Applies one status under [`FIELD_MANAGER`].
async fn apply_status(client: &Client, update: &StatusUpdate) -> Result<(), Error> {
    let resource = update.status.kind().api_resource();
    let patch = any_status_body(&resource, &update.status)?;
    let params = PatchParams::apply(FIELD_MANAGER).force();
    // The server answers with the whole object, which the watch brings anyway: it is read as
    // text and dropped, not parsed (`Api::patch_status` would build a tree of the object,
    // managed fields included, thousands of small blocks per write that a first start's
    // 10,000 writes left scattered through the heap).
    let url = DynamicObject::url_path(&resource, Some(&update.key.namespace));
    let request = kube::core::Request::new(url)
        .patch_subresource("status", &update.key.name, &params, &Patch::Apply(patch))
        .map_err(|e| Error::Api(kube::Error::BuildRequest(e)))?;
    client.request_text(request).await?;
    Ok(())
}

/// A Peer check's apply (the typed check is the body: label, owners, spec) or delete, under
/// [`PEER_FIELD_MANAGER`].
async fn peer_check(client: &Client, write: &PeerWrite) -> Result<(), kube::Error> {
    let key = write.key();
    let api: Api<HealthCheck> = Api::namespaced(client.clone(), &key.namespace);
    match write {
        PeerWrite::Apply { check, .. } => {
            let params = PatchParams::apply(PEER_FIELD_MANAGER).force();
            api.patch(&key.name, &params, &Patch::Apply(check.as_ref()))
                .await?;
        }
        PeerWrite::Delete { uid, .. } => {
            api.delete(&key.name, &delete_params(uid.clone())).await?;
        }
    }
    Ok(())
}

/// A mirror's apply (the object, then its status) or delete, under
/// [`ENGINE_SHIFT_FIELD_MANAGER`].
async fn engine_shift(client: &Client, write: &ShiftWrite) -> Result<(), Error> {
    let key = write.key();
    let api: Api<ZonalShift> = Api::namespaced(client.clone(), &key.namespace);
    let params = PatchParams::apply(ENGINE_SHIFT_FIELD_MANAGER).force();
    match write {
        ShiftWrite::Apply { object, status, .. } => {
            if let Some(object) = object {
                api.patch(&key.name, &params, &Patch::Apply(object.as_ref()))
                    .await?;
            }
            if let Some(status) = status {
                let body = mirror_status_body(key, status)?;
                api.patch_status(&key.name, &params, &Patch::Apply(body))
                    .await?;
            }
        }
        ShiftWrite::Delete { uid, .. } => {
            api.delete(&key.name, &delete_params(uid.clone())).await?;
        }
    }
    Ok(())
}

fn mirror_status_body(key: &ObjectKey, status: &ZonalShiftStatus) -> Result<Json, Error> {
    status_body(
        &ApiResource::erase::<ZonalShift>(&()),
        Some(&key.name),
        status,
    )
}

/// Records a written status's Events (each within `timeout`); returns how many were.
async fn record_events(recorder: &Recorder, update: &StatusUpdate, timeout: Duration) -> u64 {
    let mut recorded = 0;
    let Some(events) = update.events.as_deref() else {
        return 0;
    };
    for n in &events.notices {
        let event = Event {
            type_: if n.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: n.reason.into(),
            note: Some(n.note.clone()),
            action: n.action.into(),
            secondary: n.related.as_ref().map(|r| related(&events.about, r)),
        };
        match tokio::time::timeout(timeout, recorder.publish(&event, &events.about)).await {
            Ok(Ok(())) => recorded += 1,
            Ok(Err(e)) => tracing::debug!(error = %e, "event not recorded"),
            Err(_) => tracing::debug!("event not recorded in time"),
        }
    }
    recorded
}

/// The `related` reference of an Event: a record of the group (the group, with the record's
/// field path), a RecordGroup of the object's namespace, or a zone of a ZonalAutoshift (the
/// object, with the zone's field path).
fn related(regarding: &ObjectReference, what: &Related) -> ObjectReference {
    match what {
        Related::Record(id) => ObjectReference {
            field_path: Some(format!("spec.records{{{id}}}")),
            ..regarding.clone()
        },
        Related::Zone(zone) => ObjectReference {
            field_path: Some(format!("status.zones{{{zone}}}")),
            ..regarding.clone()
        },
        Related::Group(name) => ObjectReference {
            api_version: Some(RecordGroup::api_version(&()).into_owned()),
            kind: Some(RecordGroup::kind(&()).into_owned()),
            name: Some(name.clone()),
            namespace: regarding.namespace.clone(),
            ..Default::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use healthroute_api::{ShiftState, ShiftType};

    // The typed bodies are the JSON bodies the writers sent before they were typed, field for
    // field: objects on a live cluster keep one owner per field (SEM-X4, SEM-AS13).
    #[test]
    fn a_mirrors_status_body_is_what_it_was() {
        let key = ObjectKey::new("shop", "app-autoshift");
        let status = ZonalShiftStatus {
            shift_type: Some(ShiftType::Autoshift),
            status: Some(ShiftState::Active),
            applied_groups: Some("2/3".into()),
            ..Default::default()
        };
        let body = mirror_status_body(&key, &status).expect("encodes");
        assert_eq!(
            body,
            json!({
                "apiVersion": "healthroute.io/v1alpha1",
                "kind": "ZonalShift",
                "metadata": {"name": "app-autoshift"},
                "status": status,
            })
        );
        let group = healthroute_api::RecordGroupStatus::default();
        let body = any_status_body(
            &ApiResource::erase::<RecordGroup>(&()),
            &Status::RecordGroup(group.clone()),
        )
        .expect("encodes");
        assert_eq!(
            body,
            json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup", "status": group})
        );
    }
}
