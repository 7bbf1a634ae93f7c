//! Zonal autoshift on a real API server (SEMANTICS AS3, AS4, AS9, AS10, AS11): the operator's
//! control loop, in this process, over three frontend groups whose Services' endpoints are
//! Pods on Nodes in three zones. Zone names are this run's own (`as<pid>-a` ...), so that
//! other tests' Nodes never count in its detection, and everything lives in a namespace
//! `hr-autoshift-live-<pid>`, deleted at the end with the Pods and Nodes, a failed step or not.
//!
//!   HEALTHROUTE_TEST_KUBECONFIG=~/.kube/config cargo test -p healthroute-operator --test live_autoshift -- --include-ignored --nocapture
//!
//! Pods have no kubelet here: the test sets their status, and the Nodes' (the controller
//! manager runs without its node-lifecycle controller, so a NotReady Node leaves its Pods
//! ready: only the autoshift moves traffic away from them). What the published table answers
//! is read back from its ConfigMaps, as a resolver reads it. Each phase's time is printed.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use healthroute_api::{HealthCheck, RecordGroup, ZonalAutoshift, ZonalShift};
use healthroute_compiler::ServedZones;
use healthroute_operator::controller::{self, Config, OperatorMetrics};
use healthroute_table::published::{Assembler, DATA_KEY, TABLE_LABEL};
use healthroute_table::{RoutingTable, Value};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, CustomResourceExt, ResourceExt};
use serde_json::{Value as Json, json};

const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
const GROUPS: [&str; 3] = ["api", "web", "search"];
/// How long a zone stays healthy before traffic returns, and how long a practice run lasts.
const HOLD: Duration = Duration::from_secs(3);
const RUN: Duration = Duration::from_secs(5);
const WITHIN: Duration = Duration::from_secs(30);

async fn client() -> Client {
    let path = std::env::var("HEALTHROUTE_TEST_KUBECONFIG")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            panic!("HEALTHROUTE_TEST_KUBECONFIG is not set: this test needs a live API server")
        });
    let kubeconfig = Kubeconfig::read_from(&path).expect("readable kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("usable kubeconfig");
    Client::try_from(config).expect("client")
}

fn apply() -> PatchParams {
    PatchParams::apply("healthroute-live-test").force()
}

/// This run's zones, nodes and pod addresses.
#[derive(Clone)]
struct World {
    ns: String,
    zones: [String; 3],
}

impl World {
    fn of_this_run() -> Self {
        let pid = std::process::id();
        World {
            ns: format!("hr-autoshift-live-{pid}"),
            zones: ["a", "b", "c"].map(|z| format!("as{pid}-{z}")),
        }
    }
    fn node(&self, zone: usize, n: usize) -> String {
        format!("{}-{n}", self.zones[zone])
    }
    /// The address of `group`'s pod in zone `zone` (TEST-NET-2: never reached).
    fn ip(group: usize, zone: usize) -> String {
        format!("198.51.100.{}", 10 * (group + 1) + zone + 1)
    }
    fn pod(group: usize, zone: usize) -> String {
        format!("{}-{zone}", GROUPS[group])
    }
}

/// The table as the resolvers assemble it from the ConfigMaps.
async fn published(client: &Client, ns: &str) -> Option<RoutingTable<Value>> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
    let list = cms
        .list(&ListParams::default().labels(TABLE_LABEL))
        .await
        .ok()?;
    let mut a = Assembler::default();
    for cm in list.items {
        let data = cm.data.as_ref()?.get(DATA_KEY)?.clone();
        a.set(
            cm.labels().get(TABLE_LABEL).map(String::as_str),
            data.as_bytes(),
        )
        .ok()?;
    }
    a.assemble().ok().flatten()
}

/// The zones whose pod address every group answers (a zone counts when all three do).
async fn zones_answered(client: &Client, world: &World) -> BTreeSet<usize> {
    let Some(table) = published(client, &world.ns).await else {
        return BTreeSet::new();
    };
    (0..3)
        .filter(|z| {
            GROUPS.iter().enumerate().all(|(g, name)| {
                table
                    .groups
                    .get(format!("{}/{name}", world.ns).as_str())
                    .is_some_and(|e| format!("{:?}", e.selection).contains(&World::ip(g, *z)))
            })
        })
        .collect()
}

