//! The exchange listener (SEMANTICS X6, X7): peer clusters' checkers ask, over TSIG-signed
//! DNS, what a RecordGroup answers as healthy here. It answers nothing else, on its own
//! address, so exchange names never reach the public DNS port's answers.
//!
//! ```text
//!   UDP datagram / TCP message ──▶ verify_query (key, MAC, time: RFC 8945 5.2)
//!        rejected ──▶ its error response (REFUSED, NOTAUTH + BADKEY/BADSIG/BADTIME), counted
//!        verified ──▶ the current table: the group's candidates' values (never its last
//!                     resort) ──▶ encode_answer, signed with the query's key, counted
//! ```
//!
//! The table is the one the resolver serves (the same `watch` the serving table is built
//! from), so a peer hears exactly what this cluster answers. Exchange traffic is small (one
//! query per peer check, checker and interval), so the listener is a plain tokio loop.
//!
//! The keys are loaded once per query from [`ServerKeys`], which the peers' key file reloads
//! swap (X1): a changed Secret is accepted without a restart, and while its change goes on the
//! previous secret too, the answer signed with whichever verified the query.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use healthroute_admin::metrics::{Collector, CountsByResult, DescriptorEncoder, Exposition};
use healthroute_checker::peer::ServerKeys;
use healthroute_exchange::{MAX_MESSAGE_SIZE, PeerAnswer, PeerValue, encode_answer, verify_query};
use healthroute_table::{RoutingTable, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::sync::watch;

use crate::error::Error;

/// How long a TCP connection may stay idle between two messages.
const TCP_IDLE: Duration = Duration::from_secs(10);
/// TCP connections served at once; more wait in the kernel's backlog.
const TCP_CONNECTIONS: usize = 64;

/// The listener's configuration: where, and which keys it accepts (every peer's, X1; swapped
/// when a key file changes).
#[derive(Debug, Clone)]
pub struct ExchangeConfig {
    pub listen: SocketAddr,
    pub keys: ServerKeys,
}

/// Exchange queries by outcome (X7: rejections are counted), exported as
/// `healthroute_exchange_queries_total{result}`.
#[derive(Debug, Default)]
pub struct ExchangeMetrics {
    /// Queries by result; a lock is fine at exchange rates (one query per peer check,
    /// checker and interval).
    by_result: CountsByResult,
}

impl ExchangeMetrics {
    fn count(&self, result: &'static str) {
        self.by_result.count(result);
    }
}

/// The exchange's metrics in the admin registry.
#[derive(Debug, Clone)]
pub struct ExchangeCollector(pub Arc<ExchangeMetrics>);

impl Collector for ExchangeCollector {
    fn encode(&self, encoder: DescriptorEncoder) -> std::fmt::Result {
        self.0.by_result.encode(
            &mut Exposition::new(encoder),
            "healthroute_exchange_queries_total",
            "Exchange queries from peer clusters, by result: answered, or why refused (unsigned, bad_key, bad_signature, bad_time, malformed, not_exchange).",
            &["answered"],
        )
    }
}

/// What this cluster tells a peer about `namespace/name` (X2): the group's candidates'
/// values, unless it is in its last resort or gone.
pub fn peer_answer(table: Option<&RoutingTable<Value>>, namespace: &str, name: &str) -> PeerAnswer {
    let Some(table) = table else {
        // No table yet (a resolver still serving its disk copy): nothing to vouch for.
        return PeerAnswer::NothingHealthy;
    };
    let key = healthroute_api::ObjectKey::new(namespace, name).group_key();
    let Some(group) = table.groups.get(&key) else {
        return PeerAnswer::NoSuchGroup;
    };
    if group.last_resort {
        return PeerAnswer::NothingHealthy;
    }
    let values: Vec<PeerValue> = table
        .candidate_values(group)
        .into_iter()
        .map(|v| PeerValue::from(v.clone()))
        .collect();
    if values.is_empty() {
        PeerAnswer::NothingHealthy
    } else {
        PeerAnswer::Healthy(values)
    }
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The reply to one exchange message, if any; `max` is the largest reply the transport takes.
fn reply(
    bytes: &[u8],
    keys: &ServerKeys,
    tables: &watch::Receiver<Option<Arc<RoutingTable<Value>>>>,
    metrics: &ExchangeMetrics,
    udp: bool,
) -> Option<Vec<u8>> {
    let now = unix_now();
    // The verified query holds the secret that verified it: the ring is not kept.
    let verified = verify_query(bytes, &keys.load(), now);
    match verified {
        Err(rejection) => {
            metrics.count(rejection.label());
            tracing::debug!(%rejection, "exchange query refused");
            rejection.into_response()
        }
        Ok(query) => {
            metrics.count("answered");
            let table = tables.borrow().clone();
            let (namespace, name) = query.group();
            let answer = peer_answer(table.as_deref(), namespace, name);
            let max = if udp {
                query.max_udp_payload()
            } else {
                MAX_MESSAGE_SIZE
            };
            Some(encode_answer(&query, &answer, now, max))
        }
    }
}

/// Binds the listener (UDP and TCP on one address) and serves until the tasks are aborted.
pub async fn start(
    config: ExchangeConfig,
    tables: watch::Receiver<Option<Arc<RoutingTable<Value>>>>,
    metrics: Arc<ExchangeMetrics>,
) -> Result<(SocketAddr, Vec<tokio::task::JoinHandle<()>>), Error> {
    let listen = |what: &'static str| {
        move |source| Error::Listen {
            what,
            addr: config.listen,
            source,
        }
    };
    let udp = UdpSocket::bind(config.listen)
        .await
        .map_err(listen("exchange UDP"))?;
    let bound = udp.local_addr()?;
    let tcp = TcpListener::bind(bound)
        .await
        .map_err(listen("exchange TCP"))?;
    let keys = config.keys;
    let udp_task = {
        let (keys, tables, metrics) = (keys.clone(), tables.clone(), metrics.clone());
        let span = tracing::info_span!("exchange_udp", addr = %bound);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let mut buf = vec![0u8; 65_535];
                loop {
                    let (n, from) = match udp.recv_from(&mut buf).await {
                        Ok(got) => got,
                        Err(e) => {
                            tracing::debug!(error = %e, "exchange UDP receive failed");
                            continue;
                        }
                    };
                    if let Some(out) = reply(&buf[..n], &keys, &tables, &metrics, true)
                        && let Err(e) = udp.send_to(&out, from).await
                    {
                        tracing::debug!(error = %e, %from, "exchange UDP send failed");
                    }
                }
            },
            span,
        ))
    };
    let tcp_span = tracing::info_span!("exchange_tcp", addr = %bound);
    let tcp_task = tokio::spawn(tracing::Instrument::instrument(
        async move {
            let slots = Arc::new(tokio::sync::Semaphore::new(TCP_CONNECTIONS));
            loop {
                let Ok(permit) = slots.clone().acquire_owned().await else {
                    return;
                };
                let (stream, from) = match tcp.accept().await {
                    Ok(got) => got,
                    Err(e) => {
                        tracing::debug!(error = %e, "exchange TCP accept failed");
                        continue;
                    }
                };
                let (keys, tables, metrics) = (keys.clone(), tables.clone(), metrics.clone());
                tokio::spawn(async move {
                    if let Err(e) = serve_tcp(stream, &keys, &tables, &metrics).await {
                        tracing::debug!(error = %e, %from, "exchange TCP connection ended");
                    }
                    drop(permit);
                });
            }
        },
        tcp_span,
    ));
    Ok((bound, vec![udp_task, tcp_task]))
}

