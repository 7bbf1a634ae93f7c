//! `healthroute-resolver simulate`: what DNS would answer, without a cluster.
//!
//! Reads a manifest directory, applies the what-ifs (`--unhealthy`, `--not-ready`, `--now`,
//! `--zone-impaired`, `--practice-run`),
//! compiles with the same compiler as the operator, and draws `--queries` answers with the
//! same per-query choice as the resolver, from a seeded generator so that the output is
//! reproducible.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;

use crate::error::Error;
use healthroute_api::CheckType;
use healthroute_compiler::manifests::Manifests;
use healthroute_compiler::shift::targets;
use healthroute_compiler::{CheckerView, Compiler, ObjectKey, ServedZones};
use healthroute_table::{RecordType, RoutingTable, Value, normalize_name};
use jiff::Timestamp;

use crate::config::{FileConfig, zones_and_ttl};
use crate::dns::counters::{AnswerCounters, Tally};
use crate::dns::serving::{Chain, ChainEnd, Outcome, ServingTable, ZoneConfig};
use crate::dns::wire::{TYPE_A, TYPE_AAAA, TYPE_CNAME, value_rr, wire_name, wire_type};

/// The checker name the simulator reports its what-if views as.
const SIMULATOR: &str = "simulator";

#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Directory of manifests (RecordGroups, HealthChecks, ZonalShifts, ZonalAutoshifts,
    /// Services, EndpointSlices, Nodes), read recursively.
    #[arg(long, value_name = "DIR")]
    pub manifests: PathBuf,
    /// A served zone (repeatable); default: the zones in DIR/healthroute.yaml.
    #[arg(long = "zone", value_name = "ZONE")]
    pub zones: Vec<String>,
    /// Treat this HealthCheck (`name` or `namespace/name`) as seen unhealthy by its checkers.
    #[arg(long, value_name = "HEALTHCHECK")]
    pub unhealthy: Vec<String>,
    /// Treat this Metric check (`name` or `namespace/name`) as having evaluated to `ok`,
    /// `alarm` or `nodata` for long enough to flip (H13): `NAME=STATE`.
    #[arg(long, value_name = "NAME=STATE")]
    pub alarm: Vec<String>,
    /// Treat every peer source of this peer cluster as unhealthy (X8), keeping the values
    /// given with `--peer` for a last resort.
    #[arg(long = "peer-down", value_name = "CLUSTER")]
    pub peer_down: Vec<String>,
    /// What a peer cluster's group answers as healthy:
    /// `CLUSTER/NAMESPACE/NAME=VALUE[,VALUE...]` (values of the asking group's type). A peer
    /// source without one has no values to answer (X2).
    #[arg(long = "peer", value_name = "CLUSTER/NS/NAME=VALUES")]
    pub peer: Vec<String>,
    /// Treat the endpoint with this address as not ready (and not serving).
    #[arg(long = "not-ready", value_name = "IP")]
    pub not_ready: Vec<IpAddr>,
    /// Take this zone as impaired by every signal: each ZonalAutoshift with autoshift Enabled
    /// shifts away from it as it would (AS3, AS4; fail open and precedence included).
    #[arg(long = "zone-impaired", value_name = "ZONE")]
    pub zone_impaired: Option<String>,
    /// Ask every ZonalAutoshift for a practice run now, away from ZONE (`next`: the next zone
    /// in rotation): the answers are what it would leave serving, or why it would not start
    /// (AS7, AS8).
    #[arg(long = "practice-run", value_name = "ZONE|next")]
    pub practice_run: Option<String>,
    /// The time to simulate at (RFC 3339), for zonal shift expiry and practice run windows;
    /// default: now.
    #[arg(long, value_name = "RFC3339")]
    pub now: Option<String>,
    /// How many queries to draw.
    #[arg(long, default_value_t = 10_000)]
    pub queries: usize,
    /// Seed of the per-query generator (the same seed gives the same output).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print the decision path: which records were candidates, and why the others were not.
    #[arg(long)]
    pub explain: bool,
    /// Ask as a resolver in this zone does (zone affinity, A1); default: healthroute.yaml's
    /// `zoneName`, else no zone.
    #[arg(long = "from-zone", value_name = "ZONE")]
    pub from_zone: Option<String>,
    /// Views to start from, each with a fresh heartbeat (`kubectl healthroute explain` passes
    /// the cluster's: what each checker reported in status).
    #[arg(skip)]
    pub views: Vec<(ObjectKey, CheckerView)>,
    /// The zone default TTL (default: healthroute.yaml, else 60).
    #[arg(long = "default-ttl", value_name = "SECONDS")]
    pub default_ttl: Option<u32>,
    /// The name to query.
    pub name: String,
    /// The record type to query: A, AAAA, CNAME or TXT.
    #[arg(default_value = "A")]
    pub record_type: String,
}

