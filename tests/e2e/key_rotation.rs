//! A key's secret changed under its name while both clusters run (SEMANTICS X1, issue #42):
//! two standalone resolvers on loopback are two peer clusters, "east" and "west", each asking
//! the other for shop/www every second, each with the shared key in a file laid out as kubelet
//! mounts a Secret (`keys/east-west` → `..data/east-west`, `..data` a symlink swapped by a
//! rename). The test rewrites east's copy, then some seconds later west's, as two clusters'
//! Secrets change on their own schedules, and counts that nothing was refused meanwhile.
//!
//! ```text
//!   east ──signed TXT query (every 1 s)──▶ west's exchange listener
//!   east's exchange listener ◀──────────── west
//!   keys/..data ─▶ ..v1/east-west          (then ..v2: the new secret)
//! ```
//!
//! Each side's peer check turns unhealthy on its first failed exchange (failure threshold
//! 1), so one refused exchange would show in the peer record's answer, in the checker's
//! `healthroute_peer_exchanges_total` and in the listener's
//! `healthroute_exchange_queries_total`. Every wait is bounded.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use healthroute_exchange::{KeyRing, PeerAnswer, PeerValue, Query, TsigKey};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::{RData, RecordType};

use crate::dns::{UDP, exchange_raw, query};
use crate::support::{Backend, Resolver, eventually, free_port, sample, temp_dir};

const KEY: &str = "east-west.";
/// The secret both start with ("healthroute-e2e-key-one-32bytes!").
const BEFORE: &str = "aGVhbHRocm91dGUtZTJlLWtleS1vbmUtMzJieXRlcyE=";
/// The secret both move to ("healthroute-rotated-secret-32by!").
const AFTER: &str = "aGVhbHRocm91dGUtcm90YXRlZC1zZWNyZXQtMzJieSE=";

const EAST_WWW: &str = "192.0.2.10";
const WEST_WWW: &str = "198.51.100.10";

/// How long any one state change may take: seconds of checks and reloads, with room for a
/// loaded machine.
const WITHIN: Duration = Duration::from_secs(20);

/// One cluster: its directory, its exchange address and its process.
struct Cluster {
    name: &'static str,
    dir: PathBuf,
    exchange: SocketAddr,
    resolver: Resolver,
    /// The value of shop/www here, which the other cluster's shop/only answers.
    www: &'static str,
}

/// Writes `secret` as kubelet updates a mounted Secret: the files in a new folder, then the
/// `..data` symlink replaced by a rename, so that a reader sees the old file or the new one.
fn mount_secret(keys: &Path, version: u32, secret: &str) {
    let folder = format!("..v{version}");
    std::fs::create_dir_all(keys.join(&folder)).expect("dir");
    std::fs::write(keys.join(&folder).join("east-west"), format!("{secret}\n")).expect("write");
    let _ = std::fs::remove_file(keys.join("..data_tmp"));
    std::os::unix::fs::symlink(&folder, keys.join("..data_tmp")).expect("symlink");
    std::fs::rename(keys.join("..data_tmp"), keys.join("..data")).expect("swap");
    if version == 1 {
        std::os::unix::fs::symlink("..data/east-west", keys.join("east-west")).expect("symlink");
    } else {
        let _ = std::fs::remove_dir_all(keys.join(format!("..v{}", version - 1)));
    }
}

