//! `healthroute-operator uninstall`, the chart's pre-delete hook (SEMANTICS P13): removes what
//! healthroute made at runtime and nothing the chart makes owns, and says on every RecordGroup
//! that nothing serves it any more. What the chart's objects own (the table and the leader
//! Lease: [`crate::owner`]; a checker's Lease: its Pod) the garbage collector removes with
//! them, hooks or not; this removes them too, for a table written before it had an owner.
//!
//! ```text
//!  stop the writers: the operator's Deployment scaled to 0; wait until no replica runs and the
//!      leader Lease is free (released by the last leader once its writes ended, or expired)
//!  then passes, until one finds nothing left to do (or --timeout):
//!      HealthChecks the operator derived (label healthroute.io/peer-check=true)   ──▶ DELETE
//!      ZonalShifts that mirror engine shifts (the label, a ZonalAutoshift controls) ──▶ DELETE
//!      RecordGroups, a page at a time ──▶ status::record_group_not_served
//!                                     ──▶ WriteQueue ──▶ the one writer (as the leader's)
//!      the table's ConfigMaps, the leader Lease, checker Leases past their expiry  ──▶ DELETE
//! ```
//!
//! The operator is stopped first because a replica still running would undo the rest: a
//! leader makes again what is deleted and writes `served: true` again, and once the chart's
//! objects go, the garbage collector deletes the leader Lease, which a standby would create
//! again and then lead. Nothing the operator made is left to a replica that may still run.
//!
//! The users' objects stay: their RecordGroups (only the status changes), HealthChecks,
//! ZonalShifts (one with the mirror label that no ZonalAutoshift controls is a customer's,
//! AS13) and ZonalAutoshifts; so do the checker Leases of resolvers still running (each is its
//! Pod's and goes with it). Every step is idempotent: a second run finds nothing to do and
//! writes nothing.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use healthroute_api::{CHECKER_LABEL, ENGINE_SHIFT_LABEL, HealthCheck, RecordGroup, ZonalShift};
use healthroute_compiler::ObjectKey;
use healthroute_table::contract::RESOLVER_LABEL;
use healthroute_table::published::TABLE_LABEL;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::Error;
use crate::metrics::WriteMetrics;
use crate::peers::{PEER_CHECK_LABEL, is_operators};
use crate::status::Status;
use crate::writes::{self, StatusUpdate, WriteQueue, WriterConfig, delete_params};

/// The field manager of the operator's scale-down.
pub const UNINSTALL_FIELD_MANAGER: &str = "healthroute-operator/uninstall";
/// The longest one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Deletes and status writes in flight at once.
const IN_FLIGHT: usize = 8;
/// Objects per list request: 100,000 RecordGroups are never held at once.
const PAGE: u32 = 500;
/// How often a wait on the API server looks again.
const POLL: Duration = Duration::from_millis(500);
/// Clocks differ: a Lease counts as expired this long after its holder's expiry (as the
/// plugin's `status` counts a resolver gone, P5).
const CLOCK_SLACK: Duration = Duration::from_secs(5);

/// What the subcommand is told.
#[derive(Debug, Clone, clap::Args)]
pub struct Settings {
    /// The release namespace: the table's ConfigMaps, the leader Lease, the checker Leases.
    #[arg(long, env = "POD_NAMESPACE", default_value = "healthroute")]
    pub namespace: String,
    /// Only this namespace's RecordGroups, Peer checks and engine-shift mirrors (the
    /// operator's `--watch-namespace`; default: every namespace).
    #[arg(long = "watch-namespace", value_name = "NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// The operator's Deployment (in the release namespace), scaled to 0 first so that no
    /// replica writes again. Without it, a leader still running makes the run fail.
    #[arg(long = "operator-deployment", value_name = "NAME")]
    pub operator_deployment: Option<String>,
    /// The leader Lease.
    #[arg(long = "lease", value_name = "NAME", default_value = crate::LEADER_LEASE)]
    pub lease: String,
    /// Seconds the whole run may take; what is left then is reported and the exit code is 2.
    #[arg(long, value_name = "SECONDS", default_value_t = 120)]
    pub timeout: u64,
}

impl Settings {
    /// For `namespace`, with the defaults of the flags.
    pub fn new(namespace: impl Into<String>) -> Self {
        Settings {
            namespace: namespace.into(),
            watch_namespace: None,
            operator_deployment: None,
            lease: crate::LEADER_LEASE.into(),
            timeout: 120,
        }
    }
}

