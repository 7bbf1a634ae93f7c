//! Running the resolver: sockets, the admin endpoint, and the table feed.
//!
//! ```text
//!   last-table file ──serve_last_table──▶ ArcSwap store   (at start, until a source has one, P2)
//!   table source (standalone compiler, or the published table) ──watch──▶ TableFeed
//!        TableFeed: ServingTable::build_from(the table served) ─▶ ArcSwap store
//!                   ─▶ table_file writer (in the background: the newest table, P2)
//!   DnsPath: UDP sockets (one per core, SO_REUSEPORT, a loop thread each) ──▶ DnsHandler
//!            TCP listener ──▶ hickory Server ──▶ DnsHandler
//!   exchange listener (X6) ◀──watch── the same tables
//!   start_admin: /metrics /livez /readyz
//!   Running::shutdown: DnsPath stops (UDP loops, then TCP), tasks end, the table file written
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use healthroute_table::{RoutingTable, Value};
use hickory_server::Server;
use tokio::sync::watch;
use tracing::{Instrument, info_span};

use healthroute_admin::endpoint::Admin;
use healthroute_admin::metrics::Registry;
use healthroute_checker::CheckerCollector;

use crate::dns::dnssec::Signers;
use crate::dns::exchange::{self, ExchangeCollector, ExchangeMetrics};
use crate::dns::forward::Forwarder;
use crate::dns::handler::DnsHandler;
use crate::dns::metrics::Metrics;
use crate::dns::serving::{ServingTable, ZoneConfig};
use crate::dns::state::{ServingCollector, Shared};
use crate::error::Error;
use crate::sources::table_file;

/// How the resolver listens and what it serves.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub listen: Vec<SocketAddr>,
    pub admin_listen: Option<SocketAddr>,
    pub zones: Vec<ZoneConfig>,
    pub upstream: Option<SocketAddr>,
    pub upstream_timeout: Duration,
    /// Where the last table is written, and read at start when no source has one yet (P2).
    pub table_file: Option<PathBuf>,
    /// UDP sockets per listen address (SO_REUSEPORT).
    pub udp_sockets: usize,
    /// Whether each UDP loop is pinned to a CPU.
    pub udp_cpu_affinity: Affinity,
    /// The zone this resolver runs in: groups with zone affinity answer from it (A1).
    pub local_zone: Option<String>,
    /// An in-process checker whose metrics the admin endpoint exports.
    pub checker: Option<CheckerCollector>,
    /// The exchange listener peer clusters ask (X6); none without peers.
    pub exchange: Option<crate::dns::exchange::ExchangeConfig>,
    /// Standalone mode's ZonalAutoshift metrics (AS11).
    pub autoshift: Option<crate::sources::standalone::AutoshiftCollector>,
    /// The push listener's metrics (P12), when there is one.
    pub push: Option<crate::sources::push::PushCollector>,
    /// The settings file, read again for the signed zones' keys (K5), when there is one.
    pub settings_file: Option<PathBuf>,
}

/// A running resolver.
pub struct Running {
    pub shared: Arc<Shared>,
    pub dns_addrs: Vec<SocketAddr>,
    pub admin_addr: Option<SocketAddr>,
    /// Where the exchange listener answers peers (X6), when there is one.
    pub exchange_addr: Option<SocketAddr>,
    dns: DnsPath,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Writes the last-table file; asked at shutdown to write the newest table (P2).
    table_writer: Option<table_file::Writer>,
}

impl Running {
    /// Turns /readyz unready and keeps answering for `drain`, so that load balancers and
    /// EndpointSlices move traffic away before the sockets close (P9); a second stop signal
    /// ends the wait.
    pub async fn drain(
        &self,
        drain: Duration,
        second_signal: impl std::future::Future<Output = ()>,
    ) {
        self.shared.draining.store(true, Ordering::Relaxed);
        if drain.is_zero() {
            return;
        }
        tracing::info!(
            seconds = drain.as_secs_f64(),
            "draining: unready, still answering"
        );
        tokio::select! {
            _ = tokio::time::sleep(drain) => {}
            _ = second_signal => tracing::info!("second stop signal: not waiting for the drain"),
        }
    }

    /// Stops accepting, lets in-flight queries finish, and returns.
    pub async fn shutdown(self) {
        self.dns.shutdown().await;
        for t in self.tasks {
            t.abort();
        }
        // The newest table served goes to disk before the process ends (P2).
        if let Some(writer) = self.table_writer {
            writer.finish().await;
        }
    }
}

