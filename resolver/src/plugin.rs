//! `kubectl healthroute`: what the cluster's healthroute objects say, read the way an operator
//! of the system wants them, and the ZonalShift lifecycle.
//!
//! ```text
//!   status            every RecordGroup: policy, healthy/total, last resort, served generation,
//!                     and the generation each resolver serves when they differ
//!   explain NAME      why the live answer is what it is: the cluster's objects through the
//!                     simulator (docs/semantics.md), checks at their current status
//!   shift start|extend|cancel|list
//!   checks            every HealthCheck: each checker's view and the quorum
//! ```
//!
//! Every command reads through the API server only (the user's kubeconfig and RBAC) and
//! prints a table, or JSON with `-o json`. The functions here return the text, so that the
//! tests run them against a stand-in API server and compare what a user would see.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use crate::error::Error;
use healthroute_api::{CHECKER_LABEL, SERVED_GENERATION_ANNOTATION};
use healthroute_api::{
    HealthCheck, NotAppliedReason, RecordGroup, ShiftState, ZonalShift, parse_expires_in,
};
use healthroute_compiler::manifests::{Manifests, cluster_ips, endpoints_from_slices};
use healthroute_compiler::{CheckerView, ObjectKey};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value as Json, json};

/// Where a command looks: one namespace, or all of them.
#[derive(Clone, Debug)]
pub enum Scope {
    Namespace(String),
    All,
}

impl Scope {
    fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        match self {
            Scope::Namespace(ns) => Api::namespaced(client.clone(), ns),
            Scope::All => Api::all(client.clone()),
        }
    }

    /// Every `K` in the scope that `params` selects; `what` names the request in the error.
    async fn list<K>(
        &self,
        client: &Client,
        params: &ListParams,
        what: &'static str,
    ) -> Result<Vec<K>, Error>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Ok(self
            .api::<K>(client)
            .list(params)
            .await
            .map_err(err(what))?
            .items)
    }
}

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Table,
    Json,
}

fn err(what: &'static str) -> impl Fn(kube::Error) -> Error {
    move |source| Error::Kube { what, source }
}

/// Left-aligned columns, two spaces apart, as kubectl prints them.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    let line = |cells: Vec<&str>, out: &mut String| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                l.push_str(c);
            } else {
                let _ = write!(l, "{c:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec(), &mut out);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), &mut out);
    }
    out
}

fn json_text(v: &Json) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

/// `status`: every RecordGroup, and the table generation each resolver serves.
pub async fn status(
    client: &Client,
    scope: &Scope,
    table_namespace: &str,
    output: Output,
) -> Result<String, Error> {
    let groups = scope
        .list::<RecordGroup>(client, &ListParams::default(), "cannot list RecordGroups")
        .await?;
    let leases = Api::<Lease>::namespaced(client.clone(), table_namespace)
        .list(&ListParams::default().labels(CHECKER_LABEL))
        .await
        .map_err(err("cannot list the checkers' Leases"))?;
    let mut resolvers: Vec<(String, Option<u64>)> = leases
        .items
        .iter()
        .map(|l| {
            let name = l
                .labels()
                .get(CHECKER_LABEL)
                .cloned()
                .unwrap_or_else(|| l.name_any());
            let generation = l
                .annotations()
                .get(SERVED_GENERATION_ANNOTATION)
                .and_then(|g| g.parse().ok());
            (name, generation)
        })
        .collect();
    resolvers.sort();
    let mut rows = Vec::new();
    let mut items = Vec::new();
    for g in &groups {
        let st = g.status.clone().unwrap_or_default();
        let served = match (st.served, st.served_generation) {
            (true, Some(generation)) => generation.to_string(),
            (true, None) => "yes".into(),
            (false, _) => "no".into(),
        };
        rows.push(vec![
            format!("{}/{}", g.namespace().unwrap_or_default(), g.name_any()),
            g.spec.name.clone(),
            format!("{:?}", g.spec.routing_policy),
            st.healthy_records.clone().unwrap_or_else(|| "-".into()),
            if st.last_resort { "yes" } else { "no" }.into(),
            served,
        ]);
        items.push(json!({
            "recordGroup": format!("{}/{}", g.namespace().unwrap_or_default(), g.name_any()),
            "name": g.spec.name, "policy": format!("{:?}", g.spec.routing_policy),
            "healthy": st.healthy_records, "lastResort": st.last_resort,
            "served": st.served, "servedGeneration": st.served_generation,
        }));
    }
    let generations: std::collections::BTreeSet<Option<u64>> =
        resolvers.iter().map(|(_, g)| *g).collect();
    if output == Output::Json {
        let resolvers: Vec<Json> = resolvers
            .iter()
            .map(|(n, g)| json!({"checker": n, "servedGeneration": g}))
            .collect();
        return Ok(json_text(
            &json!({"recordGroups": items, "resolvers": resolvers}),
        ));
    }
    let mut out = table(
        &[
            "RECORDGROUP",
            "NAME",
            "POLICY",
            "HEALTHY",
            "LAST RESORT",
            "SERVED GENERATION",
        ],
        &rows,
    );
    if groups.is_empty() {
        out = "no RecordGroups\n".into();
    }
    match (resolvers.len(), generations.len()) {
        (0, _) => out.push_str("resolvers: none reports a served generation (no checker Lease)\n"),
        (n, 1) => {
            let g = resolvers[0].1.map_or("unknown".into(), |g| g.to_string());
            let _ = writeln!(out, "resolvers: {n}, all serving table generation {g}");
        }
        (n, _) => {
            let _ = writeln!(out, "resolvers: {n}, serving different table generations:");
            for (name, g) in &resolvers {
                let _ = writeln!(
                    out,
                    "  {name}: {}",
                    g.map_or("unknown".into(), |g| g.to_string())
                );
            }
        }
    }
    Ok(out)
}

