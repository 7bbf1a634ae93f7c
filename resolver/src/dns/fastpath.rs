//! The UDP fast path: a plain query answered by writing the reply straight from the serving
//! table (the picked values, the zone's wire RRs), without building a message.
//!
//! ```text
//!   datagram ─▶ parse header, one question (class IN), optional plain OPT
//!        ─▶ ServingTable::lookup (the one lookup, D8; counted once, M1)
//!        ─▶ header + question (copied as asked, D3) + the chain's RRs (owners: pointers to the
//!           question, then to each CNAME target) [+ SOA] [+ glue, D12] [+ our own OPT, D10];
//!           a reply over the client's limit keeps whole RRsets only and sets TC (D4)
//!   anything else (other opcodes, several questions, an EDNS version above 0, names outside
//!   the zones, malformed): Fallback ─▶ hickory handler, with nothing picked or counted
//! ```
//!
//! The header and OPT checks of D10 and D11 cost the fast path nothing: what they answer
//! (BADVERS, NOTIMP, FORMERR for two OPTs) is what it already declined, and the reply's
//! header and OPT are written from constants and the question's RD and CD bits.
//!
//! Every answer it gives is one the hickory path gives (the e2e DNS tests run both).

use healthroute_table::Value;

use crate::dns::counters::Tally;
use crate::dns::dnssec::signer::rrset_key;
use crate::dns::dnssec::{Signers, ZoneSigner};
use crate::dns::serving::{ApexRecords, Chain, ChainEnd, Outcome, ServedZone, ServingTable};
use crate::dns::wire::{
    MAX_UDP_PAYLOAD, TYPE_AXFR, TYPE_CDNSKEY, TYPE_CDS, TYPE_CNAME, TYPE_DNSKEY, TYPE_IXFR,
    TYPE_OPT, TYPE_RRSIG, push_value_rr,
};

/// The result of [`answer`].
pub enum Fast {
    /// `out` holds the reply; the fields are for metrics.
    Reply { zone: usize, qtype: u16, rcode: u8 },
    /// Let the full handler answer.
    Fallback,
}

/// The UDP payload we advertise and honour (as the full path).
const MAX_UDP: usize = MAX_UDP_PAYLOAD as usize;
const HEADER: usize = 12;

fn u16_at(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]))
}

/// A parsed plain query: what the reply needs from it.
pub struct Question<'r> {
    /// The request's first 4 bytes (ID, flags).
    pub id_flags: [u8; 4],
    /// The question section as asked.
    pub section: &'r [u8],
    /// Length of the question name in wire form.
    pub name_len: usize,
    pub qtype: u16,
    /// The client's UDP limit (512 without EDNS, at most our 1232).
    pub limit: usize,
    pub edns: bool,
    /// The OPT's DO bit (K2).
    pub dnssec_ok: bool,
}

/// Parses a plain query; `lower` receives the question name in lower case.
pub fn parse<'r>(req: &'r [u8], lower: &mut [u8; 256]) -> Option<Question<'r>> {
    if req.len() < HEADER {
        return None;
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
        return None;
    }
    let mut i = HEADER;
    let mut n = 0;
    loop {
        let len = *req.get(i)?;
        if len & 0xC0 != 0 || n + usize::from(len) + 1 > 255 {
            return None;
        }
        let label = req.get(i..i + 1 + usize::from(len))?;
        for (k, b) in label.iter().enumerate() {
            lower[n + k] = if k == 0 { *b } else { b.to_ascii_lowercase() };
        }
        n += label.len();
        i += label.len();
        if len == 0 {
            break;
        }
    }
    let (qtype, qclass) = (u16_at(req, i)?, u16_at(req, i + 2)?);
    let question_end = i + 4;
    // Zone transfers are the handler's (REFUSED).
    if qclass != 1 || qtype == TYPE_OPT || qtype == TYPE_AXFR || qtype == TYPE_IXFR {
        return None;
    }
    // An optional OPT: root owner, version 0, no extended rcode; its flags (DO) and options
    // are ignored, never echoed (D10). A version above 0 is the handler's (BADVERS).
    let mut limit = 512;
    let mut edns = false;
    let mut dnssec_ok = false;
    if ar == 1 {
        let b = &req[question_end..];
        if b.len() < 11 || b[0] != 0 || u16_at(b, 1) != Some(TYPE_OPT) || b[5] != 0 || b[6] != 0 {
            return None;
        }
        let rdlen = usize::from(u16_at(b, 9).unwrap_or(0));
        if b.len() != 11 + rdlen {
            return None;
        }
        limit = usize::from(u16_at(b, 3).unwrap_or(512)).clamp(512, MAX_UDP);
        edns = true;
        dnssec_ok = b[7] & 0x80 != 0;
    } else if req.len() != question_end {
        return None;
    }
    Some(Question {
        id_flags: [req[0], req[1], req[2], req[3]],
        section: &req[HEADER..question_end],
        name_len: n,
        qtype,
        limit,
        edns,
        dnssec_ok,
    })
}