/// Binds every socket and starts serving the tables that arrive on `tables`, in the order the
/// module's picture reads: the process state, the last table from disk (P2), the DNS
/// listeners, the exchange listener (X6), the table task, the admin endpoint.
pub async fn start(
    config: ServeConfig,
    tables: watch::Receiver<Option<Arc<RoutingTable<Value>>>>,
) -> Result<Running, Error> {
    let zone_names: Vec<String> = config.zones.iter().map(|z| z.apex.clone()).collect();
    let shared = Arc::new(Shared {
        table: ArcSwapOption::empty(),
        upstream: config.upstream.map(|upstream| Forwarder {
            upstream,
            timeout: config.upstream_timeout,
        }),
        metrics: Metrics::new(zone_names),
        draining: Default::default(),
        signers: Signers::load(
            config
                .zones
                .iter()
                .filter_map(|z| Some((z.apex.as_str(), z.dnssec.as_ref()?))),
        )?,
    });
    let from_disk = tables.borrow().is_none() && serve_last_table(&config, &shared)?;
    let mut tasks = Vec::new();
    if !shared.signers.is_empty() {
        let settings = config.settings_file.clone();
        tasks.push(tokio::spawn(reload_keys(shared.clone(), settings)));
    }
    let (dns, dns_addrs) = DnsPath::bind(&config, &shared)?;

    // The exchange listener reads the same tables the serving table is built from (X6).
    let exchange_metrics = Arc::new(ExchangeMetrics::default());
    let exchange_addr = match config.exchange {
        Some(listener) => {
            let (addr, exchange_tasks) =
                exchange::start(listener, tables.clone(), exchange_metrics.clone()).await?;
            tasks.extend(exchange_tasks);
            Some(addr)
        }
        None => None,
    };
    // The last-table file is written in the background (P2): the table task never waits.
    let (table_file, table_writer) = match config.table_file.clone() {
        Some(path) => {
            let (offer, writer) = table_file::Writer::start(path);
            (Some(offer), Some(writer))
        }
        None => (None, None),
    };
    let feed = TableFeed {
        shared: shared.clone(),
        zones: config.zones.clone(),
        local_zone: config.local_zone.clone(),
        table_file,
        from_disk,
        started: false,
    };
    tasks.push(tokio::spawn(
        feed.run(tables).instrument(info_span!("table_feed")),
    ));

    let admin_addr = match config.admin_listen {
        Some(addr) => {
            let mut registry = Registry::default();
            registry.register_collector(Box::new(ServingCollector(shared.clone())));
            if let Some(checker) = config.checker {
                registry.register_collector(Box::new(checker));
            }
            if let Some(autoshift) = config.autoshift {
                registry.register_collector(Box::new(autoshift));
            }
            if let Some(push) = config.push {
                registry.register_collector(Box::new(push));
            }
            if exchange_addr.is_some() {
                registry.register_collector(Box::new(ExchangeCollector(exchange_metrics)));
            }
            let (local, task) = start_admin(addr, registry, shared.clone()).await?;
            tasks.push(task);
            Some(local)
        }
        None => None,
    };
    Ok(Running {
        shared,
        dns_addrs,
        admin_addr,
        exchange_addr,
        dns,
        tasks,
        table_writer,
    })
}

/// How often the signed zones' key files are read again (K5).
const KEY_RELOAD_EVERY: Duration = Duration::from_secs(10);

/// Reads the settings' `dnssec` and the key files again every [`KEY_RELOAD_EVERY`]: a
/// Secret's or a ConfigMap's new version (kubelet swaps the mounted files) or an edited file is
/// signed with from then on; keys that cannot be used leave the old ones signing, with the
/// error in the log and a metric (K5).
async fn reload_keys(shared: Arc<Shared>, settings: Option<PathBuf>) {
    let mut every = tokio::time::interval(KEY_RELOAD_EVERY);
    every.tick().await;
    loop {
        every.tick().await;
        let fresh = settings.as_deref().map(crate::config::dnssec_settings);
        for (zone, outcome) in shared.signers.reload(fresh) {
            match outcome {
                Ok(()) => tracing::info!(%zone, "DNSSEC keys changed: signing with the new ones"),
                Err(e) => {
                    tracing::error!(%zone, error = %e, "DNSSEC keys changed but cannot be used: the previous keys keep signing")
                }
            }
        }
    }
}