/// Runs the simulation and returns what it prints.
pub fn run(args: &SimulateArgs) -> Result<String, Error> {
    let file = FileConfig::load(&args.manifests)?;
    let (zones, ttl) = zones_and_ttl(&args.zones, args.default_ttl, &file)?;
    let manifests = crate::sources::manifest_dir::load(&args.manifests)?;
    run_on(args, zones, ttl, manifests, file.zone_name.clone())
}

/// The simulation over `manifests` (a directory's, or a cluster's current objects), in its
/// steps: read the question, apply the what-ifs and compile, then answer with the resolver's
/// own serving table and print the chain, the shares of the answers drawn, and why.
pub fn run_on(
    args: &SimulateArgs,
    zones: ServedZones,
    ttl: u32,
    mut manifests: Manifests,
    default_from_zone: Option<String>,
) -> Result<String, Error> {
    let asked = Asked::parse(args)?;
    mark_not_ready(&mut manifests, &args.not_ready)?;
    let compiler = compile_what_ifs(args, &zones, ttl, &manifests, asked.now)?;

    let mut out = String::new();
    for warning in &manifests.warnings {
        let _ = writeln!(out, "note: {warning}");
    }
    let Asked { now, rtype, name } = &asked;
    let Some(zone) = zones.zone_of(name) else {
        let _ = writeln!(
            out,
            "{name} {rtype}: REFUSED (not in a served zone: {})",
            zones.names().join(", ")
        );
        return Ok(out);
    };
    rejected_claimants(&compiler, &manifests, &asked, &mut out);

    // The resolver's own serving form and lookup: what the simulator prints is what a
    // resolver answers (D8 chains included).
    let table = compiler.table();
    let counters = AnswerCounters::default();
    let from_zone = args.from_zone.clone().or(default_from_zone);
    let serving = serving_table(&table, &zones, ttl, from_zone.as_deref(), &counters)?;
    let qname = wire_name(name);
    let qtype = wire_type(*rtype);
    let mut rng = fastrand::Rng::with_seed(args.seed);
    let first = serving.lookup(&qname, qtype, &mut rng, &mut Tally::default());
    let chain = match &first {
        Outcome::Answer { chain, .. } => chain,
        Outcome::NxDomain { .. } => {
            let _ = writeln!(out, "{name} {rtype}: NXDOMAIN (zone {zone})");
            return Ok(out);
        }
        _ => {
            no_data(&table, &asked, &mut out);
            return Ok(out);
        }
    };
    let Some(head) = chain.iter().next() else {
        return Err(Error::Inconsistent(name.clone()));
    };
    let chained = chain_lines(chain, &manifests, &asked, &mut out);
    zone_affinity_lines(chain, &table, from_zone.as_deref(), &mut out);
    // The draws start from the seed again: the shares do not depend on the lookup above.
    let mut rng = fastrand::Rng::with_seed(args.seed);
    let draw = || describe(&serving.lookup(&qname, qtype, &mut rng, &mut Tally::default()));
    answer_shares(args.queries.max(1), draw, &mut out);
    let _ = writeln!(
        out,
        "last resort: {}",
        if head.group.compiled.last_resort {
            "yes (no record is healthy)"
        } else {
            "no"
        }
    );
    shift_lines(&compiler, &manifests, &chained[0], *now, &mut out);
    autoshift_lines(&compiler, &manifests, &chained[0], &mut out);
    if args.explain {
        let _ = writeln!(out, "decision:");
        for key in &chained {
            explain(&compiler, &manifests, key, &mut out, 0);
        }
    }
    Ok(out)
}

/// The question and the time it is asked at, as the arguments give them.
struct Asked {
    now: Timestamp,
    rtype: RecordType,
    /// Normalised: lower case, with the trailing dot.
    name: String,
}

impl Asked {
    fn parse(args: &SimulateArgs) -> Result<Asked, Error> {
        let now = match &args.now {
            Some(raw) => raw.parse::<Timestamp>().map_err(|source| Error::Now {
                raw: raw.clone(),
                source,
            })?,
            None => Timestamp::now(),
        };
        Ok(Asked {
            now,
            rtype: args.record_type.parse()?,
            name: normalize_name(&args.name)?,
        })
    }
}

/// `--not-ready`: each endpoint with one of these addresses is neither ready nor serving; an
/// address no endpoint has is an error.
fn mark_not_ready(manifests: &mut Manifests, addresses: &[IpAddr]) -> Result<(), Error> {
    for ip in addresses {
        let mut found = false;
        for svc in manifests.services.values_mut() {
            for ep in svc.endpoints.iter_mut().filter(|e| e.address == *ip) {
                ep.ready = false;
                ep.serving = false;
                found = true;
            }
        }
        if !found {
            return Err(Error::NoSuchEndpoint(ip.to_string()));
        }
    }
    Ok(())
}

