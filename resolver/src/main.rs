//! `healthroute-resolver`: the DNS server, standalone mode, and the simulator.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tokio::sync::{mpsc, watch};
use tracing::{Instrument, info_span};

use healthroute_admin::lifecycle::{self, LogFormat};
use healthroute_checker::{Checker, Cidr, TargetPolicy, peer};
use healthroute_compiler::manifests::CONFIG_FILE;
use healthroute_resolver::config::{FileConfig, zone_configs, zones_and_ttl};
use healthroute_resolver::error::Error;
use healthroute_resolver::server::{self, ServeConfig};
use healthroute_resolver::sources::standalone::Standalone;
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
    Simulate(SimulateArgs),
}

#[derive(Args, Clone)]
struct ServeArgs {
    /// Standalone mode: serve the manifests in DIR (RecordGroups, HealthChecks, ZonalShifts,
    /// ZonalAutoshifts, EndpointSlices, Nodes), reloaded when a file changes. DIR/healthroute.yaml may hold the
    /// settings below (flags win).
    #[arg(long, value_name = "DIR")]
    manifests: Option<PathBuf>,
    /// Read the settings from FILE (healthroute.yaml's form: zones with their nameservers,
    /// listen, upstream...), in a cluster too; in standalone mode instead of
    /// DIR/healthroute.yaml. Flags win.
    #[arg(long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to answer DNS on, UDP and TCP (repeatable). Default 0.0.0.0:53.
    #[arg(long = "listen", value_name = "ADDR:PORT")]
    listen: Vec<SocketAddr>,
    /// A zone this resolver is authoritative for (repeatable).
    #[arg(long = "zone", value_name = "ZONE")]
    zones: Vec<String>,
    /// Where queries outside the served zones go; without it they get REFUSED.
    #[arg(long, value_name = "ADDR:PORT")]
    upstream: Option<SocketAddr>,
    /// Seconds to wait for the upstream before answering SERVFAIL.
    #[arg(long = "upstream-timeout", value_name = "SECONDS", default_value_t = 2)]
    upstream_timeout: u64,
    /// Address of the admin endpoint: /metrics, /livez, /readyz.
    #[arg(long = "admin-listen", value_name = "ADDR:PORT")]
    admin_listen: Option<SocketAddr>,
    /// TTL of records without their own, and the negative-answer TTL (default 60).
    #[arg(long = "default-ttl", value_name = "SECONDS")]
    default_ttl: Option<u32>,
    /// Name server announced at each zone apex (repeatable), without an address; default
    /// the file's nameservers of each zone, else ns.<zone>.
    #[arg(long = "nameserver", value_name = "NAME")]
    nameservers: Vec<String>,
    /// File that keeps the last table, served at start until a newer one arrives.
    #[arg(long = "table-file", value_name = "PATH")]
    table_file: Option<PathBuf>,
    /// UDP sockets per listen address (SO_REUSEPORT), each with its own loop; default one
    /// per core.
    #[arg(long = "udp-sockets", value_name = "N")]
    udp_sockets: Option<usize>,
    /// Pin each UDP loop to its own CPU: `on`, `auto` (pin only when the process may run on
    /// exactly as many CPUs as it has UDP sockets, i.e. a dedicated cpuset) or `off` (the
    /// default: the kernel places the loops and may move a loop next to whoever woke it;
    /// pinning halved one-client QPS in docs/benchmarks.md).
    #[arg(long = "udp-cpu-affinity", value_name = "MODE", default_value = "off")]
    udp_cpu_affinity: crate::server::Affinity,
    /// Only probe targets in these ranges (CIDR, repeatable). A range inside one denied by
    /// default (loopback in a cluster, say 127.0.0.0/8) admits it on purpose.
    #[arg(long = "checker-allow", value_name = "CIDR")]
    checker_allow: Vec<Cidr>,
    /// Never probe targets in these ranges (CIDR, repeatable), on top of the defaults:
    /// link-local, 0.0.0.0/8 and ::, and in a cluster loopback too.
    #[arg(long = "checker-deny", value_name = "CIDR")]
    checker_deny: Vec<Cidr>,
    /// In a cluster: namespace of the published table ConfigMaps and of checker Leases.
    #[arg(
        long = "table-namespace",
        env = "POD_NAMESPACE",
        default_value = "healthroute"
    )]
    table_namespace: String,
    /// In a cluster: this resolver's checker name (one per pod).
    #[arg(long = "checker-name", env = "POD_NAME", default_value = "resolver")]
    checker_name: String,
    /// The zone this resolver runs in (`topology.kubernetes.io/zone`): the zone of its
    /// checker's views, and the zone whose answers groups with `zoneAffinity` give (A1). In
    /// standalone mode also `zoneName` in healthroute.yaml.
    #[arg(
        long = "zone-name",
        alias = "checker-zone",
        env = "CHECKER_ZONE",
        value_name = "ZONE"
    )]
    zone_name: Option<String>,
    /// In a cluster: do not run health checks from this resolver.
    #[arg(long = "no-checker")]
    no_checker: bool,
    /// Where peer clusters' checkers ask this cluster (the exchange listener, X6, UDP and
    /// TCP); also `exchange.listen` in the configuration file. Off unless set.
    #[arg(long = "exchange-listen", value_name = "ADDR:PORT")]
    exchange_listen: Option<SocketAddr>,
    /// In a cluster: where the operator leader pushes each delta it publishes (P12, HTTP/1.1),
    /// so that a change need not wait for the table watch. Off unless set; needs
    /// --push-key-file.
    #[arg(long = "push-listen", value_name = "ADDR:PORT")]
    push_listen: Option<SocketAddr>,
    /// The address the leader reaches the push listener at, told on this resolver's checker
    /// Lease: HOST:PORT, or an IP address alone for the listener's port (the chart passes
    /// the pod's IP); default: --push-listen's, unless unspecified.
    #[arg(
        long = "push-advertise",
        env = "PUSH_ADVERTISE",
        value_name = "HOST[:PORT]"
    )]
    push_advertise: Option<String>,
    /// A file holding the push key, the secret the operator signs pushed deltas with (32
    /// bytes or more; whitespace around it ignored).
    #[arg(long = "push-key-file", value_name = "FILE")]
    push_key_file: Option<PathBuf>,
    /// Seconds to keep answering after a stop signal, with /readyz unready, so that traffic
    /// moves away first (default: 5 in a cluster, 0 in standalone mode).
    #[arg(long = "shutdown-drain", value_name = "SECONDS")]
    shutdown_drain: Option<f64>,
    /// Log format: text (coloured only on a terminal) or json (one object per line).
    #[arg(long = "log-format", value_name = "text|json", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

