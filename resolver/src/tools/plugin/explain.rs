//! `kubectl healthroute explain NAME`: the simulator over the cluster's current objects,
//! checks at their current status (each checker's view, a Metric check's last evaluation).

use crate::error::Error;
use crate::tools::simulate::Scenario;
use healthroute_api::{HealthCheck, RecordGroup, ZonalShift, is_engine_shift};
use healthroute_compiler::manifests::{Manifests, cluster_ips, endpoints_from_slices, node_input};
use healthroute_compiler::{CheckerView, ObjectKey};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};

use super::scope::{Scope, autoshifts, unserved_or_forbidden};

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
        views.extend(st.checker_views().map(|view| (key.clone(), view)));
        if let Some(m) = &st.metric {
            let healthy = m
                .state
                .healthy()
                .unwrap_or_else(|| st.healthy.unwrap_or(true) != c.spec.inverted);
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
    let scenario = Scenario {
        views,
        queries: 1000,
        explain: true,
        from_zone,
        ..Scenario::asking(name, record_type, at.as_deref())?
    };
    let served = healthroute_compiler::ServedZones::new(&zones)?;
    crate::tools::simulate::run_on(
        &scenario,
        served,
        healthroute_compiler::DEFAULT_TTL,
        manifests,
        None,
    )
}