/// The compiler over `manifests` with the what-ifs applied (`--unhealthy`, `--alarm`, the
/// views handed in), compiled at `now`.
fn compile_what_ifs(
    args: &SimulateArgs,
    zones: &ServedZones,
    ttl: u32,
    manifests: &Manifests,
    now: Timestamp,
) -> Result<Compiler, Error> {
    let mut compiler = Compiler::new(zones.clone(), ttl).explaining();
    let mut applied = manifests.clone();
    if let Some(zone) = &args.practice_run {
        ask_practice_runs(&mut applied, zone);
    }
    let _ = applied.apply_to(&mut compiler, None);
    compiler.assume_impaired(args.zone_impaired.clone());
    for wanted in &args.unhealthy {
        mark_unhealthy(&mut compiler, manifests, wanted)?;
    }
    for wanted in &args.alarm {
        set_alarm(&mut compiler, manifests, wanted)?;
    }
    set_peers(&mut compiler, manifests, &args.peer, &args.peer_down)?;
    for (key, view) in &args.views {
        compiler.set_heartbeat(view.checker.clone(), now);
        compiler.set_check_view(key, view.clone());
    }
    compiler.set_heartbeat(SIMULATOR, now);
    compiler.compile(now);
    Ok(compiler)
}

/// `--practice-run ZONE|next`: every ZonalAutoshift is asked for a run now (AS10), with a
/// request value none of them answered yet.
fn ask_practice_runs(manifests: &mut Manifests, zone: &str) {
    use healthroute_api::{PRACTICE_RUN_ANNOTATION, PRACTICE_RUN_ZONE_ANNOTATION};
    for autoshift in manifests.autoshifts.values_mut() {
        let annotations = autoshift
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(PRACTICE_RUN_ANNOTATION.into(), "start:simulate".into());
        if zone == "next" {
            annotations.remove(PRACTICE_RUN_ZONE_ANNOTATION);
        } else {
            annotations.insert(PRACTICE_RUN_ZONE_ANNOTATION.into(), zone.into());
        }
        if let Some(status) = autoshift.status.as_mut() {
            status.last_request = None;
        }
    }
}

/// `--unhealthy NAME`: every HealthCheck it names is seen unhealthy by the simulator's
/// checker. A Calculated check has no checker of its own, so it cannot be.
fn mark_unhealthy(
    compiler: &mut Compiler,
    manifests: &Manifests,
    wanted: &str,
) -> Result<(), Error> {
    for key in checks_named(manifests, "--unhealthy", wanted, wanted)? {
        if manifests.checks[&key].spec.check_type == CheckType::Calculated {
            return Err(Error::CalculatedUnhealthy(wanted.to_owned()));
        }
        compiler.set_check_view(
            &key,
            CheckerView {
                checker: SIMULATOR.into(),
                zone: None,
                healthy: false,
                message: Some("--unhealthy".into()),
                values: Vec::new(),
            },
        );
    }
    Ok(())
}

/// `--peer CLUSTER/NS/NAME=VALUES` and `--peer-down CLUSTER`: the simulator's checker is the
/// one that asked each Peer check's peer (X4). A value is written as the asking groups'
/// records would write it; its type is theirs.
fn set_peers(
    compiler: &mut Compiler,
    manifests: &Manifests,
    heard: &[String],
    down: &[String],
) -> Result<(), Error> {
    let mut said: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for wanted in heard {
        let form = || Error::PeerForm(wanted.clone());
        let (target, values) = wanted.split_once('=').ok_or_else(form)?;
        let (cluster, group) = target.split_once('/').ok_or_else(form)?;
        if !group.contains('/') {
            return Err(form());
        }
        said.insert(
            (cluster.to_owned(), group.to_owned()),
            values
                .split(',')
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
                .collect(),
        );
    }
    let peer_checks = manifests
        .checks
        .iter()
        .filter_map(|(k, c)| c.spec.peer.as_ref().map(|p| (k, p)));
    let mut known = BTreeSet::new();
    for (key, target) in peer_checks {
        known.insert(target.cluster.as_str());
        let values = said
            .remove(&(target.cluster.clone(), target.record_group.clone()))
            .unwrap_or_default();
        let is_down = down.contains(&target.cluster);
        if values.is_empty() && !is_down {
            continue;
        }
        // The asking groups' type names the values (X6: `TYPE value`).
        let rtype = manifests
            .groups
            .iter()
            .filter(|(g, _)| g.namespace == key.namespace)
            .find(|(_, g)| {
                g.spec
                    .records
                    .iter()
                    .any(|r| r.peer.as_ref() == Some(target))
            })
            .map_or("A", |(_, g)| g.spec.record_type.as_str());
        compiler.set_check_view(
            key,
            CheckerView {
                checker: SIMULATOR.into(),
                zone: None,
                healthy: !is_down,
                message: Some(if is_down { "--peer-down" } else { "--peer" }.into()),
                values: values.iter().map(|v| format!("{rtype} {v}")).collect(),
            },
        );
    }
    if let Some(((cluster, group), _)) = said.into_iter().next() {
        return Err(Error::NoSuchPeerSource {
            flag: "--peer",
            name: format!("{cluster}/{group}"),
        });
    }
    if let Some(cluster) = down.iter().find(|c| !known.contains(c.as_str())) {
        return Err(Error::NoSuchPeerSource {
            flag: "--peer-down",
            name: cluster.clone(),
        });
    }
    Ok(())
}

