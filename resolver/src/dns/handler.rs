//! The DNS request handler: reads the current [`ServingTable`] snapshot and answers with the
//! same lookup as the UDP fast path, or forwards what lies outside the served zones
//! (SEMANTICS D1–D12).
//!
//! ```text
//!   Request ─▶ EDNS version (BADVERS), opcode (NOTIMP), one question ─▶ a table?
//!        ─▶ class IN/ANY in a zone ─▶ ServingTable::lookup
//!        ├─ in a zone: the lookup's RRs as hickory records (an NS answer with its glue)
//!        └─ outside:   Forwarder (D5), or REFUSED
//!   every exit answers through Recorder::send: the response goes out and the query is counted
//!   (zone, type, response code, latency), once
//! ```
//!
//! hickory's `Server` owns the TCP listener, parses requests (answering FORMERR to what does
//! not parse, two OPT records included, D10) and encodes responses; this handler turns the
//! lookup's RRs, in the wire form the fast path writes, into hickory records. A reply's header comes from hickory's
//! `Metadata::response_from_request`, which has no Z bit and clears RA (D11); its OPT is our
//! own (D10). It never blocks on a writer: the table is an `ArcSwap` snapshot. Layer: above the
//! process state, the serving table and the wire form; below the UDP loop and the server.

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use hickory_server::net::runtime::Time;
use hickory_server::proto::op::{Edns, MessageType, Metadata, OpCode, ResponseCode};
use hickory_server::proto::rr::{DNSClass, Name, Record, RecordType};
use hickory_server::proto::serialize::binary::{BinDecodable, BinDecoder};
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::{MessageResponse, MessageResponseBuilder};

use crate::dns::counters::Tally;
use crate::dns::dnssec::{self, Signers, ZoneSigner};
use crate::dns::metrics::Metrics;
use crate::dns::serving::{ApexRecords, ChainEnd, Outcome, ServingTable};
use crate::dns::state::Shared;
use crate::dns::wire::{MAX_UDP_PAYLOAD, value_rr, wire_name};

