//! Generated cases end to end (#41): the compiler's property search
//! (crates/compiler/src/tests/invariants.rs) run on the wire. A seeded generator writes a
//! manifest directory per case (one or two RecordGroups of every policy, over static values
//! with and without a zone, a Service's EndpointSlice in every readiness state, an alias, a
//! record of a peer cluster never heard from; HTTP and TCP checks against loopback servers
//! that answer or not); the real resolver serves it, and the simulator of the same binary is
//! asked the same question with the same health as what-ifs:
//!
//! ```text
//!   seed, i ─▶ Case ─▶ DIR (healthroute.yaml, cases.yaml) + loopback servers: 200, 503, closed
//!                │       ├─▶ healthroute-resolver --manifests DIR ─▶ checks settle ─▶ UDP queries
//!                │       └─▶ healthroute-resolver simulate DIR --unhealthy .. --peer-down east
//!                └─▶ Model (record health, values: docs/semantics.md) ─▶ the invariants on the wire
//! ```
//!
//! Every answer the server gives is one the simulator gives, every answer the simulator gives
//! in at least a tenth of its draws is one the server gives, and each answer keeps the
//! contract's promises (S6: NOERROR, AA, never empty; only configured values; while a record is
//! healthy, only healthy records' values). 12 cases by default, the same every run;
//! `HEALTHROUTE_E2E_CASES`, `HEALTHROUTE_E2E_SEED` and `HEALTHROUTE_E2E_CASE` (one case by its
//! index) run others by hand. A failure prints the case's manifests and how to run it again.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};

use crate::dns::{UDP, query};
use crate::support::{Backend, Resolver, resolver, sample, temp_dir};

/// Cases in a CI run (each takes about two seconds: the checks' first probes and a settle).
const CASES: usize = 12;
/// The seed of a CI run.
const SEED: u64 = 41;
/// Cases run at once: each mostly waits for its checks.
const WORKERS: usize = 3;
/// Queries per name, first; more are drawn (up to [`MAX_QUERIES`]) only while an answer the
/// simulator gives in at least [`SEEN_SHARE`] percent of its draws is not seen yet.
const QUERIES: usize = 60;
const MAX_QUERIES: usize = 400;
const SEEN_SHARE: f64 = 10.0;
/// The simulator's draws.
const SIM_QUERIES: &str = "2000";
const ZONES: [&str; 2] = ["zone-a", "zone-b"];
const NAMESPACE: &str = "gen";
/// The peer cluster of every `peer:` record: configured, its exchange address a loopback port
/// where nothing listens, so it is never heard from (X3, X5).
const PEER: &str = "east";
/// "healthroute-e2e-generated-key-32".
const PEER_KEY: &str = "aGVhbHRocm91dGUtZTJlLWdlbmVyYXRlZC1rZXktMzI=";
/// How long a case's checks may take to settle, and a wait for its table to stay the same.
const SETTLE_WITHIN: Duration = Duration::from_secs(20);
const SETTLED_FOR: Duration = Duration::from_millis(600);

/// What a record's health check probes, and so whether it is healthy (H2, H4).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Probe {
    /// HTTP to a server that answers 200.
    Http200,
    /// HTTP to a server that answers 503.
    Http503,
    /// HTTP to a closed port.
    HttpClosed,
    /// TCP to a server that accepts.
    TcpOpen,
    /// TCP to a closed port.
    TcpClosed,
}

impl Probe {
    fn healthy(self) -> bool {
        matches!(self, Probe::Http200 | Probe::TcpOpen)
    }

    fn check_type(self) -> &'static str {
        match self {
            Probe::Http200 | Probe::Http503 | Probe::HttpClosed => "HTTP",
            Probe::TcpOpen | Probe::TcpClosed => "TCP",
        }
    }
}

/// One EndpointSlice endpoint's conditions (H11).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Endpoint {
    Ready,
    /// Terminating but still serving: used when nothing is ready.
    ServingTerminating,
    /// Terminating and no longer serving.
    Gone,
    NotReady,
}

