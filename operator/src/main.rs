//! `healthroute-operator`: watches RecordGroups, HealthChecks, ZonalShifts and endpoints,
//! compiles the routing table, and (as the elected leader) publishes it and every status.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use healthroute_admin::endpoint::{self, Admin};
use healthroute_admin::lifecycle::{self, LogFormat};
use healthroute_admin::metrics::Registry;
use healthroute_checker::{Cidr, TargetPolicy};
use healthroute_compiler::{DEFAULT_TTL, ServedZones};
use healthroute_operator::controller::{self, Config, OperatorMetrics, Readiness};
use healthroute_operator::error::Error;
use healthroute_operator::leader;
use healthroute_operator::status::WriterConfig;
use tokio::sync::watch;
use tracing::Instrument;

#[derive(Parser)]
#[command(
    name = "healthroute-operator",
    version,
    about = "Health-checked DNS routing: the control plane",
    subcommand_negates_reqs = true
)]
struct Args {
    /// `uninstall`: what the chart's pre-delete hook runs (SEMANTICS P13); none: the operator.
    #[command(subcommand)]
    command: Option<Command>,
    /// A zone the resolvers serve (repeatable); groups outside every zone are rejected.
    #[arg(long = "zone", value_name = "ZONE", required = true)]
    zones: Vec<String>,
    /// TTL of records without their own.
    #[arg(long = "default-ttl", value_name = "SECONDS", default_value_t = DEFAULT_TTL)]
    default_ttl: u32,
    /// Namespace of the table ConfigMaps, the leader Lease and the checker Leases.
    #[arg(long, env = "POD_NAMESPACE", default_value = "healthroute")]
    namespace: String,
    /// Compile only the RecordGroups, HealthChecks, ZonalShifts, Services and EndpointSlices
    /// of this namespace (default: every namespace). Two installations in two namespaces of
    /// one cluster then stay apart, as two clusters would.
    #[arg(long = "watch-namespace", value_name = "NAMESPACE")]
    watch_namespace: Option<String>,
    /// This replica's identity in the leader election.
    #[arg(long, env = "POD_NAME", default_value = "healthroute-operator")]
    identity: String,
    /// The fewest shards of the published table (each one ConfigMap); more are used when the
    /// table needs them, so that no shard nears a ConfigMap's 1 MiB.
    #[arg(long = "table-shards", default_value_t = 8)]
    table_shards: u32,
    /// A file holding the push key (32 bytes or more; whitespace around it ignored): the
    /// leader then also pushes each delta it publishes to every resolver that advertises a
    /// push address on its checker Lease (P12). Nothing is pushed without it.
    #[arg(long = "push-key-file", value_name = "FILE")]
    push_key_file: Option<std::path::PathBuf>,
    /// Status patches in flight at once (the status writer; the table never waits for it).
    #[arg(long = "status-concurrency", default_value_t = 8)]
    status_concurrency: usize,
    /// Seconds one status patch may take before it counts as failed and is retried.
    #[arg(long = "status-timeout", value_name = "SECONDS", default_value_t = 10)]
    status_timeout: u64,
    /// Seconds between two re-checks of every status against the objects as watched: a
    /// status another writer changed is written again within this.
    #[arg(
        long = "status-recheck-interval",
        value_name = "SECONDS",
        default_value_t = controller::STATUS_RECHECK.as_secs()
    )]
    status_recheck_interval: u64,
    /// Leader lease duration in seconds; a new leader takes over within this.
    #[arg(long = "lease-duration", default_value_t = 15)]
    lease_duration: u64,
    /// Milliseconds to gather a burst of changes into one compile and one write.
    #[arg(long = "debounce-ms", default_value_t = 20)]
    debounce_ms: u64,
    /// Address of /metrics, /livez, /readyz.
    #[arg(
        long = "admin-listen",
        value_name = "ADDR:PORT",
        default_value = "0.0.0.0:9090"
    )]
    admin_listen: SocketAddr,
    /// Metric checks (H15): only query Prometheus servers in these ranges (CIDR, repeatable).
    /// A range inside a default-denied one (loopback, link-local) admits it on purpose.
    #[arg(long = "metric-allow", value_name = "CIDR")]
    metric_allow: Vec<Cidr>,
    /// Metric checks: never query Prometheus servers in these ranges (CIDR, repeatable), on
    /// top of the defaults (link-local, 0.0.0.0/8, ::, loopback).
    #[arg(long = "metric-deny", value_name = "CIDR")]
    metric_deny: Vec<Cidr>,
    /// Log format: text (coloured only on a terminal) or json (one object per line).
    #[arg(long = "log-format", value_name = "text|json", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// The same as `--log-format json` (kept for charts written before 0.2).
    #[arg(long = "log-json", hide = true)]
    log_json: bool,
    /// The ServiceAccount (in --namespace) that owns the table's ConfigMaps and the leader
    /// Lease, so that uninstalling removes them with it (the chart: the pod's own).
    #[arg(
        long = "owner-service-account",
        env = "HEALTHROUTE_OWNER_SERVICE_ACCOUNT",
        value_name = "NAME"
    )]
    owner_service_account: Option<String>,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Removes what healthroute made at runtime (the operator stopped first) and marks every
    /// RecordGroup not served: the chart's pre-delete hook.
    Uninstall(healthroute_operator::uninstall::Settings),
}