impl ServeArgs {
    fn drain(&self, default_seconds: f64) -> Duration {
        Duration::from_secs_f64(
            self.shutdown_drain
                .unwrap_or(default_seconds)
                .clamp(0.0, 3600.0),
        )
    }
}

/// A start-up error is said once, as `error: ...` on stderr, the way the simulator and the
/// flag parser say theirs, and not also as a log line: the log goes to stderr too, so the
/// two were the same words twice, and a log line would hide it from a `RUST_LOG` that
/// filters this target out. Errors while serving stay log lines.
fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Simulate(args)) => match simulate::run(&args) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
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

async fn serve(args: ServeArgs) -> Result<(), Error> {
    match args.manifests.clone() {
        Some(_) if args.push_listen.is_some() || args.push_key_file.is_some() => Err(Error::Push(
            "--push-listen and --push-key-file are for a cluster, where an operator pushes; \
             standalone mode compiles its own table"
                .into(),
        )),
        Some(dir) => serve_standalone(args, dir).await,
        None => serve_cluster(args).await,
    }
}

/// The push listener's address and key (P12), when both are set; an error when one is.
fn push_settings(
    args: &ServeArgs,
) -> Result<Option<(SocketAddr, healthroute_table::push::PushKey)>, Error> {
    let (addr, path) = match (args.push_listen, &args.push_key_file) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) if args.no_checker => {
            return Err(Error::Push(
                "--push-listen with --no-checker: the checker's Lease is where the leader \
                 learns the push address"
                    .into(),
            ));
        }
        (Some(addr), Some(path)) => (addr, path),
        (Some(_), None) => {
            return Err(Error::Push(
                "--push-listen needs --push-key-file: an unsigned push is never taken".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(Error::Push(
                "--push-key-file is set without --push-listen: nothing would listen".into(),
            ));
        }
    };
    let secret = std::fs::read(path)
        .map_err(|e| Error::Push(format!("--push-key-file {}: {e}", path.display())))?;
    let key = healthroute_table::push::PushKey::new(&secret)
        .map_err(|e| Error::Push(format!("--push-key-file {}: {e}", path.display())))?;
    Ok(Some((addr, key)))
}

