//! Peer checks (SEMANTICS X1, X4-X6): what a RecordGroup of a peer cluster answers as healthy
//! there, asked over the TSIG-signed exchange (`healthroute_exchange`).
//!
//! ```text
//!   interval ──▶ Query::new (signed) ──UDP──▶ listener 1 ── answer? read_answer (verify)
//!                          TC ──▶ a new query over TCP        │ no answer in time, error
//!                                                             ▼
//!                                        listener 2, ... (the first that answers decides)
//!   Healthy(values) ──▶ healthy observation with the values; anything else ──▶ unhealthy
//! ```
//!
//! One observation is one exchange with the first of the peer's listeners that answers within
//! the timeout: a listener that does not answer (or answers what cannot be read) is skipped
//! for the next one, but an answer that is read (signed or refused) decides. Thresholds (H5)
//! are the check task's, as for probes.
//!
//! # Keys that change while running (X1)
//! Each peer's [`KeyRing`] and the exchange listener's ([`ServerKeys`]) sit behind an
//! `ArcSwap`, loaded once per exchange. [`follow_key_files`] reads every `secretFile` again
//! every [`KEY_FILE_INTERVAL`]; a file whose bytes changed and hold a valid secret swaps in
//! rings [`KeyRing::rotated`] from the ones in use (the previous secret still signs for a
//! window and is accepted for two), and a file that cannot be used keeps the secret in use,
//! told once per problem and counted.
//!
//! ```text
//!   every 2 s: read each secretFile ── same bytes ──▶ nothing
//!                  │ other bytes
//!                  ├─ unreadable, not base64, too short ──▶ keep; warn once, count `refused`
//!                  └─ valid ──▶ peer ring, listener ring: rotated(fresh, now) ──▶ store; `loaded`
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::{ArcSwap, Guard};
use healthroute_admin::metrics::{AtomicHistogram, CountsByResult};
use healthroute_exchange::{
    ExchangeError, KeyConfig, KeyRing, MAX_MESSAGE_SIZE, PeerAnswer, PeerValue, Query,
    ROTATION_WINDOW, TsigKey,
};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::error::Error;

/// One peer cluster as the resolvers' configuration names it (X1).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PeerConfig {
    /// A DNS label, as `peer.cluster` in RecordGroups names it.
    pub name: String,
    /// The peer's exchange listeners, `host:port` (several, in several zones).
    pub addresses: Vec<String>,
    /// One or two TSIG keys: queries are signed with the first; either is accepted.
    pub keys: Vec<KeyConfig>,
}

/// A configured peer, ready to ask.
#[derive(Debug)]
pub struct Peer {
    pub name: String,
    pub addresses: Vec<String>,
    /// Its keys, swapped when a key file changes (X1).
    keys: ArcSwap<KeyRing>,
}

impl Peer {
    /// The keys queries to this peer are signed with now: one load per exchange, no
    /// allocation.
    pub fn keys(&self) -> Guard<Arc<KeyRing>> {
        self.keys.load()
    }
}

/// The keys the exchange listener accepts: every peer's (X7), swapped when a key file changes
/// (X1). Clones share them.
#[derive(Debug, Clone)]
pub struct ServerKeys(Arc<ArcSwap<KeyRing>>);

impl ServerKeys {
    /// The keys now: one load per query, no allocation.
    pub fn load(&self) -> Guard<Arc<KeyRing>> {
        self.0.load()
    }
}

/// How often key files are read again (X1): a read of a few bytes and a comparison each, so
/// a changed Secret is in use seconds after kubelet writes it.
pub const KEY_FILE_INTERVAL: Duration = Duration::from_secs(2);

/// Every configured peer, by name, and the keys read from files, read again while running.
#[derive(Debug, Default)]
pub struct Peers {
    peers: BTreeMap<String, Peer>,
    /// The exchange listener's keys; `None` without peers.
    server: Option<ServerKeys>,
    /// The keys whose secret is in a file, in configuration order; the lock is taken by
    /// [`Peers::reload_key_files`] alone.
    key_files: Mutex<Vec<KeyFile>>,
    /// Key file reads that found another secret, by result (`loaded`, `refused`).
    key_reloads: Arc<CountsByResult>,
}

/// A key whose secret is in a file (X1).
struct KeyFile {
    /// The peer's name, and the key's place in its ring.
    peer: String,
    index: usize,
    /// The key as configured: name, algorithm and the file's path.
    config: KeyConfig,
    /// Where it is configured (`peers[0].keys[1].secretFile`), for messages.
    field: String,
    /// The file's bytes whose secret is in use. They hold the secret: never printed.
    in_use: Vec<u8>,
    /// The problem last told about the file, so that one is told once.
    problem: Option<String>,
}

