//! The resolver's settings, resolved once (k8gb's `depresolver` shape): the flags
//! ([`ServeArgs`]) and the settings file ([`crate::config`]: `--config FILE`, or the manifest
//! directory's `healthroute.yaml` in standalone mode) become one validated [`Settings`], or
//! the first mistake, said as today. `main` only wires what it says.
//!
//! ```text
//!   flags ─┐
//!          ├─▶ Settings::resolve ─▶ Settings { mode: Standalone | Cluster,
//!   file ──┘       (flags win)                 serving: serve, zones, peers, checker policy, drain }
//! ```
//!
//! What it checks: the served zones and every zone's apex records, the peers and the exchange
//! listener (their key files read here), and the push listener's flags (P12): a listener
//! needs a key, a key needs a listener, a listener on every address needs an address to
//! advertise, and pushes are for a cluster. A resolver without a checker takes pushes too:
//! it registers on its own Lease ([`healthroute_table::contract`]). No message quotes a
//! secret (SEM-X10): a key is told by its file and its length.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use healthroute_admin::lifecycle::LogFormat;
use healthroute_checker::peer::Peers;
use healthroute_checker::{Cidr, TargetPolicy};
use healthroute_compiler::ServedZones;
use healthroute_compiler::manifests::CONFIG_FILE;
use healthroute_table::push::PushKey;

use crate::config::{FileConfig, peers_and_exchange, zone_configs, zones_and_ttl};
use crate::error::Error;
use crate::server::{Affinity, ServeConfig};

