//! Serving one UDP socket on its own thread: the fast path answers the common query inline;
//! everything else goes to the same [`DnsHandler`] as TCP, as a task on the runtime, so a slow
//! answer (forwarding) never holds the socket.
//!
//! ```text
//!   recv ─▶ fastpath::answer (table snapshot, pre-encoded RRs) ─▶ send
//!            └ Fallback ─▶ spawn: Request::from_bytes ─▶ DnsHandler ─▶ UdpResponder ─▶ send
//!                                  └ unparseable: FORMERR (12 bytes or more) or dropped
//! ```

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::proto::op::{Header, MessageType, Metadata, OpCode, ResponseCode};
use hickory_server::proto::rr::{Record, RecordType};
use hickory_server::proto::serialize::binary::BinEncoder;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponse;
use tokio::runtime::Handle;

use crate::fastpath::{self, Fast};
use crate::handler::DnsHandler;

/// Serves `socket` on the calling (dedicated) thread until `stop` is set: a blocking receive
/// loop wakes for each datagram with no scheduler in between, which is what a one-query-at-a-
/// time client waits on. Fallbacks run as tasks on `runtime`.
pub fn serve(socket: Arc<UdpSocket>, handler: DnsHandler, runtime: Handle, stop: Arc<AtomicBool>) {
    // Wake up now and then to notice `stop`.
    let _ = socket.set_read_timeout(Some(Duration::from_millis(200)));
    let mut buf = vec![0u8; 4096];
    let mut out = Vec::with_capacity(1232);
    let mut rng = fastrand::Rng::new();
    while !stop.load(Ordering::Relaxed) {
        let (n, src) = match socket.recv_from(&mut buf) {
            Ok(x) => x,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => {
                // ICMP errors from earlier sends surface here on Linux; they are not fatal.
                tracing::debug!(error = %e, "UDP receive failed");
                continue;
            }
        };
        let start = Instant::now();
        let request = &buf[..n];
        let fast = match handler.shared.table.load().as_deref() {
            Some(table) => fastpath::answer(table, request, &mut out, &mut rng),
            None => Fast::Fallback,
        };
        match fast {
            Fast::Reply { zone, qtype, rcode } => {
                if let Err(e) = socket.send_to(&out, src) {
                    tracing::debug!(error = %e, %src, "UDP send failed");
                }
                handler.shared.metrics.record_query(
                    Some(zone),
                    RecordType::from(qtype),
                    ResponseCode::from(0, rcode),
                    start.elapsed(),
                );
            }
            Fast::Fallback => {
                let raw = request.to_vec();
                let socket = socket.clone();
                let handler = handler.clone();
                runtime.spawn(async move { slow_path(raw, src, socket, handler).await });
            }
        }
    }
}

async fn slow_path(raw: Vec<u8>, src: SocketAddr, socket: Arc<UdpSocket>, handler: DnsHandler) {
    if raw.len() < 12 {
        return; // not even a header: nothing to answer to
    }
    let header = [raw[0], raw[1], raw[2], raw[3]];
    if header[2] & 0x80 != 0 {
        return; // a response: never answer those (reflection)
    }
    match Request::from_bytes(raw, src, Protocol::Udp) {
        Ok(request) => {
            let responder = UdpResponder { socket, dst: src };
            handler
                .handle_request::<_, TokioTime>(&request, responder)
                .await;
        }
        Err(_) => {
            // FORMERR: the id and opcode as sent, no sections.
            let mut reply = [0u8; 12];
            reply[..2].copy_from_slice(&header[..2]);
            reply[2] = 0x80 | (header[2] & 0x78);
            reply[3] = ResponseCode::FormErr.low();
            let _ = socket.send_to(&reply, src);
        }
    }
}

/// Sends the handler's responses on the socket the query came from, truncated (TC) to the
/// client's EDNS buffer, or 512 bytes without EDNS.
#[derive(Clone)]
struct UdpResponder {
    socket: Arc<UdpSocket>,
    dst: SocketAddr,
}

#[async_trait::async_trait]
impl ResponseHandler for UdpResponder {
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
        let id = response.metadata().id;
        let max = response.edns().map_or(512, |e| e.max_payload().max(512));
        let mut bytes = Vec::with_capacity(512);
        let mut encoder = BinEncoder::new(&mut bytes);
        encoder.set_max_size(max);
        let info = match response.destructive_emit(&mut encoder) {
            Ok(info) => info,
            Err(e) => {
                tracing::debug!(error = %e, "could not encode a response; answering SERVFAIL");
                bytes.clear();
                let mut metadata = Metadata::new(id, MessageType::Response, OpCode::Query);
                metadata.response_code = ResponseCode::ServFail;
                let header = Header {
                    metadata,
                    counts: Default::default(),
                };
                let mut encoder = BinEncoder::new(&mut bytes);
                let _ = hickory_server::proto::serialize::binary::BinEncodable::emit(
                    &header,
                    &mut encoder,
                );
                ResponseInfo::from(header)
            }
        };
        // A UDP send does not wait for the peer; on a blocking socket it returns at once.
        self.socket
            .send_to(&bytes, self.dst)
            .map_err(|e| hickory_server::net::NetError::from(e.to_string()))?;
        Ok(info)
    }
}
