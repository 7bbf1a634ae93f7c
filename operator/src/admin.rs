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
            let n = match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await
            {
                Ok(Ok(n)) => n,
                _ => return,
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
