//! The admin endpoint shared by the binaries: `/metrics`, `/livez`, `/readyz`, over hyper's
//! HTTP/1.1 server (one request per connection: probes and scrapers open a connection each).
//! Health probes hit it every few seconds; it stays out of traces.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::metrics::{self, Registry};

/// Whether the process is ready to serve (a table loaded, caches synced...).
pub trait Readiness: Send + Sync + 'static {
    /// Why it is not ready, in words for whoever reads `/readyz`; `None` when it is.
    fn not_ready(&self) -> Option<String>;
}

/// What the endpoint serves: the process's metrics and its readiness.
pub struct Admin {
    pub registry: Registry,
    pub readiness: Arc<dyn Readiness>,
}

fn answer(admin: &Admin, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, content_type, body) = match request.uri().path() {
        "/metrics" => (
            StatusCode::OK,
            metrics::CONTENT_TYPE,
            metrics::encode(&admin.registry),
        ),
        "/livez" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/readyz" => match admin.readiness.not_ready() {
            None => (StatusCode::OK, "text/plain", "ready\n".to_owned()),
            Some(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("{why}\n"),
            ),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

/// Serves until the listener fails. Each connection gets one response; a request head must
/// arrive within 5 seconds.
pub async fn serve(listener: TcpListener, admin: Arc<Admin>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let admin = admin.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let response = answer(&admin, &request);
                async move { Ok::<_, Infallible>(response) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .keep_alive(false)
                .timer(TokioTimer::new())
                .header_read_timeout(Duration::from_secs(5))
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    struct Ready;
    impl Readiness for Ready {
        fn not_ready(&self) -> Option<String> {
            None
        }
    }

    #[derive(Debug)]
    struct Up;
    impl metrics::Collector for Up {
        fn encode(
            &self,
            encoder: prometheus_client::encoding::DescriptorEncoder,
        ) -> std::fmt::Result {
            metrics::Exposition::new(encoder).gauge("healthroute_up", "Up.", 1)
        }
    }

    // A request that arrives in pieces (here a byte at a time up to the path) is answered as
    // a whole: the first read used to see "GET " alone and answer 404.
    #[tokio::test]
    async fn a_request_in_pieces_is_read_whole() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Up));
        let admin = Admin {
            registry,
            readiness: Arc::new(Ready),
        };
        tokio::spawn(serve(listener, Arc::new(admin)));
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
