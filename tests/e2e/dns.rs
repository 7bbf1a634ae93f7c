//! The DNS protocol rules (SEMANTICS D1–D7) with real packets over loopback, against the real
//! resolver binary in standalone mode.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::str::FromStr;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};

use crate::support::{Resolver, temp_dir};

const ZONE_FILES: &str = r#"
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: api, namespace: t}
spec:
  name: api.example.com.
  type: A
  routingPolicy: Weighted
  ttl: 30
  records:
    - {setIdentifier: a, weight: 1, values: ["192.0.2.1"]}
    - {setIdentifier: b, weight: 1, values: ["192.0.2.2"]}
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: deep, namespace: t}
spec:
  name: a.b.deep.example.com.
  type: A
  routingPolicy: Simple
  records: [{setIdentifier: x, values: ["192.0.2.9"]}]
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: big, namespace: t}
spec:
  name: big.example.com.
  type: TXT
  routingPolicy: Simple
  records:
    - setIdentifier: x
      values:
        - "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        - "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
        - "cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc"
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: huge, namespace: t}
spec:
  name: huge.example.com.
  type: TXT
  routingPolicy: Simple
  records:
    - setIdentifier: x
      values:
EOF_MARKER
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: alias, namespace: t}
spec:
  name: www.example.com.
  type: CNAME
  routingPolicy: Simple
  records: [{setIdentifier: x, values: ["api.example.com."]}]
"#;

fn zone_dir(tag: &str) -> std::path::PathBuf {
    let dir = temp_dir(tag);
    let huge: String = (0..8)
        .map(|i| {
            format!(
                "        - \"{}\"\n",
                char::from(b'd' + i).to_string().repeat(250)
            )
        })
        .collect();
    std::fs::write(
        dir.join("zone.yaml"),
        ZONE_FILES.replace("EOF_MARKER\n", &huge),
    )
    .expect("write");
    std::fs::write(
        dir.join("healthroute.yaml"),
        "zones: [example.com]\ndefaultTtl: 45\n",
    )
    .expect("write");
    dir
}

#[derive(Clone, Copy)]
pub struct Q {
    pub tcp: bool,
    pub edns: Option<u16>,
}

pub const UDP: Q = Q {
    tcp: false,
    edns: None,
};

pub const TCP: Q = Q {
    tcp: true,
    edns: None,
};

fn message(name: &str, rtype: RecordType, edns: Option<u16>) -> Message {
    let mut m = Message::new(
        fastrand::u16(..),
        hickory_proto::op::MessageType::Query,
        hickory_proto::op::OpCode::Query,
    );
    m.add_query(hickory_proto::op::Query::query(
        Name::from_ascii(name).expect("name"),
        rtype,
    ));
    m.metadata.recursion_desired = true;
    if let Some(size) = edns {
        let mut e = Edns::new();
        e.set_max_payload(size);
        m.set_edns(e);
    }
    m
}

/// Sends raw bytes and returns the raw reply (None on timeout).
pub fn exchange_raw(addr: SocketAddr, bytes: &[u8], tcp: bool, wait: Duration) -> Option<Vec<u8>> {
    if tcp {
        let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
        s.set_read_timeout(Some(wait)).ok()?;
        let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(bytes);
        s.write_all(&framed).ok()?;
        let mut len = [0u8; 2];
        s.read_exact(&mut len).ok()?;
        let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
        s.read_exact(&mut buf).ok()?;
        Some(buf)
    } else {
        let s = UdpSocket::bind("127.0.0.1:0").ok()?;
        s.set_read_timeout(Some(wait)).ok()?;
        s.send_to(bytes, addr).ok()?;
        let mut buf = vec![0u8; 65_535];
        let (n, _) = s.recv_from(&mut buf).ok()?;
        buf.truncate(n);
        Some(buf)
    }
}

pub fn query(addr: SocketAddr, name: &str, rtype: RecordType, q: Q) -> (Message, usize) {
    let m = message(name, rtype, q.edns);
    let raw = exchange_raw(
        addr,
        &m.to_vec().expect("encode"),
        q.tcp,
        Duration::from_secs(3),
    )
    .expect("an answer");
    let reply = strict(&raw);
    assert_eq!(reply.metadata.id, m.metadata.id);
    (reply, raw.len())
}