/// Where the leader reaches a push listener bound at `bound`.
fn push_address(args: &ServeArgs, bound: SocketAddr) -> Result<String, Error> {
    match &args.push_advertise {
        // An IP alone (v6 too): the listener's port, written as a socket address.
        Some(advertised) => Ok(match advertised.parse::<std::net::IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, bound.port()).to_string(),
            Err(_) => advertised.clone(),
        }),
        None if !bound.ip().is_unspecified() => Ok(bound.to_string()),
        None => Err(Error::Push(format!(
            "--push-listen {bound} is every address: pass --push-advertise HOST:PORT, the one \
             the operator reaches this pod at (the chart passes the pod's IP)"
        ))),
    }
}

/// The settings file: `--config FILE`, else in standalone mode DIR/healthroute.yaml (which
/// may be missing), else none. Returns it with its path, for messages.
fn file_config(args: &ServeArgs, dir: Option<&Path>) -> Result<(FileConfig, PathBuf), Error> {
    match (&args.config, dir) {
        (Some(path), _) => Ok((FileConfig::read(path)?, path.clone())),
        (None, Some(dir)) => Ok((FileConfig::load(dir)?, dir.join(CONFIG_FILE))),
        (None, None) => Ok((FileConfig::default(), PathBuf::from(CONFIG_FILE))),
    }
}

fn serve_config(
    args: &ServeArgs,
    (file, file_path): &(FileConfig, PathBuf),
    zones: &healthroute_compiler::ServedZones,
    default_ttl: u32,
) -> Result<ServeConfig, Error> {
    let zones = zone_configs(zones, &args.nameservers, default_ttl, file, file_path)?;
    let listen = if !args.listen.is_empty() {
        args.listen.clone()
    } else {
        vec![file.listen.unwrap_or_else(|| ([0, 0, 0, 0], 53).into())]
    };
    Ok(ServeConfig {
        listen,
        admin_listen: args.admin_listen.or(file.admin_listen),
        zones,
        upstream: args.upstream.or(file.upstream),
        upstream_timeout: Duration::from_secs(args.upstream_timeout.max(1)),
        table_file: args.table_file.clone(),
        checker: None,
        exchange: None,
        autoshift: None,
        push: None,
        // Each UDP socket has its own receive loop (the fast path answers inline), so one
        // socket per core uses every core (bench/dnsperf.sh: on 2 cores, 2 sockets gave 187k
        // QPS where 1 gave 155k).
        udp_sockets: args
            .udp_sockets
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        udp_cpu_affinity: args.udp_cpu_affinity,
        local_zone: args
            .zone_name
            .clone()
            .or_else(|| file.zone_name.clone())
            .filter(|z| !z.is_empty()),
    })
}

fn checker_policy(args: &ServeArgs, base: TargetPolicy) -> TargetPolicy {
    let mut policy = base;
    policy.allow = args.checker_allow.clone();
    policy.deny.extend(args.checker_deny.iter().copied());
    for (allowed, denied) in policy.admissions() {
        tracing::warn!(%allowed, %denied, "the checker may probe {allowed}, inside {denied}, which is denied by default (--checker-allow)");
    }
    policy
}

async fn serve_standalone(args: ServeArgs, dir: PathBuf) -> Result<(), Error> {
    let file = file_config(&args, Some(&dir))?;
    let (zones, default_ttl) = zones_and_ttl(&args.zones, args.default_ttl, &file.0)?;
    let mut config = serve_config(&args, &file, &zones, default_ttl)?;

    // The in-process checker probes every HealthCheck of the directory (H1: on its own
    // schedule); its views reach the compiler through the event channel.
    let (events_tx, events_rx) = mpsc::channel(4096);
    let policy = checker_policy(&args, TargetPolicy::standalone_default());
    // Metric checks (H14) run here too: in standalone mode this process is the whole cluster.
    let (peers, exchange) =
        healthroute_resolver::config::peers_and_exchange(&file.0, &file.1, args.exchange_listen)?;
    config.exchange = exchange;
    // Key files are read again while running (X1): a changed Secret needs no restart.
    let peers = std::sync::Arc::new(peers);
    let _key_files = peer::follow_key_files(peers.clone(), peer::KEY_FILE_INTERVAL);
    let mut checker = Checker::new("standalone", config.local_zone.clone(), policy, events_tx)
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
    running
        .drain(args.drain(0.0), lifecycle::shutdown_signal())
        .await;
    tracing::info!("shutting down: finishing in-flight queries");
    let _ = stop_tx.send(true);
    let _ = compile_loop.await;
    running.shutdown().await;
    Ok(())
}

