//! `kubectl healthroute practice start|cancel NAME`: a practice run asked of a ZonalAutoshift
//! through its annotation (AS10), and the operator's answer.

use std::time::Duration;

use crate::error::Error;
use healthroute_api::{PRACTICE_RUN_ANNOTATION, PRACTICE_RUN_ZONE_ANNOTATION};
use healthroute_api::{ZonalAutoshift, ZonalAutoshiftStatus};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use super::scope::err;

/// `practice start NAME [--zone Z] [--id ID]`: asks ZonalAutoshift NAME for a practice run now
/// (AS10): its annotation `healthroute.io/practice-run: start:<id>` (an id of the time when
/// none is given: each value is acted on once), and `healthroute.io/practice-run-zone` set to
/// `--zone` or removed (the rotation's zone). Then reports, within `wait`, what the operator
/// answered: the run started (away from which zone, until when), or why it did not (AS7,
/// AS8).
pub async fn practice_start(
    client: &Client,
    namespace: &str,
    name: &str,
    zone: Option<String>,
    id: Option<String>,
    wait: Duration,
) -> Result<String, Error> {
    let value = format!("start:{}", request_id(id));
    let api = Api::<ZonalAutoshift>::namespaced(client.clone(), namespace);
    // A JSON merge patch: null removes a zone asked for by an earlier request.
    let patch = json!({"metadata": {"annotations": {
        PRACTICE_RUN_ANNOTATION: value, PRACTICE_RUN_ZONE_ANNOTATION: zone}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(err("cannot ask the ZonalAutoshift for a practice run"))?;
    let mut out = format!(
        "zonalautoshift {namespace}/{name}: practice run asked ({PRACTICE_RUN_ANNOTATION}: {value}{})\n",
        zone.as_deref()
            .map(|z| format!(", away from {z}"))
            .unwrap_or_default()
    );
    out.push_str(&match answered(&api, name, &value, wait).await? {
        None => not_answered(name, wait),
        // A refusal names the request it answers; a run already running is not this one's
        // (AlreadyRunning says so).
        Some(st) => match (&st.not_started, &st.practice_run) {
            (Some(refused), _) if refused.request.as_deref() == Some(value.as_str()) => {
                format!(
                    "not started ({}): {}\n",
                    refused.reason.as_str(),
                    refused.message
                )
            }
            (_, Some(run)) => format!(
                "started: traffic moves away from {} until {} unless an outcome alarm fails it\n",
                run.zone, run.end_time.0
            ),
            _ => match st.outcomes.first() {
                // It ended in the same compile: its capacity check, or an alarm.
                Some(last) if last.requested => format!(
                    "not started or ended at once ({}): {}\n",
                    last.outcome.as_str(),
                    last.message.as_deref().unwrap_or("")
                ),
                _ => "answered; see `kubectl get zas` for its state\n".into(),
            },
        },
    });
    Ok(out)
}

/// `practice cancel NAME [--id ID]`: ends ZonalAutoshift NAME's running practice run as
/// `Interrupted` (AS9, AS10), through `healthroute.io/practice-run: cancel:<id>`, and reports
/// the operator's answer within `wait`.
pub async fn practice_cancel(
    client: &Client,
    namespace: &str,
    name: &str,
    id: Option<String>,
    wait: Duration,
) -> Result<String, Error> {
    let value = format!("cancel:{}", request_id(id));
    let api = Api::<ZonalAutoshift>::namespaced(client.clone(), namespace);
    let running = api
        .get(name)
        .await
        .map_err(err("cannot read the ZonalAutoshift"))?
        .status
        .and_then(|s| s.practice_run);
    let patch = json!({"metadata": {"annotations": {PRACTICE_RUN_ANNOTATION: value}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map_err(err("cannot cancel the practice run"))?;
    let mut out = format!(
        "zonalautoshift {namespace}/{name}: practice run cancel asked ({PRACTICE_RUN_ANNOTATION}: {value})\n"
    );
    out.push_str(
        &match (answered(&api, name, &value, wait).await?, running) {
            (None, _) => not_answered(name, wait),
            (Some(_), None) => "no practice run was running: nothing to end\n".into(),
            (Some(st), Some(run)) => match st.outcomes.first() {
                Some(last) if last.start_time == run.start_time => format!(
                    "ended ({}): traffic is back in {}\n",
                    last.outcome.as_str(),
                    last.zone
                ),
                _ => "answered; see `kubectl get zas` for its state\n".into(),
            },
        },
    );
    Ok(out)
}

/// A request's id: the one given, else the time (each distinct value is acted on once).
fn request_id(id: Option<String>) -> String {
    id.map(|i| i.trim().to_owned())
        .filter(|i| !i.is_empty())
        .unwrap_or_else(|| jiff::Timestamp::now().as_second().to_string())
}

fn not_answered(name: &str, wait: Duration) -> String {
    format!(
        "the operator has not answered within {} s: check `kubectl get zas {name} -o yaml` (status.lastRequest, notStarted)\n",
        wait.as_secs()
    )
}

/// Waits (at most `wait`) until the status of ZonalAutoshift `name` says it acted on
/// `request` (`status.lastRequest`), and returns that status.
async fn answered(
    api: &Api<ZonalAutoshift>,
    name: &str,
    request: &str,
    wait: Duration,
) -> Result<Option<ZonalAutoshiftStatus>, Error> {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let status = api
            .get(name)
            .await
            .map_err(err("cannot read the ZonalAutoshift"))?
            .status;
        if let Some(st) = status.filter(|s| s.last_request.as_deref() == Some(request)) {
            return Ok(Some(st));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
