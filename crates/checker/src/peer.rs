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

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use healthroute_admin::metrics::AtomicHistogram;
use healthroute_exchange::{
    ExchangeError, KeyConfig, KeyRing, MAX_MESSAGE_SIZE, PeerAnswer, PeerValue, Query, TsigKey,
};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

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
    pub keys: KeyRing,
}

/// Every configured peer, by name.
#[derive(Debug, Default)]
pub struct Peers {
    peers: BTreeMap<String, Peer>,
}

impl Peers {
    /// Reads the configuration (key files included); every problem is an error that names the
    /// peer and the field.
    pub fn from_config(configs: &[PeerConfig]) -> Result<Peers, Error> {
        let mut peers = BTreeMap::new();
        for c in configs {
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
            let keys = KeyRing::from_config(&c.keys).map_err(|e| bad(format!("keys: {e}")))?;
            let peer = Peer {
                name: c.name.clone(),
                addresses: c.addresses.clone(),
                keys,
            };
            if peers.insert(c.name.clone(), peer).is_some() {
                return Err(bad("named twice".into()));
            }
        }
        Ok(Peers { peers })
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

    /// The keys this cluster accepts on its exchange listener: every peer's (X7), as
    /// [`Peers::from_config`] already read them. `None` without peers. Two peers that give
    /// one key name two secrets are an error.
    pub fn server_keys(&self) -> Result<Option<KeyRing>, Error> {
        let mut all: Vec<TsigKey> = Vec::new();
        for peer in self.peers.values() {
            for key in peer.keys.keys() {
                match all.iter().find(|k| k.name() == key.name()) {
                    Some(known) if known != key => {
                        return Err(Error::PeerConfig {
                            peer: peer.name.clone(),
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
    /// `TYPE value` of each healthy value; empty unless healthy.
    pub values: Vec<String>,
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
            values: values
                .iter()
                .map(|PeerValue { record_type, value }| format!("{record_type} {value}"))
                .collect(),
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
    Query::new(namespace, name, &peer.keys, unix_now())
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

/// Exchanges per peer: how long they took and how they ended (X9).
#[derive(Debug, Default)]
pub struct PeerMetrics {
    by_peer: Mutex<BTreeMap<String, PeerCounts>>,
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
        let both = Peers::from_config(&[good.clone(), other]).expect("two peers");
        assert!(both.server_keys().is_err());
        assert!(Peers::default().server_keys().expect("none").is_none());
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
        let live = listener(vec![PeerValue::new("A", "198.51.100.7")]).await;
        let peers = Peers::from_config(&[config(
            "west",
            &[silent_addr.clone(), live.clone()],
            vec![key("k.", SECRET)],
        )])
        .expect("peers");
        let peer = peers.get("west").expect("west");
        let obs = observe(peer, "shop", "www", Duration::from_millis(300)).await;
        assert!(obs.healthy, "{obs:?}");
        assert_eq!(obs.values, ["A 198.51.100.7"]);
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
        let live = listener(vec![PeerValue::new("A", "198.51.100.7")]).await;
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