#[derive(Clone, Debug)]
enum Source {
    Static {
        values: Vec<Ipv4Addr>,
        zone: Option<&'static str>,
    },
    /// The Service `service`: its EndpointSlice's endpoints, or (`cluster_ip`) its ClusterIP.
    Service {
        service: String,
        endpoints: Vec<(Ipv4Addr, Endpoint, Option<&'static str>)>,
        cluster_ip: Option<Ipv4Addr>,
    },
    /// An alias to the case's second group, `t`.
    Alias { evaluate: bool },
    /// `peer: {cluster: east, recordGroup: remote/<group>-<i>}`.
    Peer,
}

#[derive(Clone, Debug)]
struct Record {
    source: Source,
    check: Option<Probe>,
    weight: u8,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Policy {
    Simple,
    Weighted,
    Failover,
    MultiValue,
}

#[derive(Clone, Debug)]
struct Group {
    /// `g` (the first), or `t` (the second, the alias target).
    name: &'static str,
    policy: Policy,
    affinity: bool,
    records: Vec<Record>,
}

/// Where a case comes from, which reproduces it.
#[derive(Clone, Copy, Debug)]
enum Origin {
    /// Case `index` of the run seeded `seed`.
    Generated { seed: u64, index: usize },
    /// A case written by hand (a find kept as a named test).
    Named(&'static str),
}

#[derive(Clone, Debug)]
struct Case {
    origin: Origin,
    groups: Vec<Group>,
    /// The resolver's zone (`--zone-name`, the simulator's `--from-zone`).
    from_zone: Option<&'static str>,
}

/// Unique addresses for one case: static values from 192.0.2.0/24, endpoints from
/// 198.51.100.0/24, ClusterIPs from 203.0.113.0/24 (nothing is sent to them).
#[derive(Default)]
struct Addresses {
    used: [u8; 3],
}

impl Addresses {
    fn next(&mut self, range: usize) -> Ipv4Addr {
        self.used[range] += 1;
        let n = self.used[range];
        match range {
            0 => Ipv4Addr::new(192, 0, 2, n),
            1 => Ipv4Addr::new(198, 51, 100, n),
            _ => Ipv4Addr::new(203, 0, 113, n),
        }
    }
}

fn pick<T: Copy>(rng: &mut fastrand::Rng, weighted: &[(u32, T)]) -> T {
    let total: u32 = weighted.iter().map(|(w, _)| w).sum();
    let mut n = rng.u32(..total);
    for (w, item) in weighted {
        if n < *w {
            return *item;
        }
        n -= w;
    }
    weighted[weighted.len() - 1].1
}

fn zone(rng: &mut fastrand::Rng) -> Option<&'static str> {
    pick(rng, &[(1, None), (1, Some(ZONES[0])), (1, Some(ZONES[1]))])
}

#[derive(Clone, Copy)]
enum Kind {
    Static,
    Service,
    Alias,
    Peer,
}

fn record(
    rng: &mut fastrand::Rng,
    at: &mut Addresses,
    group: &str,
    i: usize,
    alias: bool,
) -> Record {
    let mut kinds = vec![(3, Kind::Static), (2, Kind::Service), (2, Kind::Peer)];
    if alias {
        kinds.push((1, Kind::Alias));
    }
    let source = match pick(rng, &kinds) {
        Kind::Static => Source::Static {
            values: (0..rng.usize(1..=2)).map(|_| at.next(0)).collect(),
            zone: zone(rng),
        },
        Kind::Service => Source::Service {
            service: format!("{group}-svc{i}"),
            endpoints: (0..rng.usize(0..=3))
                .map(|_| {
                    let state = pick(
                        rng,
                        &[
                            (3, Endpoint::Ready),
                            (1, Endpoint::ServingTerminating),
                            (1, Endpoint::Gone),
                            (2, Endpoint::NotReady),
                        ],
                    );
                    (at.next(1), state, zone(rng))
                })
                .collect(),
            cluster_ip: (rng.u8(..4) == 0).then(|| at.next(2)),
        },
        Kind::Alias => Source::Alias {
            evaluate: rng.bool(),
        },
        Kind::Peer => Source::Peer,
    };
    let check = pick(
        rng,
        &[
            (3, None),
            (2, Some(Probe::Http200)),
            (1, Some(Probe::TcpOpen)),
            (1, Some(Probe::Http503)),
            (1, Some(Probe::HttpClosed)),
            (1, Some(Probe::TcpClosed)),
        ],
    );
    // Weights 1 to 4 (0 one time in five): no answer is so rare that 2,000 simulated
    // queries could miss what 60 real ones see.
    let weight = if rng.u8(..5) == 0 { 0 } else { rng.u8(1..=4) };
    Record {
        source,
        check,
        weight,
    }
}

fn group(rng: &mut fastrand::Rng, at: &mut Addresses, name: &'static str, aliases: bool) -> Group {
    let policy = pick(
        rng,
        &[
            (1, Policy::Simple),
            (1, Policy::Weighted),
            (1, Policy::Failover),
            (1, Policy::MultiValue),
        ],
    );
    let len = if policy == Policy::Simple {
        1
    } else {
        pick(rng, &[(1, 1), (3, 2), (3, 3), (2, 4)])
    };
    // MultiValue records cannot be aliases (S8).
    let aliases = aliases && policy != Policy::MultiValue;
    Group {
        name,
        policy,
        affinity: rng.u8(..3) == 0,
        records: (0..len)
            .map(|i| record(rng, at, name, i, aliases))
            .collect(),
    }
}

/// Case `index` of the run seeded `seed`: the same case for the same pair, whatever the
/// other cases.
fn generate(seed: u64, index: usize) -> Case {
    let mut rng = fastrand::Rng::with_seed(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ index as u64);
    let mut at = Addresses::default();
    let g = group(&mut rng, &mut at, "g", true);
    let aliased = g
        .records
        .iter()
        .any(|r| matches!(r.source, Source::Alias { .. }));
    let mut groups = vec![g];
    if aliased || rng.bool() {
        groups.push(group(&mut rng, &mut at, "t", false));
    }
    Case {
        origin: Origin::Generated { seed, index },
        groups,
        from_zone: pick(
            &mut rng,
            &[(2, None), (1, Some(ZONES[0])), (1, Some(ZONES[1]))],
        ),
    }
}

impl Case {
    /// Every HealthCheck of the case: its name and what it probes.
    fn checks(&self) -> Vec<(String, Probe)> {
        self.groups
            .iter()
            .flat_map(|g| {
                g.records
                    .iter()
                    .enumerate()
                    .filter_map(|(i, r)| Some((check_name(g.name, i), r.check?)))
            })
            .collect()
    }