/// Waits until `f` holds, and returns how long it took; panics after `within`.
async fn wait_until<F: std::future::Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut f: impl FnMut() -> F,
) -> Duration {
    let start = Instant::now();
    while start.elapsed() < within {
        if f().await {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out after {within:?} waiting for {what}");
}

async fn autoshift_status(client: &Client, ns: &str) -> Json {
    Api::<ZonalAutoshift>::namespaced(client.clone(), ns)
        .get_status("frontend")
        .await
        .ok()
        .and_then(|a| serde_json::to_value(a.status).ok())
        .unwrap_or(Json::Null)
}

fn condition<'a>(status: &'a Json, kind: &str) -> &'a Json {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind))
        .unwrap_or(&Json::Null)
}

async fn set_node_ready(client: &Client, node: &str, ready: bool) {
    Api::<Node>::all(client.clone())
        .patch_status(
            node,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": [
                {"type": "Ready", "status": if ready { "True" } else { "False" },
                 "reason": "LiveTest", "message": "set by the live test"}]}})),
        )
        .await
        .expect("node status");
}

async fn set_pod_ready(pods: &Api<Pod>, group: usize, zone: usize, ready: bool) {
    let status = if ready { "True" } else { "False" };
    let ip = World::ip(group, zone);
    pods.patch_status(
        &World::pod(group, zone),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {
            "phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
            "conditions": [{"type": "Ready", "status": status},
                           {"type": "ContainersReady", "status": status}]}})),
    )
    .await
    .expect("pod status");
}

/// Nodes of other tests that are not Ready in a zone not this run's: detection by Nodes
/// (AS3 c) then sees more than one zone failing and rightly shifts nothing.
async fn foreign_unready_nodes(client: &Client, world: &World) -> Vec<String> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .expect("nodes");
    nodes
        .items
        .iter()
        .filter(|n| {
            n.labels()
                .get(ZONE_LABEL)
                .is_some_and(|z| !world.zones.contains(z))
        })
        .filter(|n| {
            !n.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .map(|n| n.name_any())
        .collect()
}

async fn event_reasons(client: &Client, ns: &str) -> Vec<String> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.kind.as_deref()) == Some("ZonalAutoshift")
                })
                .filter_map(|e| e.reason.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// A ZonalShift's status, as `kubectl get zs NAME -o json` shows it (`Null` when absent).
async fn zonal_shift(client: &Client, ns: &str, name: &str) -> Json {
    match Api::<ZonalShift>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("get ZonalShift")
    {
        Some(s) => serde_json::to_value(&s).expect("json"),
        None => Json::Null,
    }
}

async fn setup(client: &Client, world: &World) {
    for crd in [
        HealthCheck::crd(),
        RecordGroup::crd(),
        ZonalShift::crd(),
        ZonalAutoshift::crd(),
    ] {
        Api::<CustomResourceDefinition>::all(client.clone())
            .patch(&crd.name_any(), &apply(), &Patch::Apply(&crd))
            .await
            .expect("CRD applies");
    }
    tokio::time::sleep(Duration::from_secs(2)).await; // let the CRDs become established
    Api::<Namespace>::all(client.clone())
        .patch(
            &world.ns,
            &apply(),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": world.ns}}),
            ),
        )
        .await
        .expect("namespace");
    // Two Ready Nodes per zone.
    for (z, zone) in world.zones.iter().enumerate() {
        for n in 0..2 {
            let node = world.node(z, n);
            Api::<Node>::all(client.clone())
                .patch(
                    &node,
                    &apply(),
                    &Patch::Apply(json!({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": node, "labels": {ZONE_LABEL: zone}}})),
                )
                .await
                .expect("node");
            set_node_ready(client, &node, true).await;
        }
    }
    // Per group a Service over one pod in each zone, all ready.
    let services: Api<Service> = Api::namespaced(client.clone(), &world.ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &world.ns);
    for (g, group) in GROUPS.iter().enumerate() {
        services
            .patch(
                &format!("svc-{group}"),
                &apply(),
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Service",
                    "metadata": {"name": format!("svc-{group}")},
                    "spec": {"selector": {"app": group}, "ports": [{"port": 80}]}})),
            )
            .await
            .expect("service");
        for z in 0..3 {
            pods.patch(
                &World::pod(g, z),
                &apply(),
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": World::pod(g, z), "labels": {"app": group}},
                    "spec": {"nodeName": world.node(z, 0),
                             "containers": [{"name": "app", "image": "app:none"}]}})),
            )
            .await
            .expect("pod");
            set_pod_ready(&pods, g, z, true).await;
        }
    }
}

async fn teardown(client: &Client, world: &World) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &world.ns);
    for g in 0..GROUPS.len() {
        for z in 0..3 {
            let _ = pods
                .delete(
                    &World::pod(g, z),
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..DeleteParams::default()
                    },
                )
                .await;
        }
    }
    let _ = Api::<Namespace>::all(client.clone())
        .delete(&world.ns, &DeleteParams::default())
        .await;
    for z in 0..3 {
        for n in 0..2 {
            let _ = Api::<Node>::all(client.clone())
                .delete(&world.node(z, n), &DeleteParams::default())
                .await;
        }
    }
}