/// A cluster's directory: its own www (healthy while `web` listens), `only` (the other
/// cluster's www, through a peer record) with its peer check, and the key from a file.
fn cluster_dir(
    name: &str,
    www: &str,
    other: &str,
    exchange: SocketAddr,
    other_exchange: SocketAddr,
    web: &Backend,
) -> PathBuf {
    let dir = temp_dir(&format!("key-rotation-{name}"));
    mount_secret(&dir.join("keys"), 1, BEFORE);
    std::fs::write(
        dir.join("healthroute.yaml"),
        format!(
            "zones: [example.com]\nexchange: {{listen: \"{exchange}\"}}\npeers:\n  - name: {other}\n    addresses: [\"{other_exchange}\"]\n    keys:\n      - {{name: {KEY}, secretFile: keys/east-west}}\n"
        ),
    )
    .expect("write");
    std::fs::write(
        dir.join("shop.yaml"),
        format!(
            r#"apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: www, namespace: shop}}
spec:
  name: www.example.com.
  type: A
  routingPolicy: Simple
  records:
    - {{setIdentifier: {name}, values: ["{www}"], healthCheckRef: {{name: web}}}}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: only, namespace: shop}}
spec:
  name: only.example.com.
  type: A
  routingPolicy: Simple
  records:
    - {{setIdentifier: {other}, peer: {{cluster: {other}, recordGroup: shop/www}}}}
---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {{name: web, namespace: shop}}
spec:
  type: TCP
  target: {{address: 127.0.0.1, port: {port}}}
  requestIntervalSeconds: 1
  failureThreshold: 1
  connectTimeoutSeconds: 1
---
apiVersion: healthroute.io/v1alpha1
kind: HealthCheck
metadata: {{name: peer.{other}.shop.www, namespace: shop}}
spec:
  type: Peer
  peer: {{cluster: {other}, recordGroup: shop/www}}
  requestIntervalSeconds: 1
  failureThreshold: 1
  responseTimeoutSeconds: 1
"#,
            port = web.addr.port()
        ),
    )
    .expect("write");
    dir
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Cluster {
    fn metrics(&self) -> String {
        self.resolver.metrics()
    }

    /// The A values of only.example.com here, sorted.
    fn only(&self) -> Vec<String> {
        let (m, _) = query(self.resolver.dns, "only.example.com.", RecordType::A, UDP);
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "{m:?}");
        let mut values: Vec<String> = m
            .answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0.to_string()),
                _ => None,
            })
            .collect();
        values.sort();
        values
    }

    /// This cluster's peer checks' exchanges with the other, for one result.
    fn exchanges(&self, metrics: &str, other: &str, result: &str) -> f64 {
        sample(
            metrics,
            &format!(
                "healthroute_peer_exchanges_total{{checker=\"standalone\",peer=\"{other}\",result=\"{result}\"}}"
            ),
        )
        .unwrap_or(0.0)
    }

    /// This cluster's key file reloads, for one result.
    fn reloads(&self, result: &str) -> f64 {
        sample(
            &self.metrics(),
            &format!(
                "healthroute_peer_key_reloads_total{{checker=\"standalone\",result=\"{result}\"}}"
            ),
        )
        .unwrap_or(-1.0)
    }

    /// Whether the peer record answers the other cluster's value, not its last resort.
    fn hears(&self, other: &Cluster) -> bool {
        let metrics = self.metrics();
        sample(
            &metrics,
            "healthroute_last_resort{record_group=\"shop/only\"}",
        ) == Some(0.0)
            && self.only() == [other.www]
    }

    /// The exchange queries this cluster's listener refused, and its peer check exchanges
    /// that did not end `ok`: the series, as exported (the first exchanges, before the other
    /// cluster listened, may have failed: a test compares two of these).
    fn not_ok(&self) -> Vec<String> {
        self.metrics()
            .lines()
            .filter(|l| {
                (l.starts_with("healthroute_exchange_queries_total{")
                    && !l.contains("result=\"answered\""))
                    || (l.starts_with("healthroute_peer_exchanges_total{")
                        && !l.contains("result=\"ok\""))
            })
            .filter(|l| !l.ends_with(" 0"))
            .map(str::to_owned)
            .collect()
    }
}

