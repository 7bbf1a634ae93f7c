//! The DNS protocol toward the outside (SEMANTICS D10–D12): EDNS, header bits and opcodes, and
//! a zone's apex with its nameservers, with real packets over loopback against the real
//! resolver binary, over UDP (the fast path, and the handler for what it declines) and TCP
//! (hickory's server and the handler).

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::EdnsOption;
use hickory_proto::rr::{Name, RData, RecordType};

use crate::dns::{Q, exchange_raw, query, strict};
use crate::support::{Resolver, resolver, temp_dir};

const RECORDS: &str = r#"
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: api, namespace: t}
spec:
  name: api.example.com.
  type: A
  routingPolicy: Simple
  records: [{setIdentifier: x, values: ["192.0.2.1"]}]
"#;

/// A RecordGroup that holds a nameserver's name (D12: it wins).
const NS_GROUP: &str = r#"
---
apiVersion: healthroute.io/v1alpha1
kind: RecordGroup
metadata: {name: ns2, namespace: t}
spec:
  name: ns2.example.com.
  type: A
  routingPolicy: Simple
  records: [{setIdentifier: x, values: ["203.0.113.2"]}]
"#;

const APEX_CONFIG: &str = r#"
zones:
  - name: example.com
    nameservers:
      - {name: ns1.example.com., addresses: [192.0.2.53, "2001:db8::53"]}
      - {name: ns2.example.com., addresses: [198.51.100.53]}
      - {name: ns3.example.com., addresses: [198.51.100.54]}
      - {name: ns.provider.net.}
    soa: {rname: dns-admin.example.com.}
defaultTtl: 45
"#;

/// A manifest directory with `records` and `config` as its healthroute.yaml.
fn dir_with(tag: &str, records: &str, config: &str) -> std::path::PathBuf {
    let dir = temp_dir(tag);
    std::fs::write(dir.join("zone.yaml"), records).expect("write");
    std::fs::write(dir.join("healthroute.yaml"), config).expect("write");
    dir
}

fn plain_zone(tag: &str) -> Resolver {
    let dir = dir_with(tag, RECORDS, "zones: [example.com]\n");
    Resolver::start(&dir, &[])
}

/// A query for `name`/`rtype` with `edns` set up by the caller, as bytes.
fn message(name: &str, rtype: RecordType, op: OpCode, edns: Option<Edns>) -> Message {
    let mut m = Message::new(fastrand::u16(..), MessageType::Query, op);
    m.add_query(Query::query(Name::from_ascii(name).expect("name"), rtype));
    m.metadata.recursion_desired = true;
    if let Some(e) = edns {
        m.set_edns(e);
    }
    m
}

fn ask_raw(addr: SocketAddr, bytes: &[u8], tcp: bool) -> Vec<u8> {
    exchange_raw(addr, bytes, tcp, Duration::from_secs(3)).expect("an answer")
}

/// The 11 bytes of an OPT that says only our payload size (1232), version 0, `rcode_high`,
/// no flags (DO clear) and no option.
fn our_opt(rcode_high: u8) -> [u8; 11] {
    [0, 0, 41, 0x04, 0xD0, rcode_high, 0, 0, 0, 0, 0]
}

fn transport(tcp: bool) -> &'static str {
    if tcp { "TCP" } else { "UDP" }
}