/// What a run did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Operator replicas running when the run started (scaled to 0).
    pub operator_replicas: i32,
    pub peer_checks: usize,
    pub engine_shifts: usize,
    /// RecordGroups whose status now says that nothing serves them.
    pub groups_marked: usize,
    pub table_configmaps: usize,
    /// The leader Lease and the checker Leases of pods that are gone.
    pub leases: usize,
    /// Checker Leases of resolvers still running, left to their Pods.
    pub live_checker_leases: usize,
    /// Passes made; the last one found nothing to do.
    pub passes: usize,
}

impl Report {
    fn add(&mut self, pass: &Pass) {
        self.peer_checks += pass.peer_checks;
        self.engine_shifts += pass.engine_shifts;
        self.groups_marked += pass.groups_marked;
        self.table_configmaps += pass.table_configmaps;
        self.leases += pass.leases;
        self.live_checker_leases = pass.live_checker_leases;
        self.passes += 1;
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "deleted {} Peer checks, {} engine-shift ZonalShifts, {} table ConfigMaps and {} Leases; \
             {} RecordGroups marked not served; {} checker Leases of running resolvers left to their Pods",
            self.peer_checks,
            self.engine_shifts,
            self.table_configmaps,
            self.leases,
            self.groups_marked,
            self.live_checker_leases
        )
    }
}

/// What one pass changed (and found still running).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Pass {
    peer_checks: usize,
    engine_shifts: usize,
    groups_marked: usize,
    table_configmaps: usize,
    leases: usize,
    live_checker_leases: usize,
}

impl Pass {
    fn changed_anything(&self) -> bool {
        self.peer_checks
            + self.engine_shifts
            + self.groups_marked
            + self.table_configmaps
            + self.leases
            > 0
    }
}

/// Whether a Lease has expired at `now`: its holder's renewal plus its duration (and
/// [`CLOCK_SLACK`]) has passed, or it was never renewed.
pub fn lease_expired(lease: &Lease, now: Timestamp) -> bool {
    let Some(spec) = &lease.spec else {
        return true;
    };
    let (Some(renewed), Some(seconds)) = (&spec.renew_time, spec.lease_duration_seconds) else {
        return true;
    };
    let lasts = Duration::from_secs(u64::try_from(seconds).unwrap_or(0)) + CLOCK_SLACK;
    renewed
        .0
        .checked_add(lasts)
        .ok()
        .is_none_or(|expiry| expiry < now)
}

/// Whether no replica leads under `lease`: no holder (released), or expired.
pub fn lease_free(lease: &Lease, now: Timestamp) -> bool {
    let held = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .is_some_and(|h| !h.is_empty());
    !held || lease_expired(lease, now)
}

/// Whether the Deployment has been scaled to 0 and runs no replica any more.
pub fn stopped(deployment: &Deployment) -> bool {
    let wanted = deployment.spec.as_ref().and_then(|s| s.replicas);
    let status = deployment.status.clone().unwrap_or_default();
    let observed = status.observed_generation >= deployment.metadata.generation;
    wanted == Some(0)
        && observed
        && status.replicas.unwrap_or(0) == 0
        && status.terminating_replicas.unwrap_or(0) == 0
}

/// Runs the uninstall against `client`; see the module's documentation.
pub async fn run(client: Client, settings: &Settings) -> Result<Report, Error> {
    let deadline = Instant::now() + Duration::from_secs(settings.timeout);
    let mut report = Report {
        operator_replicas: stop_operator(&client, settings, deadline).await?,
        ..Report::default()
    };

    // The writer as the leader runs it, leading throughout (statuses only).
    let queue = WriteQueue::default();
    let (_leading, leader) = watch::channel(true);
    let (stop_writer, stop) = watch::channel(false);
    let writer = tokio::spawn(
        writes::run(
            client.clone(),
            queue.clone(),
            leader,
            writes::TableWrites::default(), // no table is written here
            WriteMetrics::default(),
            WriterConfig {
                concurrency: IN_FLIGHT,
                timeout: REQUEST_TIMEOUT,
                identity: "healthroute-uninstall".into(),
                // Unpaced, as the hook has --timeout for every group: the operator is stopped,
                // and nothing else of healthroute's shares the API server meanwhile.
                qps: 0.0,
                burst: 1,
            },
            stop,
        )
        .instrument(tracing::info_span!("writer")),
    );
    let uninstall = Uninstall {
        client,
        settings,
        queue,
        deadline,
    };
    let mut retry = healthroute_admin::retry::Backoff::new(POLL, Duration::from_secs(5));
    let outcome = loop {
        match uninstall.pass().await {
            Ok(pass) => {
                report.add(&pass);
                if !pass.changed_anything() {
                    break Ok(());
                }
                tracing::info!(
                    peer_checks = pass.peer_checks,
                    engine_shifts = pass.engine_shifts,
                    groups_marked = pass.groups_marked,
                    table_configmaps = pass.table_configmaps,
                    leases = pass.leases,
                    "pass {}: removed and marked; listing again to check",
                    report.passes
                );
            }
            Err(e) if Instant::now() < deadline => {
                tracing::warn!(error = %e, "an uninstall pass failed; trying again");
                tokio::time::sleep(retry.next_delay()).await;
            }
            Err(e) => break Err(e),
        }
        if Instant::now() >= deadline {
            break Err(Error::UninstallIncomplete {
                left: format!(
                    "after {} s, pass {} still found something to do (made again meanwhile?)",
                    settings.timeout, report.passes
                ),
            });
        }
    };
    let _ = stop_writer.send(true);
    let _ = writer.await;
    outcome.map(|()| report)
}