thread_local! {
    static RNG: RefCell<fastrand::Rng> = RefCell::new(fastrand::Rng::new());
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
        response: R,
    ) -> ResponseInfo {
        let mut response = Recorder::new(response, &self.shared.metrics);
        let mut metadata = Metadata::response_from_request(&request.metadata);
        let queries = request.queries.queries();
        let table = self.shared.table.load_full();
        // The question's name in wire form and its zone, once for everything below.
        let qname = queries
            .first()
            .map(|q| wire_name(&q.name().to_string()))
            .unwrap_or_default();
        let zone = table.as_ref().and_then(|t| t.zone_of(&qname));
        // The signer of the question's zone, when it is signed (K1).
        let signer = table
            .as_ref()
            .zip(zone)
            .and_then(|(table, zone)| self.shared.signers.get(&table.zones()[zone].apex));
        // An OPT when the client sent one (D4), our own (D10): our payload size, version 0,
        // none of the client's options; DO set when the client's is and the zone is signed
        // (K2). Over UDP the responder keeps the reply within the client's size.
        let dnssec_ok =
            signer.is_some() && request.edns.as_ref().is_some_and(|e| e.flags().dnssec_ok);
        let edns = request.edns.as_ref().map(|_| {
            let mut e = Edns::new();
            e.set_max_payload(MAX_UDP_PAYLOAD);
            e.set_dnssec_ok(dnssec_ok);
            e
        });
        let mut builder = MessageResponseBuilder::from_message_request(request);
        if let Some(e) = &edns {
            builder.edns(e);
        }
        response.qtype = queries.first().map_or(RecordType::NULL, |q| q.query_type());
        if let Some(code) = not_a_query(request) {
            return response
                .send(builder.error_msg(&request.metadata, code))
                .await;
        }
        let query = &queries[0];
        let Some(table) = table else {
            // Not ready: no table yet (readiness says so too).
            return response
                .send(builder.error_msg(&request.metadata, ResponseCode::ServFail))
                .await;
        };
        response.zone = zone;
        // Another class, or a zone transfer (no server copies our zones: each resolver builds
        // its own from the table): REFUSED at once, where a NODATA would leave a transfer
        // client waiting for the rest of the zone.
        if zone.is_some()
            && (!matches!(query.query_class(), DNSClass::IN | DNSClass::ANY)
                || matches!(query.query_type(), RecordType::AXFR | RecordType::IXFR))
        {
            return response
                .send(builder.error_msg(&request.metadata, ResponseCode::Refused))
                .await;
        }
        let mut tally = Tally::default();
        let outcome = RNG.with(|rng| {
            table.lookup(
                &qname,
                u16::from(query.query_type()),
                &mut rng.borrow_mut(),
                &mut tally,
            )
        });
        drop(tally);
        metadata.authoritative = zone.is_some();
        let none: [&Record; 0] = [];
        match outcome {
            Outcome::NotServed => self.forward(request, builder, response).await,
            served => {
                let owner = query.original().name().clone();
                let (mut answers, mut authority) = records(&table, &served, &owner);
                let mut rcode = served.rcode();
                if let Some(signer) = &signer {
                    // K2-K4: the apex's keys, and with DO every RRset signed.
                    let keys = apex_keys(signer, &table, &served, &qname, query.query_type());
                    let denied = keys.is_none();
                    if let Some(keys) = keys {
                        answers = keys;
                        authority.clear();
                    }
                    if dnssec_ok {
                        (answers, authority, rcode) = sign_sections(
                            &self.shared.signers,
                            &table,
                            (&served, denied),
                            &owner,
                            answers,
                            authority,
                        );
                    }
                }
                let glue = additional(&table, &served);
                metadata.response_code = ResponseCode::from(0, rcode);
                let msg = builder.build(
                    metadata,
                    answers.iter(),
                    none,
                    authority.iter(),
                    glue.iter(),
                );
                response.send(msg).await
            }
        }
    }
}

impl DnsHandler {
    /// D5: a question outside every served zone goes to the upstream, when there is one, and
    /// its answer back (SERVFAIL when it fails); REFUSED without one.
    async fn forward<R: ResponseHandler>(
        &self,
        request: &Request,
        builder: MessageResponseBuilder<'_>,
        response: Recorder<'_, R>,
    ) -> ResponseInfo {
        let Some(upstream) = &self.shared.upstream else {
            return response
                .send(builder.error_msg(&request.metadata, ResponseCode::Refused))
                .await;
        };
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
                let none: [&Record; 0] = [];
                let msg = builder.build(
                    meta,
                    reply.answers.iter(),
                    reply.authorities.iter(),
                    none,
                    reply.additionals.iter(),
                );
                response.send(msg).await
            }
            Err(e) => {
                tracing::debug!(error = %e, "upstream failed");
                self.shared
                    .metrics
                    .upstream_failures
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                response
                    .send(builder.error_msg(&request.metadata, ResponseCode::ServFail))
                    .await
            }
        }
    }
}

/// The response code of a request that is not one question we answer, checked before
/// anything else in this order: an EDNS version we do not speak (D10, RFC 6891 6.1.3; our OPT
/// of version 0 goes with it, hickory writes the extended code's high bits into it), an
/// opcode other than QUERY (D11: NOTIFY, UPDATE, IQUERY, STATUS...: the question echoed, no
/// records), not exactly one question or not a query (FORMERR).
fn not_a_query(request: &Request) -> Option<ResponseCode> {
    if request.edns.as_ref().is_some_and(|e| e.version() > 0) {
        Some(ResponseCode::BADVERS)
    } else if request.metadata.op_code != OpCode::Query {
        Some(ResponseCode::NotImp)
    } else if request.queries.queries().len() != 1
        || request.metadata.message_type != MessageType::Query
    {
        Some(ResponseCode::FormErr)
    } else {
        None
    }
}