/// For `d`, both clusters' peer records answer the other's value, asked every 100 ms.
fn both_keep_hearing(east: &Cluster, west: &Cluster, d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        for (a, b) in [(east, west), (west, east)] {
            assert!(
                a.hears(b),
                "{}'s peer record fell back {:?} into the rotation: {:?} {:?}",
                a.name,
                start.elapsed(),
                a.not_ok(),
                b.not_ok()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Asks `cluster`'s listener for shop/www signed with `secret`: its answer, read back.
fn ask(cluster: &Cluster, secret: &str) -> Result<PeerAnswer, healthroute_exchange::ExchangeError> {
    let key = TsigKey::new(KEY, "hmac-sha256", secret).expect("key");
    let ring = KeyRing::new(vec![key]).expect("ring");
    let Query { bytes, pending } = Query::new("shop", "www", &ring, unix_now()).expect("query");
    let raw = exchange_raw(cluster.exchange, &bytes, false, Duration::from_secs(3)).expect("reply");
    pending.read_answer(&raw, unix_now())
}

// SEM-X1 SEM-X7 SEM-X10: both clusters' copies of a Secret change, east's first and west's
// seconds later, while each asks the other every second: each resolver reads its new file
// without a restart, no exchange is refused by either listener, every peer check exchange
// succeeds and neither peer record falls back. Afterwards each listener takes the new secret
// and still the old one; a bad file then keeps the secret in use, is told once by its field
// without the secret, and refuses nothing either.
#[test]
fn a_secret_changed_in_both_clusters_refuses_no_exchange() {
    let (east_web, west_web) = (Backend::start(), Backend::start());
    let (east_x, west_x): (SocketAddr, SocketAddr) = (
        ([127, 0, 0, 1], free_port()).into(),
        ([127, 0, 0, 1], free_port()).into(),
    );
    let start = |name, www, other, x, other_x, web: &Backend| {
        let dir = cluster_dir(name, www, other, x, other_x, web);
        let resolver = Resolver::start(&dir, &[]);
        Cluster {
            name,
            dir,
            exchange: x,
            resolver,
            www,
        }
    };
    let east = start("east", EAST_WWW, "west", east_x, west_x, &east_web);
    let mut west = start("west", WEST_WWW, "east", west_x, east_x, &west_web);
    eventually(WITHIN, || east.hears(&west) && west.hears(&east))
        .expect("each hears the other on the first secret");
    for cluster in [&east, &west] {
        assert_eq!(cluster.reloads("loaded"), 0.0, "{}", cluster.metrics());
        assert_eq!(cluster.reloads("refused"), 0.0, "{}", cluster.metrics());
    }
    let answered = |c: &Cluster| {
        sample(
            &c.metrics(),
            "healthroute_exchange_queries_total{result=\"answered\"}",
        )
        .unwrap_or(0.0)
    };
    let answered_before = (answered(&east), answered(&west));
    let not_ok_before = (east.not_ok(), west.not_ok());
    let nothing_new = |east: &Cluster, west: &Cluster| {
        assert_eq!(
            east.not_ok(),
            not_ok_before.0,
            "east: refused or failed exchanges"
        );
        assert_eq!(
            west.not_ok(),
            not_ok_before.1,
            "west: refused or failed exchanges"
        );
    };

    // East's Secret changes first.
    let started = Instant::now();
    mount_secret(&east.dir.join("keys"), 2, AFTER);
    eventually(WITHIN, || {
        both_keep_hearing(&east, &west, Duration::from_millis(100));
        east.reloads("loaded") == 1.0
    })
    .expect("east reads its new secret without a restart");
    eprintln!(
        "east took its new secret {:?} after the write",
        started.elapsed()
    );
    both_keep_hearing(&east, &west, Duration::from_secs(3));

    // West's, some seconds later.
    let started = Instant::now();
    mount_secret(&west.dir.join("keys"), 2, AFTER);
    eventually(WITHIN, || {
        both_keep_hearing(&east, &west, Duration::from_millis(100));
        west.reloads("loaded") == 1.0
    })
    .expect("west reads its new secret without a restart");
    eprintln!(
        "west took its new secret {:?} after the write",
        started.elapsed()
    );
    both_keep_hearing(&east, &west, Duration::from_secs(4));

    // Both listeners take the new secret, and the old one while the change goes on; the
    // answers are signed with the secret that asked.
    let www = |c: &Cluster| {
        Ok(PeerAnswer::Healthy(vec![
            PeerValue::parse("A", c.www).expect("an IPv4 address"),
        ]))
    };
    for cluster in [&east, &west] {
        assert_eq!(
            ask(cluster, AFTER),
            www(cluster),
            "{}: the new secret",
            cluster.name
        );
        assert_eq!(
            ask(cluster, BEFORE),
            www(cluster),
            "{}: the old secret",
            cluster.name
        );
    }
    nothing_new(&east, &west);
    for cluster in [&east, &west] {
        assert_eq!(cluster.reloads("refused"), 0.0, "{}", cluster.metrics());
    }
    let other = |c: &Cluster| if c.name == "east" { "west" } else { "east" };
    for cluster in [&east, &west] {
        let metrics = cluster.metrics();
        assert!(
            cluster.exchanges(&metrics, other(cluster), "ok") >= 10.0,
            "{}: exchanges went on: {metrics}",
            cluster.name
        );
    }
    assert!(
        answered(&east) >= answered_before.0 + 8.0 && answered(&west) >= answered_before.1 + 8.0
    );

    // A bad file on west: the secret in use is kept, the problem told once, nothing refused.
    mount_secret(&west.dir.join("keys"), 3, "not base64!");
    eventually(WITHIN, || west.reloads("refused") == 1.0).expect("west refuses the bad file");
    both_keep_hearing(&east, &west, Duration::from_secs(3));
    assert_eq!(ask(&west, AFTER), www(&west));
    assert_eq!(west.reloads("refused"), 1.0, "told and counted once");
    assert_eq!(west.reloads("loaded"), 1.0);
    nothing_new(&east, &west);
    let log = west.resolver.stop_and_log();
    let told: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("is not base64"))
        .collect();
    assert_eq!(told.len(), 1, "{log}");
    assert!(
        told[0].contains("peers[0].keys[0].secretFile: TSIG key east-west.")
            && told[0].contains("the key's secret in use is kept"),
        "{}",
        told[0]
    );
    assert!(
        log.contains("a new secret from"),
        "the reload is told:\n{log}"
    );
    for secret in [
        BEFORE,
        AFTER,
        &BEFORE[..16],
        &AFTER[..16],
        "healthroute-rotated",
    ] {
        assert!(!log.contains(secret), "a secret in the log:\n{log}");
    }
    let _ = std::fs::remove_dir_all(&east.dir);
    let _ = std::fs::remove_dir_all(&west.dir);
}