/// The flags of `healthroute-resolver` when it serves (no subcommand).
#[derive(Args, Clone, Debug)]
pub struct ServeArgs {
    /// Standalone mode: serve the manifests in DIR (RecordGroups, HealthChecks, ZonalShifts,
    /// ZonalAutoshifts, EndpointSlices, Nodes), reloaded when a file changes. DIR/healthroute.yaml may hold the
    /// settings below (flags win).
    #[arg(long, value_name = "DIR")]
    pub manifests: Option<PathBuf>,
    /// Read the settings from FILE (healthroute.yaml's form: zones with their nameservers,
    /// listen, upstream...), in a cluster too; in standalone mode instead of
    /// DIR/healthroute.yaml. Flags win.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to answer DNS on, UDP and TCP (repeatable). Default 0.0.0.0:53.
    #[arg(long = "listen", value_name = "ADDR:PORT")]
    pub listen: Vec<SocketAddr>,
    /// A zone this resolver is authoritative for (repeatable).
    #[arg(long = "zone", value_name = "ZONE")]
    pub zones: Vec<String>,
    /// Where queries outside the served zones go; without it they get REFUSED.
    #[arg(long, value_name = "ADDR:PORT")]
    pub upstream: Option<SocketAddr>,
    /// Seconds to wait for the upstream before answering SERVFAIL.
    #[arg(long = "upstream-timeout", value_name = "SECONDS", default_value_t = 2)]
    pub upstream_timeout: u64,
    /// Address of the admin endpoint: /metrics, /livez, /readyz.
    #[arg(long = "admin-listen", value_name = "ADDR:PORT")]
    pub admin_listen: Option<SocketAddr>,
    /// TTL of records without their own, and the negative-answer TTL (default 60).
    #[arg(long = "default-ttl", value_name = "SECONDS")]
    pub default_ttl: Option<u32>,
    /// Name server announced at each zone apex (repeatable), without an address; default
    /// the file's nameservers of each zone, else ns.<zone>.
    #[arg(long = "nameserver", value_name = "NAME")]
    pub nameservers: Vec<String>,
    /// File that keeps the last table, served at start until a newer one arrives.
    #[arg(long = "table-file", value_name = "PATH")]
    pub table_file: Option<PathBuf>,
    /// UDP sockets per listen address (SO_REUSEPORT), each with its own loop; default one
    /// per core.
    #[arg(long = "udp-sockets", value_name = "N")]
    pub udp_sockets: Option<usize>,
    /// Pin each UDP loop to its own CPU: `on`, `auto` (pin only when the process may run on
    /// exactly as many CPUs as it has UDP sockets, i.e. a dedicated cpuset) or `off` (the
    /// default: the kernel places the loops and may move a loop next to whoever woke it;
    /// pinning halved one-client QPS in docs/benchmarks.md).
    #[arg(long = "udp-cpu-affinity", value_name = "MODE", default_value = "off")]
    pub udp_cpu_affinity: Affinity,
    /// Only probe targets in these ranges (CIDR, repeatable). A range inside one denied by
    /// default (loopback in a cluster, say 127.0.0.0/8) admits it on purpose.
    #[arg(long = "checker-allow", value_name = "CIDR")]
    pub checker_allow: Vec<Cidr>,
    /// Never probe targets in these ranges (CIDR, repeatable), on top of the defaults:
    /// link-local, 0.0.0.0/8 and ::, and in a cluster loopback too.
    #[arg(long = "checker-deny", value_name = "CIDR")]
    pub checker_deny: Vec<Cidr>,
    /// In a cluster: namespace of the published table ConfigMaps, of this resolver's
    /// registration Lease and of its checker's Lease.
    #[arg(
        long = "table-namespace",
        env = "POD_NAMESPACE",
        default_value = "healthroute"
    )]
    pub table_namespace: String,
    /// In a cluster: this resolver's name (one per pod): its registration's and its checker's.
    #[arg(long = "checker-name", env = "POD_NAME", default_value = "resolver")]
    pub checker_name: String,
    /// The zone this resolver runs in (`topology.kubernetes.io/zone`): the zone of its
    /// checker's views, and the zone whose answers groups with `zoneAffinity` give (A1). In
    /// standalone mode also `zoneName` in healthroute.yaml.
    #[arg(
        long = "zone-name",
        alias = "checker-zone",
        env = "CHECKER_ZONE",
        value_name = "ZONE"
    )]
    pub zone_name: Option<String>,
    /// In a cluster: do not run health checks from this resolver.
    #[arg(long = "no-checker")]
    pub no_checker: bool,
    /// Where peer clusters' checkers ask this cluster (the exchange listener, X6, UDP and
    /// TCP); also `exchange.listen` in the configuration file. Off unless set.
    #[arg(long = "exchange-listen", value_name = "ADDR:PORT")]
    pub exchange_listen: Option<SocketAddr>,
    /// In a cluster: where the operator leader pushes each delta it publishes (P12, HTTP/1.1),
    /// so that a change need not wait for the table watch. Off unless set; needs
    /// --push-key-file.
    #[arg(long = "push-listen", value_name = "ADDR:PORT")]
    pub push_listen: Option<SocketAddr>,
    /// The address the leader reaches the push listener at, told on this resolver's
    /// registration Lease: HOST:PORT, or an IP address alone for the listener's port (the
    /// chart passes the pod's IP); default: --push-listen's, unless unspecified.
    #[arg(
        long = "push-advertise",
        env = "PUSH_ADVERTISE",
        value_name = "HOST[:PORT]"
    )]
    pub push_advertise: Option<String>,
    /// A file holding the push key, the secret the operator signs pushed deltas with (32
    /// bytes or more; whitespace around it ignored).
    #[arg(long = "push-key-file", value_name = "FILE")]
    pub push_key_file: Option<PathBuf>,
    /// Seconds to keep answering after a stop signal, with /readyz unready, so that traffic
    /// moves away first (default: 5 in a cluster, 0 in standalone mode).
    #[arg(long = "shutdown-drain", value_name = "SECONDS")]
    pub shutdown_drain: Option<f64>,
    /// Log format: text (coloured only on a terminal) or json (one object per line).
    #[arg(long = "log-format", value_name = "text|json", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Everything a serving resolver needs to know, checked.
pub struct Settings {
    pub mode: Mode,
    pub serving: Serving,
}