/// The client's responder, and the one place a query of the hickory path is counted: every
/// exit of [`DnsHandler::handle_request`] answers through [`Recorder::send`], which sends the
/// response and records the query's zone, type, response code and latency. `send` takes the
/// recorder by value, so a query is answered, and counted, at most once.
struct Recorder<'m, R> {
    inner: R,
    metrics: &'m Metrics,
    /// When the parsed query reached the handler.
    start: Instant,
    /// The served zone the question is in; none outside every zone, or before the lookup.
    zone: Option<usize>,
    /// The question's type; NULL for a request without a question.
    qtype: RecordType,
}

impl<'m, R: ResponseHandler> Recorder<'m, R> {
    fn new(inner: R, metrics: &'m Metrics) -> Self {
        Recorder {
            inner,
            metrics,
            start: Instant::now(),
            zone: None,
            qtype: RecordType::NULL,
        }
    }

    /// Sends `msg` and counts the query under the response code that went out: the
    /// responder's (a UDP reply that cannot be written back goes out as FORMERR), or SERVFAIL
    /// when the send failed.
    async fn send<'a>(
        mut self,
        msg: MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
            impl Iterator<Item = &'a Record> + Send + 'a,
        >,
    ) -> ResponseInfo {
        let id = msg.metadata().id;
        let info = match self.inner.send_response(msg).await {
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
        };
        self.metrics.record_query(
            self.zone,
            self.qtype,
            info.response_code,
            self.start.elapsed(),
        );
        info
    }
}

