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
//!
//! ```text
//!   scope.rs     where a command looks (Scope), how it reads through the API server, how it
//!                prints (Output: a table or JSON)
//!   this file    status and checks: what the groups, the resolvers and the checks say
//!   explain.rs   explain: the cluster's objects through the simulator
//!   shift.rs     shift start|extend|cancel|list
//!   practice.rs  practice start|cancel
//! ```

mod explain;
mod practice;
mod scope;
mod shift;

pub use explain::explain;
pub use practice::{practice_cancel, practice_start};
pub use scope::{Output, Scope};
pub use shift::{ShiftTarget, shift_cancel, shift_extend, shift_list, shift_start};

use std::fmt::Write as _;

use crate::error::Error;
use healthroute_api::CHECKER_LABEL;
use healthroute_api::{HealthCheck, RecordGroup};
use healthroute_table::contract::RESOLVER_LABEL;
use healthroute_table::contract::SERVED_GENERATION_ANNOTATION;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use serde_json::{Value as Json, json};

use scope::{err, json_text, key_of, table};

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
                .get(RESOLVER_LABEL)
                .or_else(|| l.labels().get(CHECKER_LABEL))
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
    // Each resolver's registration; a resolver from before registrations told what it serves
    // on its checker Lease (healthroute_table::contract).
    let leases = Api::<Lease>::namespaced(client.clone(), table_namespace)
        .list(&ListParams::default())
        .await
        .map_err(err("cannot list the checkers' Leases"))?;
    let registrations = leases.items.iter().filter(|l| {
        l.labels().contains_key(RESOLVER_LABEL)
            || (l.labels().contains_key(CHECKER_LABEL)
                && l.annotations().contains_key(SERVED_GENERATION_ANNOTATION))
    });
    let (resolvers, stale) = live_resolvers(registrations, jiff::Timestamp::now());
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
            key_of(g).to_string(),
            g.spec.name.clone(),
            format!("{:?}", g.spec.routing_policy),
            st.healthy_records.clone().unwrap_or_else(|| "-".into()),
            if st.last_resort { "yes" } else { "no" }.into(),
            served,
        ]);
        items.push(json!({
            "recordGroup": key_of(g).to_string(),
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
                    "healthCheck": key_of(c).to_string(),
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
