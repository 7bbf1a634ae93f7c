//! The UDP fast path: the common query answered from pre-encoded records, without building
//! a message.
//!
//! ```text
//!   datagram ─▶ parse header, one question, optional plain OPT ─▶ served name?
//!        yes: header + question (copied as asked, D3) + pre-encoded RRs (owner = pointer to
//!             the question) [+ SOA for NODATA/NXDOMAIN] [+ OPT] ─▶ send
//!        anything else (other types, ANY, outside the zones, too big for the client's
//!        buffer, EDNS options we do not speak, malformed): Fallback ─▶ hickory handler
//! ```
//!
//! Every answer it gives is one the hickory path would give (the e2e DNS tests run both).

use crate::metrics::Tally;
use crate::serving::{FastOutcome, ServingTable};

/// The result of [`answer`].
pub enum Fast {
    /// `out` holds the reply; the fields are for metrics.
    Reply { zone: usize, qtype: u16, rcode: u8 },
    /// Let the full handler answer.
    Fallback,
}

const TYPE_A: u16 = 1;
const TYPE_CNAME: u16 = 5;
const TYPE_TXT: u16 = 16;
const TYPE_AAAA: u16 = 28;
const TYPE_OPT: u16 = 41;
/// The UDP payload we advertise and honour (as the full path).
const MAX_UDP: usize = crate::handler::MAX_UDP_PAYLOAD as usize;

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]))
}

