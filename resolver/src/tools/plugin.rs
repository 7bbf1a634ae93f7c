//! `kubectl healthroute`: what the cluster's healthroute objects say, read the way an operator
//! of the system wants them, and the ZonalShift lifecycle.
//!
//! ```text
//!   status            every RecordGroup: policy, healthy/total, last resort, served generation,
//!                     and the generation each live resolver serves when they differ (a
//!                     checker Lease past its expiry is a gone pod's: counted, not shown)
//!   explain NAME      why the live answer is what it is: the cluster's objects through the
//!                     simulator (docs/semantics.md), checks at their current status
//!   shift start|extend|cancel|list   (list: ZonalShifts and the shifts ZonalAutoshifts
//!                     hold, each with its type: Customer, Autoshift, PracticeRun)
//!   practice start|cancel NAME   asks a ZonalAutoshift for a practice run, or ends the running
//!                     one, through its annotation (AS10), and reports the operator's answer
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
use healthroute_api::{
    CHECKER_LABEL, PRACTICE_RUN_ANNOTATION, PRACTICE_RUN_ZONE_ANNOTATION,
    SERVED_GENERATION_ANNOTATION,
};
use healthroute_api::{
    ENGINE_SHIFT_LABEL, HealthCheck, NotAppliedReason, RecordGroup, ShiftState, ShiftType,
    ZonalAutoshift, ZonalAutoshiftStatus, ZonalShift, ZonalShiftStatus, is_engine_shift,
    parse_expires_in,
};
use healthroute_compiler::manifests::{Manifests, cluster_ips, endpoints_from_slices, node_input};
use healthroute_compiler::{CheckerView, ObjectKey};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Service};
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

/// Whether the API server answered that it does not serve the kind (its CRD is not
/// installed), or that the user may not read it.
fn unserved_or_forbidden(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) if matches!(s.code, 403 | 404) => Some(s.code),
        _ => None,
    }
}

/// Every ZonalAutoshift in the scope; none when the kind is not served (an install without
/// its CRD reads as one without ZonalAutoshifts).
async fn autoshifts(client: &Client, scope: &Scope) -> Result<Vec<ZonalAutoshift>, Error> {
    match scope
        .api::<ZonalAutoshift>(client)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(list.items),
        Err(e) if matches!(unserved_or_forbidden(&e), Some(404)) => Ok(Vec::new()),
        Err(source) => Err(Error::Kube {
            what: "cannot list ZonalAutoshifts",
            source,
        }),
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

/// How long past its Lease's expiry a checker still counts as live: the resolver's clock
/// (which wrote `renewTime`) and the user's may differ by this much.
pub const LEASE_CLOCK_SLACK: jiff::SignedDuration = jiff::SignedDuration::from_secs(5);

/// A resolver as its live checker Lease tells it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct LiveResolver {
    pub checker: String,
    /// The table generation it serves (P4), when it says.
    pub served_generation: Option<u64>,
}

/// The resolvers whose checker Lease is live at `now`, by checker name, and how many Leases
/// are stale. A Lease is live while `renewTime + leaseDurationSeconds` (plus
/// [`LEASE_CLOCK_SLACK`]) is ahead of `now`; a Lease without a renewal time is stale. A stale
/// Lease is a resolver that stopped renewing: a pod gone (its Lease not yet collected), or
/// one cut off from the API server (H7 counts it out too).
pub fn live_resolvers<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    now: jiff::Timestamp,
) -> (Vec<LiveResolver>, usize) {
    let default_duration = crate::sources::cluster::CHECKER_LEASE_SECONDS;
    let mut live = Vec::new();
    let mut stale = 0;
    for l in leases {
        let spec = l.spec.as_ref();
        let expiry = spec
            .and_then(|s| s.renew_time.as_ref())
            .and_then(|renewed| {
                let seconds = spec
                    .and_then(|s| s.lease_duration_seconds)
                    .unwrap_or(default_duration);
                let lasts = jiff::SignedDuration::from_secs(i64::from(seconds)) + LEASE_CLOCK_SLACK;
                renewed.0.checked_add(lasts).ok()
            });
        if expiry.is_none_or(|e| e <= now) {
            stale += 1;
            continue;
        }
        live.push(LiveResolver {
            checker: l
                .labels()
                .get(CHECKER_LABEL)
                .cloned()
                .unwrap_or_else(|| l.name_any()),
            served_generation: l
                .annotations()
                .get(SERVED_GENERATION_ANNOTATION)
                .and_then(|g| g.parse().ok()),
        });
    }
    live.sort();
    (live, stale)
}