/// Answers `req` into `out` when it is a plain query for a name in a served zone; the
/// answer is counted in `tally`. In a signed zone (`signers`), a DO query's positive answer
/// is written with the RRSIGs the signature cache holds for its RRsets (K2, K3); anything
/// else of a signed zone with DO, a cache miss included, and its keys are the handler's.
pub fn answer<'a>(
    table: &'a ServingTable,
    signers: &Signers,
    req: &[u8],
    out: &mut Vec<u8>,
    rng: &mut fastrand::Rng,
    tally: &mut Tally<'a>,
) -> Fast {
    let mut lower = [0u8; 256];
    let Some(q) = parse(req, &mut lower) else {
        return Fast::Fallback;
    };
    let qname = &lower[..q.name_len];
    // Only where some zone is signed does the question's zone need finding first.
    if !signers.is_empty()
        && let Some(zone) = table.zone_of(qname)
        && table.zones()[zone].signed
    {
        if matches!(q.qtype, TYPE_DNSKEY | TYPE_CDS | TYPE_CDNSKEY) {
            return Fast::Fallback;
        }
        if q.dnssec_ok {
            return match signers.get(&table.zones()[zone].apex) {
                Some(signer) => answer_signed(table, &signer, &q, qname, out, rng),
                None => Fast::Fallback,
            };
        }
    }
    let outcome = table.lookup(qname, q.qtype, rng, tally);
    // Outside every zone (forwarded or refused): the handler's, and nothing was counted.
    let Some(zone) = outcome.zone() else {
        return Fast::Fallback;
    };
    let rcode = write_reply(table, &outcome, &q, None, out).unwrap_or_default();
    Fast::Reply {
        zone,
        qtype: q.qtype,
        rcode,
    }
}

/// A DO query in a signed zone: a positive answer whose every RRset has fresh RRSIGs in the
/// cache is written here; otherwise nothing is counted (the picks are dropped) and the
/// handler answers, signing what the cache lacks (M1: one count per query either way).
fn answer_signed(
    table: &ServingTable,
    signer: &ZoneSigner,
    q: &Question<'_>,
    qname: &[u8],
    out: &mut Vec<u8>,
    rng: &mut fastrand::Rng,
) -> Fast {
    let mut picked = Tally::default();
    let outcome = table.lookup(qname, q.qtype, rng, &mut picked);
    let Outcome::Answer {
        zone,
        end: ChainEnd::Answered | ChainEnd::OutOfZone,
        ..
    } = outcome
    else {
        picked.discard();
        return Fast::Fallback;
    };
    let sign = Sign {
        signer,
        zone,
        now: crate::dns::dnssec::unix_now(),
    };
    match write_reply(table, &outcome, q, Some(&sign), out) {
        Some(rcode) => Fast::Reply {
            zone,
            qtype: q.qtype,
            rcode,
        },
        None => {
            picked.discard();
            Fast::Fallback
        }
    }
}

/// What a signed reply is written with (K2): the zone's signer, the zone every owner must be
/// in (a chain into another zone is the handler's), and now, for the cache's freshness.
struct Sign<'s> {
    signer: &'s ZoneSigner,
    zone: usize,
    now: u64,
}

/// Where a name sits in the reply, for pointers to it and to its tail.
#[derive(Clone, Copy)]
struct NameAt {
    offset: usize,
    len: usize,
}

