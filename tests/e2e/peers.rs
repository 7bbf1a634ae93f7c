//! Peer clusters end to end (SEMANTICS X1-X9): two standalone resolvers on loopback are two
//! clusters, "east" and "west". Each asks the other over its TSIG-signed exchange listener,
//! and each decides its own records with TCP health checks against local servers that the
//! tests switch off and on.
//!
//! ```text
//!   east (dns, admin, exchange) ──peer check: signed TXT query──▶ west's exchange listener
//!        │ TCP check                                                   │ answers from west's table
//!        ▼                                                             ▼
//!   east_web (Backend)                                          west_web (Backend)
//! ```
//!
//! East's peer checks are defined in its directory with a one-second interval (the
//! directory's definition wins over the derived one, X4), so that a test waits seconds, not
//! the default 10 s × 3. Every wait is bounded.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use healthroute_exchange::{KeyRing, PeerAnswer, PeerValue, Query, TsigKey};
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::rdata::tsig::TsigError;
use hickory_proto::rr::{RData, RecordType};

use crate::dns::{UDP, exchange_raw, query, strict};
use crate::support::{Backend, Resolver, eventually, free_port, sample, temp_dir};

/// The key both clusters share in most tests ("healthroute-e2e-key-one-32bytes!").
const SHARED: (&str, &str) = ("east-west.", "aGVhbHRocm91dGUtZTJlLWtleS1vbmUtMzJieXRlcyE=");
/// The key a rotation moves to ("healthroute-e2e-key-two-32bytes!").
const NEW: (&str, &str) = (
    "east-west-2.",
    "aGVhbHRocm91dGUtZTJlLWtleS10d28tMzJieXRlcyE=",
);
/// Another secret under the shared key's name ("a-wrong-secret-for-the-e2e-tests").
const WRONG_SECRET: &str = "YS13cm9uZy1zZWNyZXQtZm9yLXRoZS1lMmUtdGVzdHM=";

const WEST_WWW: &str = "198.51.100.10";
const EAST_WWW: &str = "192.0.2.10";
const EAST_API: &str = "192.0.2.11";
const WEST_API: [&str; 2] = ["198.51.100.11", "198.51.100.12"];

/// The exchange name of the RecordGroup shop/www.
const WWW_EXCHANGE_NAME: &str = "www.shop.exchange.healthroute.invalid.";

/// How long any one state change may take here: seconds of checks, with room for a loaded
/// machine (the tests run in parallel, each with two resolvers).
const WITHIN: Duration = Duration::from_secs(20);

fn loopback() -> SocketAddr {
    ([127, 0, 0, 1], free_port()).into()
}

/// `healthroute.yaml`: example.com, this cluster's exchange listener, and one peer.
fn config(
    exchange: SocketAddr,
    peer: &str,
    peer_exchange: SocketAddr,
    keys: &[(&str, &str)],
) -> String {
    let keys: String = keys
        .iter()
        .map(|(name, secret)| {
            format!("      - {{name: {name}, algorithm: hmac-sha256, secret: {secret}}}\n")
        })
        .collect();
    format!(
        "zones: [example.com]\nexchange: {{listen: \"{exchange}\"}}\npeers:\n  - name: {peer}\n    addresses: [\"{peer_exchange}\"]\n    keys:\n{keys}"
    )
}

fn cluster_dir(tag: &str, config: &str, manifests: &str) -> PathBuf {
    let dir = temp_dir(tag);
    std::fs::write(dir.join("healthroute.yaml"), config).expect("write");
    std::fs::write(dir.join("shop.yaml"), manifests).expect("write");
    dir
}

/// A TCP check of `backend`, one probe a second, unhealthy after one failure.
fn tcp_check(name: &str, backend: &Backend) -> String {
    format!(
        "---\napiVersion: healthroute.io/v1alpha1\nkind: HealthCheck\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n  type: TCP\n  target: {{address: 127.0.0.1, port: {port}}}\n  requestIntervalSeconds: 1\n  failureThreshold: 1\n  connectTimeoutSeconds: 1\n",
        port = backend.addr.port()
    )
}