/// `checks`: each HealthCheck with every checker's view and the quorum.
pub async fn checks(client: &Client, scope: &Scope, output: Output) -> Result<String, Error> {
    let list = scope
        .list::<HealthCheck>(client, &ListParams::default(), "cannot list HealthChecks")
        .await?;
    if output == Output::Json {
        let items: Vec<Json> = list
            .iter()
            .map(|c| {
                json!({
                    "healthCheck": format!("{}/{}", c.namespace().unwrap_or_default(), c.name_any()),
                    "type": c.spec.check_type,
                    "healthy": c.status.as_ref().and_then(|s| s.healthy),
                    "quorum": {"healthyCheckerPercent": c.spec.healthy_checker_percent,
                               "checkers": c.status.as_ref().and_then(|s| s.checkers_healthy.clone())},
                    "checkers": c.status.as_ref().map(|s| s.checkers.clone()).unwrap_or_default(),
                    "metric": c.status.as_ref().and_then(|s| s.metric.clone()),
                })
            })
            .collect();
        return Ok(json_text(&Json::Array(items)));
    }
    let mut out = String::new();
    for c in &list {
        let st = c.status.clone().unwrap_or_default();
        let target = match (&c.spec.target, &c.spec.metric, &c.spec.calculated) {
            (Some(t), _, _) => format!("{}:{}", t.address, t.port),
            (_, Some(m), _) => format!("{} {:?}", m.prometheus.url, m.query),
            (_, _, Some(calc)) => format!(
                "at least {} of [{}]",
                calc.health_threshold,
                calc.children.join(", ")
            ),
            _ => "-".into(),
        };
        let healthy = match st.healthy {
            Some(true) => "healthy",
            Some(false) => "unhealthy",
            None => "no status yet",
        };
        let kind = serde_json::to_value(c.spec.check_type)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{}/{}  {kind} {target}: {healthy}",
            c.namespace().unwrap_or_default(),
            c.name_any(),
        );
        if let Some(q) = &st.checkers_healthy {
            let _ = writeln!(
                out,
                "  quorum: {q} checkers see it healthy (more than {}% needed)",
                c.spec.healthy_checker_percent
            );
        }
        if let Some(m) = &st.metric {
            let _ = writeln!(
                out,
                "  last evaluation: {} ({})",
                m.state,
                m.value.clone().or(m.error.clone()).unwrap_or_default()
            );
        }
        let rows: Vec<Vec<String>> = st
            .checkers
            .iter()
            .map(|v| {
                vec![
                    format!("  {}", v.name),
                    v.zone.clone().unwrap_or_else(|| "-".into()),
                    if v.healthy { "healthy" } else { "unhealthy" }.into(),
                    v.last_observed
                        .as_ref()
                        .map_or("-".into(), |t| t.0.to_string()),
                    v.message.clone().unwrap_or_default(),
                ]
            })
            .collect();
        if !rows.is_empty() {
            out.push_str(&table(
                &["  CHECKER", "ZONE", "VIEW", "LAST OBSERVED", "MESSAGE"],
                &rows,
            ));
        }
    }
    if list.is_empty() {
        out.push_str("no HealthChecks\n");
    }
    Ok(out)
}

/// Everything the compiler reads, as the cluster has it now, for the simulator.
async fn cluster_manifests(client: &Client, namespace: &str) -> Result<Manifests, Error> {
    let ns = Scope::Namespace(namespace.into());
    let key = |name: String| ObjectKey::new(namespace, name);
    let mut m = Manifests::default();
    for g in ns
        .list::<RecordGroup>(client, &ListParams::default(), "cannot list RecordGroups")
        .await?
    {
        m.groups.insert(key(g.name_any()), g);
    }
    for c in ns
        .list::<HealthCheck>(client, &ListParams::default(), "cannot list HealthChecks")
        .await?
    {
        m.checks.insert(key(c.name_any()), c);
    }
    for s in ns
        .list::<ZonalShift>(client, &ListParams::default(), "cannot list ZonalShifts")
        .await?
    {
        m.shifts.insert(key(s.name_any()), s);
    }
    let slices = ns
        .list::<EndpointSlice>(
            client,
            &ListParams::default().labels("kubernetes.io/service-name"),
            "cannot list EndpointSlices",
        )
        .await?;
    m.services = endpoints_from_slices(&slices);
    for svc in ns
        .list::<Service>(client, &ListParams::default(), "cannot list Services")
        .await?
    {
        let k = ObjectKey::new(namespace, svc.name_any());
        m.services.entry(k).or_default().cluster_ips = cluster_ips(&svc);
    }
    Ok(m)
}

