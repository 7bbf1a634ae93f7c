//! What the control plane's fuzz targets check (`tests/fuzz`, run with cargo-afl), as plain
//! functions: the targets call them on every input, and `cargo test` replays the committed
//! corpora through them, so a crash found once stays a test.
//!
//! Each returns normally for any input and panics only when an invariant breaks.

use std::time::Duration;

use crate::checker::probe::{ProbeKind, ProbeSpec, http_exchange};
use crate::compiler::{Compiler, ServedZones};
use crate::manifests::Manifests;

/// YAML bytes, as a file of a manifest directory, to a compiled table: a bad document is an
/// error naming it, never a panic; whatever compiles gives a table of groups in the zone.
pub fn manifests(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let zones = ServedZones::new(["example.com"]).expect("a valid zone");
    match Manifests::load_str(std::path::Path::new("fuzz.yaml"), text) {
        Ok(m) => {
            let mut compiler = Compiler::new(zones.clone(), 60);
            let _ = m.apply_to(&mut compiler, None);
            compiler.compile(jiff::Timestamp::from_second(1_800_000_000).expect("a time"));
            for group in compiler.table().groups.values() {
                assert!(
                    zones.zone_of(&group.name).is_some(),
                    "{} served outside the zones",
                    group.name
                );
            }
        }
        Err(e) => assert!(!e.to_string().is_empty(), "an error says what is wrong"),
    }
}

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

/// The committed corpus of `target` (`tests/fuzz/corpus/<target>/`), every file, in name
/// order: what the replay tests feed the checks.
pub fn corpus(target: &str) -> Vec<Vec<u8>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fuzz/corpus")
        .join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display())))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every input the fuzzers kept (and every crash they found) goes through again.
    #[test]
    fn the_manifest_corpus_replays() {
        let inputs = corpus("manifests");
        assert!(!inputs.is_empty());
        inputs.iter().for_each(|i| manifests(i));
    }

    #[test]
    fn the_http_response_corpus_replays() {
        let inputs = corpus("http");
        assert!(!inputs.is_empty());
        inputs.iter().for_each(|i| http_response(i));
    }
}
