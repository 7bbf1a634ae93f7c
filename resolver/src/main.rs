//! `healthroute-resolver`: the DNS server, standalone mode, and the simulator. The flags and
//! the settings file are resolved once ([`healthroute_resolver::settings`]); this file wires
//! what they say: the table's source, the checker, the registration, the push listener.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use tokio::sync::{mpsc, watch};
use tracing::{Instrument, info_span};

use healthroute_admin::lifecycle;
use healthroute_checker::{Checker, peer};
use healthroute_resolver::error::Error;
use healthroute_resolver::server::{self, ServeConfig};
use healthroute_resolver::settings::{Cluster, Mode, Push, ServeArgs, Serving, Settings};
use healthroute_resolver::sources::cluster;
use healthroute_resolver::sources::standalone::Standalone;
use healthroute_resolver::tools::dnssec;
use healthroute_resolver::tools::simulate::{self, SimulateArgs};

#[derive(Parser)]
#[command(
    name = "healthroute-resolver",
    version,
    about = "Health-checked DNS routing: an authoritative DNS server over the compiled routing table",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    serve: ServeArgs,
}

#[derive(Subcommand)]
enum Command {
    /// What would DNS answer if...: compile a manifest directory and draw answers.
    Simulate(Box<SimulateArgs>),
    /// Signed zones: a new key, the DS for the parent zone.
    Dnssec {
        #[command(subcommand)]
        command: dnssec::DnssecCommand,
    },
}