/// Decodes a reply as a strict client does (dnspython's `TrailingJunk`, dig's "extra bytes
/// at end"): every section as its count says, and not one byte more. SEM-D4.
pub fn strict(raw: &[u8]) -> Message {
    use hickory_proto::serialize::binary::{BinDecodable, BinDecoder};
    let mut decoder = BinDecoder::new(raw);
    let m = Message::read(&mut decoder).expect("decodes");
    assert!(
        decoder.is_empty(),
        "{} bytes after the message's last record",
        decoder.len()
    );
    m
}

fn ips(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            RData::AAAA(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

// SEM-D1 SEM-D2 SEM-D3 SEM-D7: AA, answers, SOA/NS at the apex, NODATA and NXDOMAIN with the
// SOA (negative TTL = SOA minimum), case-insensitive names echoed as asked, TTLs.
#[test]
fn authoritative_answers() {
    let dir = zone_dir("dns-auth");
    let r = Resolver::start(&dir, &[]);
    for tcp in [false, true] {
        let q = || Q { tcp, edns: None };
        let (m, _) = query(r.dns, "api.example.com.", RecordType::A, q());
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert!(m.metadata.authoritative, "AA set");
        assert_eq!(m.answers.len(), 1);
        assert_eq!(m.answers[0].ttl, 30, "TTL from the group");

        let asked = message("ApI.ExAmPlE.CoM.", RecordType::A, None);
        let raw = exchange_raw(
            r.dns,
            &asked.to_vec().expect("encode"),
            tcp,
            Duration::from_secs(2),
        )
        .expect("reply");
        assert!(
            raw.windows(4).any(|w| w == b"\x03ApI"),
            "question echoed as asked"
        );
        assert_eq!(Message::from_vec(&raw).expect("decodes").answers.len(), 1);

        let (m, _) = query(r.dns, "example.com.", RecordType::SOA, q());
        assert!(matches!(m.answers[0].data, RData::SOA(_)));
        let (m, _) = query(r.dns, "example.com.", RecordType::NS, q());
        assert!(matches!(m.answers[0].data, RData::NS(_)));

        let (m, _) = query(r.dns, "api.example.com.", RecordType::AAAA, q());
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "NODATA");
        assert!(m.answers.is_empty());
        let soa = &m.authorities[0];
        assert_eq!(soa.record_type(), RecordType::SOA);
        match &soa.data {
            RData::SOA(s) => assert_eq!(s.minimum, 45, "negative TTL is the SOA minimum"),
            other => panic!("{other:?}"),
        }

        let (m, _) = query(r.dns, "b.deep.example.com.", RecordType::A, q());
        assert_eq!(
            m.metadata.response_code,
            ResponseCode::NoError,
            "empty non-terminal: NODATA"
        );
        let (m, _) = query(r.dns, "nope.example.com.", RecordType::A, q());
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
        assert!(m.metadata.authoritative);
        assert_eq!(m.authorities[0].record_type(), RecordType::SOA);

        // A CNAME answers other types at its name, and its target inside the zones is
        // followed (D8): the CNAME, then api's A, owned by the CNAME's target.
        let (m, _) = query(r.dns, "www.example.com.", RecordType::A, q());
        assert_eq!(m.answers[0].record_type(), RecordType::CNAME);
        assert_eq!(m.answers[1].record_type(), RecordType::A);
        assert_eq!(m.answers[1].name.to_ascii(), "api.example.com.");
        assert_eq!(m.answers.len(), 2);
        // No record of a zone default TTL left unset: D7 falls back to the zone default.
        let (m, _) = query(r.dns, "a.b.deep.example.com.", RecordType::A, q());
        assert_eq!(m.answers[0].ttl, 45);
    }
}

// SEM-D4: over UDP, answers beyond 512 bytes (no EDNS) or the client's EDNS buffer are
// truncated with TC, OPT kept; over TCP the same query gets everything.
#[test]
fn truncation_and_edns() {
    let dir = zone_dir("dns-tc");
    let r = Resolver::start(&dir, &[]);
    // ~630 bytes: over 512, under 1232.
    let (m, n) = query(r.dns, "big.example.com.", RecordType::TXT, UDP);
    assert!(
        m.metadata.truncation && n <= 512,
        "TC without EDNS ({n} bytes)"
    );
    let (m, n) = query(
        r.dns,
        "big.example.com.",
        RecordType::TXT,
        Q {
            tcp: false,
            edns: Some(1232),
        },
    );
    assert!(!m.metadata.truncation, "fits the EDNS buffer ({n} bytes)");
    assert_eq!(m.answers.len(), 3, "one TXT record per value");
    assert!(m.edns.is_some(), "OPT echoed");
    // ~2 KiB: over every UDP size we honour.
    let (m, n) = query(
        r.dns,
        "huge.example.com.",
        RecordType::TXT,
        Q {
            tcp: false,
            edns: Some(4096),
        },
    );
    assert!(
        m.metadata.truncation && n <= 1232,
        "TC at our 1232-byte limit ({n} bytes)"
    );
    assert!(m.edns.is_some(), "OPT kept in a truncated answer");
    let (m, n) = query(r.dns, "huge.example.com.", RecordType::TXT, TCP);
    assert!(
        !m.metadata.truncation && n > 2000,
        "TCP gets the whole answer ({n} bytes)"
    );
    // Three 200-byte strings without EDNS (the case dig and dnspython refused). Whole RRsets only, counts that
    // match, nothing after the last record (strict() checks every reply here).
    let (m, n) = query(r.dns, "big.example.com.", RecordType::TXT, UDP);
    assert!(m.metadata.truncation && n <= 512, "{n} bytes");
    assert!(m.answers.is_empty(), "no part of the RRset");
    let (m, _) = query(r.dns, "big.example.com.", RecordType::TXT, TCP);
    assert_eq!(m.answers.len(), 3, "TCP gets every record");
    // SEM-M1: each of the four queries for big (two of them truncated) was picked and counted
    // once, not again by a fallback.
    let metrics = r.metrics();
    let big = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "healthroute_answers_total{record_group=\"t/big\",set_identifier=\"x\"} ",
            )
        })
        .and_then(|n| n.parse::<u64>().ok());
    assert_eq!(big, Some(4), "{metrics}");
}