// SEM-D10: a query of EDNS version 1 gets BADVERS (header RCODE 0, the OPT's extended RCODE 1)
// with an OPT of version 0 and no records; unknown options, the DO bit and a large payload
// are not echoed (the OPT carries our 1232 only); two OPTs get FORMERR. Over UDP (the fast
// path, and the handler for a name outside the zones) and TCP.
#[test]
fn edns_versions_options_and_flags() {
    let r = plain_zone("proto-edns");
    for tcp in [false, true] {
        let t = transport(tcp);
        for name in ["api.example.com.", "www.other.org."] {
            let mut v1 = Edns::new();
            v1.set_version(1).set_max_payload(1232);
            let asked = message(name, RecordType::A, OpCode::Query, Some(v1));
            let raw = ask_raw(r.dns, &asked.to_vec().expect("encode"), tcp);
            let m = strict(&raw);
            // 16: BADVERS (hickory names the code BADSIG, which shares it with TSIG).
            assert_eq!(u16::from(m.metadata.response_code), 16, "{t} {name}");
            assert_eq!(raw[3] & 0x0F, 0, "{t}: header RCODE 0");
            assert_eq!(raw[raw.len() - 11..], our_opt(1), "{t} {name}: our OPT");
            assert_eq!(u16::from_be_bytes([raw[6], raw[7]]), 0, "no answer");
            assert_eq!(u16::from_be_bytes([raw[8], raw[9]]), 0, "no authority");
            assert_eq!(u16::from_be_bytes([raw[10], raw[11]]), 1, "the OPT alone");
            assert_eq!(m.queries.len(), 1, "{t}: the question echoed");

            let mut odd = Edns::new();
            odd.set_max_payload(4096).set_dnssec_ok(true);
            odd.options_mut()
                .insert(EdnsOption::Unknown(65001, b"echo me".to_vec()));
            let mut bytes = message(name, RecordType::A, OpCode::Query, Some(odd))
                .to_vec()
                .expect("encode");
            // An unknown EDNS flag too, the bit after DO. The OPT ends the query: 11 bytes,
            // then the option (4 + 7); its flags are its 8th and 9th bytes.
            let flags_at = bytes.len() - 22 + 7;
            assert_eq!(bytes[flags_at], 0x80, "DO set");
            bytes[flags_at] |= 0x40;
            let raw = ask_raw(r.dns, &bytes, tcp);
            let m = strict(&raw);
            let expected = if name.starts_with("api") {
                ResponseCode::NoError
            } else {
                ResponseCode::Refused
            };
            assert_eq!(m.metadata.response_code, expected, "{t} {name}");
            assert_eq!(
                raw[raw.len() - 11..],
                our_opt(0),
                "{t} {name}: 1232, DO clear, no option"
            );
        }
        // Two OPT records: FORMERR.
        let mut bytes = message(
            "api.example.com.",
            RecordType::A,
            OpCode::Query,
            Some(Edns::new()),
        )
        .to_vec()
        .expect("encode");
        let opt = bytes[bytes.len() - 11..].to_vec();
        bytes.extend_from_slice(&opt);
        bytes[11] = 2;
        let raw = ask_raw(r.dns, &bytes, tcp);
        assert_eq!(
            Message::from_vec(&raw)
                .expect("decodes")
                .metadata
                .response_code,
            ResponseCode::FormErr,
            "{t}: two OPTs"
        );
    }
    // Still answering.
    let (m, _) = query(
        r.dns,
        "api.example.com.",
        RecordType::A,
        Q {
            tcp: false,
            edns: Some(1232),
        },
    );
    assert_eq!(m.answers.len(), 1);
}

// SEM-D11: the reply's Z bit is clear whatever the query's, RD is echoed, RA is clear; an
// opcode other than QUERY (IQUERY, STATUS, NOTIFY, UPDATE) gets NOTIMP with the question echoed
// and no records. UDP and TCP.
#[test]
fn header_bits_and_opcodes() {
    let r = plain_zone("proto-header");
    for tcp in [false, true] {
        let t = transport(tcp);
        // The fast path (in the zone), and the handler (outside: REFUSED; another class).
        for name in ["api.example.com.", "nope.example.com.", "www.other.org."] {
            for rd in [false, true] {
                let mut m = message(name, RecordType::A, OpCode::Query, None);
                m.metadata.recursion_desired = rd;
                let mut bytes = m.to_vec().expect("encode");
                bytes[3] |= 0x40; // Z
                let raw = ask_raw(r.dns, &bytes, tcp);
                strict(&raw);
                assert_eq!(raw[3] & 0x40, 0, "{t} {name}: Z clear");
                assert_eq!(raw[3] & 0x80, 0, "{t} {name}: RA clear");
                assert_eq!(raw[2] & 0x01 == 1, rd, "{t} {name}: RD echoed");
            }
        }
        for op in [
            OpCode::Unknown(1), // IQUERY
            OpCode::Status,
            OpCode::Notify,
            OpCode::Update,
        ] {
            let asked = message("example.com.", RecordType::SOA, op, None);
            let mut bytes = asked.to_vec().expect("encode");
            bytes[2] |= 0x01; // RD, to see it echoed
            let raw = ask_raw(r.dns, &bytes, tcp);
            let m = strict(&raw);
            assert_eq!(m.metadata.response_code, ResponseCode::NotImp, "{t} {op}");
            assert_eq!(m.metadata.op_code, op, "{t}: the opcode as asked");
            assert_eq!(m.queries, asked.queries, "{t} {op}: the question echoed");
            assert!(
                m.answers.is_empty() && m.authorities.is_empty() && m.additionals.is_empty(),
                "{t} {op}: no records"
            );
            assert_eq!(raw[2] & 0x01, 1, "{t} {op}: RD echoed");
            assert_eq!(raw[3] & 0xC0, 0, "{t} {op}: RA and Z clear");
        }
    }
}