/// P2: serves the last table from disk until a source has a newer one; true when it does.
fn serve_last_table(config: &ServeConfig, shared: &Shared) -> Result<bool, Error> {
    let Some(path) = &config.table_file else {
        return Ok(false);
    };
    match table_file::read(path) {
        Ok(Some(table)) => {
            let serving = ServingTable::build(
                &table,
                &config.zones,
                config.local_zone.as_deref(),
                &shared.metrics.answers,
            )?;
            shared.store(serving);
            tracing::info!(path = %path.display(), generation = table.generation, "serving the last table from disk");
            Ok(true)
        }
        Ok(None) => Ok(false),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring the last-table file");
            Ok(false)
        }
    }
}

/// The DNS listeners: UDP is ours (a loop per socket on a thread of its own, the fast path
/// first, the handler for the rest); TCP is hickory's server.
struct DnsPath {
    server: Server<DnsHandler>,
    udp_threads: Vec<std::thread::JoinHandle<()>>,
    udp_stop: Arc<AtomicBool>,
}

impl DnsPath {
    /// Binds every listen address (`udp_sockets` UDP sockets and a TCP listener on each);
    /// returns the listeners and the addresses bound (a port 0 made concrete).
    fn bind(
        config: &ServeConfig,
        shared: &Arc<Shared>,
    ) -> Result<(DnsPath, Vec<SocketAddr>), Error> {
        let mut dns = DnsPath {
            server: Server::new(DnsHandler {
                shared: shared.clone(),
            }),
            udp_threads: Vec::new(),
            udp_stop: Arc::new(AtomicBool::new(false)),
        };
        let mut dns_addrs = Vec::new();
        let sockets = config.udp_sockets.max(1);
        let cpus = udp_cpus(config.udp_cpu_affinity, sockets);
        // SO_REUSEPORT would let us join another process's sockets on a port and quietly take
        // part of its traffic (a stale resolver, say). A plain bind of every address first,
        // before any of ours, fails if anyone holds one.
        for addr in config.listen.iter().filter(|a| a.port() != 0) {
            udp_socket(*addr, false).map_err(|source| Error::PortTaken {
                addr: *addr,
                source,
            })?;
        }
        for addr in &config.listen {
            let mut bound = *addr;
            for i in 0..sockets {
                let socket = udp_socket(bound, true).map_err(|source| Error::Listen {
                    what: "UDP",
                    addr: bound,
                    source,
                })?;
                if i == 0 {
                    bound = socket.local_addr()?;
                }
                dns.spawn_udp_loop(socket, bound, i, cpus.get(i).copied(), shared)?;
            }
            let tcp = tcp_listener(bound).map_err(|source| Error::Listen {
                what: "TCP",
                addr: bound,
                source,
            })?;
            dns.server
                .register_listener(tcp, Duration::from_secs(10), 65_535);
            dns_addrs.push(bound);
        }
        Ok((dns, dns_addrs))
    }

    /// Starts UDP socket `i` of `bound`'s loop on a thread of its own, pinned to `cpu`.
    fn spawn_udp_loop(
        &mut self,
        socket: std::net::UdpSocket,
        bound: SocketAddr,
        i: usize,
        cpu: Option<usize>,
        shared: &Arc<Shared>,
    ) -> Result<(), Error> {
        let handler = DnsHandler {
            shared: shared.clone(),
        };
        let (runtime, stop) = (tokio::runtime::Handle::current(), self.udp_stop.clone());
        let socket = Arc::new(socket);
        let thread = std::thread::Builder::new()
            .name(format!("udp-{bound}-{i}"))
            .spawn(move || {
                // Entered once for the loop's life: its rare log lines say which socket, and
                // no query pays for it.
                let _span = info_span!("udp", addr = %bound, socket = i).entered();
                if let Some(cpu) = cpu {
                    pin_to(cpu);
                }
                crate::dns::udp::serve(socket, handler, runtime, stop)
            })
            .map_err(Error::Thread)?;
        self.udp_threads.push(thread);
        Ok(())
    }