// SEM-D6: ANY gets a minimal answer; malformed packets get FORMERR or nothing, and never stop
// the server.
#[test]
fn any_and_malformed() {
    let dir = zone_dir("dns-bad");
    let r = Resolver::start(&dir, &[]);
    let (m, _) = query(r.dns, "api.example.com.", RecordType::ANY, UDP);
    assert_eq!(m.answers.len(), 1);
    assert!(matches!(m.answers[0].data, RData::HINFO(_)), "RFC 8482");

    let mut rng = fastrand::Rng::with_seed(7);
    let good = message("api.example.com.", RecordType::A, None)
        .to_vec()
        .expect("encode");
    for i in 0..300 {
        let bytes: Vec<u8> = match i % 4 {
            0 => (0..rng.usize(0..64)).map(|_| rng.u8(..)).collect(),
            1 => good[..rng.usize(0..good.len())].to_vec(),
            2 => {
                let mut b = good.clone();
                let at = rng.usize(0..b.len());
                b[at] = rng.u8(..);
                b
            }
            _ => {
                let mut b = good.clone();
                b[5] = 5; // QDCOUNT 5 with one question present
                b
            }
        };
        for tcp in [false, i % 10 == 0] {
            if let Some(reply) = exchange_raw(r.dns, &bytes, tcp, Duration::from_millis(100))
                && let Ok(m) = Message::from_vec(&reply)
            {
                assert!(
                    matches!(
                        m.metadata.response_code,
                        ResponseCode::FormErr
                            | ResponseCode::NoError
                            | ResponseCode::NXDomain
                            | ResponseCode::Refused
                            | ResponseCode::NotImp
                            | ResponseCode::ServFail
                    ),
                    "{m:?}"
                );
            }
        }
    }
    // Still answering, over both transports.
    let (m, _) = query(r.dns, "api.example.com.", RecordType::A, UDP);
    assert_eq!(m.answers.len(), 1);
    let (m, _) = query(r.dns, "api.example.com.", RecordType::A, TCP);
    assert_eq!(m.answers.len(), 1);
    // Two questions: FORMERR.
    let mut two = message("api.example.com.", RecordType::A, None);
    two.add_query(hickory_proto::op::Query::query(
        Name::from_str("x.example.com.").expect("name"),
        RecordType::A,
    ));
    let reply = exchange_raw(
        r.dns,
        &two.to_vec().expect("encode"),
        false,
        Duration::from_secs(2),
    )
    .expect("reply");
    assert_eq!(
        Message::from_vec(&reply)
            .expect("decodes")
            .metadata
            .response_code,
        ResponseCode::FormErr
    );
}