/// What both modes need.
pub struct Serving {
    /// What the server serves and how; its sources (checker, exchange, autoshift, push
    /// collectors) are filled in by whoever starts them, the exchange here.
    pub serve: ServeConfig,
    pub zones: ServedZones,
    pub default_ttl: u32,
    /// The peer clusters a checker asks (X1), their key files already read once.
    pub peers: Peers,
    /// What the checker may probe.
    pub checker_policy: TargetPolicy,
    /// How long to keep answering after a stop signal (P9).
    pub drain: Duration,
}

/// Where the table comes from.
pub enum Mode {
    /// A directory of manifests, compiled in this process.
    Standalone { dir: PathBuf },
    /// The cluster's published table.
    Cluster(Box<Cluster>),
}

/// In a cluster.
pub struct Cluster {
    /// Namespace of the table's ConfigMaps and of this resolver's Leases.
    pub namespace: String,
    /// This resolver's name: its registration's and its checker's.
    pub name: String,
    /// Whether a checker runs here.
    pub checker: bool,
    /// The zone of the checker's views.
    pub checker_zone: Option<String>,
    /// The push listener (P12), when there is one.
    pub push: Option<Push>,
}

/// The push listener's settings (P12).
pub struct Push {
    pub listen: SocketAddr,
    /// The key as read at start; the file is followed while running.
    pub key: PushKey,
    pub key_file: PathBuf,
    advertise: Option<String>,
}

impl Push {
    /// Where the leader reaches the listener once bound at `bound` (its port, when the
    /// listener's was 0): `--push-advertise`, with the listener's port for an IP alone, else
    /// the listener's own address (never unspecified: [`Settings::resolve`] refuses that).
    pub fn address(&self, bound: SocketAddr) -> String {
        match &self.advertise {
            // An IP alone (v6 too): the listener's port, written as a socket address.
            Some(advertised) => match advertised.parse::<std::net::IpAddr>() {
                Ok(ip) => SocketAddr::new(ip, bound.port()).to_string(),
                Err(_) => advertised.clone(),
            },
            None => bound.to_string(),
        }
    }
}

impl Settings {
    /// Resolves the flags and the settings file into settings, or says the first mistake.
    pub fn resolve(args: &ServeArgs) -> Result<Settings, Error> {
        if args.manifests.is_some() && (args.push_listen.is_some() || args.push_key_file.is_some())
        {
            return Err(Error::Push(
                "--push-listen and --push-key-file are for a cluster, where an operator pushes; \
                 standalone mode compiles its own table"
                    .into(),
            ));
        }
        let (file, file_path) = file_config(args)?;
        let (zones, default_ttl) = zones_and_ttl(&args.zones, args.default_ttl, &file)?;
        let mut serve = serve_config(args, &file, &file_path, &zones, default_ttl)?;
        let (peers, exchange) = peers_and_exchange(&file, &file_path, args.exchange_listen)?;
        serve.exchange = exchange;
        let (mode, base, drain) = match &args.manifests {
            Some(dir) => (
                Mode::Standalone { dir: dir.clone() },
                TargetPolicy::standalone_default(),
                0.0,
            ),
            None => (
                Mode::Cluster(Box::new(Cluster {
                    namespace: args.table_namespace.clone(),
                    name: args.checker_name.clone(),
                    checker: !args.no_checker,
                    checker_zone: args.zone_name.clone().or_else(|| file.zone_name.clone()),
                    push: push(args)?,
                })),
                TargetPolicy::cluster_default(),
                5.0,
            ),
        };
        Ok(Settings {
            mode,
            serving: Serving {
                serve,
                zones,
                default_ttl,
                peers,
                checker_policy: checker_policy(args, base),
                drain: Duration::from_secs_f64(
                    args.shutdown_drain.unwrap_or(drain).clamp(0.0, 3600.0),
                ),
            },
        })
    }
}

/// The settings file: `--config FILE`, else in standalone mode DIR/healthroute.yaml (which
/// may be missing), else none. Returns it with its path, for messages.
fn file_config(args: &ServeArgs) -> Result<(FileConfig, PathBuf), Error> {
    match (&args.config, &args.manifests) {
        (Some(path), _) => Ok((FileConfig::read(path)?, path.clone())),
        (None, Some(dir)) => Ok((FileConfig::load(dir)?, dir.join(CONFIG_FILE))),
        (None, None) => Ok((FileConfig::default(), PathBuf::from(CONFIG_FILE))),
    }
}

