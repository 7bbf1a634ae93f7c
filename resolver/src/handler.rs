//! The DNS request handler: reads the current [`ServingTable`] snapshot and answers with the
//! same lookup as the UDP fast path, or forwards what lies outside the served zones
//! (SEMANTICS D1–D8).
//!
//! hickory's `Server` owns the TCP listener, parses requests (answering FORMERR to what does
//! not parse) and encodes responses; this handler turns the lookup's wire RRs into hickory
//! records. It never blocks on a writer: the table is an `ArcSwap` snapshot.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use hickory_server::net::runtime::Time;
use hickory_server::net::xfer::Protocol;
use hickory_server::proto::op::{Edns, Message, MessageType, Metadata, OpCode, ResponseCode};
use hickory_server::proto::rr::{DNSClass, Name, Record, RecordType};
use hickory_server::proto::serialize::binary::{BinDecodable, BinDecoder};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::Error;
use crate::metrics::{Metrics, Tally};
use crate::serving::{ApexRecords, Outcome, ServingTable, wire_name};

/// The largest UDP payload we advertise and honour (the DNS Flag Day 2020 value).
pub const MAX_UDP_PAYLOAD: u16 = 1232;

thread_local! {
    static RNG: RefCell<fastrand::Rng> = RefCell::new(fastrand::Rng::new());
}

/// State shared by every query: the table snapshot, the upstream, the metrics.
pub struct Shared {
    pub table: ArcSwapOption<ServingTable>,
    pub upstream: Option<Forwarder>,
    pub metrics: Metrics,
    /// Set when a stop signal arrived: /readyz turns unready while queries are still
    /// answered, so that traffic moves away before the sockets close (P9).
    pub draining: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// Replaces the table; queries already running finish on the old one.
    pub fn store(&self, table: ServingTable) {
        self.table.store(Some(Arc::new(table)));
        self.metrics.table_loaded();
    }
}

#[derive(Clone)]
pub struct DnsHandler {
    pub shared: Arc<Shared>,
}

#[async_trait::async_trait]
impl RequestHandler for DnsHandler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response: R,
    ) -> ResponseInfo {
        let start = Instant::now();
        let mut metadata = Metadata::response_from_request(&request.metadata);
        // Echo OPT when the client sent one (D4), with the buffer we honour.
        let edns = request.edns.as_ref().map(|client| {
            let mut e = Edns::new();
            e.set_max_payload(client.max_payload().clamp(512, MAX_UDP_PAYLOAD));
            e
        });
        let mut builder = MessageResponseBuilder::from_message_request(request);
        if let Some(e) = &edns {
            builder.edns(e);
        }
        let queries = request.queries.queries();
        let bad = if request.metadata.op_code != OpCode::Query {
            Some(ResponseCode::NotImp)
        } else if queries.len() != 1 || request.metadata.message_type != MessageType::Query {
            Some(ResponseCode::FormErr)
        } else {
            None
        };
        if let Some(code) = bad {
            let qtype = queries.first().map_or(RecordType::NULL, |q| q.query_type());
            let info = send(&mut response, builder.error_msg(&request.metadata, code)).await;
            self.shared
                .metrics
                .record_query(None, qtype, code, start.elapsed());
            return info;
        }
        let query = &queries[0];
        let qtype = query.query_type();
        let Some(table) = self.shared.table.load_full() else {
            // Not ready: no table yet (readiness says so too).
            let info = send(
                &mut response,
                builder.error_msg(&request.metadata, ResponseCode::ServFail),
            )
            .await;
            self.shared
                .metrics
                .record_query(None, qtype, ResponseCode::ServFail, start.elapsed());
            return info;
        };
        let qname = wire_name(&query.name().to_string());
        let zone = table.zone_of(&qname);
        if zone.is_some() && !matches!(query.query_class(), DNSClass::IN | DNSClass::ANY) {
            let info = send(
                &mut response,
                builder.error_msg(&request.metadata, ResponseCode::Refused),
            )
            .await;
            self.shared
                .metrics
                .record_query(zone, qtype, ResponseCode::Refused, start.elapsed());
            return info;
        }
        let mut tally = Tally::default();
        let outcome = RNG
            .with(|rng| table.lookup(&qname, u16::from(qtype), &mut rng.borrow_mut(), &mut tally));
        drop(tally);
        metadata.authoritative = zone.is_some();
        let none: [&Record; 0] = [];
        let info = match outcome {
            Outcome::NotServed => match &self.shared.upstream {
                None => {
                    send(
                        &mut response,
                        builder.error_msg(&request.metadata, ResponseCode::Refused),
                    )
                    .await
                }
                Some(upstream) => {
                    self.shared
                        .metrics
                        .forwarded
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    match upstream
                        .forward(request.as_slice(), request.protocol())
                        .await
                    {
                        Ok(reply) => {
                            let mut meta = reply.metadata;
                            meta.id = request.metadata.id;
                            meta.message_type = MessageType::Response;
                            meta.truncation = false;
                            let msg = builder.build(
                                meta,
                                reply.answers.iter(),
                                reply.authorities.iter(),
                                none,
                                reply.additionals.iter(),
                            );
                            send(&mut response, msg).await
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "upstream failed");
                            self.shared
                                .metrics
                                .upstream_failures
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            send(
                                &mut response,
                                builder.error_msg(&request.metadata, ResponseCode::ServFail),
                            )
                            .await
                        }
                    }
                }
            },
            served => {
                let owner = query.original().name().clone();
                let (answers, authority) = records(&table, &served, &owner);
                metadata.response_code = ResponseCode::from(0, served.rcode());
                let msg = builder.build(metadata, answers.iter(), none, authority.iter(), none);
                send(&mut response, msg).await
            }
        };
        self.shared
            .metrics
            .record_query(zone, qtype, info.response_code, start.elapsed());
        info
    }
}

