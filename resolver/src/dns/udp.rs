//! Serving one UDP socket on its own thread: the fast path answers the common query inline;
//! everything else goes to the same [`DnsHandler`] as TCP, as a task on the runtime, so a slow
//! answer (forwarding) never holds the socket.
//!
//! ```text
//!   recv ─▶ fastpath::answer (table snapshot, pre-encoded RRs) ─▶ send
//!            └ Fallback ─▶ spawn: Request::from_bytes ─▶ DnsHandler ─▶ UdpResponder ─▶ send
//!                                  └ unparseable: FORMERR (12 bytes or more) or dropped
//! ```

use std::io::IoSliceMut;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
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
use nix::errno::Errno;
use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg};
use tokio::runtime::Handle;
use tracing::Instrument;

use crate::dns::counters::Tally;
use crate::dns::fastpath::{self, Fast};
use crate::dns::handler::DnsHandler;
use crate::dns::wire::MAX_UDP_PAYLOAD;

/// Datagrams taken from the socket per `recvmmsg` call (and replies per `sendmmsg`).
const BATCH: usize = 16;
/// Receive buffer per datagram: larger than any query we answer (EDNS or not).
const RECV_BUF: usize = 4096;

/// Serves `socket` on the calling (dedicated) thread until `stop` is set: a blocking receive
/// loop wakes for each burst of datagrams with no scheduler in between, which is what a
/// one-query-at-a-time client waits on. One `recvmmsg` takes up to [`BATCH`] queued
/// datagrams and one `sendmmsg` sends their fast-path replies, so under load the cost of a
/// system call is shared by the batch. Fallbacks run as tasks on `runtime`.
pub fn serve(socket: Arc<UdpSocket>, handler: DnsHandler, runtime: Handle, stop: Arc<AtomicBool>) {
    // Wake up now and then to notice `stop`.
    let _ = socket.set_read_timeout(Some(Duration::from_millis(200)));
    let fd = socket.as_raw_fd();
    let mut bufs: Box<[[u8; RECV_BUF]; BATCH]> = Box::new([[0u8; RECV_BUF]; BATCH]);
    let mut headers = MultiHeaders::<SockaddrStorage>::preallocate(BATCH, None);
    let mut received: [(usize, Option<SockaddrStorage>); BATCH] = [(0, None); BATCH];
    let mut outs: [Vec<u8>; BATCH] =
        std::array::from_fn(|_| Vec::with_capacity(MAX_UDP_PAYLOAD as usize));
    let mut answered: [Option<(usize, u16, u8)>; BATCH] = [None; BATCH];
    let mut rng = fastrand::Rng::new();
    while !stop.load(Ordering::Relaxed) {
        let n = {
            let mut iovs = bufs.each_mut().map(|b| [IoSliceMut::new(b)]);
            match recvmmsg(
                fd,
                &mut headers,
                iovs.iter_mut(),
                MsgFlags::MSG_WAITFORONE,
                None,
            ) {
                Ok(messages) => {
                    let mut n = 0;
                    for (slot, m) in received.iter_mut().zip(messages) {
                        *slot = (m.bytes, m.address);
                        n += 1;
                    }
                    n
                }
                Err(Errno::EAGAIN | Errno::EINTR) => continue,
                Err(e) => {
                    // ICMP errors from earlier sends surface here on Linux; they are not fatal.
                    tracing::debug!(error = %e, "UDP receive failed");
                    continue;
                }
            }
        };
        let start = Instant::now();
        let table = handler.shared.table.load();
        let metrics = &handler.shared.metrics;
        // Borrows the snapshot's counters: declared after it, and dropped before the send.
        let mut tally = Tally::default();
        for i in 0..n {
            answered[i] = None;
            let (len, Some(src)) = received[i] else {
                continue;
            };
            let request = &bufs[i][..len];
            let fast = match table.as_deref() {
                Some(table) => fastpath::answer(
                    table,
                    &handler.shared.signers,
                    request,
                    &mut outs[i],
                    &mut rng,
                    &mut tally,
                ),
                None => Fast::Fallback,
            };
            match fast {
                Fast::Reply { zone, qtype, rcode } => answered[i] = Some((zone, qtype, rcode)),
                Fast::Fallback => {
                    let Some(src) = socket_addr(&src) else {
                        continue;
                    };
                    let raw = request.to_vec();
                    let socket = socket.clone();
                    let handler = handler.clone();
                    // A debug span: per query, so off at the default level, where creating
                    // it costs one check of the filter; its events are debug ones too.
                    let span = tracing::debug_span!("dns_fallback", client = %src);
                    runtime.spawn(slow_path(raw, src, socket, handler).instrument(span));
                }
            }
        }
        // Counted before the replies leave: a client that has its answer finds it in the
        // metrics.
        for (zone, qtype, rcode) in answered[..n].iter().flatten() {
            tally.add(metrics.query_counter(
                Some(*zone),
                RecordType::from(*qtype),
                ResponseCode::from(0, *rcode),
            ));
        }
        drop(tally);
        let mut replies: Vec<(&[u8], &SockaddrStorage)> = Vec::with_capacity(n);
        for i in 0..n {
            if let (Some(_), (_, Some(src))) = (answered[i], &received[i]) {
                replies.push((&outs[i], src));
            }
        }
        crate::dns::sys::send_batch(socket.as_fd(), &replies, |i, e| {
            tracing::debug!(error = %e, dst = %replies[i].1, "UDP send failed");
        });
        metrics.record_latency(replies.len() as u64, start.elapsed());
    }
}

