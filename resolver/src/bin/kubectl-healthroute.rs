//! `kubectl healthroute`: a kubectl plugin (any `kubectl-NAME` on PATH is one). Install with
//! `cargo install --path resolver --bin kubectl-healthroute`; it reads the current kubeconfig
//! context, as kubectl does. See healthroute_resolver::tools::plugin for what each command shows.

use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use healthroute_resolver::error::Error;
use healthroute_resolver::tools::dnssec::{self, PluginDnssecCommand};
use healthroute_resolver::tools::plugin::{self, Output, Scope, ShiftTarget};

#[derive(Parser)]
#[command(
    name = "kubectl-healthroute",
    version,
    about = "healthroute in a cluster: status, explain, zonal shifts, practice runs, checks"
)]
struct Cli {
    /// The namespace (default: the kubeconfig context's).
    #[arg(short = 'n', long, global = true)]
    namespace: Option<String>,
    /// Every namespace (status, checks, shift list).
    #[arg(short = 'A', long = "all-namespaces", global = true)]
    all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = Output::Table, global = true)]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Every RecordGroup: policy, healthy/total, last resort, served generation; and the
    /// generation each resolver serves when they differ.
    Status {
        /// Namespace of the table ConfigMaps and checker Leases (the installation's);
        /// default: the one namespace that holds a healthroute table, else `healthroute`.
        #[arg(long = "table-namespace")]
        table_namespace: Option<String>,
    },
    /// Why the live answer for NAME is what it is, from the cluster's current objects.
    Explain {
        /// The DNS name asked.
        name: String,
        /// The record type asked.
        #[arg(default_value = "A")]
        record_type: String,
        /// A served zone (repeatable; default: each group's parent domain).
        #[arg(long = "zone")]
        zones: Vec<String>,
        /// Ask as a resolver in this zone (zone affinity).
        #[arg(long = "from-zone")]
        from_zone: Option<String>,
        /// The time to ask at (RFC 3339), e.g. after a shift expires; default now.
        #[arg(long)]
        at: Option<String>,
    },
    /// ZonalShift lifecycle.
    Shift {
        #[command(subcommand)]
        command: ShiftCommand,
    },
    /// A ZonalAutoshift's practice runs on demand (its annotation).
    Practice {
        #[command(subcommand)]
        command: PracticeCommand,
    },
    /// Every HealthCheck: each checker's view and the quorum.
    Checks,
    /// Signed zones: a new key, and the DS to hand to the parent zone (from a settings file,
    /// or from the keys' Secrets).
    Dnssec {
        #[command(subcommand)]
        command: PluginDnssecCommand,
    },
}

#[derive(Subcommand)]
enum ShiftCommand {
    /// Move traffic away from ZONE for a bounded time.
    Start {
        zone: String,
        /// One RecordGroup by name...
        #[arg(long, conflicts_with = "selector")]
        group: Option<String>,
        /// ...or the RecordGroups with these labels (k=v,k2=v2).
        #[arg(long)]
        selector: Option<String>,
        /// 1m to 72h.
        #[arg(long = "expires-in")]
        expires_in: String,
        #[arg(long)]
        comment: Option<String>,
        /// Seconds to wait for the operator to report where the shift applies.
        #[arg(long, default_value_t = 10)]
        wait: u64,
    },
    /// Change when a shift ends (counted from now).
    Extend {
        name: String,
        #[arg(long = "expires-in")]
        expires_in: String,
        #[arg(long, default_value_t = 10)]
        wait: u64,
    },
    /// End a shift now (the object stays as a record).
    Cancel { name: String },
    /// Every shift and what it applies to.
    List,
}

#[derive(Subcommand)]
enum PracticeCommand {
    /// Ask ZonalAutoshift NAME for a practice run now; the windows, dates, alarms and
    /// capacity check still hold, the cadence does not.
    Start {
        name: String,
        /// The zone to shift away from (default: the next zone in rotation).
        #[arg(long)]
        zone: Option<String>,
        /// The request's id (default: the time): each distinct request is acted on once.
        #[arg(long)]
        id: Option<String>,
        /// Seconds to wait for the operator's answer.
        #[arg(long, default_value_t = 10)]
        wait: u64,
    },
    /// End ZonalAutoshift NAME's running practice run now (outcome Interrupted).
    Cancel {
        name: String,
        #[arg(long)]
        id: Option<String>,
        #[arg(long, default_value_t = 10)]
        wait: u64,
    },
}

async fn run(cli: Cli) -> Result<String, Error> {
    if let Command::Dnssec {
        command: PluginDnssecCommand::Local(local),
    } = &cli.command
    {
        return dnssec::run(local);
    }
    let client = kube::Client::try_default().await.map_err(Error::NoClient)?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_owned());
    let scope = if cli.all_namespaces {
        Scope::All
    } else {
        Scope::Namespace(namespace.clone())
    };
    match cli.command {
        Command::Status { table_namespace } => {
            let table_namespace = match table_namespace {
                Some(ns) => ns,
                None => plugin::find_table_namespace(&client).await?,
            };
            plugin::status(&client, &scope, &table_namespace, cli.output).await
        }
        Command::Explain {
            name,
            record_type,
            zones,
            from_zone,
            at,
        } => {
            plugin::explain(
                &client,
                &namespace,
                &name,
                &record_type,
                &zones,
                from_zone,
                at,
            )
            .await
        }
        Command::Checks => plugin::checks(&client, &scope, cli.output).await,
        Command::Dnssec { command } => match command {
            PluginDnssecCommand::SecretDs { zone, keys } => {
                dnssec::secret_ds(&client, &namespace, &zone, &keys).await
            }
            PluginDnssecCommand::Local(local) => dnssec::run(&local),
        },
        Command::Practice { command } => match command {
            PracticeCommand::Start {
                name,
                zone,
                id,
                wait,
            } => {
                plugin::practice_start(
                    &client,
                    &namespace,
                    &name,
                    zone,
                    id,
                    Duration::from_secs(wait),
                )
                .await
            }
            PracticeCommand::Cancel { name, id, wait } => {
                plugin::practice_cancel(&client, &namespace, &name, id, Duration::from_secs(wait))
                    .await
            }
        },
        Command::Shift { command } => match command {
            ShiftCommand::Start {
                zone,
                group,
                selector,
                expires_in,
                comment,
                wait,
            } => {
                let target = match (group, selector) {
                    (Some(g), _) => ShiftTarget::Group(g),
                    (None, Some(sel)) => ShiftTarget::Selector(parse_selector(&sel)?),
                    (None, None) => return Err(Error::NoShiftTarget),
                };
                plugin::shift_start(
                    &client,
                    &namespace,
                    &zone,
                    target,
                    &expires_in,
                    comment,
                    Duration::from_secs(wait),
                )
                .await
            }
            ShiftCommand::Extend {
                name,
                expires_in,
                wait,
            } => {
                plugin::shift_extend(
                    &client,
                    &namespace,
                    &name,
                    &expires_in,
                    Duration::from_secs(wait),
                )
                .await
            }
            ShiftCommand::Cancel { name } => plugin::shift_cancel(&client, &namespace, &name).await,
            ShiftCommand::List => plugin::shift_list(&client, &scope, cli.output).await,
        },
    }
}

fn parse_selector(raw: &str) -> Result<BTreeMap<String, String>, Error> {
    raw.split(',')
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| Error::Selector(raw.to_owned()))
        })
        .collect()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