/// The Peer check that records in namespace shop naming `cluster` / `group` read (X4), as the
/// user defines it to make it fast: one exchange a second.
fn peer_check(cluster: &str, group: &str, failure_threshold: u32) -> String {
    let (ns, name) = group.split_once('/').expect("namespace/name");
    format!(
        "---\napiVersion: healthroute.io/v1alpha1\nkind: HealthCheck\nmetadata: {{name: peer.{cluster}.{ns}.{name}, namespace: shop}}\nspec:\n  type: Peer\n  peer: {{cluster: {cluster}, recordGroup: {group}}}\n  requestIntervalSeconds: 1\n  failureThreshold: {failure_threshold}\n  responseTimeoutSeconds: 1\n"
    )
}

/// West's own records: www (one value) and api (two), healthy while `web` listens.
fn west_manifests(web: &Backend) -> String {
    format!(
        r#"apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: www, namespace: shop}}
spec:
  name: www.example.com.
  type: A
  routingPolicy: Simple
  records:
    - {{setIdentifier: west, values: ["{WEST_WWW}"], healthCheckRef: {{name: west-web}}}}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {{name: api, namespace: shop}}
spec:
  name: api.example.com.
  type: A
  routingPolicy: MultiValue
  records:
    - {{setIdentifier: w1, values: ["{}"], healthCheckRef: {{name: west-web}}}}
    - {{setIdentifier: w2, values: ["{}"], healthCheckRef: {{name: west-web}}}}
{}"#,
        WEST_API[0],
        WEST_API[1],
        tcp_check("west-web", web)
    )
}

/// A RecordGroup of east in namespace shop.
fn east_group(name: &str, policy: &str, records: &str) -> String {
    format!(
        "---\napiVersion: healthroute.io/v1alpha1\nkind: RecordGroup\nmetadata: {{name: {name}, namespace: shop}}\nspec:\n  name: {name}.example.com.\n  type: A\n  routingPolicy: {policy}\n  records:\n{records}"
    )
}

/// West on its own exchange address, with `web` deciding its records.
fn start_west(
    tag: &str,
    web: &Backend,
    west_x: SocketAddr,
    east_x: SocketAddr,
) -> (PathBuf, Resolver) {
    let dir = cluster_dir(
        tag,
        &config(west_x, "east", east_x, &[SHARED]),
        &west_manifests(web),
    );
    let west = Resolver::start(&dir, &[]);
    (dir, west)
}

/// The A values of an answer, sorted; panics unless it is NOERROR.
fn a_values(dns: SocketAddr, name: &str) -> Vec<String> {
    let (m, _) = query(dns, name, RecordType::A, UDP);
    assert_eq!(
        m.metadata.response_code,
        ResponseCode::NoError,
        "{name}: {m:?}"
    );
    let mut v: Vec<String> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|s| (*s).to_owned()).collect()
}

/// `healthroute_peer_exchanges_total` of east's checker with west, for one result.
fn exchanges(metrics: &str, result: &str) -> f64 {
    sample(
        metrics,
        &format!(
            "healthroute_peer_exchanges_total{{checker=\"standalone\",peer=\"west\",result=\"{result}\"}}"
        ),
    )
    .unwrap_or(0.0)
}

/// `healthroute_exchange_queries_total` of the answering side, for one result.
fn served(metrics: &str, result: &str) -> f64 {
    sample(
        metrics,
        &format!("healthroute_exchange_queries_total{{result=\"{result}\"}}"),
    )
    .unwrap_or(0.0)
}

fn last_resort(metrics: &str, group: &str) -> Option<f64> {
    sample(
        metrics,
        &format!("healthroute_last_resort{{record_group=\"{group}\"}}"),
    )
}