impl fmt::Debug for KeyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyFile")
            .field("field", &self.field)
            .field("path", &self.config.secret_file)
            .field("problem", &self.problem)
            .finish_non_exhaustive()
    }
}

/// What one reading of the key files did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct KeyReload {
    /// Files whose new secret is in use now.
    pub loaded: usize,
    /// Files newly found unusable (a problem already told is not counted again).
    pub refused: usize,
}

impl Peers {
    /// Reads the configuration (key files included); every problem is an error that names the
    /// peer and the field. Two peers that give one key name two secrets are an error: the
    /// exchange listener could not tell which one a peer means.
    pub fn from_config(configs: &[PeerConfig]) -> Result<Peers, Error> {
        let mut peers = BTreeMap::new();
        let mut key_files = Vec::new();
        let mut all: Vec<(String, Vec<TsigKey>)> = Vec::new();
        for (i, c) in configs.iter().enumerate() {
            let bad = |why: String| Error::PeerConfig {
                peer: c.name.clone(),
                why,
            };
            if !is_dns_label(&c.name) {
                return Err(bad("the name must be a DNS label (a-z, 0-9, '-')".into()));
            }
            if c.addresses.is_empty() {
                return Err(bad("addresses: at least one host:port".into()));
            }
            for a in &c.addresses {
                if a.rsplit_once(':')
                    .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
                {
                    return Err(bad(format!("addresses: {a:?} is not host:port")));
                }
            }
            if c.keys.is_empty() || c.keys.len() > 2 {
                return Err(bad(format!(
                    "keys: one or two TSIG keys, not {}",
                    c.keys.len()
                )));
            }
            let mut keys = Vec::with_capacity(c.keys.len());
            for (j, config) in c.keys.iter().enumerate() {
                let (key, bytes) = config.read().map_err(|e| bad(format!("keys: {e}")))?;
                if let Some(in_use) = bytes {
                    key_files.push(KeyFile {
                        peer: c.name.clone(),
                        index: j,
                        config: config.clone(),
                        field: format!("peers[{i}].keys[{j}].secretFile"),
                        in_use,
                        problem: None,
                    });
                }
                keys.push(key);
            }
            let ring = KeyRing::new(keys.clone()).map_err(|e| bad(format!("keys: {e}")))?;
            let peer = Peer {
                name: c.name.clone(),
                addresses: c.addresses.clone(),
                keys: ArcSwap::from_pointee(ring),
            };
            if peers.insert(c.name.clone(), peer).is_some() {
                return Err(bad("named twice".into()));
            }
            all.push((c.name.clone(), keys));
        }
        let server =
            server_ring(&all)?.map(|ring| ServerKeys(Arc::new(ArcSwap::from_pointee(ring))));
        Ok(Peers {
            peers,
            server,
            key_files: Mutex::new(key_files),
            key_reloads: Default::default(),
        })
    }

    pub fn get(&self, name: &str) -> Option<&Peer> {
        self.peers.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.peers.keys().map(String::as_str)
    }

    /// The keys this cluster accepts on its exchange listener: every peer's (X7), swapped
    /// when a key file changes. `None` without peers.
    pub fn server_keys(&self) -> Option<ServerKeys> {
        self.server.clone()
    }

    /// Whether some key's secret is in a file, which [`follow_key_files`] reads again.
    pub fn has_key_files(&self) -> bool {
        !self.files().is_empty()
    }

    /// Key file reads that found another secret, by result: `loaded` (in use now) or
    /// `refused` (unusable, the secret in use kept), each problem counted once.
    pub fn key_reloads(&self) -> &Arc<CountsByResult> {
        &self.key_reloads
    }