/// Scales the operator to 0 and waits until none of its replicas runs and the leader Lease is
/// free; returns how many replicas were wanted before.
async fn stop_operator(
    client: &Client,
    settings: &Settings,
    deadline: Instant,
) -> Result<i32, Error> {
    let mut replicas = 0;
    if let Some(name) = &settings.operator_deployment {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), &settings.namespace);
        let what = format!("Deployment {}/{name}", settings.namespace);
        if let Some(found) = request(&what, deployments.get_opt(name)).await? {
            replicas = found.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            if replicas != 0 {
                let params = PatchParams {
                    field_manager: Some(UNINSTALL_FIELD_MANAGER.into()),
                    ..PatchParams::default()
                };
                let zero = Patch::Merge(NoReplicas::default());
                request(&what, deployments.patch_scale(name, &params, &zero)).await?;
                tracing::info!(deployment = %name, from = replicas, "the operator scaled to 0: no replica writes from now on");
            }
            wait_until(&what, deadline, POLL, || async {
                Ok(request(&what, deployments.get_opt(name))
                    .await?
                    .is_none_or(|d| stopped(&d)))
            })
            .await
            .map_err(|_| Error::UninstallIncomplete {
                left: format!("{what} still runs replicas"),
            })?;
        }
    }
    let leases: Api<Lease> = Api::namespaced(client.clone(), &settings.namespace);
    let what = format!("Lease {}/{}", settings.namespace, settings.lease);
    let free = || async {
        Ok(request(&what, leases.get_opt(&settings.lease))
            .await?
            .is_none_or(|l| lease_free(&l, Timestamp::now())))
    };
    if settings.operator_deployment.is_none() && !free().await? {
        return Err(Error::UninstallIncomplete {
            left: format!(
                "an operator replica still leads ({what} is held): stop it first, or give --operator-deployment"
            ),
        });
    }
    wait_until(&what, deadline, POLL, free)
        .await
        .map_err(|_| Error::UninstallIncomplete {
            left: format!("{what} is still held: an operator replica may still write"),
        })?;
    Ok(replicas)
}

/// Looks with `done` until it says so, every `poll`, until `deadline`.
async fn wait_until<F: Future<Output = Result<bool, Error>>>(
    what: &str,
    deadline: Instant,
    poll: Duration,
    mut done: impl FnMut() -> F,
) -> Result<(), Error> {
    loop {
        if done().await? {
            return Ok(());
        }
        if Instant::now() + poll > deadline {
            return Err(Error::UninstallIncomplete {
                left: format!("waiting for {what}"),
            });
        }
        tokio::time::sleep(poll).await;
    }
}

/// One API request, within [`REQUEST_TIMEOUT`], its failure named by `what`.
async fn request<T>(
    what: &str,
    call: impl Future<Output = Result<T, kube::Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(result) => result.map_err(|source| Error::Uninstall {
            what: what.to_owned(),
            source,
        }),
        Err(_) => Err(Error::Timeout {
            what: what.to_owned(),
            after: REQUEST_TIMEOUT,
        }),
    }
}

/// The body of the scale-down, `{"spec": {"replicas": 0}}`: only the replicas, merged.
#[derive(Debug, Default, serde::Serialize)]
struct NoReplicas {
    spec: ReplicasSpec,
}

#[derive(Debug, Default, serde::Serialize)]
struct ReplicasSpec {
    replicas: u32,
}

struct Uninstall<'a> {
    client: Client,
    settings: &'a Settings,
    queue: WriteQueue,
    deadline: Instant,
}