/// A burst sent without waiting lands in the resolver's receive batches (recvmmsg) mixed:
/// fast-path answers (A, NXDOMAIN, NODATA), full-path ones (SOA, truncation) and garbage.
/// Every query gets exactly the answer it would get alone, under its own id (D2, D4, D6).
#[test]
fn a_burst_is_answered_query_by_query() {
    let dir = zone_dir("dns-burst");
    let r = Resolver::start(&dir, &[]);
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let kinds = [
        ("api.example.com.", RecordType::A),    // fast path: answer
        ("nope.example.com.", RecordType::A),   // fast path: NXDOMAIN
        ("api.example.com.", RecordType::AAAA), // fast path: NODATA
        ("example.com.", RecordType::SOA),      // full path
        ("huge.example.com.", RecordType::TXT), // full path: truncated
        ("www.example.com.", RecordType::A),    // fast path: CNAME
    ];
    let summary = |m: &Message| {
        (
            m.metadata.response_code,
            m.answers.len(),
            m.metadata.truncation,
        )
    };
    // What each kind gets when asked alone.
    let alone: Vec<_> = kinds
        .iter()
        .map(|(name, rtype)| summary(&query(r.dns, name, *rtype, UDP).0))
        .collect();
    assert_eq!(alone[0], (ResponseCode::NoError, 1, false));
    assert_eq!(alone[1], (ResponseCode::NXDomain, 0, false));
    assert_eq!(alone[2], (ResponseCode::NoError, 0, false));
    assert!(alone[4].2, "the huge TXT is truncated over UDP");
    let mut expect = std::collections::HashMap::new();
    let mut sent = 0;
    for round in 0..20u16 {
        for (k, (name, rtype)) in kinds.iter().enumerate() {
            let mut m = message(name, *rtype, None);
            let id = round * 16 + k as u16;
            m.metadata.id = id;
            expect.insert(id, alone[k]);
            socket
                .send_to(&m.to_vec().expect("encode"), r.dns)
                .expect("send");
            sent += 1;
        }
        // Garbage between the queries: never answered, never in the way.
        socket.send_to(&[0xde, 0xad], r.dns).expect("send");
    }
    let mut got = std::collections::HashMap::new();
    let mut buf = [0u8; 4096];
    while got.len() < sent {
        let Ok((n, _)) = socket.recv_from(&mut buf) else {
            break;
        };
        let m = strict(&buf[..n]);
        assert!(
            got.insert(m.metadata.id, summary(&m)).is_none(),
            "two replies for id {}",
            m.metadata.id
        );
    }
    assert_eq!(got, expect);
    // SEM-M1 SEM-D8: every pick is counted once, under the group and set identifier that gave
    // it: api answered its own name once alone and 20 times in the burst, and as many times
    // again as the target of www's CNAME.
    let metrics = r.metrics();
    let api: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("healthroute_answers_total{record_group=\"t/api\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(api, 42, "{metrics}");
}

/// A one-shot upstream: answers every query with 203.0.113.77 for whatever was asked.
fn stub_upstream() -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let addr = socket.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok((n, from)) = socket.recv_from(&mut buf) {
            let Ok(q) = Message::from_vec(&buf[..n]) else {
                continue;
            };
            let mut reply = Message::response(q.metadata.id, q.metadata.op_code);
            reply.queries = q.queries.clone();
            reply.metadata.recursion_available = true;
            if let Some(query) = q.queries.first() {
                reply.answers.push(hickory_proto::rr::Record::from_rdata(
                    query.name().clone(),
                    120,
                    RData::A(hickory_proto::rr::rdata::A(
                        "203.0.113.77".parse().expect("ip"),
                    )),
                ));
            }
            if let Ok::<Vec<u8>, _>(bytes) = reply.to_vec() {
                let _ = socket.send_to(&bytes, from);
            }
        }
    });
    addr
}