    /// Stops the UDP loops and the TCP listeners; in-flight queries finish.
    async fn shutdown(self) {
        // UDP threads notice within their 200 ms receive timeout.
        self.udp_stop.store(true, Ordering::Relaxed);
        let threads = self.udp_threads;
        let span = info_span!("udp_join");
        let _ = tokio::task::spawn_blocking(move || {
            let _span = span.entered();
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
        let mut server = self.server;
        if let Err(e) = server.shutdown_gracefully().await {
            tracing::warn!(error = %e, "DNS server did not stop cleanly");
        }
    }
}

/// The table task: every new table becomes the serving snapshot.
struct TableFeed {
    shared: Arc<Shared>,
    zones: Vec<ZoneConfig>,
    local_zone: Option<String>,
    /// Offers each table served to the last-table file's writer (P2).
    table_file: Option<table_file::Offer>,
    /// Whether the table served is the one read from disk (P2).
    from_disk: bool,
    /// Whether a table was served yet.
    started: bool,
}

impl TableFeed {
    /// Serves each table `tables` holds, until its sender is gone.
    async fn run(mut self, mut tables: watch::Receiver<Option<Arc<RoutingTable<Value>>>>) {
        loop {
            let current = tables.borrow_and_update().clone();
            if let Some(table) = current {
                self.serve(table);
            }
            if tables.changed().await.is_err() {
                break;
            }
        }
    }

    /// Builds `table`'s serving form from the table served now and serves it; a table that
    /// cannot be built is logged, and the previous one kept.
    fn serve(&mut self, table: Arc<RoutingTable<Value>>) {
        let shared = &self.shared;
        // The table read from disk shares no group with the source's first table (equal ones
        // are other allocations): built from nothing, that table holds only the source's
        // groups.
        let previous = if self.from_disk {
            None
        } else {
            shared.table.load_full()
        };
        let building = std::time::Instant::now();
        // Built from the table served now: only the groups that changed are new to it.
        let serving = match ServingTable::build_from(
            previous.as_deref(),
            &table,
            &self.zones,
            self.local_zone.as_deref(),
            &shared.metrics.answers,
        ) {
            Ok(serving) => serving,
            Err(e) => {
                tracing::error!(error = %e, "table rejected; still serving the previous one");
                return;
            }
        };
        self.from_disk = false;
        let shadowed = serving.shadowed_nameservers();
        // Said when it starts or changes, not at every table.
        if !shadowed.is_empty()
            && previous
                .as_ref()
                .is_none_or(|p| p.shadowed_nameservers() != shadowed)
        {
            tracing::warn!(
                names = ?shadowed,
                "a RecordGroup holds a nameserver's name: it answers there, \
                 and the configured addresses are neither served nor glue (D12)"
            );
        }
        let new_groups = serving.new_groups();
        shared.store(serving);
        tracing::info!(
            generation = table.generation,
            groups = table.groups.len(),
            new_groups,
            build_ms = building.elapsed().as_secs_f64() * 1e3,
            "serving a new table"
        );
        if let Some(file) = &self.table_file {
            file.table(table.clone());
        }
        // The old table is gone once the last query on it ends; what its build and the
        // compile freed goes back to the system (0.1-0.2 ms with 2,000 groups).
        drop(previous);
        healthroute_admin::memory::release_free_memory();
        if !std::mem::replace(&mut self.started, true) {
            // Parsing manifests or the first list, compiling or decoding a whole table,
            // binding listeners: code the resolver may not run again (10-13 MiB of the idle
            // quickstart's 16-17).
            tokio::spawn(healthroute_admin::memory::page_out_start_up_code());
        }
    }
}

/// The admin endpoint (/metrics /livez /readyz) on `addr`, exporting `registry`, ready as
/// `shared` says; returns the address bound and its task.
async fn start_admin(
    addr: SocketAddr,
    registry: Registry,
    shared: Arc<Shared>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen {
            what: "admin",
            addr,
            source,
        })?;
    let local = listener.local_addr()?;
    let admin = Admin {
        registry,
        readiness: shared,
    };
    let task = tokio::spawn(
        healthroute_admin::endpoint::serve(listener, Arc::new(admin))
            .instrument(info_span!("admin", addr = %local)),
    );
    Ok((local, task))
}

/// `--udp-cpu-affinity`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Affinity {
    /// Pin when the allowed CPUs are exactly one per UDP socket.
    Auto,
    /// Pin socket i's loop to the i-th allowed CPU (round robin).
    On,
    /// Let the kernel place the loops (the default).
    Off,
}