    fn has_peer(&self) -> bool {
        self.groups
            .iter()
            .any(|g| g.records.iter().any(|r| matches!(r.source, Source::Peer)))
    }

    fn summary(&self) -> String {
        let groups: Vec<String> = self
            .groups
            .iter()
            .map(|g| {
                let records: Vec<String> = g
                    .records
                    .iter()
                    .map(|r| {
                        let source = match &r.source {
                            Source::Static { values, zone } => {
                                format!("static×{}{}", values.len(), zone.map_or("", |_| "@z"))
                            }
                            Source::Service {
                                endpoints,
                                cluster_ip,
                                ..
                            } => format!(
                                "svc{}{:?}",
                                if cluster_ip.is_some() {
                                    "(ClusterIP)"
                                } else {
                                    ""
                                },
                                endpoints.iter().map(|e| e.1).collect::<Vec<_>>()
                            ),
                            Source::Alias { evaluate } => format!("alias(eval={evaluate})"),
                            Source::Peer => "peer".into(),
                        };
                        match r.check {
                            Some(p) => format!("{source}+{p:?}"),
                            None => source,
                        }
                    })
                    .collect();
                format!(
                    "{} {:?}{} [{}]",
                    g.name,
                    g.policy,
                    if g.affinity { " affinity" } else { "" },
                    records.join(", ")
                )
            })
            .collect();
        let origin = match self.origin {
            Origin::Generated { seed, index } => format!("case {index} (seed {seed})"),
            Origin::Named(name) => name.to_owned(),
        };
        format!("{origin}, from {:?}: {}", self.from_zone, groups.join("; "))
    }
}

fn check_name(group: &str, i: usize) -> String {
    format!("{group}-hc{i}")
}

// ---------------------------------------------------------------------------------------
// The model: which records are healthy and which values each may answer, from
// docs/semantics.md (R1-R4, H11, X2, X3), apart from the compiler. The same model as
// crates/compiler/src/tests/invariants.rs, over the sources generated here.

#[derive(Debug)]
struct Judged {
    healthy: bool,
    /// What it answers while the group is not in its last resort.
    healthy_values: BTreeSet<Ipv4Addr>,
    /// What it may answer under the last resort.
    all_values: BTreeSet<Ipv4Addr>,
}

fn judge(case: &Case, g: usize, i: usize) -> Judged {
    let r = &case.groups[g].records[i];
    // SEM-R1 SEM-R2: a check decides; no check, always healthy.
    let check_ok = r.check.is_none_or(Probe::healthy);
    let (healthy, healthy_values, all_values) = match &r.source {
        Source::Static { values, .. } => {
            let all: BTreeSet<Ipv4Addr> = values.iter().copied().collect();
            (check_ok, all.clone(), all)
        }
        // SEM-H11 SEM-R3: the ready endpoints; when none is, the serving terminating ones.
        Source::Service {
            endpoints,
            cluster_ip,
            ..
        } => {
            let with = |state: Endpoint| -> BTreeSet<Ipv4Addr> {
                endpoints
                    .iter()
                    .filter(|e| e.1 == state)
                    .map(|e| e.0)
                    .collect()
            };
            let mut usable = with(Endpoint::Ready);
            if usable.is_empty() {
                usable = with(Endpoint::ServingTerminating);
            }
            let ok = check_ok && !usable.is_empty();
            match cluster_ip {
                Some(ip) => (ok, BTreeSet::from([*ip]), BTreeSet::from([*ip])),
                None => (ok, usable, endpoints.iter().map(|e| e.0).collect()),
            }
        }
        // SEM-R4: a target with nothing to answer is never an answer; with
        // evaluateTargetHealth, the target needs a healthy record.
        Source::Alias { evaluate } => {
            let values = may_answer(case, 1);
            let ok = check_ok && !values.is_empty() && (!evaluate || any_healthy(case, 1));
            (ok, values.clone(), values)
        }
        // SEM-X2 SEM-X3: never heard from: unhealthy, and nothing for the last resort.
        Source::Peer => (false, BTreeSet::new(), BTreeSet::new()),
    };
    Judged {
        healthy,
        healthy_values: if healthy {
            healthy_values
        } else {
            BTreeSet::new()
        },
        all_values,
    }
}

fn judged(case: &Case, g: usize) -> Vec<Judged> {
    (0..case.groups[g].records.len())
        .map(|i| judge(case, g, i))
        .collect()
}

fn any_healthy(case: &Case, g: usize) -> bool {
    judged(case, g).iter().any(|j| j.healthy)
}

/// Every value group `g` may answer, whatever the health.
fn may_answer(case: &Case, g: usize) -> BTreeSet<Ipv4Addr> {
    judged(case, g)
        .into_iter()
        .flat_map(|j| j.all_values)
        .collect()
}

// ---------------------------------------------------------------------------------------
// The manifests.

fn config(peer_port: u16) -> String {
    format!(
        "zones: [example.com]\npeers:\n  - name: {PEER}\n    addresses: [\"127.0.0.1:{peer_port}\"]\n    keys:\n      - {{name: generated., algorithm: hmac-sha256, secret: {PEER_KEY}}}\n"
    )
}

/// The loopback ports the checks probe.
struct Targets {
    ok: u16,
    unavailable: u16,
    closed: u16,
}

fn manifests(case: &Case, targets: &Targets) -> String {
    let mut out = String::new();
    for g in &case.groups {
        let policy = format!("{:?}", g.policy);
        let _ = write!(
            out,
            "---\napiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: {name}, namespace: {NAMESPACE}}}\nspec:\n  name: {name}.example.com.\n  type: A\n  routingPolicy: {policy}\n",
            name = g.name
        );
        if g.affinity {
            out.push_str("  zoneAffinity: PreferSameZone\n");
        }
        out.push_str("  records:\n");
        for (i, r) in g.records.iter().enumerate() {
            let mut fields = vec![format!("setIdentifier: r{i}")];
            match g.policy {
                Policy::Weighted => fields.push(format!("weight: {}", r.weight)),
                Policy::Failover if i == 0 => fields.push("failover: {role: Primary}".into()),
                Policy::Failover => {
                    fields.push(format!("failover: {{role: Secondary, priority: {i}}}"));
                }
                Policy::Simple | Policy::MultiValue => {}
            }
            match &r.source {
                Source::Static { values, zone } => {
                    let values: Vec<String> = values.iter().map(|v| format!("\"{v}\"")).collect();
                    fields.push(format!("values: [{}]", values.join(", ")));
                    if let Some(z) = zone {
                        fields.push(format!("zone: {z}"));
                    }
                }
                Source::Service {
                    service,
                    cluster_ip,
                    ..
                } => fields.push(if cluster_ip.is_some() {
                    format!("service: {{name: {service}, addresses: ClusterIP}}")
                } else {
                    format!("service: {{name: {service}}}")
                }),
                Source::Alias { evaluate } => fields.push(format!(
                    "alias: {{recordGroup: t, evaluateTargetHealth: {evaluate}}}"
                )),
                Source::Peer => fields.push(format!(
                    "peer: {{cluster: {PEER}, recordGroup: remote/{}-{i}}}",
                    g.name
                )),
            }
            if r.check.is_some() {
                fields.push(format!(
                    "healthCheckRef: {{name: {}}}",
                    check_name(g.name, i)
                ));
            }
            let _ = writeln!(out, "    - {{{}}}", fields.join(", "));
        }
        for (i, r) in g.records.iter().enumerate() {
            if let Source::Service {
                service,
                endpoints,
                cluster_ip,
            } = &r.source
            {
                out.push_str(&service_manifests(service, endpoints, *cluster_ip));
            }
            if let Some(probe) = r.check {
                out.push_str(&check_manifest(&check_name(g.name, i), probe, targets));
            }
        }
    }
    out
}

fn service_manifests(
    service: &str,
    endpoints: &[(Ipv4Addr, Endpoint, Option<&'static str>)],
    cluster_ip: Option<Ipv4Addr>,
) -> String {
    let mut out = String::new();
    if let Some(ip) = cluster_ip {
        let _ = write!(
            out,
            "---\napiVersion: v1\nkind: Service\nmetadata: {{name: {service}, namespace: {NAMESPACE}}}\nspec: {{clusterIP: {ip}, ports: [{{port: 80}}]}}\n"
        );
    }
    let _ = write!(
        out,
        "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {service}-x1\n  namespace: {NAMESPACE}\n  labels: {{kubernetes.io/service-name: {service}}}\naddressType: IPv4\nendpoints:{}\n",
        if endpoints.is_empty() { " []" } else { "" }
    );
    for (address, state, zone) in endpoints {
        let (ready, serving, terminating) = match state {
            Endpoint::Ready => (true, true, false),
            Endpoint::ServingTerminating => (false, true, true),
            Endpoint::Gone => (false, false, true),
            Endpoint::NotReady => (false, false, false),
        };
        let _ = writeln!(
            out,
            "  - {{addresses: [\"{address}\"], conditions: {{ready: {ready}, serving: {serving}, terminating: {terminating}}}{}}}",
            zone.map(|z| format!(", zone: {z}")).unwrap_or_default()
        );
    }
    out.push_str("ports: [{name: http, port: 8080, protocol: TCP}]\n");
    out
}

/// One probe a second. A check meant to be unhealthy flips at its first failure; one meant
/// to be healthy only after three in a row, so that a slow probe on a loaded machine does not
/// flip it (H5: the threshold changes when, never what).
fn check_manifest(name: &str, probe: Probe, targets: &Targets) -> String {
    let port = match probe {
        Probe::Http200 | Probe::TcpOpen => targets.ok,
        Probe::Http503 => targets.unavailable,
        Probe::HttpClosed | Probe::TcpClosed => targets.closed,
    };
    let path = if probe.check_type() == "HTTP" {
        ", path: /healthz"
    } else {
        ""
    };
    format!(
        "---\napiVersion: healthroute.io/v1alpha1\nkind: HealthCheck\nmetadata: {{name: {name}, namespace: {NAMESPACE}}}\nspec:\n  type: {}\n  target: {{address: 127.0.0.1, port: {port}{path}}}\n  requestIntervalSeconds: 1\n  failureThreshold: {}\n  connectTimeoutSeconds: 1\n  responseTimeoutSeconds: 1\n",
        probe.check_type(),
        if probe.healthy() { 3 } else { 1 }
    )
}

// ---------------------------------------------------------------------------------------
// The loopback servers the checks probe.

/// A loopback HTTP server that answers every request `503 Service Unavailable` (an unhealthy
/// HTTP check, H2) until dropped.
struct Unavailable {
    addr: SocketAddr,
    up: Arc<AtomicBool>,
}

impl Unavailable {
    fn start() -> Unavailable {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        listener.set_nonblocking(true).expect("nonblocking");
        let up = Arc::new(AtomicBool::new(true));
        let running = up.clone();
        std::thread::spawn(move || {
            while running.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        let _ = s.set_nonblocking(false);
                        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                        let mut buf = [0u8; 1024];
                        let _ = s.read(&mut buf);
                        let _ = s.write_all(
                            b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                        );
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Unavailable { addr, up }
    }
}

impl Drop for Unavailable {
    fn drop(&mut self) {
        self.up.store(false, Ordering::SeqCst);
    }
}

/// A loopback TCP port held closed: bound and never listening, so that a connection is
/// refused (an unhealthy TCP or HTTP check, H2 H4), and bound without SO_REUSEADDR or
/// SO_REUSEPORT, so that no other socket takes the port while the case runs.
struct ClosedPort {
    _socket: socket2::Socket,
    port: u16,
}

impl ClosedPort {
    fn new() -> ClosedPort {
        use socket2::{Domain, Protocol, Socket, Type};
        let socket =
            Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP)).expect("a socket");
        let any: SocketAddr = ([127, 0, 0, 1], 0).into();
        socket.bind(&any.into()).expect("bind");
        let port = socket
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map(|a| a.port())
            .expect("a port");
        ClosedPort {
            _socket: socket,
            port,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Running one case.

/// What the simulator says of one name.
struct Simulated {
    /// Each answer (its values, sorted, space-separated) or, when the simulator shows values
    /// (`per_value`: too many distinct answers to read), each value, with its share in percent.
    shares: BTreeMap<String, f64>,
    per_value: bool,
    last_resort: bool,
    text: String,
}

fn simulate(case: &Case, dir: &std::path::Path, name: &str) -> Result<Simulated, String> {
    let mut args: Vec<String> = vec![
        "simulate".into(),
        "--manifests".into(),
        dir.to_string_lossy().into_owned(),
        "--queries".into(),
        SIM_QUERIES.into(),
        "--seed".into(),
        "1".into(),
    ];
    // The same inputs as the server's: each check whose server does not answer is
    // unhealthy, the others healthy (no view: H6); the peer is never heard from.
    for (check, probe) in case.checks() {
        if !probe.healthy() {
            args.extend(["--unhealthy".into(), format!("{NAMESPACE}/{check}")]);
        }
    }
    if case.has_peer() {
        args.extend(["--peer-down".into(), PEER.into()]);
    }
    if let Some(z) = case.from_zone {
        args.extend(["--from-zone".into(), z.into()]);
    }
    args.extend([name.into(), "A".into()]);
    let out = resolver()
        .args(&args)
        .output()
        .map_err(|e| format!("simulate does not run: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "simulate {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut shares = BTreeMap::new();
    let mut per_value = false;
    let mut lines = text
        .lines()
        .skip_while(|l| !l.starts_with("answers over "))
        .skip(1);
    for line in lines.by_ref().take_while(|l| l.starts_with("  ")) {
        if line.contains("distinct answers (") {
            per_value = true;
            continue;
        }
        let (pct, answer) = line
            .trim()
            .split_once("%  ")
            .ok_or_else(|| format!("simulate: an answer line not read: {line:?}\n{text}"))?;
        let pct: f64 = pct
            .trim()
            .parse()
            .map_err(|_| format!("simulate: a share not read: {line:?}\n{text}"))?;
        let key = if answer == "(no values)" {
            String::new()
        } else {
            normalise(answer.split(' '))?
        };
        shares.insert(key, pct);
    }
    if shares.is_empty() {
        return Err(format!("simulate printed no answer for {name}:\n{text}"));
    }
    let last_resort = text
        .lines()
        .find_map(|l| l.strip_prefix("last resort: "))
        .map(|l| l.starts_with("yes"))
        .ok_or_else(|| format!("simulate printed no last-resort line:\n{text}"))?;
    Ok(Simulated {
        shares,
        per_value,
        last_resort,
        text,
    })
}

/// Values sorted as addresses, space-separated (as the simulator prints an answer).
fn normalise<'a>(values: impl Iterator<Item = &'a str>) -> Result<String, String> {
    let mut ips = values
        .map(|v| v.parse::<Ipv4Addr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not an address ({e})"))?;
    ips.sort();
    Ok(join(&ips))
}

fn join(ips: &[Ipv4Addr]) -> String {
    ips.iter()
        .map(Ipv4Addr::to_string)
        .collect::<Vec<_>>()
        .join(" ")
}

/// The answers the server gave for one name: each distinct answer (as [`normalise`]) and how
/// often.
#[derive(Default)]
struct Drawn {
    answers: BTreeMap<String, usize>,
    queries: usize,
}

impl Drawn {
    fn values(&self) -> BTreeSet<String> {
        self.answers
            .keys()
            .flat_map(|a| a.split(' ').filter(|v| !v.is_empty()))
            .map(str::to_owned)
            .collect()
    }

    /// The answers (or values) the simulator gives in at least [`SEEN_SHARE`] percent of its
    /// draws that the server has not given yet.
    fn unseen(&self, sim: &Simulated) -> Vec<String> {
        let seen: BTreeSet<String> = if sim.per_value {
            self.values()
        } else {
            self.answers.keys().cloned().collect()
        };
        sim.shares
            .iter()
            .filter(|(a, pct)| **pct >= SEEN_SHARE && !seen.contains(*a))
            .map(|(a, _)| a.clone())
            .collect()
    }
}

/// `n` more UDP queries for `g`'s name into `drawn`, each checked against the contract on the
/// wire.
fn draw(case: &Case, g: usize, dns: SocketAddr, n: usize, drawn: &mut Drawn) -> Result<(), String> {
    let name = format!("{}.example.com.", case.groups[g].name);
    let judged = judged(case, g);
    let configured = may_answer(case, g);
    let healthy: Option<BTreeSet<Ipv4Addr>> = judged.iter().any(|j| j.healthy).then(|| {
        judged
            .iter()
            .flat_map(|j| j.healthy_values.iter().copied())
            .collect()
    });
    for _ in 0..n {
        let (m, _) = query(dns, &name, RecordType::A, UDP);
        let rcode = m.metadata.response_code;
        // SEM-S6 SEM-D1: a name that exists is answered NOERROR, authoritatively, whatever
        // the health: never NXDOMAIN, SERVFAIL or REFUSED.
        if rcode != ResponseCode::NoError || !m.metadata.authoritative {
            return Err(format!(
                "SEM-S6 SEM-D1: {name} answered {rcode:?} (AA {})",
                m.metadata.authoritative
            ));
        }
        let mut ips = Vec::new();
        for rr in &m.answers {
            match &rr.data {
                RData::A(a) if rr.name.to_ascii().eq_ignore_ascii_case(&name) => ips.push(a.0),
                other => {
                    return Err(format!(
                        "SEM-R4: {name} answered {} {other:?}: an A group answers its own A records (an alias is flattened)",
                        rr.name.to_ascii()
                    ));
                }
            }
        }
        // SEM-S6: never empty while the group has a value anywhere.
        if ips.is_empty() && !configured.is_empty() {
            return Err(format!(
                "SEM-S6: {name} answered NOERROR with no record, though the group has values {}",
                join(&configured.iter().copied().collect::<Vec<_>>())
            ));
        }
        let set: BTreeSet<Ipv4Addr> = ips.iter().copied().collect();
        if set.len() != ips.len() {
            return Err(format!("{name} answered a value twice: {ips:?}"));
        }
        // Only configured values.
        if !set.is_subset(&configured) {
            return Err(format!(
                "{name} answered {}, not all configured ({})",
                join(&ips),
                join(&configured.iter().copied().collect::<Vec<_>>())
            ));
        }
        // SEM-S1 SEM-R1 SEM-R3 SEM-H11 SEM-X3: while a record is healthy, an unhealthy record's
        // values (or an unready endpoint, or a peer never heard) never answer.
        if let Some(healthy) = &healthy
            && !set.is_subset(healthy)
        {
            return Err(format!(
                "SEM-S1: {name} answered {} while healthy records hold only {}",
                join(&ips),
                join(&healthy.iter().copied().collect::<Vec<_>>())
            ));
        }
        // SEM-S5: at most 8 values.
        if case.groups[g].policy == Policy::MultiValue && ips.len() > 8 {
            return Err(format!("SEM-S5: {name} answered {} values", ips.len()));
        }
        ips.sort();
        *drawn.answers.entry(join(&ips)).or_default() += 1;
        drawn.queries += 1;
    }
    Ok(())
}

/// Waits until every check has been probed with the result its server gives (and the
/// unhealthy ones have flipped, H5), then until the served table stays the same for
/// [`SETTLED_FOR`] (P1: a flip reaches the answers within a second); bounded by
/// [`SETTLE_WITHIN`].
fn settle(case: &Case, r: &Resolver) -> Result<Duration, String> {
    let start = Instant::now();
    let checks = case.checks();
    let mut stable: Option<(Option<f64>, Instant)> = None;
    let mut metrics = String::new();
    while start.elapsed() < SETTLE_WITHIN {
        metrics = r.metrics();
        let observed = checks.iter().all(|(check, probe)| {
            let series = |family: &str, result: Option<&str>| {
                let result = result.map(|r| format!(",result=\"{r}\"")).unwrap_or_default();
                format!(
                    "healthroute_checker_{family}{{checker=\"standalone\",check=\"{NAMESPACE}/{check}\"{result}}}"
                )
            };
            let result = if probe.healthy() {
                "healthy"
            } else {
                "unhealthy"
            };
            sample(&metrics, &series("check_probes_total", Some(result))).is_some_and(|n| n >= 1.0)
                && (probe.healthy()
                    || sample(&metrics, &series("check_flips_total", None))
                        .is_some_and(|n| n >= 1.0))
        });
        let generation = sample(&metrics, "healthroute_table_generation");
        if observed {
            match stable {
                Some((g, since)) if g == generation => {
                    if since.elapsed() >= SETTLED_FOR {
                        return Ok(start.elapsed());
                    }
                }
                _ => stable = Some((generation, Instant::now())),
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err(format!(
        "SEM-H5 SEM-P1: the checks did not settle within {SETTLE_WITHIN:?}:\n{}",
        check_lines(&metrics)
    ))
}

fn check_lines(metrics: &str) -> String {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("healthroute_checker_check_")
                || l.starts_with("healthroute_table_generation")
                || l.starts_with("healthroute_last_resort")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The case's manifest directory and the servers its checks probe (dropped with it).
struct Prepared {
    dir: std::path::PathBuf,
    _ok: Backend,
    _unavailable: Unavailable,
    _closed: ClosedPort,
}

fn prepare(case: &Case) -> Prepared {
    let ok = Backend::start();
    let unavailable = Unavailable::start();
    let closed = ClosedPort::new();
    let dir = temp_dir(&match case.origin {
        Origin::Generated { seed, index } => format!("gen-{seed}-{index}"),
        Origin::Named(name) => format!("gen-{name}"),
    });
    let targets = Targets {
        ok: ok.addr.port(),
        unavailable: unavailable.addr.port(),
        closed: closed.port,
    };
    // The peer's exchange address: a loopback port where nothing listens (the closed TCP
    // port's number, which no resolver of these tests can bind, UDP included: free_port
    // needs both).
    std::fs::write(dir.join("healthroute.yaml"), config(closed.port)).expect("write");
    std::fs::write(dir.join("cases.yaml"), manifests(case, &targets)).expect("write");
    Prepared {
        dir,
        _ok: ok,
        _unavailable: unavailable,
        _closed: closed,
    }
}

/// Serves the case, asks the server and the simulator, and compares; `Err` says which rule
/// broke. Returns what it saw, for the log.
fn run_case(case: &Case, dir: &std::path::Path) -> Result<String, String> {
    let zone_args: Vec<&str> = case
        .from_zone
        .map(|z| vec!["--zone-name", z])
        .unwrap_or_default();
    let r = Resolver::start(dir, &zone_args);
    let settled = settle(case, &r)?;
    let mut seen = format!("settled in {settled:?}");
    for (g, group) in case.groups.iter().enumerate() {
        let name = format!("{}.example.com", group.name);
        let sim = simulate(case, dir, &name)?;
        let mut drawn = Drawn::default();
        draw(case, g, r.dns, QUERIES, &mut drawn)?;
        // A rare answer is drawn again, up to a bound, before it counts as missing.
        while !drawn.unseen(&sim).is_empty() && drawn.queries < MAX_QUERIES {
            draw(case, g, r.dns, 20, &mut drawn)?;
        }
        let explain = || {
            format!(
                "server over {} queries: {:?}\nsimulator:\n{}\nmetrics:\n{}",
                drawn.queries,
                drawn.answers,
                sim.text,
                check_lines(&r.metrics())
            )
        };
        // The simulator's answer set equals the server's: the server gives nothing the
        // simulator does not, and the simulator nothing common the server does not.
        let extra: Vec<String> = if sim.per_value {
            drawn
                .values()
                .into_iter()
                .filter(|v| !sim.shares.contains_key(v))
                .collect()
        } else {
            drawn
                .answers
                .keys()
                .filter(|a| !sim.shares.contains_key(*a))
                .cloned()
                .collect()
        };
        if !extra.is_empty() {
            return Err(format!(
                "{name}: the server answered {extra:?}, which the simulator never does\n{}",
                explain()
            ));
        }
        let unseen = drawn.unseen(&sim);
        if !unseen.is_empty() {
            return Err(format!(
                "{name}: the simulator answers {unseen:?} (≥ {SEEN_SHARE}%), the server never did\n{}",
                explain()
            ));
        }
        // SEM-S6: the last resort is exactly "no record is healthy", for the model, the
        // simulator and the server alike.
        let model = !any_healthy(case, g);
        let served = sample(
            &r.metrics(),
            &format!(
                "healthroute_last_resort{{record_group=\"{NAMESPACE}/{}\"}}",
                group.name
            ),
        );
        if sim.last_resort != model || served != Some(f64::from(u8::from(model))) {
            return Err(format!(
                "SEM-S6: {name}: last resort: model {model}, simulator {}, server {served:?}\n{}",
                sim.last_resort,
                explain()
            ));
        }
        let _ = write!(
            seen,
            "; {name}: {} answer(s) in {} queries, last resort {model}",
            drawn.answers.len(),
            drawn.queries
        );
    }
    Ok(seen)
}

/// Runs one case; `Err` holds everything needed to reproduce a failure.
fn run_reported(case: &Case) -> Result<String, String> {
    let prepared = prepare(case);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_case(case, &prepared.dir)
    }))
    .unwrap_or_else(|panic| {
        Err(panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "a panic".into()))
    });
    match outcome {
        Ok(seen) => {
            let _ = std::fs::remove_dir_all(&prepared.dir);
            Ok(seen)
        }
        Err(why) => {
            let read = |f: &str| std::fs::read_to_string(prepared.dir.join(f)).unwrap_or_default();
            let again = match case.origin {
                Origin::Generated { seed, index } => format!(
                    "Run it again: HEALTHROUTE_E2E_SEED={seed} HEALTHROUTE_E2E_CASE={index} cargo test -p healthroute-e2e generated\n"
                ),
                Origin::Named(_) => String::new(),
            };
            Err(format!(
                "{}\n{why}\n\n{again}The case's directory is kept: {}\n--- healthroute.yaml\n{}--- cases.yaml\n{}",
                case.summary(),
                prepared.dir.display(),
                read("healthroute.yaml"),
                read("cases.yaml"),
            ))
        }
    }
}

fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    let raw = std::env::var(name).ok()?;
    Some(
        raw.parse()
            .unwrap_or_else(|_| panic!("{name}={raw} is not a number")),
    )
}

// SEM-S1 SEM-S2 SEM-S3 SEM-S4 SEM-S5 SEM-S6 SEM-R1 SEM-R3 SEM-R4 SEM-H2 SEM-H4 SEM-H5 SEM-H11
// SEM-X2 SEM-X3 SEM-A1 SEM-A2 SEM-D1: generated cases, served for real and simulated, agree
// and keep the contract's promises on the wire.
#[test]
fn generated_cases_answer_as_simulated_and_keep_the_contract() {
    let seed = env("HEALTHROUTE_E2E_SEED").unwrap_or(SEED);
    let indices: Vec<usize> = match env::<usize>("HEALTHROUTE_E2E_CASE") {
        Some(i) => vec![i],
        None => (0..env("HEALTHROUTE_E2E_CASES").unwrap_or(CASES)).collect(),
    };
    let cases: Vec<Case> = indices.iter().map(|&i| generate(seed, i)).collect();
    let next = AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..WORKERS.min(cases.len()) {
            s.spawn(|| {
                while let Some(case) = cases.get(next.fetch_add(1, Ordering::SeqCst)) {
                    let t = Instant::now();
                    match run_reported(case) {
                        Ok(seen) => eprintln!("{} in {:?}: {seen}", case.summary(), t.elapsed()),
                        Err(report) => failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(report),
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    eprintln!(
        "{} generated cases in {:?}, {} failed",
        cases.len(),
        started.elapsed(),
        failures.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

// SEM-S4 SEM-X3 SEM-S6: the search's first find (#41), on the wire. A Failover group whose
// primary is a peer record never heard from and whose secondary's check fails answers the
// secondary under the last resort, never NOERROR with no record; the simulator agrees.
#[test]
fn a_failover_primary_never_heard_from_leaves_the_last_resort_to_the_secondary_on_the_wire() {
    let case = Case {
        origin: Origin::Named("issue-41"),
        groups: vec![Group {
            name: "g",
            policy: Policy::Failover,
            affinity: false,
            records: vec![
                Record {
                    source: Source::Peer,
                    check: None,
                    weight: 0,
                },
                Record {
                    source: Source::Static {
                        values: vec![Ipv4Addr::new(192, 0, 2, 1)],
                        zone: None,
                    },
                    check: Some(Probe::Http503),
                    weight: 0,
                },
            ],
        }],
        from_zone: None,
    };
    if let Err(report) = run_reported(&case) {
        panic!("{report}");
    }
}