async fn serve_cluster(args: ServeArgs) -> Result<(), Error> {
    let file = file_config(&args, None)?;
    let (zones, default_ttl) = zones_and_ttl(&args.zones, args.default_ttl, &file.0)?;
    let mut config = serve_config(&args, &file, &zones, default_ttl)?;
    let (peers, exchange) =
        healthroute_resolver::config::peers_and_exchange(&file.0, &file.1, args.exchange_listen)?;
    config.exchange = exchange;
    let peers = std::sync::Arc::new(peers);
    // The push listener first: a flag error is told before any connection is tried.
    let mut tasks = Vec::new();
    let mut pushes = None;
    let mut advertised = None;
    if let Some((addr, key)) = push_settings(&args)? {
        let metrics =
            std::sync::Arc::new(healthroute_resolver::sources::push::PushMetrics::default());
        // P12: the key file is followed while running, the previous key accepted a while.
        let keys: std::sync::Arc<healthroute_table::push::PushKeys> = key.into();
        let (bound, deltas, task) =
            healthroute_resolver::sources::push::listen(addr, keys.clone(), metrics.clone())
                .await
                .map_err(|source| Error::Listen {
                    what: "push",
                    addr,
                    source,
                })?;
        let address = push_address(&args, bound)?;
        tracing::info!(addr = %bound, advertised = %address, "taking the leader's pushed deltas (P12)");
        tasks.push(task);
        if let Some(path) = args.push_key_file.clone() {
            tasks.push(tokio::spawn(
                healthroute_admin::key_file::follow(
                    path,
                    healthroute_table::push::KEY_FILE_CHECK,
                    "push key",
                    move |read| keys.take_file(read),
                )
                .instrument(tracing::info_span!("push_key_file")),
            ));
        }
        config.push = Some(healthroute_resolver::sources::push::PushCollector(
            metrics.clone(),
        ));
        pushes = Some((deltas, metrics));
        advertised = Some(address);
    }
    let client = kube::Client::try_default()
        .await
        .map_err(Error::NoClientForResolver)?;
    let (table_tx, table_rx) = watch::channel(None);
    tasks.push(tokio::spawn(
        healthroute_resolver::sources::cluster::follow_table(
            client.clone(),
            args.table_namespace.clone(),
            table_tx,
            pushes,
        )
        .instrument(info_span!("table_follower", namespace = %args.table_namespace)),
    ));
    let mut checker = None;
    if !args.no_checker {
        let (events_tx, events_rx) = mpsc::channel(4096);
        let policy = checker_policy(&args, TargetPolicy::cluster_default());
        let mut c = Checker::new(
            args.checker_name.clone(),
            args.zone_name.clone().or_else(|| file.0.zone_name.clone()),
            policy,
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
    let (stop_checker, checker_stop) = tokio::sync::oneshot::channel::<()>();
    let mut checker_task = None;
    if let Some((c, events_rx)) = checker {
        // The heartbeat carries the generation being served (P4).
        let shared = running.shared.clone();
        let served = move || shared.table.load().as_ref().map(|t| t.generation);
        let span = info_span!("checker", checker = %args.checker_name);
        checker_task = Some(tokio::spawn(
            healthroute_resolver::sources::cluster::run_checker(
                client,
                args.table_namespace.clone(),
                c,
                events_rx,
                served,
                advertised,
                async {
                    let _ = checker_stop.await;
                },
            )
            .instrument(span),
        ));
    }
    lifecycle::shutdown_signal().await;
    running
        .drain(args.drain(5.0), lifecycle::shutdown_signal())
        .await;
    // P9: after the drain the checker stops and deletes its Lease (bounded inside).
    let _ = stop_checker.send(());
    if let Some(task) = checker_task {
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