/// The CPU for each UDP loop (by socket index), or none to let the kernel place them.
///
/// Pinning keeps a loop on the core whose caches hold its socket and table; unpinned, on
/// 2 cores, the loop moved to the other core on almost every wake-up (`perf stat`: about one
/// CPU migration per context switch). On loopback that move is what makes a one-client
/// round trip fast (the loop runs where its client just ran), so `off` is the default.
fn udp_cpus(mode: Affinity, sockets: usize) -> Vec<usize> {
    use nix::sched::{CpuSet, sched_getaffinity};
    use nix::unistd::Pid;
    if mode == Affinity::Off {
        return Vec::new();
    }
    let allowed: Vec<usize> = match sched_getaffinity(Pid::from_raw(0)) {
        Ok(set) => (0..CpuSet::count())
            .filter(|&c| set.is_set(c).unwrap_or(false))
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, "cannot read the CPU affinity; UDP loops not pinned");
            return Vec::new();
        }
    };
    if allowed.is_empty() || (mode == Affinity::Auto && allowed.len() != sockets) {
        return Vec::new();
    }
    (0..sockets).map(|i| allowed[i % allowed.len()]).collect()
}

/// Pins the calling thread to `cpu`; a failure only costs speed.
fn pin_to(cpu: usize) {
    use nix::sched::{CpuSet, sched_setaffinity};
    use nix::unistd::Pid;
    let mut set = CpuSet::new();
    let pinned = set
        .set(cpu)
        .and_then(|()| sched_setaffinity(Pid::from_raw(0), &set));
    if let Err(e) = pinned {
        tracing::debug!(cpu, error = %e, "cannot pin a UDP loop");
    }
}

/// A TCP listener; on IPv6 for IPv6 only, so that `[::]` and `0.0.0.0` can both be listened
/// on with the same port.
fn tcp_listener(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_reuse_address(true)?; // restart while old connections sit in TIME_WAIT
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    tokio::net::TcpListener::from_std(socket.into())
}