/// A start-up error is said once, as `error: ...` on stderr, the way the simulator and the
/// flag parser say theirs, and not also as a log line: the log goes to stderr too, so the
/// two were the same words twice, and a log line would hide it from a `RUST_LOG` that
/// filters this target out. Errors while serving stay log lines.
fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Dnssec { command }) => printed(dnssec::run(&command)),
        Some(Command::Simulate(args)) => printed(simulate::run(&args)),
        None => {
            lifecycle::init_logging("info,hickory_server=warn", cli.serve.log_format);
            let runtime = match lifecycle::runtime() {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            };
            match runtime.block_on(serve(cli.serve)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// A command's text on stdout, or its error on stderr (exit status 2).
fn printed(result: Result<String, Error>) -> ExitCode {
    match result {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn serve(args: ServeArgs) -> Result<(), Error> {
    let Settings { mode, serving } = Settings::resolve(&args)?;
    match mode {
        Mode::Standalone { dir } => serve_standalone(serving, dir).await,
        Mode::Cluster(cluster) => serve_cluster(serving, *cluster).await,
    }
}

async fn serve_standalone(serving: Serving, dir: PathBuf) -> Result<(), Error> {
    let Serving {
        serve: mut config,
        zones,
        default_ttl,
        peers,
        checker_policy,
        drain,
        ..
    } = serving;
    // The in-process checker probes every HealthCheck of the directory (H1: on its own
    // schedule); its views reach the compiler through the event channel. Metric checks (H14)
    // run here too: in standalone mode this process is the whole cluster.
    let (events_tx, events_rx) = mpsc::channel(4096);
    // Key files are read again while running (X1): a changed Secret needs no restart.
    let peers = std::sync::Arc::new(peers);
    let _key_files = peer::follow_key_files(peers.clone(), peer::KEY_FILE_INTERVAL);
    let mut checker = Checker::new(
        "standalone",
        config.local_zone.clone(),
        checker_policy,
        events_tx,
    )
    .with_metric_checks(healthroute_checker::metric::file_credentials(dir.clone()))
    .with_peers(peers);
    if let Some(zone) = &config.local_zone {
        tracing::info!(zone, "zone-affinity answers are this zone's (A1)");
    }
    checker.start_heartbeat(Duration::from_secs(1));
    config.checker = Some(checker.collector());
    let on_manifests = Box::new(move |m: &healthroute_compiler::manifests::Manifests| {
        checker.sync(m.checks.iter().map(|(k, c)| (k, &c.spec)));
        tracing::info!(
            checks = checker.running(),
            "checker following the manifests"
        );
    });

    let (table_tx, table_rx) = watch::channel(None);
    let mut standalone = Standalone::new(dir.clone(), zones, default_ttl, table_tx, on_manifests);
    config.autoshift = Some(standalone.autoshift_collector());
    // The first load decides whether we start at all: a bad directory is an error, not a
    // silently empty server (unless the last table on disk can be served).
    if let Err(e) = standalone.reload() {
        if config.table_file.is_none() {
            return Err(Error::Manifests {
                dir,
                source: Box::new(e),
            });
        }
        tracing::error!("keeping the last good configuration:\n{e}");
    }
    standalone.compile_and_publish();

    let running = start(config, table_rx).await?;
    let (stop_tx, stop_rx) = watch::channel(false);
    let compile_loop = tokio::spawn(
        standalone
            .run(events_rx, stop_rx)
            .instrument(info_span!("standalone", dir = %dir.display())),
    );
    lifecycle::shutdown_signal().await;
    running.drain(drain, lifecycle::shutdown_signal()).await;
    tracing::info!("shutting down: finishing in-flight queries");
    let _ = stop_tx.send(true);
    let _ = compile_loop.await;
    running.shutdown().await;
    Ok(())
}

/// The push listener (P12), started, and the key file followed: where the leader reaches it,
/// the pushed deltas with their counters, and its tasks.
async fn start_push_listener(
    push: &Push,
    config: &mut ServeConfig,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<(String, PushedDeltas), Error> {
    let metrics = Arc::new(healthroute_resolver::sources::push::PushMetrics::default());
    // P12: the key file is followed while running, the previous key accepted a while.
    let keys: Arc<healthroute_table::push::PushKeys> = push.key.clone().into();
    let (bound, deltas, task) =
        healthroute_resolver::sources::push::listen(push.listen, keys.clone(), metrics.clone())
            .await
            .map_err(|source| Error::Listen {
                what: "push",
                addr: push.listen,
                source,
            })?;
    let address = push.address(bound);
    tracing::info!(addr = %bound, advertised = %address, "taking the leader's pushed deltas (P12)");
    tasks.push(task);
    tasks.push(tokio::spawn(
        healthroute_admin::key_file::follow(
            push.key_file.clone(),
            healthroute_table::push::KEY_FILE_CHECK,
            "push key",
            move |read| keys.take_file(read),
        )
        .instrument(tracing::info_span!("push_key_file")),
    ));
    config.push = Some(healthroute_resolver::sources::push::PushCollector(
        metrics.clone(),
    ));
    Ok((address, (deltas, metrics)))
}

/// Pushed deltas as the table follower takes them.
type PushedDeltas = (
    mpsc::Receiver<hyper::body::Bytes>,
    Arc<healthroute_resolver::sources::push::PushMetrics>,
);

async fn serve_cluster(serving: Serving, cluster: Cluster) -> Result<(), Error> {
    let Serving {
        serve: mut config,
        peers,
        checker_policy,
        drain,
        ..
    } = serving;
    let peers = Arc::new(peers);
    // The push listener first: a mistake is told before any connection is tried.
    let mut tasks = Vec::new();
    let (advertised, pushes) = match &cluster.push {
        Some(push) => {
            let (address, pushes) = start_push_listener(push, &mut config, &mut tasks).await?;
            (Some(address), Some(pushes))
        }
        None => (None, None),
    };
    let client = kube::Client::try_default()
        .await
        .map_err(Error::NoClientForResolver)?;
    let (table_tx, table_rx) = watch::channel(None);
    tasks.push(tokio::spawn(
        cluster::follow_table(client.clone(), cluster.namespace.clone(), table_tx, pushes)
            .instrument(info_span!("table_follower", namespace = %cluster.namespace)),
    ));
    let mut checker = None;
    if cluster.checker {
        let (events_tx, events_rx) = mpsc::channel(4096);
        let mut c = Checker::new(
            cluster.name.clone(),
            cluster.checker_zone.clone(),
            checker_policy,
            events_tx,
        )
        .with_peers(peers.clone());
        c.start_heartbeat(Duration::from_secs(1));
        config.checker = Some(c.collector());
        checker = Some((c, events_rx));
    }
    // Key files are read again while running (X1): a changed Secret needs no restart.
    tasks.extend(peer::follow_key_files(peers, peer::KEY_FILE_INTERVAL));
    let running = start(config, table_rx).await?;
    // After the drain (P9) the checker and the registration stop and delete their Leases.
    let (stop_tx, stop_rx) = watch::channel(false);
    let stopped = move || {
        let mut stop = stop_rx.clone();
        async move {
            let _ = stop.wait_for(|stop| *stop).await;
        }
    };
    let mut leases = Vec::new();
    // The registration carries the generation being served (P4) and the push address
    // (P12), whether or not a checker runs.
    let shared = running.shared.clone();
    let served = move || shared.table.load().as_ref().map(|t| t.generation);
    let registration = cluster::RegistrationLease::new(
        client.clone(),
        &cluster.namespace,
        &cluster.name,
        cluster::PodOwner::from_env(),
    );
    leases.push(tokio::spawn(
        cluster::run_registration(registration, served, advertised, stopped())
            .instrument(info_span!("registration", resolver = %cluster.name)),
    ));
    if let Some((c, events_rx)) = checker {
        leases.push(tokio::spawn(
            cluster::run_checker(client, cluster.namespace.clone(), c, events_rx, stopped())
                .instrument(info_span!("checker", checker = %cluster.name)),
        ));
    }
    lifecycle::shutdown_signal().await;
    running.drain(drain, lifecycle::shutdown_signal()).await;
    // P9: each Lease is deleted within its bound, inside.
    let _ = stop_tx.send(true);
    for task in leases {
        let _ = tokio::time::timeout(Duration::from_secs(3), task).await;
    }
    tracing::info!("shutting down: finishing in-flight queries");
    for t in tasks {
        t.abort();
    }
    running.shutdown().await;
    Ok(())
}

/// Starts serving and logs where.
async fn start(
    config: ServeConfig,
    tables: watch::Receiver<
        Option<std::sync::Arc<healthroute_table::RoutingTable<healthroute_table::Value>>>,
    >,
) -> Result<server::Running, Error> {
    let running = server::start(config, tables).await?;
    for addr in &running.dns_addrs {
        tracing::info!(%addr, "answering DNS (UDP and TCP)");
    }
    if let Some(addr) = running.exchange_addr {
        tracing::info!(%addr, "answering peer clusters' exchange queries (UDP and TCP)");
    }
    if let Some(addr) = running.admin_addr {
        tracing::info!(%addr, "admin endpoint: /metrics /livez /readyz");
    }
    Ok(running)
}