/// `--alarm NAME=STATE`: every Metric check it names has evaluated to STATE for long enough to
/// flip (H13); `nodata` follows the check's insufficient-data setting.
fn set_alarm(compiler: &mut Compiler, manifests: &Manifests, wanted: &str) -> Result<(), Error> {
    let (name, state) = wanted
        .split_once('=')
        .ok_or_else(|| Error::AlarmForm(wanted.to_owned()))?;
    for key in checks_named(manifests, "--alarm", name, wanted)? {
        let spec = &manifests.checks[&key].spec;
        let Some(metric) = spec
            .metric
            .as_ref()
            .filter(|_| spec.check_type == CheckType::Metric)
        else {
            return Err(Error::NotMetric {
                wanted: wanted.to_owned(),
                check: key.to_string(),
            });
        };
        use healthroute_api::InsufficientDataHealthStatus as Nodata;
        let (evaluation, healthy) = match state.to_ascii_lowercase().as_str() {
            "ok" => ("OK", Some(true)),
            "alarm" => ("ALARM", Some(false)),
            "nodata" => (
                "INSUFFICIENT_DATA",
                match metric.insufficient_data_health_status.unwrap_or_default() {
                    Nodata::Healthy => Some(true),
                    Nodata::Unhealthy => Some(false),
                    // No observation: the check keeps the status it had (H13, H6).
                    Nodata::LastKnownStatus => None,
                },
            ),
            other => {
                return Err(Error::AlarmState {
                    wanted: wanted.to_owned(),
                    state: other.to_owned(),
                });
            }
        };
        if let Some(healthy) = healthy {
            compiler.set_check_view(
                &key,
                CheckerView {
                    checker: SIMULATOR.into(),
                    zone: None,
                    healthy,
                    message: Some(format!("{evaluation}: simulated (--alarm {state})")),
                    values: Vec::new(),
                },
            );
        }
    }
    Ok(())
}

/// Prints why each rejected RecordGroup that claims the asked name and type is rejected.
fn rejected_claimants(compiler: &Compiler, manifests: &Manifests, asked: &Asked, out: &mut String) {
    let claimants: Vec<ObjectKey> = compiler
        .group_keys()
        .filter(|k| {
            manifests.groups.get(*k).is_some_and(|g| {
                normalize_name(&g.spec.name).ok().as_deref() == Some(asked.name.as_str())
                    && healthroute_compiler::group::record_type(g.spec.record_type) == asked.rtype
            })
        })
        .cloned()
        .collect();
    for key in &claimants {
        if let Some(Err(rejection)) = compiler.outcome(key).map(|o| &o.compiled) {
            let _ = writeln!(
                out,
                "RecordGroup {key} is rejected ({}): {}",
                rejection.reason, rejection.message
            );
        }
    }
}

/// The serving table a resolver in `from_zone` would build from `table`, its answers counted
/// into `counters`.
fn serving_table(
    table: &RoutingTable<Value>,
    zones: &ServedZones,
    ttl: u32,
    from_zone: Option<&str>,
    counters: &AnswerCounters,
) -> Result<ServingTable, Error> {
    let serving_zones: Vec<ZoneConfig> = zones
        .names()
        .iter()
        .map(|apex| ZoneConfig {
            apex: apex.to_string(),
            nameservers: Vec::new(),
            default_ttl: ttl,
            ..ZoneConfig::default()
        })
        .collect();
    ServingTable::build(table, &serving_zones, from_zone, counters)
}

/// Prints a NODATA answer, with the types the name does have.
fn no_data(table: &RoutingTable<Value>, asked: &Asked, out: &mut String) {
    let Asked { name, rtype, .. } = asked;
    let others: Vec<String> = table
        .groups
        .values()
        .filter(|g| *g.name == **name)
        .map(|g| g.record_type.to_string())
        .collect();
    let _ = writeln!(
        out,
        "{name} {rtype}: NOERROR, no answer (NODATA; the name has {})",
        if others.is_empty() {
            "names below it".to_owned()
        } else {
            others.join(", ")
        }
    );
}