/// Answers `req` into `out` when it is a plain query for a served name of a served type;
/// the answer is counted in `tally`.
pub fn answer<'a>(
    table: &'a ServingTable,
    req: &[u8],
    out: &mut Vec<u8>,
    rng: &mut fastrand::Rng,
    tally: &mut Tally<'a>,
) -> Fast {
    if req.len() < 12 {
        return Fast::Fallback;
    }
    let flags = u16::from_be_bytes([req[2], req[3]]);
    let (qd, an, ns, ar) = (
        u16::from_be_bytes([req[4], req[5]]),
        u16::from_be_bytes([req[6], req[7]]),
        u16::from_be_bytes([req[8], req[9]]),
        u16::from_be_bytes([req[10], req[11]]),
    );
    // A query (QR 0), opcode QUERY, one question, nothing else but maybe one OPT.
    if flags & 0x8000 != 0 || (flags >> 11) & 0xF != 0 || qd != 1 || an != 0 || ns != 0 || ar > 1 {
        return Fast::Fallback;
    }
    // The question name, lower-cased into a stack buffer.
    let mut lower = [0u8; 256];
    let mut i = 12;
    let mut n = 0;
    loop {
        let Some(&len) = req.get(i) else {
            return Fast::Fallback;
        };
        if len & 0xC0 != 0 || n + usize::from(len) + 1 > 255 {
            return Fast::Fallback;
        }
        let Some(label) = req.get(i..i + 1 + usize::from(len)) else {
            return Fast::Fallback;
        };
        for (k, b) in label.iter().enumerate() {
            lower[n + k] = if k == 0 { *b } else { b.to_ascii_lowercase() };
        }
        n += label.len();
        i += label.len();
        if len == 0 {
            break;
        }
    }
    let qname = &lower[..n];
    let (Some(qtype), Some(qclass)) = (u16_at(req, i), u16_at(req, i + 2)) else {
        return Fast::Fallback;
    };
    let question_end = i + 4;
    if qclass != 1 || !matches!(qtype, TYPE_A | TYPE_AAAA | TYPE_CNAME | TYPE_TXT) {
        return Fast::Fallback;
    }
    // An optional OPT: root owner, version 0, no extended rcode; options are ignored.
    let mut limit = 512;
    let mut edns = false;
    if ar == 1 {
        let b = &req[question_end..];
        if b.len() < 11 || b[0] != 0 || u16_at(b, 1) != Some(TYPE_OPT) || b[5] != 0 || b[6] != 0 {
            return Fast::Fallback;
        }
        let rdlen = usize::from(u16_at(b, 9).unwrap_or(0));
        if b.len() != 11 + rdlen {
            return Fast::Fallback;
        }
        let payload = usize::from(u16_at(b, 3).unwrap_or(512));
        limit = payload.clamp(512, MAX_UDP);
        edns = true;
    } else if req.len() != question_end {
        return Fast::Fallback;
    }

    let Some(outcome) = table.fast_lookup(qname, qtype, rng, tally) else {
        return Fast::Fallback;
    };
    let (zone, rcode, answers, soa) = match outcome {
        FastOutcome::Answer { zone, records } => (zone, 0u8, Some(records), None),
        FastOutcome::NoData {
            zone,
            apex_len,
            soa,
        } => (zone, 0, None, Some((apex_len, soa))),
        FastOutcome::NxDomain {
            zone,
            apex_len,
            soa,
        } => (zone, 3, None, Some((apex_len, soa))),
    };

    out.clear();
    out.extend_from_slice(&req[..2]);
    // QR, AA; RD and CD copied; RA, AD, TC clear.
    let rflags: u16 = 0x8000 | 0x0400 | (flags & 0x0100) | (flags & 0x0010) | u16::from(rcode);
    out.extend_from_slice(&rflags.to_be_bytes());
    let mut ancount: u16 = 0;
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]); // AN, NS: patched below
    out.extend_from_slice(&u16::from(edns).to_be_bytes());
    out.extend_from_slice(&req[12..question_end]);
    let mut nscount: u16 = 0;
    if let Some(records) = answers {
        records.for_each(|rr| {
            out.extend_from_slice(rr);
            ancount += 1;
        });
    }
    if let Some((apex_len, soa)) = soa {
        // The SOA's owner is the zone apex: the tail of the question name.
        let pointer = (0xC000u16 | (12 + n - apex_len) as u16).to_be_bytes();
        out.extend_from_slice(&pointer);
        let base = out.len();
        out.extend_from_slice(&soa.bytes);
        // Its RDATA's names that end in the apex point there too.
        for &at in soa.apex_pointers.iter() {
            out[base + at..base + at + 2].copy_from_slice(&pointer);
        }
        nscount = 1;
    }
    if edns {
        out.extend_from_slice(&[0, 0, 41]);
        out.extend_from_slice(&(MAX_UDP as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    if out.len() > limit {
        // Truncation is the full path's job (TC, OPT kept).
        return Fast::Fallback;
    }
    out[6..8].copy_from_slice(&ancount.to_be_bytes());
    out[8..10].copy_from_slice(&nscount.to_be_bytes());
    Fast::Reply { zone, qtype, rcode }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use healthroute_table::{
        Answer, CompiledGroup, RecordType, RoutingTable, Selection, Target, Value,
    };
    use hickory_server::proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
    use hickory_server::proto::rr::{Name, RData, RecordType as HType};

    use super::*;
    use crate::serving::{ServingTable, ZoneConfig};

    fn table() -> ServingTable {
        let mut t = RoutingTable::default();
        let mut add = |key: &str, name: &str, values: Vec<Value>, rtype: RecordType| {
            t.groups.insert(
                key.into(),
                Arc::new(CompiledGroup {
                    key: key.into(),
                    name: name.into(),
                    record_type: rtype,
                    ttl: 30,
                    last_resort: false,
                    selection: Selection::Fixed(Answer {
                        set_identifier: "x".into(),
                        target: Target::Values(values),
                    }),
                }),
            );
        };
        add(
            "t/api",
            "api.example.com.",
            vec![
                Value::A([192, 0, 2, 1].into()),
                Value::A([192, 0, 2, 2].into()),
            ],
            RecordType::A,
        );
        add(
            "t/txt",
            "txt.example.com.",
            vec![Value::Txt("x".repeat(300))],
            RecordType::Txt,
        );
        add(
            "t/deep",
            "a.b.example.com.",
            vec![Value::A([192, 0, 2, 9].into())],
            RecordType::A,
        );
        add(
            "t/big",
            "big.example.com.",
            ["a", "b", "c"]
                .iter()
                .map(|c| Value::Txt(c.repeat(250)))
                .collect(),
            RecordType::Txt,
        );
        ServingTable::build(
            &t,
            &[ZoneConfig {
                apex: "example.com.".into(),
                nameservers: vec![],
                default_ttl: 45,
            }],
            None,
        )
        .expect("builds")
    }

    fn query(name: &str, qtype: HType, edns: Option<u16>) -> Vec<u8> {
        let mut m = Message::new(4242, MessageType::Query, OpCode::Query);
        m.metadata.recursion_desired = true;
        m.add_query(Query::query(Name::from_ascii(name).expect("name"), qtype));
        if let Some(size) = edns {
            let mut e = Edns::new();
            e.set_max_payload(size);
            m.set_edns(e);
        }
        m.to_vec().expect("encodes")
    }

    fn ask(t: &ServingTable, req: &[u8]) -> Option<Message> {
        let mut out = Vec::new();
        match answer(
            t,
            req,
            &mut out,
            &mut fastrand::Rng::with_seed(1),
            &mut Tally::default(),
        ) {
            Fast::Reply { .. } => Some(Message::from_vec(&out).expect("a valid DNS message")),
            Fast::Fallback => None,
        }
    }

    // SEM-D1 SEM-D3: answers are authoritative, the question is echoed as asked, and the
    // answer records decode to the configured values under the asked name.
    #[test]
    fn answers_decode_as_dns() {
        let t = table();
        let m = ask(&t, &query("API.example.COM.", HType::A, None)).expect("fast");
        assert_eq!(m.metadata.id, 4242);
        assert!(m.metadata.authoritative && m.metadata.recursion_desired && !m.metadata.truncation);
        assert_eq!(m.queries[0].name().to_ascii(), "API.example.COM.");
        let ips: Vec<String> = m
            .answers
            .iter()
            .map(|r| match &r.data {
                RData::A(a) => a.0.to_string(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ips, ["192.0.2.1", "192.0.2.2"]);
        assert_eq!(m.answers[0].ttl, 30);
        assert_eq!(
            m.answers[0].name.to_ascii().to_lowercase(),
            "api.example.com."
        );
    }

    // SEM-D2 SEM-D1: NODATA and NXDOMAIN carry the zone's SOA, owner the apex.
    #[test]
    fn negative_answers_carry_the_soa() {
        let t = table();
        let m = ask(&t, &query("api.example.com.", HType::AAAA, None)).expect("fast");
        assert_eq!(m.metadata.response_code, ResponseCode::NoError);
        assert!(m.answers.is_empty());
        assert_eq!(m.authorities[0].name.to_ascii(), "example.com.");
        match &m.authorities[0].data {
            RData::SOA(soa) => assert_eq!(soa.minimum, 45),
            other => panic!("{other:?}"),
        }
        let m = ask(&t, &query("b.example.com.", HType::A, None)).expect("fast");
        assert_eq!(
            m.metadata.response_code,
            ResponseCode::NoError,
            "empty non-terminal"
        );
        let m = ask(&t, &query("Nope.Example.com.", HType::A, Some(1232))).expect("fast");
        assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
        assert_eq!(
            m.authorities[0].name.to_ascii(),
            "Example.com.",
            "the apex, as asked"
        );
        assert_eq!(m.edns.as_ref().map(|e| e.max_payload()), Some(1232));
    }

    // SEM-D2: the SOA's own names are compressed against the apex in the question when they
    // end in it, and written in full when they do not.
    #[test]
    fn the_soa_names_are_compressed() {
        let mut out = Vec::new();
        let req = query("nope.Example.com.", HType::A, None);
        assert!(matches!(
            answer(
                &table(),
                &req,
                &mut out,
                &mut fastrand::Rng::with_seed(1),
                &mut Tally::default()
            ),
            Fast::Reply { rcode: 3, .. }
        ));
        // header, question, SOA owner (pointer), type..rdlength, "ns"+pointer,
        // "hostmaster"+pointer, five numbers: the size other servers answer with.
        assert_eq!(out.len(), 12 + (18 + 4) + 2 + 10 + (3 + 2) + (11 + 2) + 20);
        let m = Message::from_vec(&out).expect("valid");
        let RData::SOA(soa) = &m.authorities[0].data else {
            panic!("{:?}", m.authorities);
        };
        assert_eq!(soa.mname.to_ascii().to_lowercase(), "ns.example.com.");
        assert_eq!(
            soa.rname.to_ascii().to_lowercase(),
            "hostmaster.example.com."
        );
        assert_eq!((soa.serial, soa.minimum), (0, 45));

        let outside = ServingTable::build(
            &RoutingTable::default(),
            &[ZoneConfig {
                apex: "example.com.".into(),
                nameservers: vec!["ns1.provider.net.".into(), "ns2.provider.net.".into()],
                default_ttl: 60,
            }],
            None,
        )
        .expect("builds");
        let m = ask(&outside, &query("a.b.example.com.", HType::AAAA, None)).expect("fast");
        let RData::SOA(soa) = &m.authorities[0].data else {
            panic!("{:?}", m.authorities);
        };
        assert_eq!(soa.mname.to_ascii(), "ns1.provider.net.");
        assert_eq!(
            soa.rname.to_ascii().to_lowercase(),
            "hostmaster.example.com."
        );
        assert_eq!(soa.minimum, 60);
    }

    // Fast-path answers are counted per group and set identifier, once each, when the
    // batch's tally ends.
    #[test]
    fn answers_are_counted_once_each() {
        let t = table();
        let req = query("api.example.com.", HType::A, None);
        let mut rng = fastrand::Rng::with_seed(1);
        let mut out = Vec::new();
        let counted = |t: &ServingTable| -> u64 {
            t.groups()
                .iter()
                .filter(|g| &*g.compiled.key == "t/api")
                .flat_map(|g| g.counters.by_set_identifier.iter())
                .map(|(_, n)| n.load(std::sync::atomic::Ordering::Relaxed))
                .sum()
        };
        {
            let mut tally = Tally::default();
            for _ in 0..40 {
                let fast = answer(&t, &req, &mut out, &mut rng, &mut tally);
                assert!(matches!(fast, Fast::Reply { .. }));
            }
            assert_eq!(counted(&t), 0, "added when the batch ends");
        }
        assert_eq!(counted(&t), 40);
    }

    // SEM-D4 SEM-D5 SEM-D6: whatever the fast path does not own goes to the full handler.
    #[test]
    fn falls_back_for_the_rest() {
        let t = table();
        assert!(
            ask(&t, &query("www.other.org.", HType::A, None)).is_none(),
            "outside the zones"
        );
        assert!(ask(&t, &query("api.example.com.", HType::ANY, None)).is_none());
        assert!(ask(&t, &query("example.com.", HType::SOA, None)).is_none());
        assert!(ask(&t, &query("api.example.com.", HType::MX, None)).is_none());
        assert!(
            ask(&t, &query("txt.example.com.", HType::TXT, None)).is_some(),
            "fits in 512"
        );
        // Over 512 bytes: truncation is the full path's; with a large enough EDNS buffer, ours.
        assert!(ask(&t, &query("big.example.com.", HType::TXT, None)).is_none());
        let m = ask(&t, &query("big.example.com.", HType::TXT, Some(4096))).expect("fits 1232");
        assert_eq!(m.answers.len(), 3);
        let big = t;
        let req = query("txt.example.com.", HType::TXT, None);
        let mut trimmed = req.clone();
        trimmed.truncate(req.len() - 1);
        assert!(ask(&big, &trimmed).is_none(), "a cut question");
        let mut two = req.clone();
        two[5] = 2;
        assert!(ask(&big, &two).is_none(), "two questions");
        let mut response = req.clone();
        response[2] |= 0x80;
        assert!(ask(&big, &response).is_none(), "a response");
        assert!(ask(&big, &[0u8; 5]).is_none(), "garbage");
    }
}