// SEM-D5: outside the served zones: forwarded to the upstream, or REFUSED without one; a dead
// upstream gives SERVFAIL.
#[test]
fn forwarding_and_refused() {
    let dir = zone_dir("dns-fwd");
    let r = Resolver::start(&dir, &[]);
    let (m, _) = query(r.dns, "www.other.org.", RecordType::A, UDP);
    assert_eq!(m.metadata.response_code, ResponseCode::Refused);
    drop(r);

    let upstream = stub_upstream();
    let r = Resolver::start(&dir, &["--upstream", &upstream.to_string()]);
    let (m, _) = query(r.dns, "www.other.org.", RecordType::A, UDP);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert_eq!(ips(&m), vec!["203.0.113.77"]);
    assert!(!m.metadata.authoritative, "not ours: no AA");
    // Served zones are still answered locally.
    let (m, _) = query(r.dns, "api.example.com.", RecordType::A, UDP);
    assert!(m.metadata.authoritative);
    drop(r);

    // An upstream that never answers (held open so no other process can take its port).
    let silent = UdpSocket::bind("127.0.0.1:0").expect("bind");
    let dead = silent.local_addr().expect("addr");
    let r = Resolver::start(
        &dir,
        &["--upstream", &dead.to_string(), "--upstream-timeout", "1"],
    );
    let (m, _) = query(r.dns, "www.other.org.", RecordType::A, UDP);
    assert_eq!(m.metadata.response_code, ResponseCode::ServFail);
    assert!(
        r.metrics()
            .contains("healthroute_dns_upstream_failures_total 1")
    );
}

// SEM-D1 SEM-D3: the same answers through dig, when it is installed.
#[test]
fn dig_sees_the_same() {
    if std::process::Command::new("dig")
        .arg("-v")
        .output()
        .is_err()
    {
        eprintln!("skipped: dig is not installed");
        return;
    }
    let dir = zone_dir("dns-dig");
    let r = Resolver::start(&dir, &[]);
    let out = std::process::Command::new("dig")
        .args([
            "@127.0.0.1",
            "-p",
            &r.dns.port().to_string(),
            "API.example.com",
            "A",
            "+norec",
        ])
        .output()
        .expect("dig");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("status: NOERROR") && text.contains("flags: qr aa"),
        "{text}"
    );
    assert!(
        text.contains("192.0.2.1") || text.contains("192.0.2.2"),
        "{text}"
    );
    let out = std::process::Command::new("dig")
        .args([
            "@127.0.0.1",
            "-p",
            &r.dns.port().to_string(),
            "huge.example.com",
            "TXT",
            "+tcp",
        ])
        .output()
        .expect("dig");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ANSWER: 8") && !text.contains("Truncated"),
        "{text}"
    );
}

// SEM-D4: the same answers over IPv6, UDP and TCP.
#[test]
fn ipv6_udp_and_tcp() {
    let Ok(probe) = UdpSocket::bind("[::1]:0") else {
        eprintln!("skipped: no IPv6 loopback here");
        return;
    };
    let port = probe.local_addr().expect("addr").port();
    drop(probe);
    let v6: SocketAddr = format!("[::1]:{port}").parse().expect("addr");
    let dir = zone_dir("dns-v6");
    let _r = Resolver::start(&dir, &["--listen", &v6.to_string()]);
    for tcp in [false, true] {
        let m = message("api.example.com.", RecordType::A, None);
        let raw = if tcp {
            exchange_raw(
                v6,
                &m.to_vec().expect("encode"),
                true,
                Duration::from_secs(3),
            )
        } else {
            let s = UdpSocket::bind("[::1]:0").expect("bind");
            s.set_read_timeout(Some(Duration::from_secs(3)))
                .expect("timeout");
            s.send_to(&m.to_vec().expect("encode"), v6).expect("send");
            let mut buf = vec![0u8; 4096];
            s.recv_from(&mut buf).ok().map(|(n, _)| buf[..n].to_vec())
        }
        .expect("an answer over IPv6");
        let reply = Message::from_vec(&raw).expect("decodes");
        assert_eq!(reply.answers.len(), 1, "tcp={tcp}");
        assert!(reply.metadata.authoritative);
    }
}
