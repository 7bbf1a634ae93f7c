//! `healthroute-resolver simulate`: what DNS would answer, without a cluster.
//!
//! Reads a manifest directory, applies the what-ifs (`--unhealthy`, `--not-ready`, `--now`),
//! compiles with the same compiler as the operator, and draws `--queries` answers with the
//! same per-query choice as the resolver, from a seeded generator so that the output is
//! reproducible.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;

use healthroute_operator::api::CheckType;
use healthroute_operator::compiler::shift::targets;
use healthroute_operator::compiler::{CheckerView, Compiler, ObjectKey};
use healthroute_operator::manifests::Manifests;
use healthroute_table::{RecordType, normalize_name};
use jiff::Timestamp;

use crate::config::{FileConfig, zones_and_ttl};

/// The checker name the simulator reports its what-if views as.
const SIMULATOR: &str = "simulator";

#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Directory of manifests (RecordGroups, HealthChecks, ZonalShifts, Services,
    /// EndpointSlices), read recursively.
    #[arg(long, value_name = "DIR")]
    pub manifests: PathBuf,
    /// A served zone (repeatable); default: the zones in DIR/healthroute.yaml.
    #[arg(long = "zone", value_name = "ZONE")]
    pub zones: Vec<String>,
    /// Treat this HealthCheck (`name` or `namespace/name`) as seen unhealthy by its checkers.
    #[arg(long, value_name = "HEALTHCHECK")]
    pub unhealthy: Vec<String>,
    /// Treat the endpoint with this address as not ready (and not serving).
    #[arg(long = "not-ready", value_name = "IP")]
    pub not_ready: Vec<IpAddr>,
    /// The time to simulate at (RFC 3339), for zonal shift expiry; default: now.
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
pub fn run(args: &SimulateArgs) -> Result<String, String> {
    let file = FileConfig::load(&args.manifests)?;
    let (zones, ttl) = zones_and_ttl(&args.zones, args.default_ttl, &file)?;
    let now = match &args.now {
        Some(raw) => raw
            .parse::<Timestamp>()
            .map_err(|e| format!("--now {raw:?}: {e} (use RFC 3339, e.g. 2026-01-02T15:04:05Z)"))?,
        None => Timestamp::now(),
    };
    let rtype: RecordType = args.record_type.parse()?;
    let name = normalize_name(&args.name)?;

    let mut manifests = Manifests::load_dir(&args.manifests).map_err(|e| e.to_string())?;
    for ip in &args.not_ready {
        let mut found = false;
        for svc in manifests.services.values_mut() {
            for ep in svc.endpoints.iter_mut().filter(|e| e.address == *ip) {
                ep.ready = false;
                ep.serving = false;
                found = true;
            }
        }
        if !found {
            return Err(format!(
                "--not-ready {ip}: no EndpointSlice in the directory has this address"
            ));
        }
    }
    let mut compiler = Compiler::new(zones.clone(), ttl);
    manifests.apply_to(&mut compiler, None);
    for wanted in &args.unhealthy {
        let keys: Vec<ObjectKey> = manifests
            .checks
            .keys()
            .filter(|k| k.to_string() == *wanted || k.name == *wanted)
            .cloned()
            .collect();
        if keys.is_empty() {
            return Err(format!(
                "--unhealthy {wanted}: no HealthCheck of that name in the directory"
            ));
        }
        for key in keys {
            if manifests.checks[&key].spec.check_type == CheckType::Calculated {
                return Err(format!(
                    "--unhealthy {wanted}: a calculated check's status comes from its children; mark those unhealthy"
                ));
            }
            compiler.set_check_view(
                &key,
                CheckerView {
                    checker: SIMULATOR.into(),
                    zone: None,
                    healthy: false,
                    message: Some("--unhealthy".into()),
                },
            );
        }
    }
    compiler.set_heartbeat(SIMULATOR, now);
    compiler.compile(now);

    let mut out = String::new();
    for warning in &manifests.warnings {
        let _ = writeln!(out, "note: {warning}");
    }
    let Some(zone) = zones.zone_of(&name) else {
        let _ = writeln!(
            out,
            "{name} {rtype}: REFUSED (not in a served zone: {})",
            zones.names().join(", ")
        );
        return Ok(out);
    };

    // Rejected groups that claim this name: say why.
    let claimants: Vec<ObjectKey> = compiler
        .group_keys()
        .filter(|k| {
            manifests.groups.get(*k).is_some_and(|g| {
                normalize_name(&g.spec.name).ok().as_deref() == Some(name.as_str())
                    && RecordType::from(g.spec.record_type) == rtype
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

    let table = compiler.table();
    let Some(group) = table
        .groups
        .values()
        .find(|g| *g.name == *name && g.record_type == rtype)
    else {
        let others: Vec<String> = table
            .groups
            .values()
            .filter(|g| *g.name == *name)
            .map(|g| g.record_type.to_string())
            .collect();
        let exists_below = table
            .groups
            .values()
            .any(|g| g.name.ends_with(&format!(".{name}")));
        if !others.is_empty() || exists_below {
            let _ = writeln!(
                out,
                "{name} {rtype}: NOERROR, no answer (NODATA; the name has {})",
                if others.is_empty() {
                    "names below it".to_owned()
                } else {
                    others.join(", ")
                }
            );
        } else {
            let _ = writeln!(out, "{name} {rtype}: NXDOMAIN (zone {zone})");
        }
        return Ok(out);
    };
    let key_text = group.key.to_string();
    let policy = manifests
        .groups
        .iter()
        .find(|(k, _)| k.to_string() == key_text)
        .map(|(_, g)| format!("{:?}", g.spec.routing_policy))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "{name} {rtype}  (RecordGroup {}, {policy}, TTL {})",
        group.key, group.ttl
    );
    let mut rng = fastrand::Rng::with_seed(args.seed);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let queries = args.queries.max(1);
    for _ in 0..queries {
        let Some(resolved) = table.resolve(group, &mut rng) else {
            return Err(format!(
                "the table for {name} is inconsistent (alias chain broken)"
            ));
        };
        let mut values = Vec::with_capacity(resolved.values.len());
        resolved.values.for_each(|v| values.push(v));
        values.sort();
        let answer = if values.is_empty() {
            "(no values)".to_owned()
        } else {
            values
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        };
        *counts.entry(answer).or_default() += 1;
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
    let _ = writeln!(
        out,
        "last resort: {}",
        if group.last_resort {
            "yes (no record is healthy)"
        } else {
            "no"
        }
    );
    shift_lines(&compiler, &manifests, &key_text, now, &mut out);
    if args.explain {
        let _ = writeln!(out, "decision:");
        explain(&compiler, &manifests, &key_text, &mut out, 0);
    }
    Ok(out)
}

/// Prints every ZonalShift that targets the group: its state and whether it applies.
fn shift_lines(
    compiler: &Compiler,
    manifests: &Manifests,
    key_text: &str,
    now: Timestamp,
    out: &mut String,
) {
    let Some((key, group)) = manifests
        .groups
        .iter()
        .find(|(k, _)| k.to_string() == key_text)
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
                    .find(|g| g.record_group == key.name)
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

/// Prints a group's decision path, then its alias targets' (indented).
fn explain(
    compiler: &Compiler,
    manifests: &Manifests,
    key_text: &str,
    out: &mut String,
    depth: usize,
) {
    let Some((key, group)) = manifests
        .groups
        .iter()
        .find(|(k, _)| k.to_string() == key_text)
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