/// Length-prefixed messages (RFC 1035 4.2.2) until the client closes or idles.
async fn serve_tcp(
    mut stream: TcpStream,
    keys: &ServerKeys,
    tables: &watch::Receiver<Option<Arc<RoutingTable<Value>>>>,
    metrics: &ExchangeMetrics,
) -> std::io::Result<()> {
    loop {
        let len = match tokio::time::timeout(TCP_IDLE, stream.read_u16()).await {
            Ok(Ok(len)) => usize::from(len),
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Ok(()),
        };
        let mut message = vec![0u8; len];
        tokio::time::timeout(TCP_IDLE, stream.read_exact(&mut message))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "idle"))??;
        let Some(out) = reply(&message, keys, tables, metrics, false) else {
            return Ok(());
        };
        let Ok(n) = u16::try_from(out.len()) else {
            return Ok(());
        };
        let mut framed = Vec::with_capacity(out.len() + 2);
        framed.extend_from_slice(&n.to_be_bytes());
        framed.extend_from_slice(&out);
        stream.write_all(&framed).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use healthroute_table::{Answer, CompiledGroup, RecordType, Selection, Target};
    use std::net::Ipv4Addr;

    fn group(key: &str, last_resort: bool, ips: &[u8]) -> Arc<CompiledGroup<Value>> {
        Arc::new(CompiledGroup {
            key: key.into(),
            name: "api.example.com.".into(),
            record_type: RecordType::A,
            ttl: 60,
            last_resort,
            zone_affinity: None,
            selection: Selection::Fixed(Answer {
                set_identifier: "a".into(),
                target: Target::Values(
                    ips.iter()
                        .map(|i| Value::A(Ipv4Addr::new(192, 0, 2, *i)))
                        .collect(),
                ),
            }),
        })
    }

    // SEM-X2: a peer hears the group's candidates, never its last resort; a missing group is
    // NXDOMAIN.
    #[test]
    fn a_peer_hears_candidates_not_the_last_resort() {
        let mut table = RoutingTable::default();
        table
            .groups
            .insert("shop/api".into(), group("shop/api", false, &[1, 2]));
        table
            .groups
            .insert("shop/down".into(), group("shop/down", true, &[3]));
        assert_eq!(
            peer_answer(Some(&table), "shop", "api"),
            PeerAnswer::Healthy(vec![
                PeerValue::from(Value::A([192, 0, 2, 1].into())),
                PeerValue::from(Value::A([192, 0, 2, 2].into()))
            ])
        );
        assert_eq!(
            peer_answer(Some(&table), "shop", "down"),
            PeerAnswer::NothingHealthy
        );
        assert_eq!(
            peer_answer(Some(&table), "shop", "gone"),
            PeerAnswer::NoSuchGroup
        );
        assert_eq!(peer_answer(None, "shop", "api"), PeerAnswer::NothingHealthy);
    }
}
