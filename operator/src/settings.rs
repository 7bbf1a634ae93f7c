//! The operator's settings, resolved once (k8gb's `depresolver` shape): the flags ([`Args`])
//! become one validated [`Settings`] (the control loop's [`Config`], the leader election, the
//! admin endpoint's address), or the first mistake, said as today. `main` only wires what it
//! says.
//!
//! ```text
//!   flags ──▶ Settings::resolve ──▶ Settings { config: controller::Config, election, admin }
//!              (zones checked, the push key read: told by its file, never its content, X10)
//! ```

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use clap::Parser;
use healthroute_admin::lifecycle::LogFormat;
use healthroute_checker::{Cidr, TargetPolicy};
use healthroute_compiler::{DEFAULT_TTL, ServedZones};
use healthroute_table::push::PushKey;

use crate::controller::{self, Config};
use crate::error::Error;
use crate::leader::Election;

/// The flags of `healthroute-operator`.
#[derive(Parser, Debug)]
#[command(
    name = "healthroute-operator",
    version,
    about = "Health-checked DNS routing: the control plane",
    subcommand_negates_reqs = true
)]
pub struct Args {
    /// `uninstall`: what the chart's pre-delete hook runs (SEMANTICS P13); none: the operator.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// A zone the resolvers serve (repeatable); groups outside every zone are rejected.
    #[arg(long = "zone", value_name = "ZONE", required = true)]
    pub zones: Vec<String>,
    /// TTL of records without their own.
    #[arg(long = "default-ttl", value_name = "SECONDS", default_value_t = DEFAULT_TTL)]
    pub default_ttl: u32,
    /// Namespace of the table ConfigMaps, the leader Lease, the checker Leases and the
    /// resolvers' registrations.
    #[arg(long, env = "POD_NAMESPACE", default_value = "healthroute")]
    pub namespace: String,
    /// Compile only the RecordGroups, HealthChecks, ZonalShifts, Services and EndpointSlices
    /// of this namespace (default: every namespace). Two installations in two namespaces of
    /// one cluster then stay apart, as two clusters would.
    #[arg(long = "watch-namespace", value_name = "NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// This replica's identity in the leader election.
    #[arg(long, env = "POD_NAME", default_value = "healthroute-operator")]
    pub identity: String,
    /// The fewest shards of the published table (each one ConfigMap); more are used when the
    /// table needs them, so that no shard nears a ConfigMap's 1 MiB.
    #[arg(long = "table-shards", default_value_t = 8)]
    pub table_shards: u32,
    /// A file holding the push key (32 bytes or more; whitespace around it ignored): the
    /// leader then also pushes each delta it publishes to every resolver that advertises a
    /// push address on its registration Lease (P12). Nothing is pushed without it.
    #[arg(long = "push-key-file", value_name = "FILE")]
    pub push_key_file: Option<std::path::PathBuf>,
    /// Status patches in flight at once (the status writer; the table never waits for it).
    #[arg(long = "status-concurrency", default_value_t = 8)]
    pub status_concurrency: usize,
    /// Writes a second on average of the one writer (statuses, Peer checks, mirrors): its
    /// share of the API server; 0 for no limit. The table's writes are not paced.
    #[arg(long = "status-qps", value_name = "QPS", default_value_t = crate::writes::DEFAULT_QPS)]
    pub status_qps: f64,
    /// Writes that may go at once after a quiet spell, above the pace.
    #[arg(long = "status-burst", value_name = "N", default_value_t = crate::writes::DEFAULT_BURST)]
    pub status_burst: u32,
    /// Seconds one status patch may take before it counts as failed and is retried.
    #[arg(long = "status-timeout", value_name = "SECONDS", default_value_t = 10)]
    pub status_timeout: u64,
    /// Seconds between two re-checks of every status against the objects as watched: a
    /// status another writer changed is written again within this.
    #[arg(
        long = "status-recheck-interval",
        value_name = "SECONDS",
        default_value_t = controller::STATUS_RECHECK.as_secs()
    )]
    pub status_recheck_interval: u64,
    /// Leader lease duration in seconds; a new leader takes over within this.
    #[arg(long = "lease-duration", default_value_t = 15)]
    pub lease_duration: u64,
    /// Milliseconds to gather a burst of changes into one compile and one write.
    #[arg(long = "debounce-ms", default_value_t = 20)]
    pub debounce_ms: u64,
    /// Address of /metrics, /livez, /readyz.
    #[arg(
        long = "admin-listen",
        value_name = "ADDR:PORT",
        default_value = "0.0.0.0:9090"
    )]
    pub admin_listen: SocketAddr,
    /// Metric checks (H15): only query Prometheus servers in these ranges (CIDR, repeatable).
    /// A range inside a default-denied one (loopback, link-local) admits it on purpose.
    #[arg(long = "metric-allow", value_name = "CIDR")]
    pub metric_allow: Vec<Cidr>,
    /// Metric checks: never query Prometheus servers in these ranges (CIDR, repeatable), on
    /// top of the defaults (link-local, 0.0.0.0/8, ::, loopback).
    #[arg(long = "metric-deny", value_name = "CIDR")]
    pub metric_deny: Vec<Cidr>,
    /// Log format: text (coloured only on a terminal) or json (one object per line).
    #[arg(long = "log-format", value_name = "text|json", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The same as `--log-format json` (kept for charts written before 0.2).
    #[arg(long = "log-json", hide = true)]
    pub log_json: bool,
    /// The ServiceAccount (in --namespace) that owns the table's ConfigMaps and the leader
    /// Lease, so that uninstalling removes them with it (the chart: the pod's own).
    #[arg(
        long = "owner-service-account",
        env = "HEALTHROUTE_OWNER_SERVICE_ACCOUNT",
        value_name = "NAME"
    )]
    pub owner_service_account: Option<String>,
}