// SEM-AS3 SEM-AS4 SEM-AS9 SEM-AS10 SEM-AS11: zone-a's pods unready in all three groups start
// an autoshift away from zone-a (status, Event, metric); ready again, traffic returns only
// after the hold time. zone-b's Nodes NotReady (their pods still ready) shift zone-b away in
// the published table, and back after the hold time. A practice run asked for through the
// annotation shifts zone-c away for its duration and ends Succeeded. SEM-AS13: each shift is
// a ZonalShift of its type while it lasts.
#[tokio::test]
#[ignore = "needs a live API server (HEALTHROUTE_TEST_KUBECONFIG), run with --include-ignored"]
async fn live_zonal_autoshift_and_a_practice_run() {
    let client = client().await;
    let world = World::of_this_run();
    // The scenario is a task of its own, so that a failed step is its result: the Nodes and
    // the namespace it made are deleted all the same, and then the failure is the test's.
    let scenario = tokio::spawn(set_up_and_shift(client.clone(), world.clone())).await;
    teardown(&client, &world).await;
    if let Err(failed) = scenario {
        std::panic::resume_unwind(failed.into_panic());
    }
}

async fn set_up_and_shift(client: Client, world: World) {
    setup(&client, &world).await;
    let ns = world.ns.clone();

    let (_leader_tx, leader) = tokio::sync::watch::channel(true);
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let mut config = Config::new(
        ns.clone(),
        ServedZones::new(["live.example."]).expect("zone"),
    );
    config.shards = 2;
    config.watch_namespace = Some(ns.clone());
    let metrics = OperatorMetrics::default();
    let control = tokio::spawn(controller::run(
        client.clone(),
        config,
        leader,
        metrics.clone(),
        Default::default(),
        stop,
    ));

    let rgs: Api<RecordGroup> = Api::namespaced(client.clone(), &ns);
    for group in GROUPS {
        rgs.patch(group, &apply(), &Patch::Apply(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "RecordGroup",
            "metadata": {"name": group, "labels": {"tier": "frontend"}},
            "spec": {"name": format!("{group}.live.example."), "type": "A", "routingPolicy": "MultiValue",
                     "records": [{"setIdentifier": "pods", "service": {"name": format!("svc-{group}")}}]}
        }))).await.expect("RecordGroup");
    }
    // The practice runs' outcome alarm: a TCP check of a loopback port this test holds open,
    // so that it stays healthy (not in ALARM) even if a checker from another test probes it.
    let outcome_port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let outcome_addr = outcome_port.local_addr().expect("addr");
    Api::<HealthCheck>::namespaced(client.clone(), &ns)
        .patch("outcome", &apply(), &Patch::Apply(json!({
            "apiVersion": "healthroute.io/v1alpha1", "kind": "HealthCheck", "metadata": {"name": "outcome"},
            "spec": {"type": "TCP", "target": {"address": "127.0.0.1", "port": outcome_addr.port()}}
        }))).await.expect("HealthCheck");
    let zas: Api<ZonalAutoshift> = Api::namespaced(client.clone(), &ns);
    zas.patch("frontend", &apply(), &Patch::Apply(json!({
        "apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalAutoshift", "metadata": {"name": "frontend"},
        "spec": {"target": {"selector": {"matchLabels": {"tier": "frontend"}}}, "autoshift": "Enabled",
                 "detection": {"holdTime": format!("{}s", HOLD.as_secs())},
                 "practiceRun": {"outcomeAlarms": [{"name": "outcome"}],
                                 "duration": format!("{}s", RUN.as_secs()), "cadence": "168h"}}
    }))).await.expect("ZonalAutoshift");

    let all: BTreeSet<usize> = [0, 1, 2].into();
    let listed = wait_until("every zone published", WITHIN, || async {
        zones_answered(&client, &world).await == all
    })
    .await;
    wait_until("the ZonalAutoshift's first status", WITHIN, || async {
        let st = autoshift_status(&client, &ns).await;
        st["autoshift"] == "Inactive" && condition(&st, "Ready")["status"] == "True"
    })
    .await;
    println!("published with every zone, status written: {listed:?}");

    // Phase 1, endpoints (AS3 a): zone-a's pods unready in all three groups.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    for g in 0..GROUPS.len() {
        set_pod_ready(&pods, g, 0, false).await;
    }
    let shifted = wait_until("an autoshift away from zone-a", WITHIN, || async {
        autoshift_status(&client, &ns).await["activeZone"] == world.zones[0].as_str()
    })
    .await;
    let st = autoshift_status(&client, &ns).await;
    assert_eq!(
        condition(&st, "Autoshift")["reason"],
        "ZoneImpaired",
        "{st:#}"
    );
    assert_eq!(st["shifts"][0]["status"]["type"], "Autoshift");
    assert_eq!(st["shifts"][0]["status"]["appliedGroups"], "3/3", "{st:#}");
    wait_until("the AutoshiftStarted Event", WITHIN, || async {
        event_reasons(&client, &ns)
            .await
            .iter()
            .any(|r| r == "AutoshiftStarted")
    })
    .await;
    let zone_a = world.zones[0].clone();
    let gauge = |zone: &str| {
        let mut registry = healthroute_admin::metrics::Registry::default();
        metrics.register(&mut registry);
        let line = format!("healthroute_autoshift_active{{zone=\"{zone}\"}} 1");
        healthroute_admin::metrics::encode(&registry)
            .lines()
            .any(|l| l == line)
    };
    assert!(gauge(&zone_a), "the gauge names {zone_a}");
    // AS13: `kubectl get zs` shows the autoshift as a ZonalShift of its type.
    wait_until("the autoshift as a ZonalShift", WITHIN, || async {
        let zs = zonal_shift(&client, &ns, "frontend-autoshift").await;
        zs["status"]["type"] == "Autoshift" && zs["status"]["appliedGroups"] == "3/3"
    })
    .await;
    let zs = zonal_shift(&client, &ns, "frontend-autoshift").await;
    assert_eq!(zs["spec"]["awayFrom"], zone_a.as_str(), "{zs:#}");
    // AS5: a customer's shift on the same groups takes precedence; the autoshift's ZonalShift
    // then says NotApplied (Conflict) for each group, and Applied again once it is gone.
    let shifts: Api<ZonalShift> = Api::namespaced(client.clone(), &ns);
    shifts
        .patch(
            "drain-a",
            &apply(),
            &Patch::Apply(json!({"apiVersion": "healthroute.io/v1alpha1", "kind": "ZonalShift",
                "metadata": {"name": "drain-a"},
                "spec": {"awayFrom": zone_a, "target": {"selector": {"matchLabels": {"tier": "frontend"}}},
                         "expiresIn": "1h"}})),
        )
        .await
        .expect("customer shift");
    wait_until("the customer shift first", WITHIN, || async {
        let zs = zonal_shift(&client, &ns, "frontend-autoshift").await;
        zs["status"]["appliedGroups"] == "0/3" && zs["status"]["groups"][0]["reason"] == "Conflict"
    })
    .await;
    // What a user sees, when kubectl is at hand.
    if let Ok(out) = std::process::Command::new("kubectl")
        .args(["get", "zs", "-n", &ns])
        .output()
    {
        println!("kubectl get zs:\n{}", String::from_utf8_lossy(&out.stdout));
    }
    // Its own status is another write of the leader's, after or before the mirror's.
    wait_until("the customer shift's status", WITHIN, || async {
        let customer = zonal_shift(&client, &ns, "drain-a").await;
        customer["status"]["type"] == "Customer"
    })
    .await;
    let customer = zonal_shift(&client, &ns, "drain-a").await;
    assert_eq!(customer["status"]["appliedGroups"], "3/3", "{customer:#}");
    shifts
        .delete("drain-a", &DeleteParams::default())
        .await
        .expect("delete");
    wait_until("the autoshift applied again", WITHIN, || async {
        zonal_shift(&client, &ns, "frontend-autoshift").await["status"]["appliedGroups"] == "3/3"
    })
    .await;
    assert_eq!(
        zs["metadata"]["ownerReferences"][0]["kind"],
        "ZonalAutoshift"
    );
    println!("zone-a pods unready -> autoshift in status: {shifted:?}");

    for g in 0..GROUPS.len() {
        set_pod_ready(&pods, g, 0, true).await;
    }
    let recovered = Instant::now();
    wait_until(
        "zone-a healthy again, within its hold time",
        WITHIN,
        || async { autoshift_status(&client, &ns).await["healthySince"].is_string() },
    )
    .await;
    assert!(
        !zones_answered(&client, &world).await.contains(&0),
        "zone-a's ready pods stay out during the hold time"
    );
    wait_until("zone-a back in the table", WITHIN, || async {
        zones_answered(&client, &world).await == all
    })
    .await;
    let back = recovered.elapsed();
    assert!(
        back >= HOLD,
        "back after {back:?}, before the hold time {HOLD:?}"
    );
    // Its status follows the table (P7: written after, at the writer's pace).
    wait_until("the autoshift's status says it ended", WITHIN, || async {
        let st = autoshift_status(&client, &ns).await;
        st["activeZone"].is_null() && condition(&st, "Autoshift")["status"] == "False"
    })
    .await;
    wait_until("the autoshift's ZonalShift gone", WITHIN, || async {
        zonal_shift(&client, &ns, "frontend-autoshift")
            .await
            .is_null()
    })
    .await;
    println!("zone-a pods ready -> back in the table after {back:?} (hold {HOLD:?})");

    // Phase 2, Nodes (AS3 c): zone-b's Nodes NotReady, their pods still ready.
    let foreign = foreign_unready_nodes(&client, &world).await;
    if foreign.is_empty() {
        for n in 0..2 {
            set_node_ready(&client, &world.node(1, n), false).await;
        }
        let away = wait_until("zone-b out of the table", WITHIN, || async {
            zones_answered(&client, &world).await == [0, 2].into()
        })
        .await;
        // Its status follows the table (P7: written after, at the writer's pace).
        wait_until("the autoshift's status names zone-b", WITHIN, || async {
            autoshift_status(&client, &ns).await["activeZone"] == world.zones[1].as_str()
        })
        .await;
        for n in 0..2 {
            set_node_ready(&client, &world.node(1, n), true).await;
        }
        let t2 = Instant::now();
        wait_until("zone-b back in the table", WITHIN, || async {
            zones_answered(&client, &world).await == all
        })
        .await;
        let back = t2.elapsed();
        assert!(back >= HOLD, "back after {back:?}, before the hold time");
        println!(
            "zone-b Nodes NotReady -> out of the table in {away:?}; Ready -> back after {back:?}"
        );
    } else {
        println!(
            "phase 2 (Nodes) not run: other tests' Nodes are not Ready in other zones ({foreign:?}), \
             so detection by Nodes rightly sees more than one zone failing"
        );
    }

    // Phase 3, a practice run asked for through the annotation, away from zone-c.
    let t = Instant::now();
    zas.patch(
        "frontend",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {
            "healthroute.io/practice-run": "start:live-1",
            "healthroute.io/practice-run-zone": world.zones[2]}}})),
    )
    .await
    .expect("annotate");
    let away = wait_until("zone-c out of the table during the run", WITHIN, || async {
        zones_answered(&client, &world).await == [0, 1].into()
    })
    .await;
    // Its status follows the table (P7: written after, at the writer's pace).
    wait_until("the practice run in the status", WITHIN, || async {
        autoshift_status(&client, &ns).await["practiceRun"]["zone"] == world.zones[2].as_str()
    })
    .await;
    let st = autoshift_status(&client, &ns).await;
    assert_eq!(st["lastRequest"], "start:live-1");
    assert_eq!(st["shifts"][0]["status"]["type"], "PracticeRun");
    wait_until("the practice run as a ZonalShift", WITHIN, || async {
        zonal_shift(&client, &ns, "frontend-practice-run").await["status"]["type"] == "PracticeRun"
    })
    .await;
    wait_until("zone-c back after the run", WITHIN, || async {
        zones_answered(&client, &world).await == all
    })
    .await;
    let ran = t.elapsed();
    let outcome = wait_until("the run's outcome", WITHIN, || async {
        autoshift_status(&client, &ns).await["outcomes"][0]["outcome"] == "Succeeded"
    })
    .await;
    assert!(ran >= RUN, "the run lasted {ran:?}, less than {RUN:?}");
    wait_until("the practice run's ZonalShift gone", WITHIN, || async {
        zonal_shift(&client, &ns, "frontend-practice-run")
            .await
            .is_null()
    })
    .await;
    wait_until("the practice run's Events", WITHIN, || async {
        let reasons = event_reasons(&client, &ns).await;
        [
            "PracticeRunStarted",
            "PracticeRunSucceeded",
            "AutoshiftEnded",
        ]
        .iter()
        .all(|r| reasons.iter().any(|x| x == r))
    })
    .await;
    let mut registry = healthroute_admin::metrics::Registry::default();
    metrics.register(&mut registry);
    let text = healthroute_admin::metrics::encode(&registry);
    assert!(
        text.lines()
            .any(|l| l == r#"healthroute_practice_runs_total{outcome="Succeeded"} 1"#),
        "{text}"
    );
    println!(
        "practice run asked -> zone-c out of the table in {away:?}, back after {ran:?} (duration {RUN:?}), outcome written {outcome:?} later"
    );

    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), control).await;
}