/// A start-up error is said once, as `error: ...` on stderr, as the resolver says its own:
/// the log goes to stderr as well, and a log line could be filtered out by `RUST_LOG`.
fn main() -> ExitCode {
    let args = Args::parse();
    let log_format = if args.log_json {
        LogFormat::Json
    } else {
        args.log_format
    };
    lifecycle::init_logging("info", log_format);
    let runtime = match lifecycle::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Every 10 s, what a burst freed (4 MiB or more) goes back to the system: the first lists,
    // a first start's status writes, a takeover, a standby dropping its outputs.
    if let Err(e) =
        healthroute_admin::memory::spawn_scavenger(std::time::Duration::from_secs(10), 4 << 20)
    {
        tracing::warn!(error = %e, "no scavenger thread: freed memory stays with the process");
    }
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// The push key in `path` (P12). A mistake is told by the file's name and the key's length,
/// never its content (SEM-X10).
fn push_key(path: &std::path::Path) -> Result<healthroute_table::push::PushKey, Error> {
    let failed = |reason: String| Error::PushKey {
        path: path.display().to_string(),
        reason,
    };
    let secret = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
    healthroute_table::push::PushKey::new(&secret).map_err(|e| failed(e.to_string()))
}

async fn run(args: Args) -> Result<(), Error> {
    if let Some(Command::Uninstall(settings)) = args.command {
        return healthroute_operator::uninstall::main(settings).await;
    }
    let zones = ServedZones::new(&args.zones)?;
    let push_key = match &args.push_key_file {
        Some(path) => {
            let key = push_key(path)?;
            tracing::info!("pushing each delta to the resolvers that take pushes (P12)");
            Some(key)
        }
        None => None,
    };
    let kube_config = kube::Config::infer().await.map_err(Error::NoClientConfig)?;
    let client = kube::Client::try_from(kube_config.clone()).map_err(Error::NoClient)?;
    let metrics = OperatorMetrics::default();
    let readiness = Arc::new(Readiness::default());
    let listener = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .map_err(|source| Error::Admin {
            addr: args.admin_listen,
            source,
        })?;
    let mut registry = Registry::default();
    metrics.register(&mut registry);
    let admin = Admin {
        registry,
        readiness: readiness.clone(),
    };
    tokio::spawn(
        endpoint::serve(listener, Arc::new(admin))
            .instrument(tracing::info_span!("admin", addr = %args.admin_listen)),
    );

    // P3: one writer. Every replica watches; only the lease holder compiles and writes.
    if args.lease_duration < 3 {
        return Err(Error::LeaseTooShort);
    }
    let election = leader::Election {
        lease: healthroute_operator::LEADER_LEASE.into(),
        namespace: args.namespace.clone(),
        identity: args.identity.clone(),
        duration: args.lease_duration,
        grace: leader::Election::grace_of(args.lease_duration),
    };
    let (leader_tx, leader) = watch::channel(false);
    let (stop_tx, stop_rx) = watch::channel(false);
    let lease_ended = leader::spawn(kube_config, election, leader_tx, stop_rx.clone())?;

    let config = Config {
        shards: args.table_shards,
        default_ttl: args.default_ttl,
        debounce: Duration::from_millis(args.debounce_ms),
        status: WriterConfig {
            concurrency: args.status_concurrency.max(1),
            timeout: Duration::from_secs(args.status_timeout.max(1)),
            identity: args.identity.clone(),
        },
        status_recheck: Duration::from_secs(args.status_recheck_interval.max(1)),
        metric_policy: {
            let mut policy = TargetPolicy::cluster_default();
            policy.allow = args.metric_allow.clone();
            policy.deny.extend(args.metric_deny.iter().copied());
            policy
        },
        watch_namespace: args.watch_namespace.clone(),
        owner_service_account: args.owner_service_account.clone(),
        push_key,
        push_key_file: args.push_key_file.clone(),
        ..Config::new(args.namespace.clone(), zones)
    };
    let control = tokio::spawn(
        controller::run(client, config, leader, metrics, readiness, stop_rx)
            .instrument(tracing::info_span!("control_loop")),
    );
    lifecycle::shutdown_signal().await;
    tracing::info!("shutting down");
    let _ = stop_tx.send(true);
    let _ = control.await;
    // The election releases the lease on the way out, for a fast handover.
    let _ = tokio::time::timeout(Duration::from_secs(6), lease_ended).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-X10: a push key that cannot be used is told by the file and its length; neither
    // the key nor its Debug form shows what it holds.
    #[test]
    fn push_key_mistakes_hold_no_secret() {
        const SECRET: &str = "healthroute-test-secret-do-not-print";
        let dir = std::env::temp_dir().join(format!("hr-operator-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let short = dir.join("short.key");
        std::fs::write(&short, &SECRET[..20]).expect("write");
        let e = push_key(&short).expect_err("short").to_string();
        assert!(e.contains("short.key") && e.contains("20 bytes"), "{e}");
        assert!(!e.contains(&SECRET[..20]), "{e}");
        let e = push_key(&dir.join("missing.key"))
            .expect_err("missing")
            .to_string();
        assert!(e.contains("missing.key"), "{e}");
        let good = dir.join("good.key");
        std::fs::write(&good, format!("{SECRET}\n")).expect("write");
        let key = push_key(&good).expect("a key of 36 bytes");
        assert!(!format!("{key:?}").contains(SECRET));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