/// Prints the groups of the answer's chain, each with its policy and TTL; returns their keys,
/// the asked name's group first.
fn chain_lines(
    chain: &Chain<'_>,
    manifests: &Manifests,
    asked: &Asked,
    out: &mut String,
) -> Vec<String> {
    let policy = |key: &str| {
        ObjectKey::parse_group_key(key)
            .and_then(|k| manifests.groups.get(&k))
            .map(|g| format!("{:?}", g.spec.routing_policy))
            .unwrap_or_default()
    };
    let mut chained = Vec::new();
    for (i, step) in chain.iter().enumerate() {
        let key = step.group.compiled.key.to_string();
        if i == 0 {
            let _ = writeln!(
                out,
                "{} {}  (RecordGroup {key}, {}, TTL {})",
                asked.name,
                asked.rtype,
                policy(&key),
                step.group.compiled.ttl
            );
        } else {
            let _ = writeln!(
                out,
                "  then {} {}  (RecordGroup {key}, {}, TTL {}; CNAME followed inside the zones)",
                step.group.compiled.name,
                step.group.compiled.record_type,
                policy(&key),
                step.group.compiled.ttl
            );
        }
        chained.push(key);
    }
    chained
}

/// Prints, for each group of the chain with zone affinity, which zone's answers a resolver in
/// `from_zone` gives (A1-A3).
fn zone_affinity_lines(
    chain: &Chain<'_>,
    table: &RoutingTable<Value>,
    from_zone: Option<&str>,
    out: &mut String,
) {
    for step in chain.iter() {
        if step.group.compiled.zone_affinity.is_none() {
            continue;
        }
        let compiled = table.groups.get(&step.group.compiled.key);
        let zone_line = match (from_zone, compiled) {
            (None, _) => {
                "asked from no zone (--from-zone ZONE): answers from every zone".to_owned()
            }
            (Some(z), Some(g)) if g.selection_for(Some(z)).1 => {
                format!("asked from {z}: answers from {z} only")
            }
            (Some(z), _) => format!(
                "asked from {z}: {z} holds no candidate, or too few (A2, A3): answers from every zone"
            ),
        };
        let _ = writeln!(
            out,
            "zone affinity ({}): {zone_line}",
            step.group.compiled.key
        );
    }
}

/// Draws `queries` answers and prints each distinct answer's share, or, when there are too
/// many distinct answers to read, each value's share.
fn answer_shares(queries: usize, mut draw: impl FnMut() -> String, out: &mut String) {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for _ in 0..queries {
        *counts.entry(draw()).or_default() += 1;
    }
    let mut by_share: Vec<(String, usize)> = counts.into_iter().collect();
    by_share.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let _ = writeln!(out, "answers over {queries} queries:");
    const SHOWN: usize = 20;
    if by_share.len() > SHOWN {
        // Many distinct sets (multivalue over a large pool): each value's share is clearer.
        let mut per_value: BTreeMap<&str, usize> = BTreeMap::new();
        let mut sizes: BTreeMap<usize, usize> = BTreeMap::new();
        for (answer, n) in &by_share {
            *sizes.entry(answer.split(' ').count()).or_default() += n;
            for v in answer.split(' ') {
                *per_value.entry(v).or_default() += n;
            }
        }
        let sizes: Vec<String> = sizes
            .iter()
            .map(|(k, n)| format!("{k} values in {n}"))
            .collect();
        let _ = writeln!(
            out,
            "  {} distinct answers ({}); each value appears in:",
            by_share.len(),
            sizes.join(", ")
        );
        for (v, n) in per_value {
            let _ = writeln!(out, "  {:>6.2}%  {v}", 100.0 * n as f64 / queries as f64);
        }
    } else {
        for (answer, n) in &by_share {
            let _ = writeln!(
                out,
                "  {:>6.2}%  {answer}",
                100.0 * *n as f64 / queries as f64
            );
        }
    }
}

/// One answer as the simulator prints it: each step's values (sorted), steps joined by
/// `→`, and how a chain that does not answer ended.
fn describe(outcome: &Outcome<'_>) -> String {
    let Outcome::Answer { chain, end, .. } = outcome else {
        return "(no answer)".to_owned();
    };
    let mut parts = Vec::new();
    for step in chain.iter() {
        // Sorted as the wire sorts them (addresses by number).
        let mut rrs: Vec<Box<[u8]>> = Vec::new();
        step.values.for_each(|v| rrs.push(value_rr(v, step.ttl)));
        rrs.sort();
        parts.push(if rrs.is_empty() {
            "(no values)".to_owned()
        } else {
            rrs.iter().map(|rr| show(rr)).collect::<Vec<_>>().join(" ")
        });
    }
    let mut text = parts.join(" → ");
    match end {
        ChainEnd::Answered => {}
        ChainEnd::OutOfZone => text.push_str(" (outside the served zones: the client follows it)"),
        ChainEnd::NoData { .. } => text.push_str(" → NODATA (the target has no such record)"),
        ChainEnd::NxDomain { .. } => text.push_str(" → NXDOMAIN (the target does not exist)"),
        ChainEnd::Cut => text.push_str(" (chain cut: a loop, or over 8 steps)"),
    }
    text
}