/// A UDP socket bound to `addr`; IPv6 for IPv6 only, so that `[::]` and `0.0.0.0` do not
/// collide. Without `reuse_port` the bind fails if anyone holds the port. Its replies are
/// never fragmented ([`crate::dns::sys::set_dont_fragment`]).
fn udp_socket(addr: SocketAddr, reuse_port: bool) -> std::io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(reuse_port)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    crate::dns::sys::set_dont_fragment(std::os::fd::AsFd::as_fd(&socket), addr.is_ipv6())?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;

    use super::*;

    /// A resolver started on `config`. The TCP listener takes the port the kernel gave the
    /// UDP socket, which a connection of another process on this machine may hold as its
    /// own ephemeral port: then another port is tried.
    async fn started(
        config: impl Fn() -> ServeConfig,
        tables: watch::Receiver<Option<Arc<RoutingTable<Value>>>>,
    ) -> Running {
        for _ in 0..9 {
            match start(config(), tables.clone()).await {
                Err(Error::Listen { source, .. })
                    if source.kind() == std::io::ErrorKind::AddrInUse => {}
                other => return other.expect("starts"),
            }
        }
        start(config(), tables).await.expect("starts")
    }

    /// One UDP socket on a free loopback port, serving example.com.
    fn config(table_file: Option<PathBuf>) -> ServeConfig {
        ServeConfig {
            listen: vec!["127.0.0.1:0".parse().expect("addr")],
            admin_listen: None,
            zones: vec![ZoneConfig {
                apex: "example.com.".into(),
                nameservers: vec![],
                default_ttl: 60,
                ..ZoneConfig::default()
            }],
            upstream: None,
            upstream_timeout: Duration::from_secs(1),
            table_file,
            udp_sockets: 1,
            udp_cpu_affinity: Affinity::Off,
            local_zone: None,
            checker: None,
            exchange: None,
            autoshift: None,
            push: None,
            settings_file: None,
        }
    }

    /// Waits (at most 2 s) until `running` serves `generation`.
    async fn served(running: &Running, generation: u64) {
        for _ in 0..200 {
            if running
                .shared
                .table
                .load()
                .as_ref()
                .is_some_and(|t| t.generation == generation)
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `n` one-value A groups, `t/g0`..: generation 1.
    fn groups(n: u8) -> RoutingTable<Value> {
        use healthroute_table::{Answer, CompiledGroup, RecordType, Selection, Target};
        let groups = (0..n).map(|i| {
            let key: Arc<str> = format!("t/g{i}").into();
            let group = CompiledGroup {
                key: key.clone(),
                name: format!("g{i}.example.com.").into(),
                record_type: RecordType::A,
                ttl: 30,
                last_resort: false,
                selection: Selection::Fixed(Answer {
                    set_identifier: "x".into(),
                    target: Target::Values(vec![Value::A([192, 0, 2, i].into())]),
                }),
                zone_affinity: None,
            };
            (key, Arc::new(group))
        });
        RoutingTable {
            generation: 1,
            groups: groups.collect(),
        }
    }

    // SEM-P11: the table task builds each table from the one served: a table that changes one
    // group of ten takes in one group (healthroute_table_groups_encoded_total).
    #[tokio::test]
    async fn a_new_table_takes_in_only_the_groups_it_changed() {
        let first = groups(10);
        let (tx, tables) = watch::channel(Some(Arc::new(first.clone())));
        let running = started(|| config(None), tables).await;
        served(&running, 1).await;
        let new_groups = || {
            running
                .shared
                .metrics
                .new_groups
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        assert_eq!(new_groups(), 10);
        let mut next = RoutingTable {
            generation: 2,
            ..first
        };
        let mut changed = (*next.groups["t/g0"]).clone();
        changed.ttl = 5;
        next.groups.insert("t/g0".into(), Arc::new(changed));
        tx.send_replace(Some(Arc::new(next)));
        served(&running, 2).await;
        assert_eq!(new_groups(), 11);
        running.shutdown().await;
    }

    // SEM-P2 SEM-P11: the source's first table after the one read from disk is built from
    // nothing: its groups equal the disk's but are other allocations, and the table served
    // holds only the source's (the disk's would otherwise stay alive beside them).
    #[tokio::test]
    async fn the_first_table_after_the_disk_holds_only_the_sources_groups() {
        let dir = std::env::temp_dir().join(format!("hr-server-disk-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("table.json");
        crate::sources::table_file::write(&path, &groups(10)).expect("written");
        let (tx, tables) = watch::channel(None);
        let running = started(|| config(Some(path.clone())), tables).await;
        served(&running, 1).await;
        let source = Arc::new(RoutingTable {
            generation: 2,
            ..groups(10)
        });
        tx.send_replace(Some(source.clone()));
        served(&running, 2).await;
        let table = running.shared.table.load_full().expect("a table");
        assert_eq!(table.generation, 2);
        for group in table.groups() {
            let theirs = &source.groups[&group.compiled.key];
            assert!(
                Arc::ptr_eq(&group.compiled, theirs),
                "{} is the source's own",
                group.compiled.key
            );
        }
        running.shutdown().await;
        let _ = std::fs::remove_dir_all(&dir);
    }

    // Every spawned task has a span: what the table task logs says it comes from it.
    #[tokio::test]
    async fn the_table_task_logs_in_its_span() {
        let (lines, _guard) = crate::test_log::capture();
        // This test's thread only (the guard): a current-thread runtime runs the spawned
        // tasks here.
        let (_tx, tables) = watch::channel(Some(Arc::new(RoutingTable::default())));
        let running = started(|| config(None), tables).await;
        served(&running, 0).await;
        running.shutdown().await;
        let text = lines.text();
        let served = text
            .lines()
            .find(|l| l.contains("serving a new table"))
            .unwrap_or_else(|| panic!("no table served in\n{text}"));
        assert!(served.contains("table_feed"), "{served}");
    }

    #[test]
    fn udp_listeners_never_fragment_their_replies() {
        let v4 = udp_socket("127.0.0.1:0".parse().expect("addr"), true).expect("IPv4 socket");
        assert_eq!(
            crate::dns::sys::mtu_discover_mode(v4.as_fd(), false).expect("option"),
            libc::IP_PMTUDISC_PROBE
        );
        // IPv6 may be missing in a sandbox.
        if let Ok(v6) = udp_socket("[::1]:0".parse().expect("addr"), true) {
            assert_eq!(
                crate::dns::sys::mtu_discover_mode(v6.as_fd(), true).expect("option"),
                libc::IPV6_PMTUDISC_PROBE
            );
        }
    }
}
