//! The server side of the tests' HTTP stand-ins.

use std::net::SocketAddr;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::net::TcpListener;

/// A server on loopback that accepts every connection and never answers (holding each one
/// open, so that only the client's timeout ends it).
pub async fn silent_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    addr
}

/// Reads one request head (up to the blank line, or until the peer stops); returns it.
pub async fn read_head<S: AsyncRead + Unpin>(s: &mut S) -> String {
    let mut buf = Vec::new();
    let mut b = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut b).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&b[..n]),
        }
    }
    String::from_utf8_lossy(&buf).into_owned()
}