/// The answer and authority records of `outcome`, from the table's wire RRs: the first step
/// owned by the question name as asked, each later one by the CNAME target before it (D8),
/// the SOA by its zone's apex.
pub fn records(
    table: &ServingTable,
    outcome: &Outcome<'_>,
    question: &Name,
) -> (Vec<Record>, Vec<Record>) {
    let mut answers = Vec::new();
    let mut owner = question.clone();
    match outcome {
        Outcome::Answer { chain, .. } => {
            for step in chain.iter() {
                step.values
                    .for_each(|rr| answers.extend(decode_rr(&owner, rr)));
                if let Some(next) = step.cname_target().and_then(decode_name) {
                    owner = next;
                }
            }
        }
        Outcome::Apex { zone, records } => {
            let z = &table.zones()[*zone];
            match records {
                ApexRecords::Soa => answers.extend(decode_rr(&owner, &z.soa)),
                ApexRecords::Ns => {
                    answers.extend(z.ns.iter().filter_map(|rr| decode_rr(&owner, rr)))
                }
                ApexRecords::Any => answers.extend(decode_rr(&owner, &z.any)),
            }
        }
        Outcome::NoData { .. } | Outcome::NxDomain { .. } | Outcome::NotServed => {}
    }
    let authority = outcome
        .authority_zone()
        .and_then(|z| {
            let zone = &table.zones()[z];
            decode_rr(&decode_name(&zone.apex)?, &zone.soa)
        })
        .into_iter()
        .collect();
    (answers, authority)
}

/// One wire RR (no owner) as a hickory record owned by `owner`.
fn decode_rr(owner: &Name, rr: &[u8]) -> Option<Record> {
    let mut buf = Vec::with_capacity(rr.len() + 1);
    buf.push(0); // the root as a stand-in owner
    buf.extend_from_slice(rr);
    let mut record = Record::read(&mut BinDecoder::new(&buf)).ok()?;
    record.name = owner.clone();
    Some(record)
}

fn decode_name(wire: &[u8]) -> Option<Name> {
    Name::read(&mut BinDecoder::new(wire)).ok()
}

async fn send<'a, R: ResponseHandler>(
    response: &mut R,
    msg: hickory_server::zone_handler::MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
) -> ResponseInfo {
    let id = msg.metadata().id;
    match response.send_response(msg).await {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!(error = %e, "could not send a response");
            let mut metadata = Metadata::new(id, MessageType::Response, OpCode::Query);
            metadata.response_code = ResponseCode::ServFail;
            hickory_server::proto::op::Header {
                metadata,
                counts: Default::default(),
            }
            .into()
        }
    }
}

/// Forwards queries outside the served zones to one upstream (CoreDNS `forward`, D5).
pub struct Forwarder {
    pub upstream: SocketAddr,
    pub timeout: Duration,
}

impl Forwarder {
    /// Sends the client's query as it came, over UDP (TCP when the client used TCP, or when
    /// the UDP answer is truncated), and returns the upstream's reply.
    pub async fn forward(&self, raw: &[u8], protocol: Protocol) -> Result<Message, Error> {
        let work = async {
            if protocol == Protocol::Udp {
                let reply = self.udp(raw).await?;
                if !reply.metadata.truncation {
                    return Ok(reply);
                }
            }
            self.tcp(raw).await
        };
        tokio::time::timeout(self.timeout, work)
            .await
            .map_err(|_| Error::UpstreamTimeout {
                upstream: self.upstream,
                timeout: self.timeout,
            })?
    }

    async fn udp(&self, raw: &[u8]) -> Result<Message, Error> {
        let bind: SocketAddr = if self.upstream.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let socket = tokio::net::UdpSocket::bind(bind).await?;
        socket.connect(self.upstream).await?;
        socket.send(raw).await?;
        let id = raw.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]));
        let mut buf = vec![0u8; 65_535];
        loop {
            let n = socket.recv(&mut buf).await?;
            match Message::from_vec(&buf[..n]) {
                Ok(m) if Some(m.metadata.id) == id => return Ok(m),
                _ => continue, // a stray or spoofed datagram: keep waiting
            }
        }
    }

    async fn tcp(&self, raw: &[u8]) -> Result<Message, Error> {
        let mut stream = tokio::net::TcpStream::connect(self.upstream).await?;
        let len = u16::try_from(raw.len()).map_err(|_| Error::QueryTooLarge)?;
        let mut framed = Vec::with_capacity(raw.len() + 2);
        framed.extend_from_slice(&len.to_be_bytes());
        framed.extend_from_slice(raw);
        stream.write_all(&framed).await?;
        let n = stream.read_u16().await?;
        let mut buf = vec![0u8; usize::from(n)];
        stream.read_exact(&mut buf).await?;
        Ok(Message::from_vec(&buf)?)
    }
}
