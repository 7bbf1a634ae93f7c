//! The server side of the tests' HTTP stand-ins.

use tokio::io::{AsyncRead, AsyncReadExt};

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