impl Uninstall<'_> {
    /// An API of `K` over the namespaces the operator watched.
    fn watched<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        match &self.settings.watch_namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        }
    }

    fn released<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.settings.namespace)
    }

    /// One pass over everything; what it changed.
    async fn pass(&self) -> Result<Pass, Error> {
        let now = Timestamp::now();
        let mut pass = Pass::default();
        let checks: Vec<HealthCheck> =
            list(&self.watched(), &format!("{PEER_CHECK_LABEL}=true")).await?;
        pass.peer_checks = self
            .delete(checks.into_iter().filter(is_operators).collect())
            .await?;
        let mirrors: Vec<ZonalShift> = list(&self.watched(), ENGINE_SHIFT_LABEL).await?;
        pass.engine_shifts = self
            .delete(
                mirrors
                    .into_iter()
                    .filter(healthroute_api::is_engine_shift)
                    .collect(),
            )
            .await?;
        pass.groups_marked = self.mark_groups(now).await?;
        let table: Vec<ConfigMap> = list(&self.released(), TABLE_LABEL).await?;
        pass.table_configmaps = self.delete(table).await?;
        // A resolver's registration (healthroute_table::contract) goes as its checker's Lease.
        let registrations: Vec<Lease> = list(&self.released(), RESOLVER_LABEL).await?;
        let (gone, live): (Vec<Lease>, Vec<Lease>) = list(&self.released(), CHECKER_LABEL)
            .await?
            .into_iter()
            .chain(registrations)
            .partition(|l| lease_expired(l, now));
        pass.live_checker_leases = live.len();
        // The leader Lease goes once no replica could take it again (the operator stopped).
        let leases: Api<Lease> = self.released();
        let what = format!("Lease {}/{}", self.settings.namespace, self.settings.lease);
        let leader = request(&what, leases.get_opt(&self.settings.lease)).await?;
        if leader.as_ref().is_some_and(|l| !lease_free(l, now)) {
            return Err(Error::UninstallIncomplete {
                left: format!("{what} is held again: an operator replica runs"),
            });
        }
        pass.leases = self
            .delete(gone.into_iter().chain(leader).collect())
            .await?;
        Ok(pass)
    }

    /// Says on every RecordGroup that nothing serves it, a page at a time, through the status
    /// writer; returns how many statuses it sent.
    async fn mark_groups(&self, now: Timestamp) -> Result<usize, Error> {
        let api: Api<RecordGroup> = self.watched();
        let mut marked = 0;
        let mut token: Option<String> = None;
        loop {
            let mut params = ListParams::default().limit(PAGE);
            if let Some(t) = &token {
                params = params.continue_token(t);
            }
            let page = match request("listing RecordGroups", api.list(&params)).await {
                Ok(page) => page,
                Err(e) if not_served_here(&e) => return Ok(marked),
                Err(e) => return Err(e),
            };
            for group in &page.items {
                let old = group.status.as_ref();
                let new = crate::status::record_group_not_served(
                    old,
                    crate::status::UNINSTALLED,
                    group.metadata.generation,
                    now,
                );
                if old == Some(&new) {
                    continue;
                }
                let key = ObjectKey::new(group.namespace().unwrap_or_default(), group.name_any());
                let status = Status::RecordGroup(new);
                self.queue.push(StatusUpdate::quiet(key, status));
                marked += 1;
            }
            // In memory: looked at often.
            let often = Duration::from_millis(20);
            wait_until(
                "the RecordGroups' status writes",
                self.deadline,
                often,
                || async { Ok(self.queue.backlog() == 0) },
            )
            .await?;
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok(marked);
            }
        }
    }

    /// Deletes `objects`, each only if it is still the object listed (its uid); returns how
    /// many were deleted (one already gone, or made again meanwhile, is not: the next pass
    /// looks again).
    async fn delete<K>(&self, objects: Vec<K>) -> Result<usize, Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + fmt::Debug,
        K::DynamicType: Default,
    {
        futures::stream::iter(objects)
            .map(|object| async move {
                let namespace = object.namespace().unwrap_or_default();
                let name = object.name_any();
                let what = format!(
                    "deleting {} {namespace}/{name}",
                    K::kind(&Default::default())
                );
                let api: Api<K> = Api::namespaced(self.client.clone(), &namespace);
                let params = delete_params(object.meta().uid.clone());
                match request(&what, api.delete(&name, &params)).await {
                    Ok(_) => {
                        tracing::debug!("{what}: done");
                        Ok(1)
                    }
                    Err(Error::Uninstall {
                        source: kube::Error::Api(s),
                        ..
                    }) if s.code == 404 || s.code == 409 => Ok(0),
                    Err(e) => Err(e),
                }
            })
            .buffer_unordered(IN_FLIGHT)
            .try_fold(0, |n, one| async move { Ok(n + one) })
            .await
    }
}