#[derive(clap::Subcommand, Debug)]
pub enum Command {
    /// Removes what healthroute made at runtime (the operator stopped first) and marks every
    /// RecordGroup not served: the chart's pre-delete hook.
    Uninstall(crate::uninstall::Settings),
}

impl Args {
    /// The log format asked for, `--log-json` included: logging starts before the rest is
    /// resolved, so that a mistake is logged in it.
    pub fn log_format(&self) -> LogFormat {
        if self.log_json {
            LogFormat::Json
        } else {
            self.log_format
        }
    }
}

/// Everything the operator needs to run, checked.
pub struct Settings {
    /// The control loop's.
    pub config: Config,
    /// The leader election's (P3).
    pub election: Election,
    /// Where /metrics, /livez and /readyz answer.
    pub admin_listen: SocketAddr,
}

impl Settings {
    /// Resolves the flags (not the `uninstall` subcommand's) into settings, or says the first
    /// mistake.
    pub fn resolve(args: &Args) -> Result<Settings, Error> {
        let zones = ServedZones::new(&args.zones)?;
        let push_key = args.push_key_file.as_deref().map(push_key).transpose()?;
        // P3: a shorter lease leaves no room to renew before it expires.
        if args.lease_duration < 3 {
            return Err(Error::LeaseTooShort);
        }
        let election = Election {
            lease: crate::LEADER_LEASE.into(),
            namespace: args.namespace.clone(),
            identity: args.identity.clone(),
            duration: args.lease_duration,
            grace: Election::grace_of(args.lease_duration),
        };
        let mut config = Config {
            shards: args.table_shards,
            default_ttl: args.default_ttl,
            debounce: Duration::from_millis(args.debounce_ms),
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
        config.status.concurrency = args.status_concurrency.max(1);
        if !(args.status_qps.is_finite() && args.status_qps >= 0.0) {
            return Err(Error::BadStatusPace(args.status_qps.to_string()));
        }
        config.status.qps = args.status_qps;
        config.status.burst = args.status_burst.max(1);
        config.status.timeout = Duration::from_secs(args.status_timeout.max(1));
        config.status.identity = args.identity.clone();
        Ok(Settings {
            config,
            election,
            admin_listen: args.admin_listen,
        })
    }
}

/// The push key in `path` (P12). A mistake is told by the file's name and the key's length,
/// never its content (SEM-X10).
fn push_key(path: &Path) -> Result<PushKey, Error> {
    let failed = |reason: String| Error::PushKey {
        path: path.display().to_string(),
        reason,
    };
    let secret = std::fs::read(path).map_err(|e| failed(e.to_string()))?;
    PushKey::new(&secret).map_err(|e| failed(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(flags: &[&str]) -> Args {
        Args::try_parse_from(std::iter::once("healthroute-operator").chain(flags.iter().copied()))
            .expect("flags parse")
    }

    fn refused(flags: &[&str]) -> String {
        match Settings::resolve(&args(flags)) {
            Ok(_) => panic!("{flags:?} was taken"),
            Err(e) => e.to_string(),
        }
    }

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
        let e = refused(&[
            "--zone",
            "example.com",
            "--push-key-file",
            short.to_str().expect("utf-8"),
        ]);
        assert!(e.contains("short.key") && !e.contains(&SECRET[..20]), "{e}");
        let e = push_key(&dir.join("missing.key"))
            .expect_err("missing")
            .to_string();
        assert!(e.contains("missing.key"), "{e}");
        let good = dir.join("good.key");
        std::fs::write(&good, format!("{SECRET}\n")).expect("write");
        let key = push_key(&good).expect("a key of 36 bytes");
        assert!(!format!("{key:?}").contains(SECRET));
        let settings = Settings::resolve(&args(&[
            "--zone",
            "example.com",
            "--push-key-file",
            good.to_str().expect("utf-8"),
        ]))
        .expect("taken");
        assert!(settings.config.push_key.is_some());
        assert_eq!(
            settings.config.push_key_file.as_deref(),
            Some(good.as_path())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    // SEM-P3: the flags become the control loop's and the election's settings; a lease too
    // short to renew in time, and a zone that is not a name, are refused.
    #[test]
    fn flags_become_one_validated_settings_value() {
        let settings = Settings::resolve(&args(&[
            "--zone",
            "example.com",
            "--namespace",
            "hr",
            "--identity",
            "op-1",
            "--lease-duration",
            "9",
            "--status-concurrency",
            "0",
            "--debounce-ms",
            "50",
            "--table-shards",
            "4",
        ]))
        .expect("taken");
        assert_eq!(settings.config.namespace, "hr");
        assert_eq!(settings.config.shards, 4);
        assert_eq!(settings.config.debounce, Duration::from_millis(50));
        assert_eq!(settings.config.status.concurrency, 1, "at least one");
        assert_eq!(settings.config.status.qps, crate::writes::DEFAULT_QPS);
        assert_eq!(settings.config.status.burst, crate::writes::DEFAULT_BURST);
        assert_eq!(settings.config.status.identity, "op-1");
        assert!(settings.config.push_key.is_none());
        assert_eq!(settings.election.lease, crate::LEADER_LEASE);
        assert_eq!(settings.election.namespace, "hr");
        assert_eq!(settings.election.duration, 9);
        assert_eq!(settings.election.grace, Election::grace_of(9));
        assert_eq!(settings.admin_listen, "0.0.0.0:9090".parse().expect("addr"));

        let e = refused(&["--zone", "example.com", "--lease-duration", "2"]);
        assert_eq!(e, Error::LeaseTooShort.to_string());
        let e = refused(&["--zone", "example.com", "--status-qps=-1"]);
        assert!(e.contains("--status-qps"), "{e}");
        let paced = Settings::resolve(&args(&[
            "--zone",
            "example.com",
            "--status-qps",
            "0",
            "--status-burst",
            "0",
        ]))
        .expect("taken");
        assert_eq!(paced.config.status.qps, 0.0, "unpaced");
        assert_eq!(paced.config.status.burst, 1, "at least one");
        let e = refused(&["--zone", "not a zone!"]);
        assert!(!e.is_empty());
        assert_eq!(
            args(&["--zone", "example.com", "--log-json"]).log_format(),
            LogFormat::Json
        );
    }
}