/// Where the installation's table lives when `--table-namespace` is not given: the one
/// namespace whose ConfigMaps carry the table's manifest label, asked across namespaces. When
/// the user may not list ConfigMaps everywhere, or none is found, the chart's default
/// (`healthroute`); several installations must be told apart with the flag.
pub async fn find_table_namespace(client: &Client) -> Result<String, Error> {
    use healthroute_table::published::{MANIFEST, TABLE_LABEL};
    use k8s_openapi::api::core::v1::ConfigMap;
    let found = Api::<ConfigMap>::all(client.clone())
        .list_metadata(&ListParams::default().labels(&format!("{TABLE_LABEL}={MANIFEST}")))
        .await;
    let namespaces = match found {
        Ok(list) => table_namespaces(
            list.items
                .iter()
                .filter_map(|m| m.metadata.namespace.as_deref()),
        ),
        // Not allowed to list everywhere, or no API: the chart's default.
        Err(_) => Vec::new(),
    };
    match &namespaces[..] {
        [] => Ok(DEFAULT_TABLE_NAMESPACE.to_owned()),
        [one] => Ok(one.clone()),
        several => Err(Error::SeveralInstallations(several.join(", "))),
    }
}

/// The chart's release namespace when nothing says otherwise.
pub const DEFAULT_TABLE_NAMESPACE: &str = "healthroute";

/// The distinct namespaces that hold a table manifest, sorted.
fn table_namespaces<'a>(namespaces: impl Iterator<Item = &'a str>) -> Vec<String> {
    let mut found: Vec<String> = namespaces.map(str::to_owned).collect();
    found.sort();
    found.dedup();
    found
}