    fn files(&self) -> std::sync::MutexGuard<'_, Vec<KeyFile>> {
        self.key_files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads every key file again at `now` (Unix seconds), as [`follow_key_files`] does: a
    /// file whose bytes changed and hold a valid secret swaps in the peer's ring and the
    /// listener's, [`KeyRing::rotated`] from the ones in use; one that cannot be read or holds
    /// no valid secret keeps the secret in use and is told (a warning naming the file and its
    /// field, never the secret, X10) and counted once per problem. Previous secrets no longer
    /// accepted are dropped.
    pub fn reload_key_files(&self, now: u64) -> KeyReload {
        let mut files = self.files();
        let mut done = KeyReload::default();
        // (file, its new key, the bytes it was read from)
        let mut fresh: Vec<(usize, TsigKey, Vec<u8>)> = Vec::new();
        for (i, file) in files.iter_mut().enumerate() {
            let read = file.config.read_secret_file().and_then(|bytes| {
                let bytes = bytes.unwrap_or_default();
                if bytes == file.in_use {
                    return Ok(None);
                }
                file.config
                    .load_secret(&bytes)
                    .map(|key| Some((key, bytes)))
            });
            match read {
                Ok(None) => {
                    if file.problem.take().is_some() {
                        tracing::info!(field = %file.field, file = %file.path(), "{}: the file holds the secret in use again", file.field);
                    }
                }
                Ok(Some((key, bytes))) => fresh.push((i, key, bytes)),
                Err(e) => {
                    done.refused += self.refuse(file, format!("{}: {e}", file.field));
                }
            }
        }
        if !fresh.is_empty() {
            self.swap_in(&mut files, fresh, now, &mut done);
        }
        self.settle(now);
        done
    }

    /// Swaps the keys of `fresh` in, unless that would give one key name two secrets.
    fn swap_in(
        &self,
        files: &mut [KeyFile],
        fresh: Vec<(usize, TsigKey, Vec<u8>)>,
        now: u64,
        done: &mut KeyReload,
    ) {
        let mut keys: Vec<(String, Vec<TsigKey>)> = self
            .peers
            .values()
            .map(|p| (p.name.clone(), p.keys().keys().cloned().collect()))
            .collect();
        // Which files hold another secret than the one in use (not only other bytes).
        let mut changed = Vec::with_capacity(fresh.len());
        for (i, key, _) in &fresh {
            let file = &files[*i];
            let slot = keys
                .iter_mut()
                .find(|(peer, _)| *peer == file.peer)
                .and_then(|(_, ring)| ring.get_mut(file.index));
            if let Some(slot) = slot {
                changed.push(*slot != *key);
                *slot = key.clone();
            } else {
                changed.push(false);
            }
        }
        let server = match server_ring(&keys) {
            Ok(server) => server,
            Err(_) => {
                // Another file of that key name has not changed yet: wait for it (the
                // listener could not tell which of two secrets a peer means).
                for (i, key, _) in &fresh {
                    let file = &mut files[*i];
                    let why = format!(
                        "{}: TSIG key {}: another peer's file for this key name still holds another secret; the new one is taken once they agree",
                        file.field,
                        key.name()
                    );
                    done.refused += self.refuse(file, why);
                }
                return;
            }
        };
        for (name, keys) in keys {
            let Some(peer) = self.peers.get(&name) else {
                continue;
            };
            let old = peer.keys();
            if old.keys().eq(keys.iter()) {
                continue;
            }
            if let Ok(ring) = KeyRing::new(keys) {
                peer.keys.store(Arc::new(old.rotated(ring, now)));
            }
        }
        if let (Some(ServerKeys(swap)), Some(ring)) = (&self.server, server) {
            let old = swap.load();
            if !old.keys().eq(ring.keys()) {
                swap.store(Arc::new(old.rotated(ring, now)));
            }
        }
        for ((i, key, bytes), changed) in fresh.into_iter().zip(changed) {
            let file = &mut files[i];
            file.in_use = bytes;
            file.problem = None;
            if !changed {
                // The same secret written otherwise (a new line, say): nothing to tell.
                continue;
            }
            done.loaded += 1;
            self.key_reloads.count("loaded");
            tracing::info!(
                field = %file.field,
                file = %file.path(),
                "TSIG key {}: a new secret from {} is accepted now; queries stay signed with the previous one for {} s (the peer's copy may not have changed yet), which is accepted for {} s",
                key.name(),
                file.path(),
                ROTATION_WINDOW,
                2 * ROTATION_WINDOW,
            );
        }
    }

    /// Tells and counts `why` about `file` unless it was the last thing told about it;
    /// returns how many were counted (0 or 1).
    fn refuse(&self, file: &mut KeyFile, why: String) -> usize {
        if file.problem.as_deref() == Some(why.as_str()) {
            return 0;
        }
        tracing::warn!(field = %file.field, file = %file.path(), "{why}; the key's secret in use is kept");
        self.key_reloads.count("refused");
        file.problem = Some(why);
        1
    }

    /// Drops previous secrets no longer accepted, so that a replaced secret leaves memory.
    fn settle(&self, now: u64) {
        let swaps = self
            .peers
            .values()
            .map(|p| &p.keys)
            .chain(self.server.as_ref().map(|s| &*s.0));
        for swap in swaps {
            let ring = swap.load();
            if ring.has_expired(now) {
                swap.store(Arc::new(ring.settled(now)));
            }
        }
    }
}

