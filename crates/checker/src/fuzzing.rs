//! What the checker's fuzz target checks (`tests/fuzz/src/bin/http.rs`), as a plain function
//! that `cargo test` also replays over the committed corpus (see
//! `healthroute_compiler::fuzzing`). Built only for tests and with the `fuzzing` feature,
//! which tests/fuzz turns on.

use std::time::Duration;

use crate::probe::{ProbeKind, ProbeSpec, http_exchange};

/// Bytes a server sends back, read by the HTTP probe: an answer or an error within the
/// response timeout, whatever arrives, and never more than the search window read.
pub fn http_response(data: &[u8]) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let (search, response) = match data.split_first() {
        // The first byte picks whether the probe looks for a string (H3).
        Some((b, rest)) if b % 2 == 1 => (Some(b"ok".to_vec()), rest),
        Some((_, rest)) => (None, rest),
        None => (None, data),
    };
    let spec = ProbeSpec {
        kind: ProbeKind::Http,
        address: "127.0.0.1".into(),
        port: 80,
        path: "/healthz".into(),
        host: None,
        search,
        connect_timeout: Duration::from_secs(1),
        response_timeout: Duration::from_secs(1),
    };
    runtime.block_on(async {
        let (mut server, client) = tokio::io::duplex(64 * 1024);
        let response = response.to_vec();
        let serve = async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut request = [0u8; 1024];
            let _ = server.read(&mut request).await;
            let _ = server.write_all(&response).await;
            drop(server);
        };
        let probe = tokio::time::timeout(Duration::from_secs(2), http_exchange(client, &spec));
        let ((), result) = tokio::join!(serve, probe);
        assert!(
            result.is_ok(),
            "the exchange ends once the server has hung up"
        );
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use healthroute_compiler::fuzzing::replay;

    #[test]
    fn the_http_response_corpus_replays() {
        replay("http", http_response);
    }
}