// SEM-D11: a zone transfer (AXFR, IXFR) of a served zone gets REFUSED at once: no server copies our
// zones (each resolver builds its own from the table), and a NODATA left transfer clients
// (Zonemaster's NAMESERVER03) waiting for the rest of the zone.
#[test]
fn zone_transfers_are_refused() {
    let r = plain_zone("proto-axfr");
    for tcp in [false, true] {
        for rtype in [RecordType::AXFR, RecordType::IXFR] {
            let asked = message("example.com.", rtype, OpCode::Query, None);
            let raw = ask_raw(r.dns, &asked.to_vec().expect("encode"), tcp);
            let m = strict(&raw);
            assert_eq!(
                m.metadata.response_code,
                ResponseCode::Refused,
                "{} {rtype}",
                transport(tcp)
            );
            assert!(m.answers.is_empty());
        }
    }
}

fn shown(records: &[hickory_proto::rr::Record]) -> Vec<String> {
    records
        .iter()
        .map(|r| {
            let value = match &r.data {
                RData::A(a) => a.0.to_string(),
                RData::AAAA(a) => a.0.to_string(),
                RData::NS(n) => n.0.to_ascii(),
                other => format!("{other:?}"),
            };
            format!("{} {} {value}", r.name.to_ascii().to_lowercase(), r.ttl)
        })
        .collect()
}

// SEM-D12: a zone's configured nameservers: the apex NS RRset lists them, with the in-zone
// ones' addresses as glue; their names answer A and AAAA from the configuration (NODATA for a
// type without an address); the SOA names the first nameserver and the configured RNAME. Over
// UDP and TCP, with and without EDNS.
#[test]
fn the_apex_for_the_outside() {
    let dir = dir_with("proto-apex", RECORDS, APEX_CONFIG);
    let r = Resolver::start(&dir, &[]);
    for tcp in [false, true] {
        for edns in [None, Some(1232)] {
            let q = Q { tcp, edns };
            let t = format!("{} edns={edns:?}", transport(tcp));
            let (m, _) = query(r.dns, "example.com.", RecordType::NS, q);
            assert!(m.metadata.authoritative && !m.metadata.truncation, "{t}");
            assert_eq!(
                shown(&m.answers),
                [
                    "example.com. 45 ns1.example.com.",
                    "example.com. 45 ns2.example.com.",
                    "example.com. 45 ns3.example.com.",
                    "example.com. 45 ns.provider.net.",
                ],
                "{t}"
            );
            assert_eq!(
                shown(&m.additionals),
                [
                    "ns1.example.com. 45 192.0.2.53",
                    "ns1.example.com. 45 2001:db8::53",
                    "ns2.example.com. 45 198.51.100.53",
                    "ns3.example.com. 45 198.51.100.54",
                ],
                "{t}: glue"
            );
            let (m, _) = query(r.dns, "NS1.example.com.", RecordType::AAAA, q);
            assert_eq!(
                shown(&m.answers),
                ["ns1.example.com. 45 2001:db8::53"],
                "{t}"
            );
            assert!(m.metadata.authoritative);
            let (m, _) = query(r.dns, "ns2.example.com.", RecordType::A, q);
            assert_eq!(
                shown(&m.answers),
                ["ns2.example.com. 45 198.51.100.53"],
                "{t}"
            );
            let (m, _) = query(r.dns, "ns2.example.com.", RecordType::AAAA, q);
            assert_eq!(
                m.metadata.response_code,
                ResponseCode::NoError,
                "{t}: NODATA"
            );
            assert!(m.answers.is_empty() && m.authorities.len() == 1, "{t}");
            let (m, _) = query(r.dns, "example.com.", RecordType::SOA, q);
            let RData::SOA(soa) = &m.answers[0].data else {
                panic!("{t}: {:?}", m.answers);
            };
            assert_eq!(soa.mname.to_ascii(), "ns1.example.com.", "{t}");
            assert_eq!(soa.rname.to_ascii(), "dns-admin.example.com.", "{t}");
            // The table's own names answer as before.
            let (m, _) = query(r.dns, "api.example.com.", RecordType::A, q);
            assert_eq!(shown(&m.answers), ["api.example.com. 45 192.0.2.1"], "{t}");
        }
    }
}