fn socket_addr(addr: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = addr.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    addr.as_sockaddr_in6()
        .map(|v6| SocketAddr::V6((*v6).into()))
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
            let responder = UdpResponder {
                socket,
                dst: src,
                limit: client_limit(&request),
            };
            handler
                .handle_request::<_, TokioTime>(&request, responder)
                .await;
        }
        Err(_) => {
            // FORMERR: the id, opcode and RD as sent (D11), no sections.
            let mut reply = [0u8; 12];
            reply[..2].copy_from_slice(&header[..2]);
            reply[2] = 0x80 | (header[2] & 0x79);
            reply[3] = ResponseCode::FormErr.low();
            let _ = socket.send_to(&reply, src);
        }
    }
}

/// The largest UDP reply `request`'s client takes: its EDNS payload size within 512..=1232,
/// or 512 without EDNS (D4). The reply's own OPT says 1232 whatever the client's (D10).
pub fn client_limit(request: &Request) -> usize {
    request.edns.as_ref().map_or(512, |e| {
        usize::from(e.max_payload().clamp(512, MAX_UDP_PAYLOAD))
    })
}

/// Sends the handler's responses on the socket the query came from, truncated (TC) to the
/// client's limit.
#[derive(Clone)]
struct UdpResponder {
    socket: Arc<UdpSocket>,
    dst: SocketAddr,
    /// [`client_limit`].
    limit: usize,
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
        let (bytes, info) = emit_udp(response, self.limit);
        // A UDP send does not wait for the peer; on a blocking socket it returns at once.
        self.socket
            .send_to(&bytes, self.dst)
            .map_err(|e| hickory_server::net::NetError::from(e.to_string()))?;
        Ok(info)
    }
}

/// A reply of a header alone: `id`, QR, and `rcode`.
fn header_only(id: u16, rcode: ResponseCode) -> (Vec<u8>, ResponseInfo) {
    let mut metadata = Metadata::new(id, MessageType::Response, OpCode::Query);
    metadata.response_code = rcode;
    let header = Header {
        metadata,
        counts: Default::default(),
    };
    let mut bytes = Vec::with_capacity(12);
    let _ = hickory_server::proto::serialize::binary::BinEncodable::emit(
        &header,
        &mut BinEncoder::new(&mut bytes),
    );
    (bytes, ResponseInfo::from(header))
}

/// `reply` cut to fit `max`: its header, question and OPT with TC set and the counts to
/// match; if even that is too large (a request of many questions, echoed in a FORMERR), the
/// header and OPT alone.
fn truncated(reply: &[u8], max: usize) -> Option<Vec<u8>> {
    use hickory_server::proto::op::Message;
    let mut m = Message::from_vec(reply).ok()?;
    m.answers.clear();
    m.authorities.clear();
    m.additionals.clear();
    m.metadata.truncation = true;
    let bytes = m.to_vec().ok()?;
    if bytes.len() <= max {
        return Some(bytes);
    }
    m.queries.clear();
    m.to_vec().ok()
}

/// Encodes a hickory response for UDP: a reply larger than `max` (the client's limit,
/// [`client_limit`]) becomes its question and OPT with TC, never a cut record (D4).
pub fn emit_udp<'a>(
    response: MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
    max: usize,
) -> (Vec<u8>, ResponseInfo) {
    let id = response.metadata().id;
    let mut bytes = Vec::with_capacity(512);
    let mut encoder = BinEncoder::new(&mut bytes);
    let info = match response.destructive_emit(&mut encoder) {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!(error = %e, "could not encode a response; answering SERVFAIL");
            return header_only(id, ResponseCode::ServFail);
        }
    };
    if bytes.len() > max {
        // Too large for the client: the question (and OPT) with TC, no partial records
        // (D4); the client asks again over TCP.
        bytes = truncated(&bytes, max).unwrap_or_default();
    }
    // A question hickory read but cannot write back (found by fuzzing: a name whose
    // compression pointer leads into the header) would go out as a reply no client can
    // read: answer FORMERR with the header alone instead (D6).
    if hickory_server::proto::op::Message::from_vec(&bytes).is_err() {
        return header_only(id, ResponseCode::FormErr);
    }
    (bytes, info)
}