/// `status`: every RecordGroup, and the table generation each live resolver serves.
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
    let (resolvers, stale) = live_resolvers(&leases.items, jiff::Timestamp::now());
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
        resolvers.iter().map(|r| r.served_generation).collect();
    if output == Output::Json {
        let resolvers: Vec<Json> = resolvers
            .iter()
            .map(|r| json!({"checker": r.checker, "servedGeneration": r.served_generation}))
            .collect();
        return Ok(json_text(&json!({
            "recordGroups": items, "resolvers": resolvers, "staleCheckerLeases": stale,
        })));
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
        (0, _) => {
            out.push_str("resolvers: none reports a served generation (no live checker Lease)\n")
        }
        (n, 1) => {
            let g = resolvers[0]
                .served_generation
                .map_or("unknown".into(), |g| g.to_string());
            let _ = writeln!(out, "resolvers: {n}, all serving table generation {g}");
        }
        (n, _) => {
            let _ = writeln!(out, "resolvers: {n}, serving different table generations:");
            for r in &resolvers {
                let _ = writeln!(
                    out,
                    "  {}: {}",
                    r.checker,
                    r.served_generation
                        .map_or("unknown".into(), |g| g.to_string())
                );
            }
        }
    }
    match stale {
        0 => {}
        1 => out.push_str("1 stale checker Lease (a gone pod) not shown\n"),
        n => {
            let _ = writeln!(out, "{n} stale checker Leases (gone pods) not shown");
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
        // A mirror of an engine's shift is not an input: the engine's status holds it (AS13).
        if !is_engine_shift(&s) {
            m.shifts.insert(key(s.name_any()), s);
        }
    }
    // With their status: the simulator's engines start from what the operator decided (the
    // autoshift in force, the running practice run, the requests answered), as a new leader's
    // do (AS11).
    for a in autoshifts(client, &ns).await? {
        m.autoshifts.insert(key(a.name_any()), a);
    }
    // Detection by Nodes (AS3 c) needs to read them, cluster-wide; without that right the
    // simulation goes on without them and says so.
    match Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(nodes) => {
            for n in &nodes.items {
                m.nodes.insert(n.name_any(), node_input(n));
            }
        }
        Err(e) if unserved_or_forbidden(&e).is_some() => m.warnings.push(format!(
            "Nodes cannot be read ({e}): detection by Nodes (AS3 c) is left out"
        )),
        Err(source) => {
            return Err(Error::Kube {
                what: "cannot list Nodes",
                source,
            });
        }
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
    let args = crate::tools::simulate::SimulateArgs {
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
    crate::tools::simulate::run_on(
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
                name: format!("{}/{}", s.namespace().unwrap_or_default(), s.name_any()),
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
                name: format!("{namespace}/{}", held.name),
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

#[cfg(test)]
mod tests {
    // SEM-P5: the plugin finds the one namespace that holds a table; several are told apart.
    #[test]
    fn the_table_namespace_is_the_one_that_holds_a_manifest() {
        assert_eq!(
            super::table_namespaces(["hr", "hr"].into_iter()),
            vec!["hr".to_owned()]
        );
        assert_eq!(
            super::table_namespaces(["west", "east", "west"].into_iter()),
            vec!["east".to_owned(), "west".to_owned()]
        );
        assert!(super::table_namespaces(std::iter::empty()).is_empty());
    }

    use super::*;

    const NOW: &str = "2026-12-01T12:00:00Z";

    fn now() -> jiff::Timestamp {
        NOW.parse().expect("time")
    }

    /// A checker's Lease as the resolver writes it, renewed `ago` seconds before [`NOW`]
    /// (none: never renewed).
    fn mk_lease(
        checker: &str,
        generation: Option<u64>,
        ago: Option<i64>,
        duration: Option<i32>,
    ) -> Lease {
        let renewed = ago.map(|s| (now() - jiff::SignedDuration::from_secs(s)).to_string());
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": format!("healthroute-checker-{checker}"),
                         "labels": {CHECKER_LABEL: checker},
                         "annotations": generation.map(|g| json!({SERVED_GENERATION_ANNOTATION: g.to_string()}))},
            "spec": {"holderIdentity": checker, "renewTime": renewed, "leaseDurationSeconds": duration},
        }))
        .expect("a Lease")
    }

    fn live(checker: &str, generation: Option<u64>) -> LiveResolver {
        LiveResolver {
            checker: checker.into(),
            served_generation: generation,
        }
    }

    // SEM-P5 SEM-H7: `status` reports the generations of the resolvers that renew their
    // checker Lease; a Lease past renewTime + leaseDurationSeconds (and the clock slack) is a
    // gone pod's, counted but not shown, so 27 gone pods never read as "different
    // generations".
    #[test]
    fn only_live_checker_leases_count_as_resolvers() {
        let cases: &[(&str, Lease, bool)] = &[
            (
                "renewed just now",
                mk_lease("a", Some(7), Some(0), Some(10)),
                true,
            ),
            (
                "within its duration",
                mk_lease("b", Some(7), Some(9), Some(10)),
                true,
            ),
            (
                "past its duration, within the slack",
                mk_lease("c", Some(7), Some(14), Some(10)),
                true,
            ),
            (
                "past duration and slack",
                mk_lease("d", Some(6), Some(16), Some(10)),
                false,
            ),
            (
                "a gone pod's, an hour old",
                mk_lease("e", Some(3), Some(3600), Some(10)),
                false,
            ),
            (
                "no duration: the checker's 10 s",
                mk_lease("f", Some(7), Some(12), None),
                true,
            ),
            (
                "no duration, old",
                mk_lease("g", Some(7), Some(20), None),
                false,
            ),
            (
                "a longer duration is honoured",
                mk_lease("h", Some(7), Some(50), Some(60)),
                true,
            ),
            (
                "never renewed",
                mk_lease("i", Some(7), None, Some(10)),
                false,
            ),
            (
                "renewed ahead of our clock",
                mk_lease("j", Some(7), Some(-3), Some(10)),
                true,
            ),
        ];
        for (what, lease, expect_live) in cases {
            let (found, stale) = live_resolvers([lease], now());
            assert_eq!(found.len() == 1, *expect_live, "{what}");
            assert_eq!(stale == 1, !*expect_live, "{what}");
        }
    }

    // SEM-P5: what `status` judges "different generations" over is the live resolvers only,
    // sorted by name; the stale ones are a count.
    #[test]
    fn stale_leases_do_not_make_generations_differ() {
        let mut leases = vec![
            mk_lease("resolver-b", Some(9), Some(1), Some(10)),
            mk_lease("resolver-a", Some(9), Some(0), Some(10)),
        ];
        for i in 0..27 {
            leases.push(mk_lease(
                &format!("gone-{i}"),
                Some(i),
                Some(600 + i as i64),
                Some(10),
            ));
        }
        let (found, stale) = live_resolvers(&leases, now());
        assert_eq!(
            found,
            [live("resolver-a", Some(9)), live("resolver-b", Some(9))]
        );
        assert_eq!(stale, 27);
        // A live Lease without a generation, or without the label, still counts.
        let mut bare = mk_lease("x", None, Some(0), Some(10));
        bare.metadata.labels = None;
        let (found, stale) = live_resolvers([&bare], now());
        assert_eq!(found, [live("healthroute-checker-x", None)]);
        assert_eq!(stale, 0);
    }
}