/// `explain NAME`: the simulator over the cluster's current objects (checks at their current
/// status), asked as a resolver in `from_zone` asks.
pub async fn explain(
    client: &Client,
    namespace: &str,
    name: &str,
    record_type: &str,
    zones: &[String],
    from_zone: Option<String>,
    at: Option<String>,
) -> Result<String, Error> {
    let manifests = cluster_manifests(client, namespace).await?;
    let zones = if zones.is_empty() {
        // The served zones are the operator's flags; without them, every group's own zone
        // (its name's parent) is served, which is how its answer reads anyway.
        let mut z: Vec<String> = manifests
            .groups
            .values()
            .filter_map(|g| {
                let n = g.spec.name.trim_end_matches('.');
                n.split_once('.').map(|(_, parent)| parent.to_owned())
            })
            .collect();
        z.sort();
        z.dedup();
        z
    } else {
        zones.to_vec()
    };
    // Each check as the cluster sees it now: its checkers' views (all taken as reachable:
    // status says what they last saw), and a Metric check's last evaluation.
    let mut views = Vec::new();
    for (key, c) in &manifests.checks {
        let Some(st) = &c.status else { continue };
        for v in &st.checkers {
            views.push((
                key.clone(),
                CheckerView {
                    checker: v.name.clone(),
                    zone: v.zone.clone(),
                    healthy: v.healthy,
                    message: v.message.clone(),
                    values: v.values.clone(),
                },
            ));
        }
        if let Some(m) = &st.metric {
            let healthy = match m.state.as_str() {
                "OK" => true,
                "ALARM" => false,
                _ => st.healthy.unwrap_or(true) != c.spec.inverted,
            };
            let detail = m.value.clone().or(m.error.clone()).unwrap_or_default();
            views.push((
                key.clone(),
                CheckerView {
                    checker: healthroute_api::METRIC_EVALUATOR.into(),
                    zone: None,
                    healthy,
                    message: Some(format!("{}: {detail}", m.state)),
                    values: Vec::new(),
                },
            ));
        }
    }
    let args = crate::simulate::SimulateArgs {
        views,
        manifests: std::path::PathBuf::from(format!("namespace {namespace}")),
        zones,
        unhealthy: Vec::new(),
        alarm: Vec::new(),
        peer: Vec::new(),
        peer_down: Vec::new(),
        not_ready: Vec::new(),
        zone_impaired: None,
        practice_run: None,
        now: at,
        queries: 1000,
        seed: 1,
        explain: true,
        from_zone,
        default_ttl: None,
        name: name.into(),
        record_type: record_type.into(),
    };
    let served = healthroute_compiler::ServedZones::new(&args.zones)?;
    crate::simulate::run_on(
        &args,
        served,
        healthroute_compiler::DEFAULT_TTL,
        manifests,
        None,
    )
}

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

/// `shift list`: every shift, its state and what it applies to.
pub async fn shift_list(client: &Client, scope: &Scope, output: Output) -> Result<String, Error> {
    let list = scope
        .list::<ZonalShift>(client, &ListParams::default(), "cannot list ZonalShifts")
        .await?;
    if output == Output::Json {
        let items: Vec<Json> = list
            .iter()
            .map(|s| {
                json!({"zonalShift": format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()),
                       "awayFrom": s.spec.away_from, "status": s.status.as_ref().and_then(|x| x.status),
                       "expiryTime": s.status.as_ref().and_then(|x| x.expiry_time.clone()),
                       "groups": s.status.as_ref().map(|x| x.groups.clone()).unwrap_or_default()})
            })
            .collect();
        return Ok(json_text(&Json::Array(items)));
    }
    if list.is_empty() {
        return Ok("no ZonalShifts\n".into());
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            let st = s.status.clone().unwrap_or_default();
            vec![
                format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()),
                s.spec.away_from.clone(),
                st.status.map_or("-".into(), |x| format!("{x:?}")),
                st.applied_groups.unwrap_or_else(|| "-".into()),
                st.expiry_time.map_or("-".into(), |t| t.0.to_string()),
                s.spec.comment.clone().unwrap_or_default(),
            ]
        })
        .collect();
    Ok(table(
        &[
            "ZONALSHIFT",
            "AWAY FROM",
            "STATUS",
            "APPLIED",
            "EXPIRES",
            "COMMENT",
        ],
        &rows,
    ))
}