fn serve_config(
    args: &ServeArgs,
    file: &FileConfig,
    file_path: &Path,
    zones: &ServedZones,
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
        settings_file: file_path.exists().then(|| file_path.to_owned()),
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

/// The push listener's settings (P12), when both its flags are set; an error when one is,
/// when its key cannot be used, or when nothing says where the leader reaches it.
fn push(args: &ServeArgs) -> Result<Option<Push>, Error> {
    let (listen, path) = match (args.push_listen, &args.push_key_file) {
        (None, None) => return Ok(None),
        (Some(listen), Some(path)) => (listen, path),
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
    let key = PushKey::new(&secret)
        .map_err(|e| Error::Push(format!("--push-key-file {}: {e}", path.display())))?;
    if args.push_advertise.is_none() && listen.ip().is_unspecified() {
        return Err(Error::Push(format!(
            "--push-listen {listen} is every address: pass --push-advertise HOST:PORT, the one \
             the operator reaches this pod at (the chart passes the pod's IP)"
        )));
    }
    Ok(Some(Push {
        listen,
        key,
        key_file: path.clone(),
        advertise: args.push_advertise.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// A folder of its own for one test's files.
    fn folder(tag: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("hr-resolver-settings-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    fn resolve(flags: &[&str]) -> Result<Settings, Error> {
        let flags = Flags::try_parse_from(
            std::iter::once("healthroute-resolver").chain(flags.iter().copied()),
        )
        .expect("flags parse");
        Settings::resolve(&flags.serve)
    }

    fn refused(flags: &[&str]) -> String {
        match resolve(flags) {
            Ok(_) => panic!("{flags:?} was taken"),
            Err(e) => e.to_string(),
        }
    }

    const ZONE: [&str; 4] = ["--zone", "example.com", "--listen", "127.0.0.1:0"];

    fn with<'a>(more: &[&'a str]) -> Vec<&'a str> {
        [&ZONE[..], more].concat()
    }

    /// A good push key's file, and its path as a flag value.
    fn good_key(dir: &Path) -> String {
        let key = dir.join("good.key");
        std::fs::write(&key, "0123456789abcdef0123456789abcdef\n").expect("key");
        key.to_str().expect("utf-8").to_owned()
    }

    // SEM-P12: the push flags are checked together: a listener without a key, a key without a
    // listener, a listener on every address with nothing to advertise, and push flags in
    // standalone mode are each refused with a message naming the flag.
    #[test]
    fn push_flags_are_checked_together() {
        let dir = folder("push");
        let good = good_key(&dir);
        let e = refused(&with(&["--push-listen", "127.0.0.1:0"]));
        assert!(e.contains("--push-listen needs --push-key-file"), "{e}");
        let e = refused(&with(&["--push-key-file", &good]));
        assert!(e.contains("without --push-listen"), "{e}");
        let e = refused(&with(&[
            "--push-listen",
            "0.0.0.0:0",
            "--push-key-file",
            &good,
        ]));
        assert!(e.contains("--push-advertise"), "{e}");
        let manifests = dir.to_str().expect("utf-8");
        let e = refused(&with(&[
            "--manifests",
            manifests,
            "--push-listen",
            "127.0.0.1:0",
            "--push-key-file",
            &good,
        ]));
        assert!(e.contains("for a cluster"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    // SEM-P12: a resolver without a checker takes pushes: it registers on a Lease of its own,
    // so the combination is a cluster resolver with a push listener and no checker.
    #[test]
    fn no_checker_still_takes_pushes() {
        let dir = folder("no-checker");
        let good = good_key(&dir);
        let settings = resolve(&with(&[
            "--no-checker",
            "--push-listen",
            "127.0.0.1:0",
            "--push-key-file",
            &good,
        ]))
        .expect("taken");
        let Mode::Cluster(cluster) = settings.mode else {
            panic!("a cluster resolver")
        };
        assert!(!cluster.checker);
        let push = cluster.push.expect("a push listener");
        assert_eq!(push.listen, "127.0.0.1:0".parse().expect("addr"));
        assert_eq!(
            push.address("127.0.0.1:8055".parse().expect("addr")),
            "127.0.0.1:8055"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    // SEM-P12: the advertised address is the flag's, an IP alone taking the listener's port.
    #[test]
    fn the_advertised_push_address() {
        let dir = folder("advertise");
        let good = good_key(&dir);
        let bound: SocketAddr = "0.0.0.0:8055".parse().expect("addr");
        for (advertise, expected) in [
            ("10.1.2.3", "10.1.2.3:8055"),
            ("fd00::7", "[fd00::7]:8055"),
            ("resolver-0.example:9000", "resolver-0.example:9000"),
        ] {
            let settings = resolve(&with(&[
                "--push-listen",
                "0.0.0.0:0",
                "--push-key-file",
                &good,
                "--push-advertise",
                advertise,
            ]))
            .expect("taken");
            let Mode::Cluster(cluster) = settings.mode else {
                panic!("a cluster resolver")
            };
            let push = cluster.push.expect("a push listener");
            assert_eq!(push.address(bound), expected);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    // SEM-X10: a push key that cannot be used is told by its file and length, never its
    // content.
    #[test]
    fn a_bad_push_key_is_told_without_it() {
        const SECRET: &str = "healthroute-test-secret-do-not-print";
        let dir = folder("x10");
        let short = dir.join("short.key");
        std::fs::write(&short, &SECRET[..20]).expect("write");
        let short = short.to_str().expect("utf-8");
        let e = refused(&with(&[
            "--push-listen",
            "127.0.0.1:0",
            "--push-key-file",
            short,
        ]));
        assert!(e.contains("short.key") && e.contains("32 or more"), "{e}");
        assert!(!e.contains(&SECRET[..20]), "{e}");
        let missing = dir.join("missing.key");
        let e = refused(&with(&[
            "--push-listen",
            "127.0.0.1:0",
            "--push-key-file",
            missing.to_str().expect("utf-8"),
        ]));
        assert!(e.contains("missing.key"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    // The flags win over the settings file; the file fills in what they leave out; the drain
    // is 5 s in a cluster and 0 in standalone mode unless set (P9).
    #[test]
    fn flags_win_over_the_file() {
        let dir = folder("file");
        let config = dir.join("healthroute.yaml");
        std::fs::write(
            &config,
            "zones: [example.org]\nlisten: 127.0.0.1:5353\nupstream: 192.0.2.53:53\nzoneName: zone-b\n",
        )
        .expect("config");
        let config = config.to_str().expect("utf-8");
        let settings = resolve(&["--config", config, "--zone-name", "zone-a"]).expect("taken");
        assert_eq!(settings.serving.zones.names().len(), 1);
        assert_eq!(
            settings.serving.serve.listen,
            ["127.0.0.1:5353".parse().expect("addr")]
        );
        assert_eq!(
            settings.serving.serve.upstream,
            Some("192.0.2.53:53".parse().expect("addr"))
        );
        assert_eq!(settings.serving.serve.local_zone.as_deref(), Some("zone-a"));
        assert_eq!(settings.serving.drain, Duration::from_secs(5));
        let Mode::Cluster(cluster) = settings.mode else {
            panic!("a cluster resolver")
        };
        assert!(cluster.checker);
        assert_eq!(cluster.checker_zone.as_deref(), Some("zone-a"));
        let settings = resolve(&[
            "--config",
            config,
            "--listen",
            "127.0.0.1:0",
            "--manifests",
            dir.to_str().expect("utf-8"),
        ])
        .expect("taken");
        assert_eq!(
            settings.serving.serve.listen,
            ["127.0.0.1:0".parse().expect("addr")]
        );
        assert!(matches!(settings.mode, Mode::Standalone { .. }));
        assert_eq!(settings.serving.drain, Duration::ZERO);
        let e = refused(&["--listen", "127.0.0.1:0"]);
        assert!(e.contains("zone"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