impl KeyFile {
    fn path(&self) -> std::path::Display<'_> {
        self.config
            .secret_file
            .as_deref()
            .unwrap_or(std::path::Path::new(""))
            .display()
    }
}

/// The exchange listener's ring: every peer's keys once (`(peer, keys)` in configuration
/// order); `None` without keys. One key name with two secrets is an error that names the
/// later peer.
fn server_ring(peers: &[(String, Vec<TsigKey>)]) -> Result<Option<KeyRing>, Error> {
    let mut all: Vec<TsigKey> = Vec::new();
    for (peer, keys) in peers {
        for key in keys {
            match all.iter().find(|k| k.name() == key.name()) {
                Some(known) if known != key => {
                    return Err(Error::PeerConfig {
                        peer: peer.clone(),
                        why: format!(
                            "key {} is configured twice with different secrets",
                            key.name()
                        ),
                    });
                }
                Some(_) => {}
                None => all.push(key.clone()),
            }
        }
    }
    if all.is_empty() {
        return Ok(None);
    }
    KeyRing::new(all).map(Some).map_err(|e| Error::PeerConfig {
        peer: "(exchange listener)".into(),
        why: e.to_string(),
    })
}

/// Reads the peers' key files again every `every` ([`KEY_FILE_INTERVAL`]) while it runs, in a
/// task of its own; `None` when no key is in a file. The files are small and local (a
/// mounted Secret), so they are read on the runtime.
pub fn follow_key_files(peers: SharedPeers, every: Duration) -> Option<JoinHandle<()>> {
    if !peers.has_key_files() {
        return None;
    }
    let span = tracing::info_span!("peer_keys");
    Some(tokio::spawn(
        async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The first tick is now, and the files were just read.
            tick.tick().await;
            loop {
                tick.tick().await;
                peers.reload_key_files(unix_now());
            }
        }
        .instrument(span),
    ))
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// What one exchange found: the values, or why the observation is unhealthy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerObservation {
    /// The healthy values, parsed by the exchange's reader; empty unless healthy.
    pub values: Vec<PeerValue>,
    pub healthy: bool,
    /// "2 values from 127.0.0.1:5454", "no listener answered within 2 s", ...
    pub message: String,
    /// A stable label of the outcome for metrics (`ok`, `nothing_healthy`, `no_such_group`,
    /// `timeout`, `unreachable`, or an [`ExchangeError::label`]).
    pub result: &'static str,
}

impl PeerObservation {
    fn unhealthy(result: &'static str, message: String) -> Self {
        PeerObservation {
            values: Vec::new(),
            healthy: false,
            message,
            result,
        }
    }
}

