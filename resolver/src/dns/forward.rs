//! Forwarding (D5): a query outside the served zones goes as it came to one upstream, the
//! way CoreDNS `forward` does, and its reply comes back as a hickory message. It knows nothing
//! of the table, the process state or the handler that calls it.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_server::net::xfer::Protocol;
use hickory_server::proto::op::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::error::Error;

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