fn ring(keys: &[(&str, &str)]) -> KeyRing {
    KeyRing::new(
        keys.iter()
            .map(|(name, secret)| TsigKey::new(name, "hmac-sha256", secret).expect("a key"))
            .collect(),
    )
    .expect("a ring")
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One signed exchange query for shop/www to `addr`: the raw reply, and what the client side
/// reads from it.
fn ask_exchange(
    addr: SocketAddr,
    keys: &KeyRing,
    tcp: bool,
) -> (
    Message,
    Result<PeerAnswer, healthroute_exchange::ExchangeError>,
) {
    let Query { bytes, pending } = Query::new("shop", "www", keys, unix_now()).expect("a query");
    let raw = exchange_raw(addr, &bytes, tcp, Duration::from_secs(3)).expect("a reply");
    let read = pending.read_answer(&raw, unix_now());
    (strict(&raw), read)
}

/// The reply's TSIG: (key name, TSIG error).
fn tsig_of(m: &Message) -> Option<(String, Option<TsigError>)> {
    m.signature().map(|r| (r.name.to_ascii(), r.data.error))
}

// SEM-X2 SEM-X4 SEM-X6 SEM-S4 SEM-H5: a Failover group whose primary is east's own server and
// whose secondary is what west answers for shop/www: east's server down → west's value;
// back up → east's again.
#[test]
fn failover_to_the_peer_and_back() {
    let (east_web, west_web) = (Backend::start(), Backend::start());
    let (east_x, west_x) = (loopback(), loopback());
    let (_west_dir, _west) = start_west("peer-fo-west", &west_web, west_x, east_x);
    let manifests = east_group(
        "www",
        "Failover",
        &format!(
            "    - {{setIdentifier: east, failover: {{role: Primary}}, values: [\"{EAST_WWW}\"], healthCheckRef: {{name: east-web}}}}\n    - {{setIdentifier: west, failover: {{role: Secondary}}, peer: {{cluster: west, recordGroup: shop/www}}}}\n"
        ),
    ) + &tcp_check("east-web", &east_web)
        + &peer_check("west", "shop/www", 1);
    let east_dir = cluster_dir(
        "peer-fo-east",
        &config(east_x, "west", west_x, &[SHARED]),
        &manifests,
    );
    let east = Resolver::start(&east_dir, &[]);
    assert_eq!(a_values(east.dns, "www.example.com."), strings(&[EAST_WWW]));
    eventually(WITHIN, || exchanges(&east.metrics(), "ok") >= 1.0)
        .expect("east hears west's shop/www");

    east_web.stop();
    let took = eventually(WITHIN, || {
        a_values(east.dns, "www.example.com.") == strings(&[WEST_WWW])
    })
    .expect("fails over to west's value");
    eprintln!("failed over to the peer in {took:?}");

    east_web.restart();
    eventually(WITHIN, || {
        a_values(east.dns, "www.example.com.") == strings(&[EAST_WWW])
    })
    .expect("fails back to east's own server");
}

/// How many of `n` answers for api.example.com are east's own value, and how many west's
/// two values; panics on any other answer.
fn draw_api(dns: SocketAddr, n: usize) -> (usize, usize) {
    let (mut east, mut west) = (0, 0);
    for _ in 0..n {
        let got = a_values(dns, "api.example.com.");
        if got == strings(&[EAST_API]) {
            east += 1;
        } else if got == strings(&WEST_API) {
            west += 1;
        } else {
            panic!("api answered {got:?}");
        }
    }
    (east, west)
}

// SEM-X3 SEM-S1 SEM-X2: a Weighted group across both clusters, east 3 to west 1: 400 answers
// split about 3:1 (a peer record answers all the values west reports, with its own weight);
// west's server down → only east; east's down (west's back) → only west.
#[test]
fn weighted_across_clusters_renormalises() {
    let (east_web, west_web) = (Backend::start(), Backend::start());
    let (east_x, west_x) = (loopback(), loopback());
    let (_west_dir, _west) = start_west("peer-w-west", &west_web, west_x, east_x);
    let manifests = east_group(
        "api",
        "Weighted",
        &format!(
            "    - {{setIdentifier: east, weight: 3, values: [\"{EAST_API}\"], healthCheckRef: {{name: east-web}}}}\n    - {{setIdentifier: west, weight: 1, peer: {{cluster: west, recordGroup: shop/api}}}}\n"
        ),
    ) + &tcp_check("east-web", &east_web)
        + &peer_check("west", "shop/api", 1);
    let east_dir = cluster_dir(
        "peer-w-east",
        &config(east_x, "west", west_x, &[SHARED]),
        &manifests,
    );
    let east = Resolver::start(&east_dir, &[]);
    eventually(WITHIN, || draw_api(east.dns, 20).1 > 0).expect("west's values are answered");

    let (e, w) = draw_api(east.dns, 400);
    let west_share = w as f64 / 400.0;
    eprintln!("400 answers: east {e}, west {w}");
    // 25 %, ± 8 points: about 3.7 standard deviations of 400 draws.
    assert!(
        (0.17..=0.33).contains(&west_share),
        "east {e}, west {w} of 400: west's share {west_share}"
    );

    // Each wait is on the check that decides (20 answers all from east happen by chance
    // once in 300 draws, and a wait draws often), then on the answers.
    west_web.stop();
    eventually(WITHIN, || {
        exchanges(&east.metrics(), "nothing_healthy") >= 1.0 && draw_api(east.dns, 20) == (20, 0)
    })
    .expect("only east once west is down");
    assert_eq!(draw_api(east.dns, 100), (100, 0));

    west_web.restart();
    eventually(WITHIN, || draw_api(east.dns, 20).1 > 0).expect("west is back");
    east_web.stop();
    eventually(WITHIN, || draw_api(east.dns, 20) == (0, 20)).expect("only west once east is down");
    assert_eq!(draw_api(east.dns, 100), (0, 100));
}

// SEM-X8 SEM-S6 SEM-X3 SEM-X5 SEM-X9 SEM-H5: the peer resolver killed: east's peer check turns
// unhealthy after its threshold (2 failed exchanges), every query meanwhile gets a non-empty
// answer, a group with only the peer record keeps answering the values last heard (its last
// resort), the failures are counted; west restarted → healthy again.
#[test]
fn a_lost_peer_is_unhealthy_and_answers_go_on() {
    let (east_web, west_web) = (Backend::start(), Backend::start());
    let (east_x, west_x) = (loopback(), loopback());
    let (west_dir, mut west) = start_west("peer-lost-west", &west_web, west_x, east_x);
    let manifests = east_group(
        "www",
        "Weighted",
        &format!(
            "    - {{setIdentifier: east, weight: 1, values: [\"{EAST_WWW}\"], healthCheckRef: {{name: east-web}}}}\n    - {{setIdentifier: west, weight: 1, peer: {{cluster: west, recordGroup: shop/www}}}}\n"
        ),
    ) + &east_group(
        "only",
        "Simple",
        "    - {setIdentifier: west, peer: {cluster: west, recordGroup: shop/www}}\n",
    ) + &tcp_check("east-web", &east_web)
        + &peer_check("west", "shop/www", 2);
    let east_dir = cluster_dir(
        "peer-lost-east",
        &config(east_x, "west", west_x, &[SHARED]),
        &manifests,
    );
    let east = Resolver::start(&east_dir, &[]);
    eventually(WITHIN, || {
        last_resort(&east.metrics(), "shop/only") == Some(0.0)
            && a_values(east.dns, "only.example.com.") == strings(&[WEST_WWW])
    })
    .expect("east hears west");

    west.stop_now();
    let ok_before = exchanges(&east.metrics(), "ok");
    let mut asked = 0;
    let took = eventually(WITHIN, || {
        // Never an empty answer while the peer is lost (X8), from either group.
        let www = a_values(east.dns, "www.example.com.");
        assert!(
            www == strings(&[EAST_WWW]) || www == strings(&[WEST_WWW]),
            "www: {www:?}"
        );
        assert_eq!(
            a_values(east.dns, "only.example.com."),
            strings(&[WEST_WWW])
        );
        asked += 1;
        last_resort(&east.metrics(), "shop/only") == Some(1.0)
    })
    .expect("the peer turns unhealthy");
    eprintln!("peer unhealthy {took:?} after it stopped, {asked} rounds of queries answered");
    let metrics = east.metrics();
    let failed: f64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("healthroute_peer_exchanges_total{checker=\"standalone\",peer=\"west\"")
                && !l.contains("result=\"ok\"")
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert!(failed >= 2.0, "failed exchanges counted: {metrics}");
    eprintln!(
        "{}",
        metrics
            .lines()
            .filter(|l| l.starts_with("healthroute_peer_exchanges_total{"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(exchanges(&metrics, "ok"), ok_before, "{metrics}");
    assert!(
        sample(
            &metrics,
            "healthroute_peer_exchange_seconds_count{checker=\"standalone\",peer=\"west\"}"
        )
        .is_some_and(|n| n >= failed),
        "every exchange timed: {metrics}"
    );
    // The mixed group answers from east alone; the peer-only group keeps west's last value
    // (its last resort, X3), never nothing.
    assert_eq!(last_resort(&metrics, "shop/www"), Some(0.0));
    for _ in 0..50 {
        assert_eq!(a_values(east.dns, "www.example.com."), strings(&[EAST_WWW]));
        assert_eq!(
            a_values(east.dns, "only.example.com."),
            strings(&[WEST_WWW])
        );
    }

    // The same exchange address again: east hears west within its checks.
    let _west = Resolver::start(&west_dir, &[]);
    eventually(WITHIN, || {
        last_resort(&east.metrics(), "shop/only") == Some(0.0)
    })
    .expect("the peer is healthy again");
    eventually(WITHIN, || {
        (0..20).any(|_| a_values(east.dns, "www.example.com.") == strings(&[WEST_WWW]))
    })
    .expect("west's value is answered again");
    assert!(exchanges(&east.metrics(), "ok") > ok_before);
}

// SEM-X7 SEM-X5: a wrong secret gets NOTAUTH + BADSIG, an unknown key name NOTAUTH + BADKEY,
// an unsigned query REFUSED, over UDP and TCP, a stale signature NOTAUTH + a signed BADTIME,
// none with a record, each counted by result; a peer configured with the wrong secret is
// unhealthy, and the label and log say why.
#[test]
fn wrong_keys_are_refused_and_said() {
    let west_web = Backend::start();
    let (east_x, west_x) = (loopback(), loopback());
    let (_west_dir, west) = start_west("peer-key-west", &west_web, west_x, east_x);

    for tcp in [false, true] {
        let (m, read) = ask_exchange(west_x, &ring(&[(SHARED.0, WRONG_SECRET)]), tcp);
        assert_eq!(m.metadata.response_code, ResponseCode::NotAuth, "{m:?}");
        assert!(m.answers.is_empty() && m.authorities.is_empty(), "{m:?}");
        assert_eq!(
            tsig_of(&m),
            Some((SHARED.0.to_owned(), Some(TsigError::BadSig)))
        );
        assert_eq!(read.map_err(|e| e.label()), Err("bad_signature"));

        let (m, read) = ask_exchange(west_x, &ring(&[("nobody.", SHARED.1)]), tcp);
        assert_eq!(m.metadata.response_code, ResponseCode::NotAuth, "{m:?}");
        assert!(m.answers.is_empty() && m.authorities.is_empty(), "{m:?}");
        assert_eq!(
            tsig_of(&m),
            Some(("nobody.".to_owned(), Some(TsigError::BadKey)))
        );
        assert_eq!(read.map_err(|e| e.label()), Err("bad_key"));

        let (m, _) = query(
            west_x,
            WWW_EXCHANGE_NAME,
            RecordType::TXT,
            crate::dns::Q { tcp, edns: None },
        );
        assert_eq!(m.metadata.response_code, ResponseCode::Refused, "{m:?}");
        assert!(m.answers.is_empty() && tsig_of(&m).is_none(), "{m:?}");
    }
    // Signed 400 s ago, outside the 300 s fudge: NOTAUTH with a signed BADTIME.
    let Query { bytes, pending } =
        Query::new("shop", "www", &ring(&[SHARED]), unix_now() - 400).expect("a query");
    let raw = exchange_raw(west_x, &bytes, false, Duration::from_secs(3)).expect("a reply");
    let m = strict(&raw);
    assert_eq!(m.metadata.response_code, ResponseCode::NotAuth, "{m:?}");
    assert!(m.answers.is_empty(), "{m:?}");
    assert_eq!(
        tsig_of(&m),
        Some((SHARED.0.to_owned(), Some(TsigError::BadTime)))
    );
    assert!(m.signature().is_some_and(|t| !t.data.mac.is_empty()));
    // The client reads BADTIME only from a reply whose MAC verifies (ClockSkew).
    assert_eq!(
        pending.read_answer(&raw, unix_now()).map_err(|e| e.label()),
        Err("bad_time")
    );
    // The right key, for comparison: west's value, signed.
    let (m, read) = ask_exchange(west_x, &ring(&[SHARED]), false);
    assert_eq!(
        read,
        Ok(PeerAnswer::Healthy(vec![
            PeerValue::parse("A", WEST_WWW).expect("an IPv4 address")
        ]))
    );
    assert_eq!(tsig_of(&m), Some((SHARED.0.to_owned(), None)));

    let metrics = west.metrics();
    assert_eq!(served(&metrics, "bad_signature"), 2.0, "{metrics}");
    assert_eq!(served(&metrics, "bad_key"), 2.0, "{metrics}");
    assert_eq!(served(&metrics, "unsigned"), 2.0, "{metrics}");
    assert_eq!(served(&metrics, "bad_time"), 1.0, "{metrics}");
    assert_eq!(served(&metrics, "answered"), 1.0, "{metrics}");

    // East with the wrong secret: its peer check fails, labelled and logged as BADSIG.
    let manifests = east_group(
        "only",
        "Simple",
        "    - {setIdentifier: west, peer: {cluster: west, recordGroup: shop/www}}\n",
    ) + &peer_check("west", "shop/www", 1);
    let east_dir = cluster_dir(
        "peer-key-east",
        &config(east_x, "west", west_x, &[(SHARED.0, WRONG_SECRET)]),
        &manifests,
    );
    let mut east = Resolver::start(&east_dir, &[]);
    eventually(WITHIN, || {
        exchanges(&east.metrics(), "bad_signature") >= 2.0
    })
    .expect("east's exchanges fail with BADSIG");
    let metrics = east.metrics();
    assert_eq!(exchanges(&metrics, "ok"), 0.0, "{metrics}");
    assert_eq!(last_resort(&metrics, "shop/only"), Some(1.0), "{metrics}");
    assert!(served(&west.metrics(), "bad_signature") >= 4.0);
    let log = east.stop_and_log();
    assert!(
        log.contains("BADSIG (the key east-west. has another secret there)")
            && log.contains("check=shop/peer.west.shop.www"),
        "the log says why:\n{log}"
    );
}

// SEM-X1 SEM-X6: a key rotation without an outage. West accepts [new, old]: a client signing
// with the old key and one signing with the new both get answers, each signed with the key
// it used; east moves from the old key to the new one (a restart with the new file) and stays
// healthy; once west drops the old key, the old one is BADKEY.
#[test]
fn key_rotation_without_an_outage() {
    let west_web = Backend::start();
    let (east_x, west_x) = (loopback(), loopback());
    let west_dir = cluster_dir(
        "peer-rot-west",
        &config(west_x, "east", east_x, &[NEW, SHARED]),
        &west_manifests(&west_web),
    );
    let west = Resolver::start(&west_dir, &[]);
    let healthy = Ok(PeerAnswer::Healthy(vec![
        PeerValue::parse("A", WEST_WWW).expect("an IPv4 address"),
    ]));
    for keys in [&[SHARED][..], &[NEW], &[NEW, SHARED]] {
        let (m, read) = ask_exchange(west_x, &ring(keys), false);
        assert_eq!(read, healthy, "signed with {}", keys[0].0);
        assert_eq!(
            tsig_of(&m),
            Some((keys[0].0.to_owned(), None)),
            "the answer is signed with the query's key"
        );
    }

    let manifests = east_group(
        "only",
        "Simple",
        "    - {setIdentifier: west, peer: {cluster: west, recordGroup: shop/www}}\n",
    ) + &peer_check("west", "shop/www", 1);
    let east_dir = cluster_dir(
        "peer-rot-east",
        &config(east_x, "west", west_x, &[SHARED]),
        &manifests,
    );
    let mut east = Resolver::start(&east_dir, &[]);
    eventually(WITHIN, || exchanges(&east.metrics(), "ok") >= 1.0).expect("old key works");
    east.stop_now();
    std::fs::write(
        east_dir.join("healthroute.yaml"),
        config(east_x, "west", west_x, &[NEW, SHARED]),
    )
    .expect("write");
    let east = Resolver::start(&east_dir, &[]);
    eventually(WITHIN, || exchanges(&east.metrics(), "ok") >= 2.0).expect("new key works");
    let metrics = east.metrics();
    assert_eq!(
        a_values(east.dns, "only.example.com."),
        strings(&[WEST_WWW])
    );
    assert_eq!(last_resort(&metrics, "shop/only"), Some(0.0), "{metrics}");
    let served_metrics = west.metrics();
    for refused in ["bad_key", "bad_signature", "bad_time", "unsigned"] {
        assert_eq!(served(&served_metrics, refused), 0.0, "{served_metrics}");
    }

    // The last step: west drops the old key.
    drop(west);
    std::fs::write(
        west_dir.join("healthroute.yaml"),
        config(west_x, "east", east_x, &[NEW]),
    )
    .expect("write");
    let _west = Resolver::start(&west_dir, &[]);
    let (m, read) = ask_exchange(west_x, &ring(&[SHARED]), false);
    assert_eq!(
        tsig_of(&m),
        Some((SHARED.0.to_owned(), Some(TsigError::BadKey)))
    );
    assert_eq!(read.map_err(|e| e.label()), Err("bad_key"));
    assert_eq!(ask_exchange(west_x, &ring(&[NEW]), false).1, healthy);
    let ok_now = exchanges(&east.metrics(), "ok");
    eventually(WITHIN, || exchanges(&east.metrics(), "ok") > ok_now)
        .expect("east, on the new key, still hears west");
}

// SEM-X7: exchange names on the public DNS port are outside every zone: REFUSED, with no
// record, signed or not, over UDP and TCP; the exchange listener counts none of them.
#[test]
fn exchange_names_are_refused_on_the_public_port() {
    let west_web = Backend::start();
    let (east_x, west_x) = (loopback(), loopback());
    let (_west_dir, west) = start_west("peer-public-west", &west_web, west_x, east_x);
    for tcp in [false, true] {
        let (m, _) = query(
            west.dns,
            WWW_EXCHANGE_NAME,
            RecordType::TXT,
            crate::dns::Q { tcp, edns: None },
        );
        assert_eq!(m.metadata.response_code, ResponseCode::Refused, "{m:?}");
        assert!(m.answers.is_empty() && m.authorities.is_empty(), "{m:?}");

        let Query { bytes, .. } =
            Query::new("shop", "www", &ring(&[SHARED]), unix_now()).expect("a query");
        let raw = exchange_raw(west.dns, &bytes, tcp, Duration::from_secs(3)).expect("a reply");
        let m = Message::from_vec(&raw).expect("decodes");
        assert_eq!(m.metadata.response_code, ResponseCode::Refused, "{m:?}");
        assert!(m.answers.is_empty(), "{m:?}");
    }
    // And the exchange listener is no DNS server for the zone.
    let (m, _) = query(west_x, "www.example.com.", RecordType::A, UDP);
    assert_eq!(m.metadata.response_code, ResponseCode::Refused, "{m:?}");
    assert!(m.answers.is_empty());
    let metrics = west.metrics();
    assert_eq!(served(&metrics, "answered"), 0.0, "{metrics}");
}

/// Runs dig with `args`; `None` (said on stderr) when dig is not installed.
fn dig(args: &[&str]) -> Option<String> {
    match std::process::Command::new("dig").args(args).output() {
        Ok(out) => Some(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )),
        Err(e) => {
            eprintln!("dig is not installed ({e}): the third-party TSIG check is skipped");
            None
        }
    }
}

// SEM-X6 SEM-X7: dig (BIND's TSIG) as a third-party client of the exchange: the right key
// gets the [TYPE, value] TXT answer, which dig verifies; a wrong secret gets NOTAUTH with
// BADSIG; an unknown key name BADKEY.
#[test]
fn dig_asks_the_exchange_with_tsig() {
    let west_web = Backend::start();
    let (east_x, west_x) = (loopback(), loopback());
    let (_west_dir, _west) = start_west("peer-dig-west", &west_web, west_x, east_x);
    let port = west_x.port().to_string();
    let ask = |key: String| {
        dig(&[
            "-y",
            &key,
            "@127.0.0.1",
            "-p",
            &port,
            "+tries=1",
            "+time=3",
            WWW_EXCHANGE_NAME,
            "TXT",
        ])
    };
    let Some(out) = ask(format!("hmac-sha256:{}:{}", SHARED.0, SHARED.1)) else {
        return;
    };
    assert!(out.contains("status: NOERROR"), "{out}");
    assert!(
        out.contains(&format!("IN TXT\t\"A\" \"{WEST_WWW}\"")),
        "{out}"
    );
    assert!(
        !out.contains("could not be validated") && !out.contains("Couldn't verify"),
        "dig verifies the answer's signature: {out}"
    );

    let out = ask(format!("hmac-sha256:{}:{WRONG_SECRET}", SHARED.0)).unwrap_or_default();
    assert!(
        out.contains("status: NOTAUTH") && out.contains(" BADSIG "),
        "{out}"
    );
    assert!(out.contains("ANSWER: 0"), "{out}");
    let out = ask(format!("hmac-sha256:nobody.:{}", SHARED.1)).unwrap_or_default();
    assert!(
        out.contains("status: NOTAUTH") && out.contains(" BADKEY "),
        "{out}"
    );
}

// SEM-X5 SEM-X9: a peer address where something holds the port and never answers: each
// exchange is an unhealthy observation after the response timeout, labelled `timeout`, and
// the log says so.
#[test]
fn a_silent_peer_times_out() {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let silent_x = silent.local_addr().expect("addr");
    let manifests = east_group(
        "only",
        "Simple",
        "    - {setIdentifier: west, peer: {cluster: west, recordGroup: shop/www}}\n",
    ) + &peer_check("west", "shop/www", 1);
    let east_dir = cluster_dir(
        "peer-silent-east",
        &config(loopback(), "west", silent_x, &[SHARED]),
        &manifests,
    );
    let mut east = Resolver::start(&east_dir, &[]);
    eventually(WITHIN, || exchanges(&east.metrics(), "timeout") >= 1.0)
        .expect("the exchange times out");
    let metrics = east.metrics();
    assert_eq!(last_resort(&metrics, "shop/only"), Some(1.0), "{metrics}");
    // The latency histogram holds the timeout (1 s) for each exchange.
    assert!(
        sample(
            &metrics,
            "healthroute_peer_exchange_seconds_sum{checker=\"standalone\",peer=\"west\"}"
        )
        .is_some_and(|s| s >= 0.9),
        "{metrics}"
    );
    let log = east.stop_and_log();
    assert!(
        log.contains(&format!("{silent_x}: no answer within 1 s")),
        "{log}"
    );
}