/// One observation of `namespace/name` in `peer` (X4, X5): listeners in order, each within
/// `timeout`, the first that answers decides.
pub async fn observe(
    peer: &Peer,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> PeerObservation {
    let mut last = PeerObservation::unhealthy("unreachable", "no listener configured".into());
    for address in &peer.addresses {
        match exchange(peer, address, namespace, name, timeout).await {
            Ok(answer) => return judge(answer, address),
            Err(Failure::Answered(e)) => {
                return PeerObservation::unhealthy(e.label(), format!("{address}: {e}"));
            }
            Err(Failure::NoAnswer(result, why)) => {
                last = PeerObservation::unhealthy(result, format!("{address}: {why}"));
            }
        }
    }
    if peer.addresses.len() > 1 {
        last.message = format!("no listener answered; last {}", last.message);
    }
    last
}

fn judge(answer: PeerAnswer, address: &str) -> PeerObservation {
    match answer {
        PeerAnswer::Healthy(values) if !values.is_empty() => PeerObservation {
            message: format!(
                "{} healthy value{} from {address}",
                values.len(),
                if values.len() == 1 { "" } else { "s" }
            ),
            values,
            healthy: true,
            result: "ok",
        },
        PeerAnswer::Healthy(_) | PeerAnswer::NothingHealthy => PeerObservation::unhealthy(
            "nothing_healthy",
            format!("{address}: the group has no healthy record there (only its last resort)"),
        ),
        PeerAnswer::NoSuchGroup => PeerObservation::unhealthy(
            "no_such_group",
            format!("{address}: no such RecordGroup there (NXDOMAIN)"),
        ),
    }
}

/// How a Peer check's view follows its observations (X4): what the peer answered counts at
/// once (its own checks already passed their thresholds); the thresholds damp the path, so an
/// exchange that failed flips the view only after `failureThreshold` failures in a row, and
/// after the path failed, as many answers in a row bring it back.
#[derive(Debug, Default)]
pub struct PathState {
    /// The last observations failed on the path (not what the peer answered).
    path_failing: bool,
}

impl PathState {
    /// Whether `obs` is the peer's answer (values, or nothing healthy there), not a failure
    /// of the exchange.
    fn answered(obs: &PeerObservation) -> bool {
        matches!(obs.result, "ok" | "nothing_healthy" | "no_such_group")
    }

    /// Counts `obs` into `view`; returns true when the view flips.
    pub fn observe(&mut self, view: &mut crate::Threshold, obs: &PeerObservation) -> bool {
        if !Self::answered(obs) {
            self.path_failing = true;
            return view.observe(false);
        }
        if self.path_failing && obs.healthy {
            // The path is back: as many answers as the threshold, as for a probe.
            let flipped = view.observe(true);
            self.path_failing = !view.healthy();
            return flipped;
        }
        self.path_failing = false;
        view.set(obs.healthy)
    }
}

/// Why an exchange with one listener gave no values.
enum Failure {
    /// The listener answered, and what it said decides the observation.
    Answered(ExchangeError),
    /// Nothing usable came back: the next listener is asked.
    NoAnswer(&'static str, String),
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

async fn exchange(
    peer: &Peer,
    address: &str,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> Result<PeerAnswer, Failure> {
    let deadline = tokio::time::Instant::now() + timeout;
    let target = resolve(address, deadline).await?;
    let udp = tokio::time::timeout_at(deadline, ask_udp(peer, target, namespace, name)).await;
    match udp {
        Err(_) => Err(Failure::NoAnswer(
            "timeout",
            format!("no answer within {} s", timeout.as_secs_f32()),
        )),
        Ok(Err(failure)) => Err(failure),
        Ok(Ok(Err(ExchangeError::Truncated))) => {
            match tokio::time::timeout_at(deadline, ask_tcp(peer, target, namespace, name)).await {
                Err(_) => Err(Failure::NoAnswer(
                    "timeout",
                    format!("no answer over TCP within {} s", timeout.as_secs_f32()),
                )),
                Ok(Err(failure)) => Err(failure),
                Ok(Ok(answer)) => answer.map_err(Failure::Answered),
            }
        }
        Ok(Ok(answer)) => answer.map_err(Failure::Answered),
    }
}

async fn resolve(address: &str, deadline: tokio::time::Instant) -> Result<SocketAddr, Failure> {
    let found = tokio::time::timeout_at(deadline, tokio::net::lookup_host(address)).await;
    match found {
        Ok(Ok(mut addrs)) => addrs
            .next()
            .ok_or_else(|| Failure::NoAnswer("unreachable", "the name has no address".into())),
        Ok(Err(e)) => Err(Failure::NoAnswer(
            "unreachable",
            format!("cannot resolve: {e}"),
        )),
        Err(_) => Err(Failure::NoAnswer(
            "timeout",
            "cannot resolve in time".into(),
        )),
    }
}

fn query(peer: &Peer, namespace: &str, name: &str) -> Result<Query, Failure> {
    Query::new(namespace, name, &peer.keys(), unix_now())
        .map_err(|e| Failure::NoAnswer("unreachable", e.to_string()))
}

/// Over UDP: datagrams that are not the answer to this query (another ID) are ignored, as a
/// late answer to an earlier one would be.
async fn ask_udp(
    peer: &Peer,
    target: SocketAddr,
    namespace: &str,
    name: &str,
) -> Result<Result<PeerAnswer, ExchangeError>, Failure> {
    let Query { bytes, pending } = query(peer, namespace, name)?;
    let local: SocketAddr = if target.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let unreachable = |e: std::io::Error| Failure::NoAnswer("unreachable", e.to_string());
    let socket = UdpSocket::bind(local).await.map_err(unreachable)?;
    socket.connect(target).await.map_err(unreachable)?;
    socket.send(&bytes).await.map_err(unreachable)?;
    let mut buf = vec![0u8; 65_535];
    loop {
        let n = socket.recv(&mut buf).await.map_err(unreachable)?;
        let reply = &buf[..n];
        if reply.len() < 2 || u16::from_be_bytes([reply[0], reply[1]]) != pending.id() {
            continue;
        }
        return Ok(pending.read_answer(reply, unix_now()));
    }
}

async fn ask_tcp(
    peer: &Peer,
    target: SocketAddr,
    namespace: &str,
    name: &str,
) -> Result<Result<PeerAnswer, ExchangeError>, Failure> {
    let Query { bytes, pending } = query(peer, namespace, name)?;
    let unreachable = |e: std::io::Error| Failure::NoAnswer("unreachable", e.to_string());
    let mut stream = TcpStream::connect(target).await.map_err(unreachable)?;
    let len = u16::try_from(bytes.len())
        .map_err(|_| Failure::NoAnswer("unreachable", "query too large".into()))?;
    let mut framed = Vec::with_capacity(bytes.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(&bytes);
    stream.write_all(&framed).await.map_err(unreachable)?;
    let n = usize::from(stream.read_u16().await.map_err(unreachable)?);
    if n > MAX_MESSAGE_SIZE {
        return Err(Failure::NoAnswer("unreachable", "answer too large".into()));
    }
    let mut reply = vec![0u8; n];
    stream.read_exact(&mut reply).await.map_err(unreachable)?;
    Ok(pending.read_answer(&reply, unix_now()))
}

/// Exchanges per peer: how long they took and how they ended (X9); and the key file reloads
/// of the peers the checker asks (X1), when some key is in a file.
#[derive(Debug, Default)]
pub struct PeerMetrics {
    by_peer: Mutex<BTreeMap<String, PeerCounts>>,
    /// [`Peers::key_reloads`], set once by `Checker::with_peers`.
    pub(crate) key_reloads: OnceLock<Arc<CountsByResult>>,
}

#[derive(Debug)]
pub(crate) struct PeerCounts {
    pub(crate) results: BTreeMap<&'static str, u64>,
    pub(crate) latency: AtomicHistogram<{ crate::LATENCY_BOUNDS_US.len() }>,
}

impl PeerMetrics {
    pub fn record(&self, peer: &str, result: &'static str, took: Duration) {
        let mut by_peer = self.by_peer.lock().unwrap_or_else(|p| p.into_inner());
        let counts = by_peer
            .entry(peer.to_owned())
            .or_insert_with(|| PeerCounts {
                results: BTreeMap::new(),
                latency: AtomicHistogram::new(crate::LATENCY_BOUNDS_US),
            });
        *counts.results.entry(result).or_default() += 1;
        counts.latency.record(1, took);
    }

    /// Each peer's counts by result, and its latency histogram's snapshot.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&BTreeMap<String, PeerCounts>) -> R) -> R {
        f(&self.by_peer.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Times one observation, for [`PeerMetrics::record`].
pub(crate) async fn observe_timed(
    peer: &Peer,
    namespace: &str,
    name: &str,
    timeout: Duration,
) -> (PeerObservation, Duration) {
    let started = Instant::now();
    let obs = observe(peer, namespace, name, timeout).await;
    (obs, started.elapsed())
}

/// The peers a checker asks, shared by its tasks.
pub type SharedPeers = Arc<Peers>;

#[cfg(test)]
mod tests {
    use super::*;
    use healthroute_exchange::{encode_answer, verify_query};

    const SECRET: &str = "aGVhbHRocm91dGUtdGVzdC1rZXktMTIzNDU2Nzg=";

    fn key(name: &str, secret: &str) -> KeyConfig {
        serde_saphyr::from_str(&format!("{{name: {name}, secret: {secret}}}")).expect("key")
    }

    fn config(name: &str, addresses: &[String], keys: Vec<KeyConfig>) -> PeerConfig {
        PeerConfig {
            name: name.into(),
            addresses: addresses.to_vec(),
            keys,
        }
    }

    // SEM-X1: a peer's name, addresses and keys are checked at start, with the field named.
    #[test]
    fn peer_configuration_is_checked() {
        let good = config("west", &["127.0.0.1:5354".into()], vec![key("k.", SECRET)]);
        assert!(Peers::from_config(std::slice::from_ref(&good)).is_ok());
        for (bad, says) in [
            (
                config("West", &good.addresses, vec![key("k.", SECRET)]),
                "DNS label",
            ),
            (config("west", &[], vec![key("k.", SECRET)]), "addresses"),
            (
                config("west", &["127.0.0.1".into()], vec![key("k.", SECRET)]),
                "host:port",
            ),
            (config("west", &good.addresses, Vec::new()), "one or two"),
            (
                config("west", &good.addresses, vec![key("k.", "bm90LWJhc2U2NA")]),
                "keys",
            ),
        ] {
            let e = Peers::from_config(&[bad]).expect_err(says).to_string();
            assert!(e.contains(says) && e.starts_with("peer "), "{e}");
        }
        let e = Peers::from_config(&[good.clone(), good.clone()]).expect_err("twice");
        assert!(e.to_string().contains("named twice"), "{e}");
        // One key name, two secrets: the listener could not tell which one a peer means.
        let other = config(
            "east",
            &good.addresses,
            vec![key("k.", "b3RoZXItc2VjcmV0LTEyMzQ1Njc4OTA=")],
        );
        let e = Peers::from_config(&[good.clone(), other]).expect_err("two secrets");
        assert_eq!(
            e.to_string(),
            "peer east: key k. is configured twice with different secrets"
        );
        assert!(Peers::default().server_keys().is_none());
    }

    /// A key of `name` whose secret is the file `path`.
    fn file_key(name: &str, path: &std::path::Path) -> KeyConfig {
        KeyConfig {
            name: name.into(),
            algorithm: "hmac-sha256".into(),
            secret: None,
            secret_file: Some(path.to_owned()),
        }
    }

    const OTHER: &str = "b3RoZXItc2VjcmV0LTEyMzQ1Njc4OTA=";

    // SEM-X1 SEM-X10: one key name read from two files (two peers): a change of one file
    // alone would give the name two secrets, so it waits, told once, until the other file
    // changes too; then both rings and the listener's take the new secret. Nothing printed
    // holds a secret.
    #[test]
    fn one_key_name_in_two_files_changes_when_both_have() {
        let dir = std::env::temp_dir().join(format!(
            "hr-peer-keys-{}-{}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).expect("dir");
        let (a, b) = (dir.join("a"), dir.join("b"));
        for path in [&a, &b] {
            std::fs::write(path, format!("{SECRET}\n")).expect("write");
        }
        let addresses = ["127.0.0.1:5354".to_owned()];
        let peers = Peers::from_config(&[
            config("east", &addresses, vec![file_key("k.", &a)]),
            config("west", &addresses, vec![file_key("k.", &b)]),
        ])
        .expect("peers");
        assert!(peers.has_key_files());
        let now = unix_now();
        assert_eq!(peers.reload_key_files(now), KeyReload::default());

        let (old, new) = (
            TsigKey::new("k.", "hmac-sha256", SECRET).expect("old"),
            TsigKey::new("k.", "hmac-sha256", OTHER).expect("new"),
        );
        let current = |peers: &Peers| {
            let mut keys: Vec<TsigKey> = ["east", "west"]
                .map(|p| peers.get(p).expect("peer").keys().signing_key(now).clone())
                .into();
            keys.extend(peers.server_keys().expect("server").load().keys().cloned());
            keys
        };

        std::fs::write(&a, OTHER).expect("write");
        assert_eq!(
            peers.reload_key_files(now + 2),
            KeyReload {
                loaded: 0,
                refused: 1
            }
        );
        assert_eq!(
            peers.reload_key_files(now + 4),
            KeyReload::default(),
            "told once"
        );
        assert_eq!(current(&peers), [old.clone(), old.clone(), old.clone()]);

        std::fs::write(&b, format!("  {OTHER}\n")).expect("write");
        assert_eq!(
            peers.reload_key_files(now + 6),
            KeyReload {
                loaded: 2,
                refused: 0
            }
        );
        for name in ["east", "west"] {
            let ring = peers.get(name).expect("peer").keys();
            assert_eq!(ring.keys().collect::<Vec<_>>(), [&new]);
            assert_eq!(ring.signing_key(now + 6), &old, "the previous one signs");
            assert_eq!(ring.signing_key(now + 6 + ROTATION_WINDOW), &new);
        }
        // The listener takes both: the new secret at once, the previous one meanwhile.
        let server = peers.server_keys().expect("server");
        for (signer, at, verifies) in [
            (&new, now + 6, true),
            (&old, now + 6, true),
            (&old, now + 6 + 2 * ROTATION_WINDOW, false),
        ] {
            let ring = KeyRing::new(vec![signer.clone()]).expect("ring");
            let query = Query::new("shop", "www", &ring, at).expect("query");
            assert_eq!(
                verify_query(&query.bytes, &server.load(), at).is_ok(),
                verifies,
                "{signer:?} at +{}",
                at - now
            );
        }
        assert_eq!(peers.key_reloads().get("loaded"), 2);
        assert_eq!(peers.key_reloads().get("refused"), 1);
        let shown = format!("{peers:?}");
        for secret in [SECRET, OTHER] {
            assert!(!shown.contains(secret), "{shown}");
        }
        assert!(shown.contains("peers[1].keys[0].secretFile"), "{shown}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A listener on loopback that answers every exchange query with `values`.
    async fn listener(values: Vec<PeerValue>) -> String {
        let socket = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let addr = socket.local_addr().expect("addr").to_string();
        let keys = KeyRing::from_config(&[key("k.", SECRET)]).expect("ring");
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, from)) = socket.recv_from(&mut buf).await {
                let out = match verify_query(&buf[..n], &keys, unix_now()) {
                    Ok(q) => {
                        let answer = PeerAnswer::Healthy(values.clone());
                        Some(encode_answer(&q, &answer, unix_now(), q.max_udp_payload()))
                    }
                    Err(rejection) => rejection.into_response(),
                };
                if let Some(out) = out {
                    let _ = socket.send_to(&out, from).await;
                }
            }
        });
        addr
    }

    // SEM-X4 SEM-X5: a listener that does not answer is skipped for the next; an answer
    // decides; no listener answering is an unhealthy observation that says so.
    #[tokio::test]
    async fn the_first_listener_that_answers_decides() {
        let silent = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let silent_addr = silent.local_addr().expect("addr").to_string();
        let live = listener(vec![
            PeerValue::parse("A", "198.51.100.7").expect("an IPv4 address"),
        ])
        .await;
        let peers = Peers::from_config(&[config(
            "west",
            &[silent_addr.clone(), live.clone()],
            vec![key("k.", SECRET)],
        )])
        .expect("peers");
        let peer = peers.get("west").expect("west");
        let obs = observe(peer, "shop", "www", Duration::from_millis(300)).await;
        assert!(obs.healthy, "{obs:?}");
        let values: Vec<String> = obs.values.iter().map(ToString::to_string).collect();
        assert_eq!(values, ["A 198.51.100.7"]);
        assert!(obs.message.contains(&live), "{}", obs.message);

        let peers = Peers::from_config(&[config(
            "west",
            std::slice::from_ref(&silent_addr),
            vec![key("k.", SECRET)],
        )])
        .expect("peers");
        let obs = observe(
            peers.get("west").expect("west"),
            "shop",
            "www",
            Duration::from_millis(200),
        )
        .await;
        assert!(!obs.healthy);
        assert_eq!(obs.result, "timeout");
        assert!(obs.message.contains("no answer within"), "{}", obs.message);
    }

    fn seen(result: &'static str, healthy: bool) -> PeerObservation {
        PeerObservation {
            values: Vec::new(),
            healthy,
            message: String::new(),
            result,
        }
    }

    // SEM-X4 SEM-H5: what the peer answers counts at once; a failing path needs the
    // threshold to flip the view, and as many answers to bring it back.
    #[test]
    fn answers_count_at_once_and_the_path_is_damped() {
        let mut view = crate::Threshold::new(3);
        let mut path = PathState::default();
        // The peer says its group has nothing healthy: unhealthy at once, back at once.
        assert!(path.observe(&mut view, &seen("nothing_healthy", false)));
        assert!(!view.healthy());
        assert!(path.observe(&mut view, &seen("ok", true)));
        assert!(view.healthy());
        // Two timeouts, then an answer: no flip (a lost packet is not a failover).
        assert!(!path.observe(&mut view, &seen("timeout", false)));
        assert!(!path.observe(&mut view, &seen("timeout", false)));
        assert!(!path.observe(&mut view, &seen("ok", true)));
        assert!(view.healthy());
        // Three in a row flip it; then three answers bring it back.
        for _ in 0..2 {
            assert!(!path.observe(&mut view, &seen("bad_signature", false)));
        }
        assert!(path.observe(&mut view, &seen("timeout", false)));
        assert!(!view.healthy());
        assert!(!path.observe(&mut view, &seen("ok", true)));
        assert!(!path.observe(&mut view, &seen("ok", true)));
        assert!(path.observe(&mut view, &seen("ok", true)));
        assert!(view.healthy());
    }

    // SEM-X5 SEM-X7: a key the peer holds with another secret: its BADSIG is an unhealthy
    // observation that says so, never a value.
    #[tokio::test]
    async fn a_wrongly_signed_answer_is_unhealthy() {
        let live = listener(vec![
            PeerValue::parse("A", "198.51.100.7").expect("an IPv4 address"),
        ])
        .await;
        let peers = Peers::from_config(&[config(
            "west",
            &[live],
            vec![key("k.", "b3RoZXItc2VjcmV0LTEyMzQ1Njc4OTA=")],
        )])
        .expect("peers");
        let obs = observe(
            peers.get("west").expect("west"),
            "shop",
            "www",
            Duration::from_millis(500),
        )
        .await;
        assert!(!obs.healthy && obs.values.is_empty(), "{obs:?}");
        assert_eq!(obs.result, "bad_signature", "{obs:?}");
        assert!(obs.message.contains("BADSIG"), "{}", obs.message);
    }
}