/// The answer and authority records of `outcome`, as the fast path writes them: the first step
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
                    .for_each(|v| answers.extend(decode_rr(&owner, &value_rr(v, step.ttl))));
                if let Some(next) = step.cname_target().and_then(|t| Name::from_ascii(t).ok()) {
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

/// K4: a question at a signed zone's apex for its DNSKEY, CDS or CDNSKEY RRset, answered
/// from its keys (with or without DO); `None` for any other question.
fn apex_keys(
    signer: &ZoneSigner,
    table: &ServingTable,
    outcome: &Outcome<'_>,
    qname: &[u8],
    qtype: RecordType,
) -> Option<Vec<Record>> {
    let Outcome::NoData { zone } = outcome else {
        return None;
    };
    if !matches!(
        qtype,
        RecordType::DNSKEY | RecordType::CDS | RecordType::CDNSKEY
    ) {
        return None;
    }
    let z = &table.zones()[*zone];
    // At the apex only (the question is in the zone: the same length is the same name); a
    // name below it has no keys.
    if qname.len() != z.apex.len() {
        return None;
    }
    let ttl = soa_minimum(&z.soa)?;
    Some(dnssec::key_records(signer, qtype, ttl)).filter(|keys| !keys.is_empty())
}

/// The SOA minimum of a wire SOA RR (no owner): the zone's default TTL (D7).
fn soa_minimum(soa: &[u8]) -> Option<u32> {
    let tail = soa.get(soa.len().checked_sub(4)?..)?;
    Some(u32::from_be_bytes(tail.try_into().ok()?))
}

/// K2, K3: with DO at a signed zone, each answer and authority RRset followed by its RRSIGs
/// (each by the signer of its owner's zone: `signers`), and a denial (NODATA, or a name that
/// does not exist, also at the end of a CNAME chain) by one NSEC at the denied name (compact
/// denial, RFC 9824): the types there, or NXNAME, and NOERROR for a name that does not
/// exist. `outcome` comes with whether its denial stands (not when the apex's keys answer
/// it). Returns the sections and the response code.
fn sign_sections(
    signers: &Signers,
    table: &ServingTable,
    (outcome, denial): (&Outcome<'_>, bool),
    question: &Name,
    answers: Vec<Record>,
    authority: Vec<Record>,
) -> (Vec<Record>, Vec<Record>, u8) {
    let now = dnssec::unix_now();
    let signer_of = |name: &Name| {
        let zone = table.zone_of(&wire_name(&name.to_ascii()))?;
        signers.get(&table.zones()[zone].apex)
    };
    let denied = match outcome {
        _ if !denial => None,
        Outcome::NoData { .. } | Outcome::NxDomain { .. } => Some(question.clone()),
        Outcome::Answer {
            chain,
            end: ChainEnd::NoData { .. } | ChainEnd::NxDomain { .. },
            ..
        } => chain
            .iter()
            .last()
            .and_then(|step| step.cname_target())
            .and_then(|target| Name::from_ascii(target).ok()),
        _ => None,
    };
    let mut authority = dnssec::with_rrsigs(&signer_of, authority, now);
    let mut rcode = outcome.rcode();
    let denied_at = denied.and_then(|name| {
        let wire = wire_name(&name.to_ascii());
        let zone = table.zone_of(&wire)?;
        let signer = signers.get(&table.zones()[zone].apex)?;
        Some((name, wire, zone, signer))
    });
    if let Some((name, wire, zone, signer)) = denied_at {
        let types = table.types_at(&wire).map(|types| {
            let mut types: Vec<RecordType> = types.into_iter().map(RecordType::from).collect();
            if wire.len() == table.zones()[zone].apex.len() {
                types.extend([RecordType::DNSKEY, RecordType::CDS, RecordType::CDNSKEY]);
            }
            types
        });
        let ttl = soa_minimum(&table.zones()[zone].soa).unwrap_or(60);
        if let Some(nsec) = dnssec::denial(&name, types.as_deref(), ttl) {
            let rrsigs = signer.rrsigs(&name, std::slice::from_ref(&nsec), now);
            authority.push(nsec);
            authority.extend(rrsigs);
        }
        // Compact denial: the name "exists" with no data for the type.
        rcode = 0;
    }
    (
        dnssec::with_rrsigs(&signer_of, answers, now),
        authority,
        rcode,
    )
}

/// The additional records of `outcome`: an apex NS answer's glue, the addresses of its
/// in-zone name servers (D12).
pub fn additional(table: &ServingTable, outcome: &Outcome<'_>) -> Vec<Record> {
    let Outcome::Apex {
        zone,
        records: ApexRecords::Ns,
    } = outcome
    else {
        return Vec::new();
    };
    let z = &table.zones()[*zone];
    let mut out = Vec::new();
    for glue in z.glue.iter() {
        let Some(owner) = z.ns.get(glue.ns).and_then(|rr| decode_name(rr.get(10..)?)) else {
            continue;
        };
        out.extend(glue.rrs.iter().filter_map(|rr| decode_rr(&owner, rr)));
    }
    out
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

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use healthroute_table::{Answer, CompiledGroup, RoutingTable, Selection, Target, Value};
    use hickory_server::net::runtime::TokioTime;
    use hickory_server::net::xfer::Protocol;
    use hickory_server::proto::op::{Message, Query};
    use hickory_server::proto::serialize::binary::BinEncoder;

    use super::*;
    use crate::dns::counters::AnswerCounters;
    use crate::dns::serving::ZoneConfig;
    use crate::dns::state::ServingCollector;

    /// A responder that encodes the response and drops it.
    #[derive(Clone)]
    struct Discard;

    #[async_trait::async_trait]
    impl ResponseHandler for Discard {
        async fn send_response<'a>(
            &mut self,
            response: MessageResponse<
                '_,
                'a,
                impl Iterator<Item = &'a Record> + Send + 'a,
                impl Iterator<Item = &'a Record> + Send + 'a,
                impl Iterator<Item = &'a Record> + Send + 'a,
                impl Iterator<Item = &'a Record> + Send + 'a,
            >,
        ) -> Result<ResponseInfo, hickory_server::net::NetError> {
            let mut bytes = Vec::new();
            Ok(response.destructive_emit(&mut BinEncoder::new(&mut bytes))?)
        }
    }

    fn shared(with_table: bool) -> Arc<Shared> {
        let metrics = Metrics::new(vec!["example.com.".into()]);
        let shared = Arc::new(Shared {
            table: Default::default(),
            upstream: None,
            metrics,
            draining: Default::default(),
            signers: Default::default(),
        });
        if with_table {
            let mut t = RoutingTable::default();
            t.groups.insert(
                "t/api".into(),
                Arc::new(CompiledGroup {
                    key: "t/api".into(),
                    name: "api.example.com.".into(),
                    record_type: healthroute_table::RecordType::A,
                    ttl: 30,
                    last_resort: false,
                    zone_affinity: None,
                    selection: Selection::Fixed(Answer {
                        set_identifier: "x".into(),
                        target: Target::Values(vec![Value::A([192, 0, 2, 1].into())]),
                    }),
                }),
            );
            let zones = [ZoneConfig {
                apex: "example.com.".into(),
                nameservers: vec![],
                default_ttl: 45,
                ..ZoneConfig::default()
            }];
            let table =
                ServingTable::build(&t, &zones, None, &AnswerCounters::default()).expect("builds");
            shared.store(table);
        }
        shared
    }

    async fn ask(shared: &Arc<Shared>, m: Message) -> ResponseCode {
        let client: SocketAddr = ([127, 0, 0, 1], 5353).into();
        let request = Request::from_bytes(m.to_vec().expect("encodes"), client, Protocol::Udp)
            .expect("parses");
        let handler = DnsHandler {
            shared: shared.clone(),
        };
        handler
            .handle_request::<_, TokioTime>(&request, Discard)
            .await
            .response_code
    }

    fn query(name: &str, op: OpCode, class: DNSClass) -> Message {
        let mut m = Message::new(7, MessageType::Query, op);
        let mut q = Query::query(Name::from_ascii(name).expect("name"), RecordType::A);
        q.set_query_class(class);
        m.add_query(q);
        m
    }

    fn count(shared: &Shared, zone: Option<usize>, rcode: ResponseCode) -> u64 {
        shared
            .metrics
            .query_counter(zone, RecordType::A, rcode)
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn render(shared: &Arc<Shared>) -> String {
        let mut registry = healthroute_admin::metrics::Registry::default();
        registry.register_collector(Box::new(ServingCollector(shared.clone())));
        healthroute_admin::metrics::encode(&registry)
    }

    // SEM-D5: every exit of the handler (an answer, NOTIMP, REFUSED outside the zones
    // and for another class, SERVFAIL without a table) counts its query once, under its zone,
    // type and the response code that went out, with one latency sample.
    #[tokio::test]
    async fn every_exit_counts_its_query_once() {
        let s = shared(true);
        let asked = [
            (
                query("api.example.com.", OpCode::Query, DNSClass::IN),
                Some(0),
                ResponseCode::NoError,
            ),
            (
                query("api.example.com.", OpCode::Status, DNSClass::IN),
                None,
                ResponseCode::NotImp,
            ),
            (
                query("www.other.org.", OpCode::Query, DNSClass::IN),
                None,
                ResponseCode::Refused,
            ),
            (
                query("api.example.com.", OpCode::Query, DNSClass::CH),
                Some(0),
                ResponseCode::Refused,
            ),
        ];
        for (n, (m, zone, rcode)) in asked.into_iter().enumerate() {
            assert_eq!(ask(&s, m).await, rcode);
            assert_eq!(count(&s, zone, rcode), 1, "query {n}");
            let text = render(&s);
            let samples = format!("healthroute_dns_request_duration_seconds_count {}", n + 1);
            assert!(text.contains(&samples), "missing {samples} in\n{text}");
        }
        let empty = shared(false);
        let m = query("api.example.com.", OpCode::Query, DNSClass::IN);
        assert_eq!(ask(&empty, m).await, ResponseCode::ServFail);
        assert_eq!(count(&empty, None, ResponseCode::ServFail), 1);
    }
}