/// One wire RR's value in presentation form.
fn show(rr: &[u8]) -> String {
    let rtype = u16::from_be_bytes([rr[0], rr[1]]);
    let rdata = rr.get(10..).unwrap_or_default();
    match rtype {
        TYPE_A if rdata.len() == 4 => {
            std::net::Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3]).to_string()
        }
        TYPE_AAAA if rdata.len() == 16 => {
            let mut octets = [0u8; 16];
            octets.copy_from_slice(rdata);
            std::net::Ipv6Addr::from(octets).to_string()
        }
        TYPE_CNAME => {
            let mut name = String::new();
            let mut i = 0;
            while let Some(&len) = rdata.get(i) {
                if len == 0 {
                    break;
                }
                let label = rdata
                    .get(i + 1..i + 1 + usize::from(len))
                    .unwrap_or_default();
                name.push_str(&String::from_utf8_lossy(label));
                name.push('.');
                i += 1 + usize::from(len);
            }
            name
        }
        _ => {
            // TXT: each character-string quoted, as a zone file writes it.
            let mut parts = Vec::new();
            let mut i = 0;
            while let Some(&len) = rdata.get(i) {
                let s = rdata
                    .get(i + 1..i + 1 + usize::from(len))
                    .unwrap_or_default();
                parts.push(format!("{:?}", String::from_utf8_lossy(s)));
                i += 1 + usize::from(len);
            }
            parts.join(" ")
        }
    }
}

/// Prints every ZonalShift that targets the group: its state and whether it applies.
fn shift_lines(
    compiler: &Compiler,
    manifests: &Manifests,
    key_text: &str,
    now: Timestamp,
    out: &mut String,
) {
    let Some((key, group)) =
        ObjectKey::parse_group_key(key_text).and_then(|k| manifests.groups.get_key_value(&k))
    else {
        return;
    };
    let labels = group.metadata.labels.clone().unwrap_or_default();
    for (skey, shift) in manifests
        .shifts
        .iter()
        .filter(|(k, _)| k.namespace == key.namespace)
    {
        if !targets(&shift.spec, &key.name, &labels) {
            continue;
        }
        let line = match compiler.shift_status(skey, now) {
            Some(Ok(status)) => {
                let state = status.status.map(|s| format!("{s:?}")).unwrap_or_default();
                let applied = status
                    .groups
                    .iter()
                    .find(|g| *g.record_group == *key.name)
                    .map(|g| match g.reason {
                        Some(reason) => format!(", {:?} ({reason:?})", g.applied_status),
                        None => format!(", {:?}", g.applied_status),
                    })
                    .unwrap_or_default();
                let expiry = status
                    .expiry_time
                    .map(|t| format!(", expires {}", t.0))
                    .unwrap_or_default();
                format!("{state}{applied}{expiry}")
            }
            Some(Err(e)) => format!("invalid: {e}"),
            None => "unknown".into(),
        };
        let _ = writeln!(
            out,
            "zonal shift {skey} (away from {}): {line}",
            shift.spec.away_from
        );
    }
}

/// Prints every ZonalAutoshift that targets the group: its autoshift, the shifts it holds and
/// what each does to the group, and its last practice run or why one did not start.
fn autoshift_lines(compiler: &Compiler, manifests: &Manifests, key_text: &str, out: &mut String) {
    let Some((key, group)) =
        ObjectKey::parse_group_key(key_text).and_then(|k| manifests.groups.get_key_value(&k))
    else {
        return;
    };
    let labels = group.metadata.labels.clone().unwrap_or_default();
    for (akey, autoshift) in manifests
        .autoshifts
        .iter()
        .filter(|(k, _)| k.namespace == key.namespace)
    {
        if !healthroute_compiler::shift::target_matches(&autoshift.spec.target, &key.name, &labels)
        {
            continue;
        }
        let Some(status) = compiler.autoshift_status(akey) else {
            continue;
        };
        // As the operator's status: why it cannot be used (AS1), else the autoshift and why.
        let line = match (compiler.autoshift_invalid(akey), &status.active_zone) {
            (Some(why), _) => format!(
                "the configuration cannot be used ({}): {why}",
                why.reason.as_str()
            ),
            (None, Some(zone)) => format!(
                "autoshift Active away from {zone}: {}",
                status.message.as_deref().unwrap_or("")
            ),
            (None, None) => format!(
                "autoshift Inactive: {}",
                status.message.as_deref().unwrap_or("")
            ),
        };
        let _ = writeln!(out, "zonal autoshift {akey}: {line}");
        for shift in &status.shifts {
            let applied = shift
                .status
                .groups
                .iter()
                .find(|g| *g.record_group == *key.name)
                .map(|g| match g.reason {
                    Some(reason) => format!("{:?} ({reason:?})", g.applied_status),
                    None => format!("{:?}", g.applied_status),
                })
                .unwrap_or_default();
            let ends = shift
                .status
                .expiry_time
                .as_ref()
                .map(|t| format!(", ends {}", t.0))
                .unwrap_or_default();
            let kind = match shift.status.shift_type {
                Some(healthroute_api::ShiftType::PracticeRun) => "practice run",
                _ => "autoshift",
            };
            let _ = writeln!(
                out,
                "  {kind} {}/{} (away from {}): {applied}{ends}",
                akey.namespace, shift.name, shift.away_from,
            );
        }
        if let Some(refused) = &status.not_started {
            let _ = writeln!(
                out,
                "  practice run not started ({}): {}",
                refused.reason.as_str(),
                refused.message
            );
        } else if let Some(last) = status
            .outcomes
            .first()
            .filter(|o| o.outcome != healthroute_api::PracticeRunOutcome::Pending)
        {
            let _ = writeln!(
                out,
                "  last practice run away from {}: {}: {}",
                last.zone,
                last.outcome.as_str(),
                last.message.as_deref().unwrap_or("")
            );
        }
        if let (None, Some(next)) = (&status.practice_run, &status.next_practice_run) {
            let _ = writeln!(out, "  next practice run: {}", next.0);
        }
    }
}

