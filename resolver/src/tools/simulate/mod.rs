//! `healthroute-resolver simulate`: what DNS would answer, without a cluster.
//!
//! Reads a manifest directory, applies the what-ifs (`--unhealthy`, `--alarm`, `--peer`,
//! `--peer-down`, `--not-ready`, `--now`, `--zone-impaired`, `--practice-run`), compiles with
//! the same compiler as the operator, and draws `--queries` answers with the same per-query
//! choice as the resolver, from a seeded generator so that the output is reproducible.
//!
//! ```text
//!   flags (SimulateArgs) ──scenario()──▶ Scenario ◀── kubectl healthroute explain
//!   DIR ─▶ zones, TTL, Manifests ─┐          │
//!                                 ▼          ▼
//!   run_on:  scenario.rs  what-ifs applied to the manifests and a Compiler, compiled at `now`
//!            output.rs    the answer: rejected claimants, the chain a resolver answers (its
//!                         own serving table), zone affinity, the shares of the answers drawn
//!            explain.rs   why: zonal shifts, ZonalAutoshifts, the decision path (--explain)
//! ```

mod explain;
mod output;
mod scenario;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;

use healthroute_compiler::ServedZones;
use healthroute_compiler::manifests::Manifests;

use crate::config::{FileConfig, zones_and_ttl};
use crate::dns::counters::{AnswerCounters, Tally};
use crate::dns::serving::Outcome;
use crate::dns::wire::{wire_name, wire_type};
use crate::error::Error;
use explain::{autoshift_lines, explain, shift_lines};
use output::{
    answer_shares, chain_lines, describe, no_data, rejected_claimants, serving_table,
    zone_affinity_lines,
};
pub use scenario::{Alarm, PeerHeard, PracticeRun, Scenario};

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
    /// The zone default TTL (default: healthroute.yaml, else 60).
    #[arg(long = "default-ttl", value_name = "SECONDS")]
    pub default_ttl: Option<u32>,
    /// The name to query.
    pub name: String,
    /// The record type to query: A, AAAA, CNAME or TXT; DS (or DNSKEY) prints the DS records
    /// of the directory's signed zones, for their parent.
    #[arg(default_value = "A")]
    pub record_type: String,
}

impl SimulateArgs {
    /// The scenario the flags describe, each read once.
    pub fn scenario(&self) -> Result<Scenario, Error> {
        let mut scenario = Scenario::asking(&self.name, &self.record_type, self.now.as_deref())?;
        scenario.unhealthy = self.unhealthy.clone();
        scenario.alarms = self
            .alarm
            .iter()
            .map(|a| Alarm::parse(a))
            .collect::<Result<_, _>>()?;
        scenario.peers = self
            .peer
            .iter()
            .map(|p| PeerHeard::parse(p))
            .collect::<Result<_, _>>()?;
        scenario.peers_down = self.peer_down.clone();
        scenario.not_ready = self.not_ready.clone();
        scenario.zone_impaired = self.zone_impaired.clone();
        scenario.practice_run = self.practice_run.as_deref().map(PracticeRun::parse);
        scenario.queries = self.queries;
        scenario.seed = self.seed;
        scenario.explain = self.explain;
        scenario.from_zone = self.from_zone.clone();
        Ok(scenario)
    }
}

/// Runs the simulation and returns what it prints. `simulate ZONE DS` (or `DNSKEY`) prints
/// what a signed zone of the directory hands to its parent (K4).
pub fn run(args: &SimulateArgs) -> Result<String, Error> {
    if ["DS", "DNSKEY"].contains(&args.record_type.to_ascii_uppercase().as_str()) {
        let path = args
            .manifests
            .join(healthroute_compiler::manifests::CONFIG_FILE);
        return crate::tools::dnssec::report_for(&path);
    }
    let file = FileConfig::load(&args.manifests)?;
    let (zones, ttl) = zones_and_ttl(&args.zones, args.default_ttl, &file)?;
    let manifests = crate::sources::manifest_dir::load(&args.manifests)?;
    run_on(
        &args.scenario()?,
        zones,
        ttl,
        manifests,
        file.zone_name.clone(),
    )
}

/// The simulation over `manifests` (a directory's, or a cluster's current objects), in its
/// steps: read the question, apply the what-ifs and compile, then answer with the resolver's
/// own serving table and print the chain, the shares of the answers drawn, and why.
pub fn run_on(
    scenario: &Scenario,
    zones: ServedZones,
    ttl: u32,
    mut manifests: Manifests,
    default_from_zone: Option<String>,
) -> Result<String, Error> {
    scenario.mark_not_ready(&mut manifests)?;
    let compiler = scenario.compile(&zones, ttl, &manifests)?;

    let mut out = String::new();
    for warning in &manifests.warnings {
        let _ = writeln!(out, "note: {warning}");
    }
    let Scenario {
        now,
        record_type: rtype,
        name,
        ..
    } = scenario;
    let Some(zone) = zones.zone_of(name) else {
        let _ = writeln!(
            out,
            "{name} {rtype}: REFUSED (not in a served zone: {})",
            zones.names().join(", ")
        );
        return Ok(out);
    };
    rejected_claimants(&compiler, &manifests, scenario, &mut out);

    // The resolver's own serving form and lookup: what the simulator prints is what a
    // resolver answers (D8 chains included).
    let table = compiler.table();
    let counters = AnswerCounters::default();
    let from_zone = scenario.from_zone.clone().or(default_from_zone);
    let serving = serving_table(&table, &zones, ttl, from_zone.as_deref(), &counters)?;
    let qname = wire_name(name);
    let qtype = wire_type(*rtype);
    let mut rng = fastrand::Rng::with_seed(scenario.seed);
    let first = serving.lookup(&qname, qtype, &mut rng, &mut Tally::default());
    let chain = match &first {
        Outcome::Answer { chain, .. } => chain,
        Outcome::NxDomain { .. } => {
            let _ = writeln!(out, "{name} {rtype}: NXDOMAIN (zone {zone})");
            return Ok(out);
        }
        _ => {
            no_data(&table, scenario, &mut out);
            return Ok(out);
        }
    };
    let Some(head) = chain.iter().next() else {
        return Err(Error::Inconsistent(name.clone()));
    };
    let chained = chain_lines(chain, &manifests, scenario, &mut out);
    zone_affinity_lines(chain, &table, from_zone.as_deref(), &mut out);
    // The draws start from the seed again: the shares do not depend on the lookup above.
    let mut rng = fastrand::Rng::with_seed(scenario.seed);
    let draw = || describe(&serving.lookup(&qname, qtype, &mut rng, &mut Tally::default()));
    answer_shares(scenario.queries.max(1), draw, &mut out);
    let _ = writeln!(
        out,
        "last resort: {}",
        if head.group.compiled.last_resort {
            "yes (no record is healthy)"
        } else {
            "no"
        }
    );
    if let Some(asked) = chained.first() {
        shift_lines(&compiler, &manifests, asked, *now, &mut out);
        autoshift_lines(&compiler, &manifests, asked, &mut out);
    }
    if scenario.explain {
        let _ = writeln!(out, "decision:");
        for key in &chained {
            explain(&compiler, &manifests, key, &mut out, 0);
        }
    }
    Ok(out)
}
