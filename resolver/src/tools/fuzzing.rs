//! What the data plane's fuzz targets check (`tests/fuzz`, run with cargo-afl), as plain
//! functions: the targets call them on every input, and `cargo test` replays the committed
//! corpora through them.
//!
//! - [`udp_datagram`]: any datagram, through the fast path and, where it falls back, the full
//!   handler: every reply parses strictly, fits the client's limit, echoes the ID and the
//!   question, and nothing panics or waits.
//! - [`published_table`]: ConfigMap data as an API server could return it, through the
//!   assembler and into a serving table.
//!
//! Built only for this crate's tests and behind the feature `fuzzing` (tests/fuzz enables it):
//! the production binaries carry none of it.

use std::sync::{Arc, OnceLock};

use healthroute_compiler::manifests::Manifests;
use healthroute_compiler::{Compiler, ServedZones};
use healthroute_table::published::Assembler;
use hickory_proto::op::Message;
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};

use crate::dns::counters::{AnswerCounters, Tally};
use crate::dns::fastpath::{self, Fast};
use crate::dns::handler::DnsHandler;
use crate::dns::metrics::Metrics;
use crate::dns::serving::{ServingTable, ZoneConfig};
use crate::dns::state::Shared;
use crate::dns::wire::{MAX_UDP_PAYLOAD, wire_name};

/// Every policy, a CNAME chain and a loop, an alias, a TXT too large for 512 bytes.
const ZONE: &str = r#"
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: api, namespace: f}
spec: {name: api.example.com., type: A, routingPolicy: Weighted, records: [{setIdentifier: a, weight: 1, values: ["192.0.2.1"]}, {setIdentifier: b, weight: 3, values: ["192.0.2.2", "192.0.2.3"]}]}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: www, namespace: f}
spec: {name: www.example.com., type: CNAME, routingPolicy: Simple, records: [{setIdentifier: x, values: ["api.example.com."]}]}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: loop-a, namespace: f}
spec: {name: a.loop.example.com., type: CNAME, routingPolicy: Simple, records: [{setIdentifier: x, values: ["b.loop.example.com."]}]}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: loop-b, namespace: f}
spec: {name: b.loop.example.com., type: CNAME, routingPolicy: Simple, records: [{setIdentifier: x, values: ["a.loop.example.com."]}]}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: fleet, namespace: f}
spec: {name: fleet.example.com., type: A, routingPolicy: MultiValue, records: [{setIdentifier: m1, values: ["192.0.2.10", "192.0.2.11", "192.0.2.12", "192.0.2.13", "192.0.2.14"]}, {setIdentifier: m2, values: ["192.0.2.15", "192.0.2.16", "192.0.2.17", "192.0.2.18", "192.0.2.19"]}]}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: alias, namespace: f}
spec: {name: alias.example.com., type: A, routingPolicy: Failover, records: [{setIdentifier: p, failover: {role: Primary}, alias: {recordGroup: api}}, {setIdentifier: s, failover: {role: Secondary}, values: ["198.51.100.1"]}]}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: big, namespace: f}
spec: {name: big.example.com., type: TXT, routingPolicy: Simple, records: [{setIdentifier: x, values: ["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", '"b" "c"', "dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd"]}]}
"#;

fn zones() -> Vec<ZoneConfig> {
    vec![ZoneConfig {
        apex: "example.com.".into(),
        nameservers: Vec::new(),
        default_ttl: 60,
        ..ZoneConfig::default()
    }]
}

fn compiled(text: &str) -> healthroute_table::RoutingTable<healthroute_table::Value> {
    let manifests = Manifests::load_str(std::path::Path::new("fuzz.yaml"), text)
        .unwrap_or_else(|e| panic!("the fuzz zone loads: {e}"));
    let mut compiler = Compiler::new(ServedZones::new(["example.com"]).expect("a valid zone"), 60);
    let _ = manifests.apply_to(&mut compiler, None);
    compiler.compile(jiff::Timestamp::from_second(1_800_000_000).expect("a time"));
    (*compiler.table()).clone()
}

/// The handler and its table, built once per process.
fn shared() -> &'static Arc<Shared> {
    static SHARED: OnceLock<Arc<Shared>> = OnceLock::new();
    SHARED.get_or_init(|| {
        let metrics = Metrics::new(vec!["example.com.".into()]);
        let table = ServingTable::build(&compiled(ZONE), &zones(), None, &metrics.answers)
            .expect("the fuzz table builds");
        let shared = Shared {
            table: Default::default(),
            upstream: None,
            metrics,
            draining: Default::default(),
            signers: Default::default(),
        };
        shared.store(table);
        Arc::new(shared)
    })
}

/// A strict decode: the sections as counted, and no byte after the last.
fn strict(reply: &[u8]) -> Message {
    let mut decoder = BinDecoder::new(reply);
    let m = Message::read(&mut decoder).unwrap_or_else(|e| panic!("reply does not parse: {e}"));
    assert!(
        decoder.is_empty(),
        "{} bytes after the last record",
        decoder.len()
    );
    m
}