/// Every object of `api` that `selector` selects, a page at a time. A kind the API server does
/// not serve (its CRD already deleted) has none.
async fn list<K>(api: &Api<K>, selector: &str) -> Result<Vec<K>, Error>
where
    K: Resource + Clone + DeserializeOwned + fmt::Debug,
    K::DynamicType: Default,
{
    let what = format!("listing {} ({selector})", K::plural(&Default::default()));
    let mut all = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = ListParams::default().labels(selector).limit(PAGE);
        if let Some(t) = &token {
            params = params.continue_token(t);
        }
        let page = match request(&what, api.list(&params)).await {
            Ok(page) => page,
            Err(e) if not_served_here(&e) => return Ok(all),
            Err(e) => return Err(e),
        };
        all.extend(page.items);
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        if token.is_none() {
            return Ok(all);
        }
    }
}

/// A list the API server answers 404: the kind is not served (its CRD is gone), so none exist.
fn not_served_here(error: &Error) -> bool {
    matches!(error, Error::Uninstall { source: kube::Error::Api(s), .. } if s.code == 404)
}

/// `healthroute-operator uninstall`: a client from the environment (in a pod, its account),
/// [`run`], and the report in the log.
pub async fn main(settings: Settings) -> Result<(), Error> {
    let config = kube::Config::infer().await.map_err(Error::NoClientConfig)?;
    let client = Client::try_from(config).map_err(Error::NoClient)?;
    tracing::info!(
        namespace = %settings.namespace,
        watch_namespace = settings.watch_namespace.as_deref().unwrap_or("(all)"),
        "uninstall: removing what healthroute made at runtime (SEMANTICS P13)"
    );
    let report = run(client, &settings).await?;
    tracing::info!(
        passes = report.passes,
        operator_replicas = report.operator_replicas,
        "uninstall done: {report}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn lease(holder: Option<&str>, renewed: Option<&str>, seconds: Option<i32>) -> Lease {
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "healthroute-operator", "namespace": "healthroute"},
            "spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": seconds}
        }))
        .expect("valid")
    }

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a time")
    }

    // SEM-P13: the leader Lease is free when released (no holder) or expired; a holder's lease
    // lasts its duration and 5 s more for clocks; one never renewed has expired.
    #[test]
    fn a_lease_is_free_when_released_or_expired() {
        let renewed = Some("2026-01-01T00:00:00.000000Z");
        let held = lease(Some("op-1"), renewed, Some(15));
        assert!(!lease_free(&held, at("2026-01-01T00:00:10Z")));
        assert!(
            !lease_free(&held, at("2026-01-01T00:00:19Z")),
            "clock slack"
        );
        assert!(lease_free(&held, at("2026-01-01T00:00:21Z")));
        assert!(lease_free(
            &lease(None, None, None),
            at("2026-01-01T00:00:00Z")
        ));
        assert!(lease_free(
            &lease(Some(""), renewed, Some(15)),
            at("2026-01-01T00:00:00Z")
        ));
        assert!(lease_expired(
            &lease(Some("r1"), None, Some(10)),
            at("2026-01-01T00:00:00Z")
        ));
        let checker = lease(Some("r1"), renewed, Some(10));
        assert!(!lease_expired(&checker, at("2026-01-01T00:00:14Z")));
        assert!(lease_expired(&checker, at("2026-01-01T00:00:16Z")));
    }

    // SEM-P13: the operator has stopped once its Deployment wants 0 replicas, the controller
    // has seen that, and no replica runs or terminates.
    #[test]
    fn the_operator_has_stopped_when_no_replica_runs_or_terminates() {
        let deployment = |wanted: i32,
                          generation: i64,
                          observed: i64,
                          running: i32,
                          ending: i32|
         -> Deployment {
            serde_json::from_value(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "hr-operator", "generation": generation},
                "spec": {"replicas": wanted, "selector": {}, "template": {}},
                "status": {"observedGeneration": observed, "replicas": running, "terminatingReplicas": ending}
            }))
            .expect("valid")
        };
        assert!(stopped(&deployment(0, 3, 3, 0, 0)));
        assert!(!stopped(&deployment(2, 3, 3, 0, 0)), "not scaled down");
        assert!(!stopped(&deployment(0, 3, 2, 0, 0)), "not seen yet");
        assert!(!stopped(&deployment(0, 3, 3, 1, 0)), "one still runs");
        assert!(!stopped(&deployment(0, 3, 3, 0, 1)), "one still terminates");
    }
}
