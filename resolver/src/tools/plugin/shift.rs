//! `kubectl healthroute shift start|extend|cancel|list`: the ZonalShift lifecycle (Z4), each
//! change reported with what the operator made of it; the list shows ZonalShifts and the
//! shifts ZonalAutoshifts hold, each with its type (AS5).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::Error;
use healthroute_api::{
    ENGINE_SHIFT_LABEL, NotAppliedReason, ShiftState, ShiftType, ZonalShift, ZonalShiftStatus,
    is_engine_shift, parse_expires_in,
};
use healthroute_compiler::ObjectKey;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value as Json, json};

use super::scope::{Output, Scope, autoshifts, err, json_text, key_of, table};

/// What `shift start` targets.
#[derive(Clone, Debug)]
pub enum ShiftTarget {
    Group(String),
    Selector(BTreeMap<String, String>),
}

/// `shift start`: creates a ZonalShift (its expiry checked first, Z4), then reports, within
/// `wait`, to which groups it applies and why not where it does not.
pub async fn shift_start(
    client: &Client,
    namespace: &str,
    away_from: &str,
    target: ShiftTarget,
    expires_in: &str,
    comment: Option<String>,
    wait: Duration,
) -> Result<String, Error> {
    check_expiry(expires_in)?;
    let name = format!(
        "away-from-{}-{}",
        away_from
            .to_lowercase()
            .replace(|c: char| !c.is_ascii_alphanumeric(), "-"),
        jiff::Timestamp::now().as_second()
    );
    let target = match target {
        ShiftTarget::Group(g) => json!({"recordGroup": g}),
        ShiftTarget::Selector(labels) => json!({"selector": {"matchLabels": labels}}),
    };
    let object: ZonalShift = serde_json::from_value(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalShift",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"awayFrom": away_from, "target": target, "expiresIn": expires_in, "comment": comment},
    }))
    .map_err(Error::BuildShift)?;
    let api = Api::<ZonalShift>::namespaced(client.clone(), namespace);
    api.create(&PostParams::default(), &object)
        .await
        .map_err(err("cannot create the ZonalShift"))?;
    let mut out =
        format!("zonalshift {namespace}/{name} created: away from {away_from} for {expires_in}\n");
    out.push_str(&report(&api, &name, wait).await?);
    Ok(out)
}

/// `expiresIn` as the API server will judge it: the CRD's form and 1m to 72h (Z4).
fn check_expiry(expires_in: &str) -> Result<(), Error> {
    parse_expires_in(expires_in)
        .map(|_| ())
        .map_err(|source| Error::ExpiresIn {
            raw: expires_in.to_owned(),
            source,
        })
}

/// Waits (at most `wait`) for the operator's status of shift `name`, and says what it does.
async fn report(api: &Api<ZonalShift>, name: &str, wait: Duration) -> Result<String, Error> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let shift = api
            .get(name)
            .await
            .map_err(err("cannot read the ZonalShift"))?;
        if let Some(st) = shift.status.as_ref().filter(|s| s.status.is_some()) {
            let mut out = format!(
                "status: {:?}, expires {}\n",
                st.status.unwrap_or(ShiftState::Active),
                st.expiry_time
                    .as_ref()
                    .map_or("?".into(), |t| t.0.to_string())
            );
            if st.groups.is_empty() && st.status == Some(ShiftState::Active) {
                out.push_str("no RecordGroup matches its target\n");
            }
            for g in &st.groups {
                let line = match g.reason {
                    None => format!("  {}: applied", g.record_group),
                    Some(NotAppliedReason::Conflict) => format!(
                        "  {}: NOT applied: an older active shift applies to it (Conflict)",
                        g.record_group
                    ),
                    Some(NotAppliedReason::NoHealthyCapacityElsewhere) => format!(
                        "  {}: NOT applied: no healthy endpoint outside {}; traffic stays (fail open, Z6)",
                        g.record_group, shift.spec.away_from
                    ),
                };
                out.push_str(&line);
                out.push('\n');
            }
            return Ok(out);
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(format!(
                "the operator has not reported on it within {} s: check `kubectl get zs {name}`\n",
                wait.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// `shift extend NAME --expires-in D`: the new expiry counts from now (Z4).
pub async fn shift_extend(
    client: &Client,
    namespace: &str,
    name: &str,
    expires_in: &str,
    wait: Duration,
) -> Result<String, Error> {
    check_expiry(expires_in)?;
    let api = Api::<ZonalShift>::namespaced(client.clone(), namespace);
    let shift = api
        .get(name)
        .await
        .map_err(err("cannot read the ZonalShift"))?;
    refuse_engine_shift(&shift, namespace, name)?;
    if shift.spec.cancel
        || shift
            .status
            .as_ref()
            .is_some_and(|s| matches!(s.status, Some(ShiftState::Expired | ShiftState::Canceled)))
    {
        return Err(Error::ShiftEnded {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"expiresIn": expires_in}})),
    )
    .await
    .map_err(err("cannot change the ZonalShift"))?;
    let mut out = format!("zonalshift {namespace}/{name} now expires {expires_in} from now\n");
    out.push_str(&report(&api, name, wait).await?);
    Ok(out)
}

/// `shift cancel NAME`: ends the shift; the object stays as a record (Z4).
pub async fn shift_cancel(client: &Client, namespace: &str, name: &str) -> Result<String, Error> {
    let api = Api::<ZonalShift>::namespaced(client.clone(), namespace);
    let shift = api
        .get(name)
        .await
        .map_err(err("cannot read the ZonalShift"))?;
    refuse_engine_shift(&shift, namespace, name)?;
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"cancel": true}})),
    )
    .await
    .map_err(err("cannot cancel the ZonalShift"))?;
    Ok(format!(
        "zonalshift {namespace}/{name} cancelled: traffic returns to its zone within a second\n"
    ))
}