/// One datagram through the fast path, and the full handler where it falls back.
pub fn udp_datagram(data: &[u8]) {
    let shared = shared();
    let table = shared.table.load_full().expect("a table");
    let mut out = Vec::new();
    let fast = fastpath::answer(
        &table,
        &shared.signers,
        data,
        &mut out,
        &mut fastrand::Rng::with_seed(7),
        &mut Tally::default(),
    );
    match fast {
        Fast::Reply { .. } => {
            let q =
                fastpath::parse(data, &mut [0u8; 256]).expect("what the fast path answers parses");
            let reply = strict(&out);
            assert!(
                out.len() <= q.limit,
                "{} bytes over the limit {}",
                out.len(),
                q.limit
            );
            assert_eq!(out[..2], data[..2], "the ID");
            assert!(reply.metadata.message_type == hickory_proto::op::MessageType::Response);
            // The question section is copied byte for byte (D3).
            assert_eq!(out.get(12..12 + q.section.len()), Some(q.section));
        }
        Fast::Fallback => full_handler(data),
    }
}

/// What the hickory handler sends for `data` over UDP, checked like a fast-path reply.
fn full_handler(data: &[u8]) {
    let Ok(request) =
        Request::from_bytes(data.to_vec(), ([127, 0, 0, 1], 5353).into(), Protocol::Udp)
    else {
        return; // the UDP loop answers FORMERR from the header alone, or drops it
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let handler = DnsHandler {
        shared: shared().clone(),
    };
    let capture = Capture {
        limit: crate::dns::udp::client_limit(&request),
        ..Capture::default()
    };
    runtime.block_on(handler.handle_request::<_, TokioTime>(&request, capture.clone()));
    let Some(reply) = capture.sent.lock().ok().and_then(|b| b.clone()) else {
        panic!("the handler sent nothing");
    };
    let parsed = strict(&reply);
    let max = request.edns.as_ref().map_or(512, |e| {
        usize::from(e.max_payload().clamp(512, MAX_UDP_PAYLOAD))
    });
    assert!(reply.len() <= max, "{} bytes over {max}", reply.len());
    assert_eq!(parsed.metadata.id, request.metadata.id);
    // The question, as asked; only a reply that could not hold it (TC) or a FORMERR goes
    // without it.
    let asked: Vec<_> = request
        .queries
        .queries()
        .iter()
        .map(|q| q.original().clone())
        .collect();
    if parsed.queries.is_empty() {
        assert!(
            parsed.metadata.truncation
                || parsed.metadata.response_code == hickory_proto::op::ResponseCode::FormErr
                || asked.is_empty(),
            "a reply without the question: {:?}",
            parsed.metadata
        );
    } else {
        assert_eq!(parsed.queries, asked, "the question, as asked");
    }
}

/// A response handler that keeps the bytes it would have sent to a client of UDP limit
/// `limit`.
#[derive(Clone, Default)]
struct Capture {
    sent: Arc<std::sync::Mutex<Option<Vec<u8>>>>,
    limit: usize,
}

#[async_trait::async_trait]
impl ResponseHandler for Capture {
    async fn send_response<'a>(
        &mut self,
        response: hickory_server::zone_handler::MessageResponse<
            '_,
            'a,
            impl Iterator<Item = &'a hickory_proto::rr::Record> + Send + 'a,
            impl Iterator<Item = &'a hickory_proto::rr::Record> + Send + 'a,
            impl Iterator<Item = &'a hickory_proto::rr::Record> + Send + 'a,
            impl Iterator<Item = &'a hickory_proto::rr::Record> + Send + 'a,
        >,
    ) -> Result<ResponseInfo, hickory_server::net::NetError> {
        let (bytes, info) = crate::dns::udp::emit_udp(response, self.limit);
        if let Ok(mut slot) = self.sent.lock() {
            *slot = Some(bytes);
        }
        Ok(info)
    }
}

/// ConfigMap data as the API server could return it: the first byte of each part says
/// manifest (1 mod 3), delta (2 mod 3) or shard (0 mod 3), parts split on `0xFF`. Whatever assembles must build a
/// serving table and answer a query; nothing panics.
pub fn published_table(data: &[u8]) {
    let mut assembler = Assembler::default();
    for part in data.split(|b| *b == 0xFF) {
        let Some((kind, json)) = part.split_first() else {
            continue;
        };
        let _ = match kind % 3 {
            1 => assembler.set_manifest(json),
            2 => assembler.set_delta(json),
            _ => assembler.set_shard(json),
        };
        if let Ok(Some(table)) = assembler.assemble() {
            let counters = AnswerCounters::default();
            if let Ok(serving) = ServingTable::build(&table, &zones(), None, &counters) {
                for name in table.groups.values().map(|g| g.name.clone()).take(8) {
                    let wire = wire_name(&name);
                    let _ = serving.lookup(
                        &wire,
                        1,
                        &mut fastrand::Rng::with_seed(1),
                        &mut Tally::default(),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use healthroute_compiler::fuzzing::replay;

    // SEM-D4 SEM-D6: every kept input and every crash found replays.
    #[test]
    fn the_udp_corpus_replays() {
        replay("udp", udp_datagram);
    }

    // SEM-S8: ConfigMap data of any shape never reaches the wire half-read.
    #[test]
    fn the_published_table_corpus_replays() {
        replay("table", published_table);
    }
}
