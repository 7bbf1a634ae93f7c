//! A minimal HTTP/1.1 admin endpoint shared by the binaries: `/metrics`, `/livez`, `/readyz`.
//! Health probes hit it every few seconds; it stays out of traces.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// What the endpoint asks its owner.
pub trait AdminState: Send + Sync + 'static {
    /// Prometheus text exposition.
    fn metrics(&self) -> String;
    /// Ready to serve (a table loaded, caches synced...).
    fn ready(&self) -> Result<(), String>;
}

/// Reads into `buf` until the request head is complete (a blank line ends it) or `buf` is
/// full; a request may arrive in several segments, and its first read may hold only part of
/// the request line. `None` when the peer closes first or the read fails.
async fn read_head(
    stream: &mut (impl tokio::io::AsyncRead + Unpin),
    buf: &mut [u8],
) -> Option<usize> {
    let mut n = 0;
    while n < buf.len() {
        match stream.read(&mut buf[n..]).await {
            Ok(0) | Err(_) => return None,
            Ok(read) => n += read,
        }
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    Some(n)
}

/// Serves until the listener fails. Each connection gets one response.
pub async fn serve(listener: TcpListener, state: Arc<dyn AdminState>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let state = state.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            let Ok(Some(n)) =
                tokio::time::timeout(Duration::from_secs(5), read_head(&mut stream, &mut buf))
                    .await
            else {
                return;
            };
            let request = String::from_utf8_lossy(&buf[..n]);
            let path = request.split_whitespace().nth(1).unwrap_or("/");
            let (status, content_type, body) = match path {
                "/metrics" => ("200 OK", "text/plain; version=0.0.4", state.metrics()),
                "/livez" => ("200 OK", "text/plain", "ok\n".to_owned()),
                "/readyz" => match state.ready() {
                    Ok(()) => ("200 OK", "text/plain", "ready\n".to_owned()),
                    Err(why) => ("503 Service Unavailable", "text/plain", format!("{why}\n")),
                },
                _ => ("404 Not Found", "text/plain", "not found\n".to_owned()),
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed;
    impl AdminState for Fixed {
        fn metrics(&self) -> String {
            "healthroute_up 1\n".into()
        }
        fn ready(&self) -> Result<(), String> {
            Ok(())
        }
    }

    // A request that arrives in pieces (here a byte at a time up to the path) is answered as
    // a whole: the first read used to see "GET " alone and answer 404.
    #[tokio::test]
    async fn a_request_in_pieces_is_read_whole() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(serve(listener, Arc::new(Fixed)));
        let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
        stream.set_nodelay(true).expect("nodelay");
        for piece in [
            "G",
            "ET ",
            "/met",
            "rics HTTP/1.1\r\n",
            "Host: x\r\n",
            "\r\n",
        ] {
            stream.write_all(piece.as_bytes()).await.expect("write");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut response = String::new();
        tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut response))
            .await
            .expect("in time")
            .expect("read");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(response.ends_with("healthroute_up 1\n"), "{response}");
    }
}