/// Writes the reply to `q` for `outcome` into `out` (within `q.limit`); returns its rcode.
/// With `sign` (a positive answer only), each answer RRset is followed by its cached RRSIGs
/// and the OPT has DO; `None` when an RRset's RRSIGs are not in the cache.
fn write_reply(
    table: &ServingTable,
    outcome: &Outcome<'_>,
    q: &Question<'_>,
    sign: Option<&Sign<'_>>,
    out: &mut Vec<u8>,
) -> Option<u8> {
    let rcode = outcome.rcode();
    let flags = u16::from_be_bytes([q.id_flags[2], q.id_flags[3]]);
    out.clear();
    out.extend_from_slice(&q.id_flags[..2]);
    // QR, AA; RD and CD copied; RA, Z, AD, TC clear (D11).
    let rflags: u16 = 0x8000 | 0x0400 | (flags & 0x0100) | (flags & 0x0010) | u16::from(rcode);
    out.extend_from_slice(&rflags.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // AN, NS, AR: set below
    out.extend_from_slice(q.section);
    let budget = q.limit - if q.edns { 11 } else { 0 };
    let mut owner = NameAt {
        offset: HEADER,
        len: q.name_len,
    };
    let (mut ancount, mut nscount, mut arcount, mut truncated) = (0u16, 0u16, 0u16, false);
    match outcome {
        Outcome::Answer { chain, .. } => {
            let (n, cut, last) = write_chain(table, chain, sign, out, owner, budget)?;
            (ancount, truncated, owner) = (n, cut, last);
        }
        Outcome::Apex { zone, records } => {
            let z = &table.zones()[*zone];
            let written = match records {
                ApexRecords::Soa => {
                    let start = out.len();
                    write_soa(out, z, owner);
                    (out.len() <= budget).then_some(1).or_else(|| {
                        out.truncate(start);
                        None
                    })
                }
                ApexRecords::Ns => {
                    let start = out.len();
                    let written = write_rrset(out, owner, budget, |emit| {
                        z.ns.iter().for_each(|rr| emit(Rr::Wire(rr)))
                    })
                    .map(|(n, _)| n);
                    if written.is_some() {
                        // D12: the in-zone nameservers' addresses, owned by the NS names
                        // just written; a set that does not fit truncates, as any (D4).
                        for glue in z.glue.iter() {
                            let name = NameAt {
                                offset: start + glue.name_at,
                                len: z.ns[glue.ns].len() - 10,
                            };
                            match write_rrset(out, name, budget, |emit| {
                                glue.rrs.iter().for_each(|rr| emit(Rr::Wire(rr)))
                            }) {
                                Some((n, _)) => arcount += n,
                                None => {
                                    truncated = true;
                                    break;
                                }
                            }
                        }
                    }
                    written
                }
                ApexRecords::Any => {
                    write_rrset(out, owner, budget, |emit| emit(Rr::Wire(&z.any))).map(|(n, _)| n)
                }
            };
            match written {
                Some(n) => ancount = n,
                None => truncated = true,
            }
        }
        Outcome::NoData { .. } | Outcome::NxDomain { .. } | Outcome::NotServed => {}
    }
    if !truncated && let Some(zone) = outcome.authority_zone() {
        let start = out.len();
        write_soa(out, &table.zones()[zone], owner);
        if out.len() > budget {
            out.truncate(start);
            truncated = true;
        } else {
            nscount = 1;
        }
    }
    if q.edns {
        // Our own OPT (D10): our payload size, version 0, no options; DO set on a signed
        // reply (K2), else clear.
        let do_bit = if sign.is_some() { 0x80 } else { 0 };
        out.extend_from_slice(&[0, 0, 41]);
        out.extend_from_slice(&(MAX_UDP as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0, do_bit, 0, 0, 0]);
        arcount += 1;
    }
    if truncated {
        out[2] |= 0x02; // TC
    }
    out[6..8].copy_from_slice(&ancount.to_be_bytes());
    out[8..10].copy_from_slice(&nscount.to_be_bytes());
    out[10..12].copy_from_slice(&arcount.to_be_bytes());
    Some(rcode)
}

/// The answer RRsets of a chain (D8), each owned by the question or the CNAME target before
/// it, and with `sign` each followed by its cached RRSIGs (K2): the two fit whole or not at
/// all (D4). Returns how many RRs were written, whether the reply is truncated, and the last
/// owner; `None` on a signature cache miss.
fn write_chain(
    table: &ServingTable,
    chain: &Chain<'_>,
    sign: Option<&Sign<'_>>,
    out: &mut Vec<u8>,
    mut owner: NameAt,
    budget: usize,
) -> Option<(u16, bool, NameAt)> {
    let mut ancount = 0u16;
    for step in chain.iter() {
        let ttl = step.ttl;
        let start = out.len();
        let written = write_rrset(out, owner, budget, |emit| {
            step.values.for_each(|v| emit(Rr::Value(v, ttl)))
        });
        let written = match (written, sign) {
            (Some((n, next)), Some(sign)) => {
                match append_rrsigs(table, sign, out, owner, start, budget)? {
                    Some(sigs) => Some((n + sigs, next)),
                    None => {
                        out.truncate(start);
                        None
                    }
                }
            }
            (written, _) => written,
        };
        match written {
            Some((n, next)) => {
                ancount += n;
                if let Some(next) = next {
                    owner = next;
                }
            }
            None => return Some((ancount, true, owner)),
        }
    }
    Some((ancount, false, owner))
}

/// Appends the cached RRSIGs of the RRset written from `start` (owned by the name at
/// `owner`) within `budget`: `Some(Some(n))` for n RRSIGs written, `Some(None)` when they do
/// not fit (the caller drops the RRset), `None` on a cache miss or an owner outside the
/// signer's zone (the handler's).
fn append_rrsigs(
    table: &ServingTable,
    sign: &Sign<'_>,
    out: &mut Vec<u8>,
    owner: NameAt,
    start: usize,
    budget: usize,
) -> Option<Option<u16>> {
    let mut lower = [0u8; 256];
    let name = lower.get_mut(..owner.len)?;
    name.copy_from_slice(out.get(owner.offset..owner.offset + owner.len)?);
    name.make_ascii_lowercase();
    let name = &*name;
    if table.zone_of(name) != Some(sign.zone) {
        return None;
    }
    // The RRs just written: a 2-byte owner pointer, TYPE, CLASS, TTL, RDLENGTH, RDATA.
    let (mut at, mut datas, mut head) = (start, Vec::with_capacity(4), None);
    while at < out.len() {
        let rr = out.get(at + 2..)?;
        let len = usize::from(u16_at(rr, 8)?);
        head.get_or_insert((u16_at(rr, 0)?, rr.get(4..8)?));
        datas.push(rr.get(10..10 + len)?);
        at += 2 + 10 + len;
    }
    let (rtype, ttl) = head?;
    let ttl_bytes: [u8; 4] = ttl.try_into().ok()?;
    let key = rrset_key(name, rtype, u32::from_be_bytes(ttl_bytes), &mut datas);
    let end = out.len();
    let mut n = 0u16;
    let hit = sign.signer.cached_wire(&key, sign.now, |rrsigs| {
        for rdata in rrsigs {
            out.extend_from_slice(&pointer(owner.offset));
            out.extend_from_slice(&TYPE_RRSIG.to_be_bytes());
            out.extend_from_slice(&1u16.to_be_bytes());
            out.extend_from_slice(&ttl_bytes);
            out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            out.extend_from_slice(rdata);
            n += 1;
        }
    });
    if !hit || n == 0 {
        out.truncate(end);
        return None;
    }
    if out.len() > budget {
        out.truncate(end);
        return Some(None);
    }
    Some(Some(n))
}

/// One RR of a reply, after its owner: a zone's own, in wire form, or an answer's value with
/// its group's TTL.
enum Rr<'a> {
    Wire(&'a [u8]),
    Value(&'a Value, u32),
}

/// Writes one RRset owned by the name at `owner`, each RR from `rrs`; a set that does not fit
/// in `budget` is left out whole (`None`: the reply is truncated, D4). Returns how many RRs
/// it wrote and where the first CNAME's target sits (the next step's owner, D8).
fn write_rrset(
    out: &mut Vec<u8>,
    owner: NameAt,
    budget: usize,
    rrs: impl FnOnce(&mut dyn FnMut(Rr<'_>)),
) -> Option<(u16, Option<NameAt>)> {
    let start = out.len();
    let mut n = 0u16;
    let mut cname_at = None;
    rrs(&mut |rr: Rr<'_>| {
        out.extend_from_slice(&pointer(owner.offset));
        let at = out.len();
        match rr {
            Rr::Wire(rr) => out.extend_from_slice(rr),
            Rr::Value(value, ttl) => push_value_rr(out, value, ttl),
        }
        if u16_at(out, at) == Some(TYPE_CNAME) && cname_at.is_none() {
            cname_at = Some(NameAt {
                offset: at + 10,
                len: out.len() - at - 10,
            });
        }
        n += 1;
    });
    if out.len() > budget {
        out.truncate(start);
        return None;
    }
    Some((n, cname_at))
}

/// A compression pointer to `offset`.
fn pointer(offset: usize) -> [u8; 2] {
    (0xC000u16 | offset as u16).to_be_bytes()
}

/// The zone's SOA, owned by its apex: the tail of the name at `name` (the question, or the
/// last CNAME target), which lies in the zone; the SOA's own names point there too.
fn write_soa(out: &mut Vec<u8>, zone: &ServedZone, name: NameAt) {
    let apex = pointer(name.offset + name.len - zone.apex.len());
    out.extend_from_slice(&apex);
    let base = out.len();
    out.extend_from_slice(&zone.soa_compressed.bytes);
    for &at in zone.soa_compressed.apex_pointers.iter() {
        out[base + at..base + at + 2].copy_from_slice(&apex);
    }
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
    use crate::dns::counters::AnswerCounters;
    use crate::dns::serving::{NameServer, ServingTable, ZoneConfig};

    fn table() -> ServingTable {
        table_counted(&AnswerCounters::default())
    }

    fn table_counted(counters: &AnswerCounters) -> ServingTable {
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
                    zone_affinity: None,
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
            "t/spf",
            "spf.example.com.",
            vec![
                Value::Txt(r#""v=spf1 -all""#.into()),
                Value::Txt(r#""part one" "part \"two\"""#.into()),
            ],
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
                ..ZoneConfig::default()
            }],
            None,
            counters,
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
        ask_signed(t, &Signers::default(), req)
    }

    /// [`ask`] with the signed zones' signers.
    fn ask_signed(t: &ServingTable, signers: &Signers, req: &[u8]) -> Option<Message> {
        let mut out = Vec::new();
        match answer(
            t,
            signers,
            req,
            &mut out,
            &mut fastrand::Rng::with_seed(1),
            &mut Tally::default(),
        ) {
            Fast::Reply { .. } => Some(Message::from_vec(&out).expect("a valid DNS message")),
            Fast::Fallback => None,
        }
    }

    // SEM-K2 SEM-K3 SEM-M1: in a signed zone, a DO query's answer comes from the fast path
    // with its RRSIG once the cache holds it (the handler signs the first one: the fast path
    // falls back, its picks uncounted); without DO the answer is the unsigned one; the keys
    // are the handler's.
    #[test]
    fn a_signed_answer_comes_from_the_cache() {
        use crate::dns::dnssec::keys::{KeyConfig, generate_pem};
        use crate::dns::dnssec::{DnssecConfig, Signers, Timing};
        use hickory_proto::dnssec::Verifier as _;
        use hickory_proto::dnssec::rdata::DNSSECRData;
        use hickory_server::proto::rr::{DNSClass, Record};

        let dir = std::env::temp_dir().join(format!("hr-fast-signed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("k.pem"), generate_pem(13).expect("key")).expect("write");
        let config = DnssecConfig {
            keys: vec![KeyConfig {
                file: dir.join("k.pem"),
                role: Default::default(),
                state: Default::default(),
            }],
            timing: Timing::default(),
            cache_entries: 100,
        };
        let signers = Signers::load([("example.com.", &config)]).expect("loads");
        let counters = AnswerCounters::default();
        let mut t = RoutingTable::default();
        t.groups.insert(
            "t/api".into(),
            Arc::new(CompiledGroup {
                key: "t/api".into(),
                name: "api.example.com.".into(),
                record_type: RecordType::A,
                ttl: 30,
                last_resort: false,
                zone_affinity: None,
                selection: Selection::Fixed(Answer {
                    set_identifier: "x".into(),
                    target: Target::Values(vec![
                        Value::A([192, 0, 2, 1].into()),
                        Value::A([192, 0, 2, 2].into()),
                    ]),
                }),
            }),
        );
        let zone = ZoneConfig {
            apex: "example.com.".into(),
            default_ttl: 45,
            dnssec: Some(config.clone()),
            ..ZoneConfig::default()
        };
        let t = ServingTable::build(&t, &[zone], None, &counters).expect("builds");
        let counter = counters.record(&"t/api".into(), &"x".into());
        let counted = || counter.load(std::sync::atomic::Ordering::Relaxed);
        let asked = |req: &[u8]| ask_signed(&t, &signers, req);
        let mut req =
            Message::from_vec(&query("API.example.com.", HType::A, Some(1232))).expect("q");
        req.edns.as_mut().expect("edns").set_dnssec_ok(true);
        let signed_query = req.to_vec().expect("encodes");
        assert!(asked(&signed_query).is_none(), "a miss is the handler's");
        assert_eq!(counted(), 0, "its picks were not counted");
        // The handler's signing fills the cache.
        let owner = Name::from_ascii("api.example.com.").expect("name");
        let rrset: Vec<Record> = ["192.0.2.1", "192.0.2.2"]
            .iter()
            .map(|ip| Record::from_rdata(owner.clone(), 30, RData::A(ip.parse().expect("ip"))))
            .collect();
        let signer = signers
            .get(&crate::dns::wire::wire_name("example.com."))
            .expect("signer");
        assert_eq!(
            signer
                .rrsigs(&owner, &rrset, crate::dns::dnssec::unix_now())
                .len(),
            1
        );
        let m = asked(&signed_query).expect("a hit is the fast path's");
        assert_eq!(counted(), 1);
        assert!(m.edns.as_ref().expect("opt").flags().dnssec_ok, "DO set");
        let sig = m
            .answers
            .iter()
            .find_map(|r| match &r.data {
                RData::DNSSEC(DNSSECRData::RRSIG(sig)) => Some(sig.clone()),
                _ => None,
            })
            .expect("an RRSIG");
        let a: Vec<Record> = m
            .answers
            .iter()
            .filter(|r| r.record_type() == HType::A)
            .cloned()
            .collect();
        assert_eq!(a.len(), 2);
        signer.keys[0]
            .dnskey
            .verify_rrsig(&owner, DNSClass::IN, &sig, a.iter())
            .expect("the cached RRSIG verifies over the fast path's RRset");
        let plain = asked(&query("api.example.com.", HType::A, Some(1232))).expect("fast");
        assert!(
            plain.answers.iter().all(|r| r.record_type() == HType::A),
            "unsigned without DO"
        );
        assert!(!plain.edns.as_ref().expect("opt").flags().dnssec_ok);
        assert!(
            asked(&query("example.com.", HType::DNSKEY, None)).is_none(),
            "keys: the handler's"
        );
        let _ = std::fs::remove_dir_all(&dir);
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
                &Signers::default(),
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
                ..ZoneConfig::default()
            }],
            None,
            &AnswerCounters::default(),
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

    // SEM-M1: fast-path answers are counted per group and set identifier, once each, when the
    // batch's tally ends.
    #[test]
    fn answers_are_counted_once_each() {
        let counters = AnswerCounters::default();
        let t = table_counted(&counters);
        let req = query("api.example.com.", HType::A, None);
        let mut rng = fastrand::Rng::with_seed(1);
        let mut out = Vec::new();
        {
            let mut tally = Tally::default();
            for _ in 0..40 {
                let fast = answer(
                    &t,
                    &Signers::default(),
                    &req,
                    &mut out,
                    &mut rng,
                    &mut tally,
                );
                assert!(matches!(fast, Fast::Reply { .. }));
            }
            assert_eq!(counters.get("t/api", "x"), 0, "added when the batch ends");
        }
        assert_eq!(counters.get("t/api", "x"), 40);
    }

    // SEM-D4: a reply over the client's limit holds whole RRsets only (here none), with TC,
    // counts that match, and parses strictly; with room it holds everything.
    #[test]
    fn truncated_replies_hold_whole_records_only() {
        let t = table();
        let mut out = Vec::new();
        let req = query("big.example.com.", HType::TXT, None);
        let fast = answer(
            &t,
            &Signers::default(),
            &req,
            &mut out,
            &mut fastrand::Rng::with_seed(1),
            &mut Tally::default(),
        );
        assert!(matches!(fast, Fast::Reply { rcode: 0, .. }));
        assert!(out.len() <= 512, "{} bytes", out.len());
        let m = Message::from_vec(&out).expect("parses");
        assert!(m.metadata.truncation, "TC set");
        assert!(
            m.answers.is_empty(),
            "no part of the RRset: {:?}",
            m.answers
        );
        assert_eq!(m.queries.len(), 1);
        // Strict: the counts name exactly what the message holds, nothing trails.
        assert_eq!(out.len(), 12 + (4 + 17), "header and question only");
        let m = ask(&t, &query("big.example.com.", HType::TXT, Some(4096))).expect("fits 1232");
        assert!(!m.metadata.truncation);
        assert_eq!(m.answers.len(), 3);
    }

    // SEM-M1: a MultiValue answer counts once for every record with a value in it; a table
    // built again (health changed, the record gone and back) keeps counting from where it was.
    #[test]
    fn multivalue_answers_count_each_contributing_record() {
        let counters = AnswerCounters::default();
        let mv = |records: &[&str], owners: Vec<u32>| {
            let mut t = RoutingTable::default();
            t.groups.insert(
                "t/mv".into(),
                Arc::new(CompiledGroup {
                    key: "t/mv".into(),
                    name: "mv.example.com.".into(),
                    record_type: RecordType::A,
                    zone_affinity: None,
                    ttl: 30,
                    last_resort: false,
                    selection: Selection::MultiValue {
                        set_identifiers: records.iter().map(|r| (*r).into()).collect(),
                        pool: (1..=owners.len() as u8)
                            .map(|i| Value::A([192, 0, 2, i].into()))
                            .collect(),
                        owners,
                    },
                }),
            );
            ServingTable::build(
                &t,
                &[ZoneConfig {
                    apex: "example.com.".into(),
                    nameservers: vec![],
                    default_ttl: 45,
                    ..ZoneConfig::default()
                }],
                None,
                &counters,
            )
            .expect("builds")
        };
        let req = query("mv.example.com.", HType::A, None);
        let ask_n = |t: &ServingTable, n: usize| {
            let mut tally = Tally::default();
            for _ in 0..n {
                answer(
                    t,
                    &Signers::default(),
                    &req,
                    &mut Vec::new(),
                    &mut fastrand::Rng::with_seed(1),
                    &mut tally,
                );
            }
        };
        ask_n(&mv(&["r1", "r2"], vec![0, 0, 1]), 5);
        assert_eq!(
            (counters.get("t/mv", "r1"), counters.get("t/mv", "r2")),
            (5, 5)
        );
        // r2 unhealthy: only r1 contributes.
        ask_n(&mv(&["r1"], vec![0, 0]), 3);
        assert_eq!(
            (counters.get("t/mv", "r1"), counters.get("t/mv", "r2")),
            (8, 5)
        );
        // r2 back: its count goes on from 5.
        ask_n(&mv(&["r1", "r2"], vec![0, 0, 1]), 2);
        assert_eq!(
            (counters.get("t/mv", "r1"), counters.get("t/mv", "r2")),
            (10, 7)
        );
    }

    // SEM-D9: quoted TXT values are served as their character-strings, without the quotes.
    #[test]
    fn quoted_txt_values_are_character_strings() {
        let m = ask(&table(), &query("spf.example.com.", HType::TXT, None)).expect("fast");
        let strings: Vec<Vec<String>> = m
            .answers
            .iter()
            .map(|r| match &r.data {
                RData::TXT(t) => t
                    .txt_data
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            strings,
            [
                vec!["v=spf1 -all".to_owned()],
                vec!["part one".into(), r#"part "two""#.into()]
            ]
        );
    }

    // SEM-D4 SEM-D5 SEM-D6: what the fast path does not own goes to the full handler, before
    // any lookup; the rest, apex records and other types included, it answers itself.
    #[test]
    fn falls_back_for_the_rest() {
        let t = table();
        assert!(
            ask(&t, &query("www.other.org.", HType::A, None)).is_none(),
            "outside the zones"
        );
        let any = ask(&t, &query("api.example.com.", HType::ANY, None)).expect("RFC 8482");
        assert!(matches!(any.answers[0].data, RData::HINFO(_)));
        let soa = ask(&t, &query("example.com.", HType::SOA, None)).expect("apex SOA");
        assert!(matches!(soa.answers[0].data, RData::SOA(_)));
        let ns = ask(&t, &query("Example.com.", HType::NS, None)).expect("apex NS");
        assert_eq!(ns.answers[0].name.to_ascii(), "Example.com.");
        let mx = ask(&t, &query("api.example.com.", HType::MX, None)).expect("NODATA");
        assert!(mx.answers.is_empty() && mx.authorities.len() == 1);
        assert!(
            ask(&t, &query("txt.example.com.", HType::TXT, None)).is_some(),
            "fits in 512"
        );
        let req = query("txt.example.com.", HType::TXT, None);
        let mut trimmed = req.clone();
        trimmed.truncate(req.len() - 1);
        assert!(ask(&t, &trimmed).is_none(), "a cut question");
        let mut two = req.clone();
        two[5] = 2;
        assert!(ask(&t, &two).is_none(), "two questions");
        let mut response = req.clone();
        response[2] |= 0x80;
        assert!(ask(&t, &response).is_none(), "a response");
        assert!(ask(&t, &[0u8; 5]).is_none(), "garbage");
    }

    /// example.com. named by ns1 (in the zone, IPv4 and IPv6), ns2 (in the zone, IPv4 only)
    /// and ns.provider.net. (outside, no address), with its SOA's RNAME set; `www` holds an A.
    fn apex_table(extra: &[(&str, Value)]) -> ServingTable {
        let mut t = RoutingTable::default();
        for (name, value) in [("www.example.com.", Value::A([192, 0, 2, 80].into()))]
            .into_iter()
            .chain(extra.iter().cloned())
        {
            t.groups.insert(
                format!("t/{name}").into(),
                Arc::new(CompiledGroup {
                    key: format!("t/{name}").into(),
                    name: name.into(),
                    record_type: match value {
                        Value::Aaaa(_) => RecordType::Aaaa,
                        _ => RecordType::A,
                    },
                    ttl: 30,
                    last_resort: false,
                    zone_affinity: None,
                    selection: Selection::Fixed(Answer {
                        set_identifier: "x".into(),
                        target: Target::Values(vec![value]),
                    }),
                }),
            );
        }
        ServingTable::build(
            &t,
            &[ZoneConfig {
                apex: "example.com.".into(),
                nameservers: vec![
                    NameServer {
                        name: "ns1.example.com.".into(),
                        addresses: vec![
                            [192, 0, 2, 53].into(),
                            "2001:db8::53".parse().expect("an address"),
                        ],
                    },
                    NameServer {
                        name: "ns2.example.com.".into(),
                        addresses: vec![[198, 51, 100, 53].into()],
                    },
                    "ns.provider.net.".into(),
                ],
                rname: Some("dns-admin.example.com.".into()),
                default_ttl: 300,
                ..ZoneConfig::default()
            }],
            None,
            &AnswerCounters::default(),
        )
        .expect("builds")
    }

    fn values(records: &[hickory_server::proto::rr::Record]) -> Vec<(String, String)> {
        records
            .iter()
            .map(|r| {
                let value = match &r.data {
                    RData::A(a) => a.0.to_string(),
                    RData::AAAA(a) => a.0.to_string(),
                    RData::NS(n) => n.0.to_ascii(),
                    other => format!("{other:?}"),
                };
                (r.name.to_ascii().to_lowercase(), value)
            })
            .collect()
    }

    // SEM-D12: the apex NS RRset lists the configured nameservers, and carries the in-zone
    // ones' addresses as glue (owned by the NS names, one RRset per name and type); the same
    // records as the hickory path writes.
    #[test]
    fn ns_answers_carry_the_nameservers_glue() {
        let t = apex_table(&[]);
        let req = query("Example.COM.", HType::NS, Some(1232));
        let m = ask(&t, &req).expect("fast");
        assert!(m.metadata.authoritative && !m.metadata.truncation);
        assert_eq!(
            values(&m.answers),
            [
                ("example.com.".to_owned(), "ns1.example.com.".to_owned()),
                ("example.com.".into(), "ns2.example.com.".into()),
                ("example.com.".into(), "ns.provider.net.".into()),
            ]
        );
        assert_eq!(
            values(&m.additionals),
            [
                ("ns1.example.com.".to_owned(), "192.0.2.53".to_owned()),
                ("ns1.example.com.".into(), "2001:db8::53".into()),
                ("ns2.example.com.".into(), "198.51.100.53".into()),
            ]
        );
        assert!(m.additionals.iter().all(|r| r.ttl == 300));
        assert_eq!(m.edns.as_ref().map(|e| e.max_payload()), Some(1232));
        let qname = crate::dns::wire::wire_name("example.com.");
        let outcome = t.lookup(
            &qname,
            u16::from(HType::NS),
            &mut fastrand::Rng::with_seed(1),
            &mut Tally::default(),
        );
        let glue = crate::dns::handler::additional(&t, &outcome);
        assert_eq!(
            values(&glue),
            values(&m.additionals),
            "the hickory path's glue"
        );
    }

    // SEM-D12: a nameserver's name answers its configured addresses of the asked type; a type
    // it has none of is NODATA; the SOA names the first nameserver and the configured RNAME.
    #[test]
    fn nameserver_names_answer_their_addresses() {
        let t = apex_table(&[]);
        let m = ask(&t, &query("NS1.example.com.", HType::AAAA, None)).expect("fast");
        assert_eq!(
            values(&m.answers),
            [("ns1.example.com.".to_owned(), "2001:db8::53".to_owned())]
        );
        assert!(m.metadata.authoritative);
        let m = ask(&t, &query("ns2.example.com.", HType::A, None)).expect("fast");
        assert_eq!(
            values(&m.answers),
            [("ns2.example.com.".to_owned(), "198.51.100.53".to_owned())]
        );
        let m = ask(&t, &query("ns2.example.com.", HType::AAAA, None)).expect("fast");
        assert_eq!(m.metadata.response_code, ResponseCode::NoError, "NODATA");
        assert!(m.answers.is_empty() && m.authorities.len() == 1);
        let m = ask(&t, &query("example.com.", HType::SOA, None)).expect("fast");
        let RData::SOA(soa) = &m.answers[0].data else {
            panic!("{:?}", m.answers);
        };
        assert_eq!(soa.mname.to_ascii(), "ns1.example.com.");
        assert_eq!(soa.rname.to_ascii(), "dns-admin.example.com.");
        // The addresses are configuration, not RecordGroups: no group, no metric.
        assert_eq!(t.groups().len(), 1);
    }

    // SEM-D12: a RecordGroup at a nameserver's name wins: it answers there, the configured
    // addresses are not served (nor glue), and the table says which names it shadows.
    #[test]
    fn a_record_group_wins_over_a_nameserver_address() {
        let t = apex_table(&[("ns1.example.com.", Value::A([203, 0, 113, 1].into()))]);
        assert_eq!(t.shadowed_nameservers(), ["ns1.example.com."]);
        let m = ask(&t, &query("ns1.example.com.", HType::A, None)).expect("fast");
        assert_eq!(
            values(&m.answers),
            [("ns1.example.com.".to_owned(), "203.0.113.1".to_owned())]
        );
        let m = ask(&t, &query("ns1.example.com.", HType::AAAA, None)).expect("fast");
        assert!(m.answers.is_empty(), "the RecordGroup's name: NODATA");
        let m = ask(&t, &query("example.com.", HType::NS, None)).expect("fast");
        assert_eq!(
            values(&m.additionals),
            [("ns2.example.com.".to_owned(), "198.51.100.53".to_owned())]
        );
    }

    // SEM-D12 SEM-D4: glue that does not fit the client's limit truncates the reply (TC),
    // whole RRsets only, with counts that match what it holds.
    #[test]
    fn glue_that_does_not_fit_truncates() {
        let many: Vec<NameServer> = (0..12)
            .map(|i| NameServer {
                name: format!("ns{i}.example.com."),
                addresses: vec![
                    [192, 0, 2, i].into(),
                    format!("2001:db8::{i}").parse().expect("an address"),
                ],
            })
            .collect();
        let t = ServingTable::build(
            &RoutingTable::default(),
            &[ZoneConfig {
                apex: "example.com.".into(),
                nameservers: many,
                default_ttl: 60,
                ..ZoneConfig::default()
            }],
            None,
            &AnswerCounters::default(),
        )
        .expect("builds");
        let mut out = Vec::new();
        let req = query("example.com.", HType::NS, None);
        answer(
            &t,
            &Signers::default(),
            &req,
            &mut out,
            &mut fastrand::Rng::with_seed(1),
            &mut Tally::default(),
        );
        assert!(out.len() <= 512, "{} bytes", out.len());
        let mut decoder = hickory_server::proto::serialize::binary::BinDecoder::new(&out);
        let m =
            <Message as hickory_server::proto::serialize::binary::BinDecodable>::read(&mut decoder)
                .expect("parses");
        assert!(decoder.is_empty(), "nothing after the last record");
        assert!(m.metadata.truncation);
        assert_eq!(m.answers.len(), 12, "the NS RRset fits");
        assert!(
            m.additionals.len() < 24 && m.additionals.len() % 2 == 0,
            "whole RRsets"
        );
        let m = ask(&t, &query("example.com.", HType::NS, Some(1232))).expect("fast");
        assert!(!m.metadata.truncation && m.additionals.len() == 24 && m.edns.is_some());
    }

    // SEM-D10 SEM-D11: the reply's OPT is ours (1232, version 0, DO clear, no options) whatever
    // the query's; its header has Z and RA clear and RD as asked; a version above 0 is the
    // handler's (BADVERS).
    #[test]
    fn replies_carry_our_own_opt_and_header() {
        let t = table();
        let mut m = Message::new(9, MessageType::Query, OpCode::Query);
        m.add_query(Query::query(
            Name::from_ascii("api.example.com.").expect("name"),
            HType::A,
        ));
        let mut e = Edns::new();
        e.set_max_payload(4096);
        e.set_dnssec_ok(true);
        e.options_mut()
            .insert(hickory_server::proto::rr::rdata::opt::EdnsOption::Unknown(
                65001,
                b"hi".to_vec(),
            ));
        m.set_edns(e);
        let mut req = m.to_vec().expect("encodes");
        req[3] |= 0x40; // Z
        let mut out = Vec::new();
        assert!(matches!(
            answer(
                &t,
                &Signers::default(),
                &req,
                &mut out,
                &mut fastrand::Rng::with_seed(1),
                &mut Tally::default()
            ),
            Fast::Reply { rcode: 0, .. }
        ));
        assert_eq!(out[3] & 0x40, 0, "Z clear");
        assert_eq!(out[2] & 0x01, 0, "RD as asked (clear)");
        assert_eq!(out[3] & 0x80, 0, "RA clear");
        assert_eq!(
            out[out.len() - 11..],
            [0, 0, 41, 0x04, 0xD0, 0, 0, 0, 0, 0, 0],
            "root, OPT, 1232, rcode 0, version 0, no flags, no options"
        );
        req[2] |= 0x01; // RD
        answer(
            &t,
            &Signers::default(),
            &req,
            &mut out,
            &mut fastrand::Rng::with_seed(1),
            &mut Tally::default(),
        );
        assert_eq!(out[2] & 0x01, 0x01, "RD echoed");
        // The query's OPT (11 bytes: no option) ends it; its 7th byte is the version.
        let mut v1 = query("api.example.com.", HType::A, Some(1232));
        let at = v1.len() - 11 + 6;
        v1[at] = 1;
        assert!(ask(&t, &v1).is_none(), "BADVERS is the handler's");
    }

    // SEM-R4 SEM-D7 SEM-D8: an alias answers with its target's values and its target's TTL,
    // each step of a CNAME chain with its own group's; the full path writes the same records.
    #[test]
    fn an_alias_answers_with_its_targets_ttl() {
        let group = |key: &str, name: &str, rtype, ttl, target| {
            Arc::new(CompiledGroup {
                key: key.into(),
                name: name.into(),
                record_type: rtype,
                ttl,
                last_resort: false,
                zone_affinity: None,
                selection: Selection::Fixed(Answer {
                    set_identifier: "x".into(),
                    target,
                }),
            })
        };
        let mut t = RoutingTable::default();
        for g in [
            group(
                "t/origin",
                "origin.example.com.",
                RecordType::A,
                20,
                Target::Values(vec![Value::A([192, 0, 2, 7].into())]),
            ),
            group(
                "t/www",
                "www.example.com.",
                RecordType::A,
                300,
                Target::Alias("t/origin".into()),
            ),
            group(
                "t/cdn",
                "cdn.example.com.",
                RecordType::Cname,
                120,
                Target::Values(vec![Value::Cname("www.example.com.".into())]),
            ),
        ] {
            t.groups.insert(g.key.clone(), g);
        }
        let zones = [ZoneConfig {
            apex: "example.com.".into(),
            default_ttl: 45,
            ..ZoneConfig::default()
        }];
        let served =
            ServingTable::build(&t, &zones, None, &AnswerCounters::default()).expect("builds");
        let shown = |records: &[hickory_server::proto::rr::Record]| -> Vec<String> {
            records
                .iter()
                .map(|r| format!("{} {} {}", r.name.to_ascii().to_lowercase(), r.ttl, r.data))
                .collect()
        };
        let want = [
            "cdn.example.com. 120 www.example.com.",
            "www.example.com. 20 192.0.2.7",
        ];
        let m = ask(&served, &query("cdn.example.com.", HType::A, None)).expect("fast");
        assert_eq!(shown(&m.answers), want);
        let outcome = served.lookup(
            &crate::dns::wire::wire_name("cdn.example.com."),
            HType::A.into(),
            &mut fastrand::Rng::with_seed(1),
            &mut Tally::default(),
        );
        let question = Name::from_ascii("cdn.example.com.").expect("name");
        let (answers, _) = crate::dns::handler::records(&served, &outcome, &question);
        assert_eq!(shown(&answers), want);
    }
}
