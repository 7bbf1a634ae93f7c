//! Serving one UDP socket: the fast path answers the common query inline; everything else
//! goes to the same [`DnsHandler`] as TCP, in its own task, so a slow answer (forwarding)
//! never holds the socket.
//!
//! ```text
//!   recv ─▶ fastpath::answer (table snapshot, pre-encoded RRs) ─▶ send
//!            └ Fallback ─▶ spawn: Request::from_bytes ─▶ DnsHandler ─▶ UdpResponder ─▶ send
//!                                  └ unparseable: FORMERR (12 bytes or more) or dropped
//! ```

use std::cell::RefCell;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_server::net::runtime::TokioTime;
use hickory_server::net::xfer::Protocol;
use hickory_server::proto::op::{Header, MessageType, Metadata, OpCode, ResponseCode};
use hickory_server::proto::rr::{Record, RecordType};
use hickory_server::proto::serialize::binary::BinEncoder;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponse;
use tokio::net::UdpSocket;

use crate::fastpath::{self, Fast};
use crate::handler::DnsHandler;

thread_local! {
    static RNG: RefCell<fastrand::Rng> = RefCell::new(fastrand::Rng::new());
}

/// Serves `socket` until it fails for good.
pub async fn serve(socket: Arc<UdpSocket>, handler: DnsHandler) {
    let mut buf = vec![0u8; 4096];
    let mut out = Vec::with_capacity(1232);
    loop {
        let (n, src) = match socket.recv_from(&mut buf).await {
            Ok(x) => x,
            Err(e) => {
                // ICMP errors from earlier sends surface here on Linux; they are not fatal.
                tracing::debug!(error = %e, "UDP receive failed");
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            }
        };
        let start = Instant::now();
        let request = &buf[..n];
        let fast = match handler.shared.table.load().as_deref() {
            Some(table) => {
                RNG.with(|rng| fastpath::answer(table, request, &mut out, &mut rng.borrow_mut()))
            }
            None => Fast::Fallback,
        };
        match fast {
            Fast::Reply { zone, qtype, rcode } => {
                if let Err(e) = socket.send_to(&out, src).await {
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
                tokio::spawn(async move { slow_path(raw, src, socket, handler).await });
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
            let _ = socket.send_to(&reply, src).await;
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
        self.socket
            .send_to(&bytes, self.dst)
            .await
            .map_err(|e| hickory_server::net::NetError::from(e.to_string()))?;
        Ok(info)
    }
}