/// Prints a group's decision path, then its alias targets' (indented).
fn explain(
    compiler: &Compiler,
    manifests: &Manifests,
    key_text: &str,
    out: &mut String,
    depth: usize,
) {
    let Some((key, group)) =
        ObjectKey::parse_group_key(key_text).and_then(|k| manifests.groups.get_key_value(&k))
    else {
        return;
    };
    let indent = "  ".repeat(depth + 1);
    if let Some(outcome) = compiler.outcome(key) {
        for line in &outcome.explain {
            let _ = writeln!(out, "{indent}{key}: {line}");
        }
    }
    if depth < 4 {
        for r in &group.spec.records {
            if let Some(alias) = &r.alias {
                let target = ObjectKey::new(&key.namespace, &alias.record_group).to_string();
                explain(compiler, manifests, &target, out, depth + 1);
            }
        }
    }
}

/// The HealthChecks that `name` (`namespace/name`, or a name alone) means; none is an error
/// for `flag`, quoting what was `wanted`.
fn checks_named(
    manifests: &Manifests,
    flag: &'static str,
    name: &str,
    wanted: &str,
) -> Result<Vec<ObjectKey>, Error> {
    let keys: Vec<ObjectKey> = manifests
        .checks
        .keys()
        .filter(|k| k.to_string() == name || &*k.name == name)
        .cloned()
        .collect();
    if keys.is_empty() {
        return Err(Error::NoSuchCheck {
            flag,
            name: wanted.to_owned(),
        });
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use healthroute_table::{
        Answer, CompiledGroup, RecordType, RoutingTable, Selection, Target, Value,
    };
    use hickory_proto::op::{Message, MessageType, OpCode, Query};
    use hickory_proto::rr::{Name, RData, Record, RecordType as HType};
    use proptest::prelude::*;

    use super::*;
    use crate::dns::fastpath::{self, Fast};

    const NAMES: [&str; 5] = ["a", "b", "c", "d.e", "f"];

    /// A group at `NAMES[at]`: A values (Fixed or Weighted), or a CNAME to another name of the
    /// pool, to a name that does not exist, or out of the zones.
    fn group(at: usize, kind: u8, pick: u8) -> (String, CompiledGroup<Value>) {
        let name = format!("{}.example.com.", NAMES[at]);
        let key: Arc<str> = format!("t/{}-{kind}", NAMES[at]).into();
        let a = |i: u8| Value::A([192, 0, 2, i].into());
        let answer = |id: &str, values: Vec<Value>| Answer {
            set_identifier: id.into(),
            target: Target::Values(values),
        };
        let (record_type, selection) = match kind % 4 {
            0 => (
                RecordType::A,
                Selection::Fixed(answer("x", vec![a(at as u8), a(100)])),
            ),
            1 => (
                RecordType::A,
                Selection::weighted([
                    (1, answer("w1", vec![a(10 + at as u8)])),
                    (3, answer("w2", vec![a(20 + at as u8)])),
                ])
                .expect("weights"),
            ),
            2 => {
                let target = match pick % 3 {
                    0 => format!("{}.example.com.", NAMES[pick as usize % NAMES.len()]),
                    1 => "missing.example.com.".to_owned(),
                    _ => "www.other.org.".to_owned(),
                };
                (
                    RecordType::Cname,
                    Selection::Fixed(answer("c", vec![Value::Cname(target)])),
                )
            }
            _ => (
                RecordType::Txt,
                Selection::Fixed(answer("t", vec![Value::Txt(format!("t{at}"))])),
            ),
        };
        (
            key.to_string(),
            CompiledGroup {
                key,
                name: name.into(),
                record_type,
                ttl: 30,
                last_resort: false,
                zone_affinity: None,
                selection,
            },
        )
    }

    /// The table: at most one group per name (a CNAME owns its name alone, as the compiler
    /// enforces).
    fn table(groups: &[(usize, u8, u8)]) -> RoutingTable<Value> {
        let mut t = RoutingTable::default();
        let mut taken = std::collections::BTreeSet::new();
        for &(at, kind, pick) in groups {
            if taken.insert(at) {
                let (key, g) = group(at, kind, pick);
                t.groups.insert(key.into(), Arc::new(g));
            }
        }
        t
    }

    fn value(r: &Record) -> String {
        match &r.data {
            RData::A(a) => a.0.to_string(),
            RData::CNAME(c) => c.0.to_ascii().to_lowercase(),
            RData::TXT(t) => t.to_string(),
            other => other.to_string(),
        }
    }

    /// Steps as the simulator prints them: values per owner, sorted.
    fn steps(records: &[Record]) -> Vec<Vec<String>> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for r in records {
            let owner = r.name.to_ascii().to_lowercase();
            match out.last_mut() {
                Some((o, vs)) if *o == owner => vs.push(value(r)),
                _ => out.push((owner, vec![value(r)])),
            }
        }
        out.into_iter()
            .map(|(_, mut vs)| {
                vs.sort_by_key(|v| v.parse::<std::net::Ipv4Addr>().ok());
                vs
            })
            .collect()
    }

    proptest! {
        // SEM-D8 SEM-D2 SEM-D3: the UDP fast path, the hickory path and the simulator answer
        // every question alike over generated tables (CNAMEs to the zone, to missing names and
        // out of it; NODATA; NXDOMAIN; names in any case), pick for pick.
        #[test]
        fn fast_path_full_path_and_simulator_agree(
            groups in proptest::collection::vec((0usize..NAMES.len(), 0u8..4, 0u8..9), 1..6),
            asked in 0usize..NAMES.len() + 1,
            qtype in prop_oneof![Just(HType::A), Just(HType::AAAA), Just(HType::CNAME), Just(HType::TXT)],
            upper in any::<bool>(),
            seed in any::<u64>(),
        ) {
            let counters = AnswerCounters::default();
            let zones = [ZoneConfig { apex: "example.com.".into(), nameservers: vec![], default_ttl: 45, ..ZoneConfig::default() }];
            let serving = ServingTable::build(&table(&groups), &zones, None, &counters).expect("builds");
            let label = NAMES.get(asked).copied().unwrap_or("nope");
            let mut text = format!("{label}.example.com.");
            if upper {
                text = text.to_uppercase();
            }
            let question = Name::from_ascii(&text).expect("name");
            let mut m = Message::new(7, MessageType::Query, OpCode::Query);
            m.add_query(Query::query(question.clone(), qtype));
            let req = m.to_vec().expect("encodes");

            let mut out = Vec::new();
            let fast = fastpath::answer(&serving, &req, &mut out, &mut fastrand::Rng::with_seed(seed), &mut Tally::default());
            let replied = matches!(fast, Fast::Reply { .. });
            prop_assert!(replied, "the fast path answers");
            let reply = Message::from_vec(&out).expect("parses");

            let qname = wire_name(&text.to_lowercase());
            let outcome = serving.lookup(&qname, u16::from(qtype), &mut fastrand::Rng::with_seed(seed), &mut Tally::default());
            let (answers, authority) = crate::dns::handler::records(&serving, &outcome, &question);
            // Names compare without case (D3): the fast path compresses against the question.
            let shown = |rs: &[Record]| rs.iter().map(|r| (r.name.to_ascii().to_lowercase(), r.record_type(), value(r).to_lowercase())).collect::<Vec<_>>();
            prop_assert_eq!(shown(&reply.answers), shown(&answers));
            prop_assert_eq!(shown(&reply.authorities), shown(&authority));
            prop_assert_eq!(reply.metadata.response_code.low(), outcome.rcode());
            // The first answer is owned by the question as asked (D3).
            if let Some(first) = reply.answers.first() {
                prop_assert_eq!(first.name.to_ascii(), text.clone());
            }

            let described = describe(&serving.lookup(&qname, u16::from(qtype), &mut fastrand::Rng::with_seed(seed), &mut Tally::default()));
            if answers.is_empty() {
                prop_assert_eq!(described, "(no answer)".to_owned());
            } else {
                let body = described.split(" (").next().unwrap_or_default();
                let simulated: Vec<Vec<String>> = body
                    .split(" → ")
                    .filter(|s| *s != "NODATA" && *s != "NXDOMAIN")
                    .map(|s| s.split(' ').map(|v| v.trim_matches('"').to_owned()).collect())
                    .collect();
                let resolved: Vec<Vec<String>> = steps(&answers)
                    .into_iter()
                    .map(|vs| vs.into_iter().map(|v| v.trim_matches('"').to_owned()).collect())
                    .collect();
                prop_assert_eq!(simulated, resolved, "{}", described);
            }
        }
    }
}