/// An edit of an engine shift's mirror would be undone by the operator: it says what ends it.
fn refuse_engine_shift(shift: &ZonalShift, namespace: &str, name: &str) -> Result<(), Error> {
    if !is_engine_shift(shift) {
        return Ok(());
    }
    let config = shift
        .labels()
        .get(ENGINE_SHIFT_LABEL)
        .cloned()
        .unwrap_or_default();
    Err(Error::EngineShift {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        config,
    })
}

/// One shift as `shift list` shows it: a ZonalShift object, or a shift a ZonalAutoshift holds.
struct ListedShift {
    /// `namespace/name`; a ZonalAutoshift's are `namespace/<config>:autoshift` or
    /// `namespace/<config>:practice-run`.
    name: String,
    /// Customer, Autoshift or PracticeRun; `-` for a ZonalShift with no status yet.
    shift_type: Option<ShiftType>,
    away_from: String,
    status: ZonalShiftStatus,
    comment: String,
}

fn type_name(t: Option<ShiftType>) -> String {
    t.and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| "-".into())
}

/// `shift list`: every shift with its type (AS5), its state and what it applies to: the
/// ZonalShifts, then the shifts each ZonalAutoshift holds now (its status's `shifts`).
pub async fn shift_list(client: &Client, scope: &Scope, output: Output) -> Result<String, Error> {
    let list = scope
        .list::<ZonalShift>(client, &ListParams::default(), "cannot list ZonalShifts")
        .await?;
    // Mirrors of the engines' shifts are listed once, from the ZonalAutoshifts below (AS13).
    let mut shifts: Vec<ListedShift> = list
        .iter()
        .filter(|s| !is_engine_shift(s))
        .map(|s| {
            let status = s.status.clone().unwrap_or_default();
            ListedShift {
                name: key_of(s).to_string(),
                // A ZonalShift is a customer's; an operator of before AS5 wrote no type.
                shift_type: status
                    .shift_type
                    .or(s.status.as_ref().map(|_| ShiftType::Customer)),
                away_from: s.spec.away_from.clone(),
                status,
                comment: s.spec.comment.clone().unwrap_or_default(),
            }
        })
        .collect();
    for a in autoshifts(client, scope).await? {
        let namespace = a.namespace().unwrap_or_default();
        for held in a.status.map(|s| s.shifts).unwrap_or_default() {
            shifts.push(ListedShift {
                name: ObjectKey::new(&namespace, &held.name).to_string(),
                shift_type: held.status.shift_type,
                away_from: held.away_from,
                status: held.status,
                comment: format!(
                    "held by ZonalAutoshift {}",
                    a.metadata.name.as_deref().unwrap_or("")
                ),
            });
        }
    }
    if output == Output::Json {
        let items: Vec<Json> = shifts
            .iter()
            .map(|s| {
                json!({"zonalShift": s.name, "type": s.shift_type,
                       "awayFrom": s.away_from, "status": s.status.status,
                       "expiryTime": s.status.expiry_time,
                       "groups": s.status.groups})
            })
            .collect();
        return Ok(json_text(&Json::Array(items)));
    }
    if shifts.is_empty() {
        return Ok("no ZonalShifts\n".into());
    }
    let rows: Vec<Vec<String>> = shifts
        .iter()
        .map(|s| {
            vec![
                s.name.clone(),
                type_name(s.shift_type),
                s.away_from.clone(),
                s.status.status.map_or("-".into(), |x| format!("{x:?}")),
                s.status
                    .applied_groups
                    .clone()
                    .unwrap_or_else(|| "-".into()),
                s.status
                    .expiry_time
                    .as_ref()
                    .map_or("-".into(), |t| t.0.to_string()),
                s.comment.clone(),
            ]
        })
        .collect();
    Ok(table(
        &[
            "ZONALSHIFT",
            "TYPE",
            "AWAY FROM",
            "STATUS",
            "APPLIED",
            "EXPIRES",
            "COMMENT",
        ],
        &rows,
    ))
}