// SEM-D12: a RecordGroup at a nameserver's name wins over its configured addresses: the
// RecordGroup answers there (NODATA for the other type), no glue is given for that name, and
// the resolver says so in its log.
#[test]
fn a_record_group_wins_over_a_nameserver_address() {
    let dir = dir_with("proto-shadow", &format!("{RECORDS}{NS_GROUP}"), APEX_CONFIG);
    let mut r = Resolver::start(&dir, &[]);
    for tcp in [false, true] {
        let q = Q { tcp, edns: None };
        let (m, _) = query(r.dns, "ns2.example.com.", RecordType::A, q);
        assert_eq!(shown(&m.answers), ["ns2.example.com. 45 203.0.113.2"]);
        let (m, _) = query(r.dns, "ns2.example.com.", RecordType::AAAA, q);
        assert!(m.answers.is_empty(), "the RecordGroup's name: NODATA");
        let (m, _) = query(r.dns, "example.com.", RecordType::NS, q);
        assert_eq!(
            shown(&m.additionals),
            [
                "ns1.example.com. 45 192.0.2.53",
                "ns1.example.com. 45 2001:db8::53",
                "ns3.example.com. 45 198.51.100.54",
            ]
        );
    }
    r.stop_now();
    let mut log = String::new();
    if let Some(mut stderr) = r.child.stderr.take() {
        use std::io::Read;
        let _ = stderr.read_to_string(&mut log);
    }
    assert!(
        log.contains("a RecordGroup holds a nameserver's name") && log.contains("ns2.example.com."),
        "{log}"
    );
}

// SEM-D12: without nameservers the apex is as before: `ns.<zone>` in NS and MNAME, with no
// address and no glue.
#[test]
fn without_nameservers_the_apex_is_as_before() {
    let r = plain_zone("proto-plain");
    for tcp in [false, true] {
        let q = Q { tcp, edns: None };
        let (m, _) = query(r.dns, "example.com.", RecordType::NS, q);
        assert_eq!(shown(&m.answers), ["example.com. 60 ns.example.com."]);
        assert!(m.additionals.is_empty());
        let (m, _) = query(r.dns, "ns.example.com.", RecordType::A, q);
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
        let (m, _) = query(r.dns, "example.com.", RecordType::SOA, q);
        let RData::SOA(soa) = &m.answers[0].data else {
            panic!("{:?}", m.answers);
        };
        assert_eq!(soa.mname.to_ascii(), "ns.example.com.");
        assert_eq!(soa.rname.to_ascii(), "hostmaster.example.com.");
    }
}

// SEM-D12: `--config FILE` replaces DIR/healthroute.yaml in standalone mode (flags still
// win), and is read in a cluster too: a mistake in it stops the resolver at start with a
// message that names the file and the field.
#[test]
fn the_config_flag() {
    let dir = dir_with("proto-config", RECORDS, "zones: [other.example]\n");
    let file = temp_dir("proto-config-file").join("resolver.yaml");
    std::fs::write(&file, APEX_CONFIG).expect("write");
    let r = Resolver::start(&dir, &["--config", &file.to_string_lossy()]);
    let (m, _) = query(
        r.dns,
        "ns1.example.com.",
        RecordType::A,
        Q {
            tcp: false,
            edns: None,
        },
    );
    assert_eq!(shown(&m.answers), ["ns1.example.com. 45 192.0.2.53"]);
    drop(r);

    let bad = temp_dir("proto-config-bad").join("resolver.yaml");
    std::fs::write(
        &bad,
        "zones:\n  - name: example.com\n    nameservers: [{name: ns1.example.com., addresses: [192.0.2.300]}]\n",
    )
    .expect("write");
    for standalone in [true, false] {
        let mut cmd = resolver();
        if standalone {
            cmd.arg("--manifests").arg(&dir);
        }
        let out = cmd
            .arg("--config")
            .arg(&bad)
            .args(["--listen", "127.0.0.1:0", "--table-namespace", "nowhere"])
            .env_remove("KUBECONFIG")
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(&format!(
                "{}:3:56: zones[0].nameservers[0].addresses[0]: \"192.0.2.300\" is not an IPv4 or IPv6 address",
                bad.display()
            )),
            "standalone={standalone}: {stderr}"
        );
    }
    let out = resolver()
        .args(["--config", "/nonexistent/healthroute.yaml"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/healthroute.yaml"));
}
