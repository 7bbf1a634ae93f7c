//! DNS wire form as the resolver writes it: record type numbers, the UDP payload limit, names
//! in lower-case wire form, and RRs without their owner. The bottom layer: it imports no other
//! module of the crate, and every module that reads or writes the wire takes these from here.
//!
//! A wire RR here is an RR without its owner: TYPE, CLASS, TTL, RDLENGTH and RDATA, with no
//! compression inside (a CNAME's target is written in full, so later RRs of a chain can point
//! at it). The owner is written per reply.

use healthroute_table::{RecordType, Value};

pub const TYPE_A: u16 = 1;
pub const TYPE_NS: u16 = 2;
pub const TYPE_CNAME: u16 = 5;
pub const TYPE_SOA: u16 = 6;
pub const TYPE_HINFO: u16 = 13;
pub const TYPE_TXT: u16 = 16;
pub const TYPE_AAAA: u16 = 28;
pub const TYPE_OPT: u16 = 41;
pub const TYPE_RRSIG: u16 = 46;
pub const TYPE_DNSKEY: u16 = 48;
pub const TYPE_CDS: u16 = 59;
pub const TYPE_CDNSKEY: u16 = 60;
pub const TYPE_IXFR: u16 = 251;
pub const TYPE_AXFR: u16 = 252;
pub const TYPE_ANY: u16 = 255;

/// The largest UDP payload we advertise and honour (the DNS Flag Day 2020 value), on the fast
/// path and the full handler alike.
pub const MAX_UDP_PAYLOAD: u16 = 1232;

/// The wire type number of a table record type.
pub fn wire_type(t: RecordType) -> u16 {
    match t {
        RecordType::A => TYPE_A,
        RecordType::Aaaa => TYPE_AAAA,
        RecordType::Cname => TYPE_CNAME,
        RecordType::Txt => TYPE_TXT,
    }
}

/// Lower-case wire form of a normalised name (`a.example.com.` → `\x01a\x07example\x03com\x00`).
pub fn wire_name(name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(name.len() + 2);
    push_name(&mut out, name);
    out
}

/// Appends [`wire_name`]`(name)` to `out`.
pub fn push_name(out: &mut Vec<u8>, name: &str) {
    for label in text_labels(name) {
        out.push(label.len() as u8);
        out.extend(label.iter().map(u8::to_ascii_lowercase));
    }
    out.push(0);
}

/// The labels of a name in text form (its dots left out, the root too).
pub fn text_labels(name: &str) -> impl Iterator<Item = &[u8]> {
    name.split('.').filter(|l| !l.is_empty()).map(str::as_bytes)
}

/// The labels of a wire name, without the root.
pub fn wire_labels(wire: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut at = 0;
    std::iter::from_fn(move || {
        let len = usize::from(*wire.get(at)?);
        let label = wire.get(at + 1..at + 1 + len).filter(|_| len > 0)?;
        at += 1 + len;
        Some(label)
    })
}

/// [`wire_name`]`(name)` in `buf`, for a lookup that must not allocate; `None` for what no
/// normalised name is (a label over 63 bytes, a name over 255 bytes in wire form).
pub fn wire_name_in<'b>(name: &str, buf: &'b mut [u8; 256]) -> Option<&'b [u8]> {
    let mut at = 0;
    for label in text_labels(name) {
        let end = at + 1 + label.len();
        if label.len() > 63 || end > 254 {
            return None;
        }
        buf[at] = label.len() as u8;
        for (to, b) in buf[at + 1..end].iter_mut().zip(label) {
            *to = b.to_ascii_lowercase();
        }
        at = end;
    }
    buf[at] = 0;
    Some(&buf[..=at])
}

/// Whether wire name `qname` is `apex` or below it (on a label boundary).
// Every lookup calls it (`ServingTable::zone_of`); inline so that it stays inlinable into the
// lookup now that it lives in another module (and so, in a release build, maybe another
// codegen unit) than its caller.
#[inline]
pub fn in_zone(qname: &[u8], apex: &[u8]) -> bool {
    let mut i = 0;
    while i < qname.len() {
        if qname.len() - i == apex.len() {
            return &qname[i..] == apex;
        }
        if qname.len() - i < apex.len() {
            return false;
        }
        i += usize::from(qname[i]) + 1;
    }
    false
}

/// Whether `prefix` is a whole number of wire labels (so what follows starts a label).
pub fn is_label_prefix(prefix: &[u8]) -> bool {
    let mut i = 0;
    while i < prefix.len() {
        i += usize::from(prefix[i]) + 1;
    }
    i == prefix.len()
}

/// An RR without its owner, class IN.
pub fn rr(rtype: u16, ttl: u32, rdata: &[u8]) -> Box<[u8]> {
    let mut out = Vec::with_capacity(10 + rdata.len());
    out.extend_from_slice(&rtype.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    out.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    out.extend_from_slice(rdata);
    out.into()
}

/// One answer value as an RR without its owner.
pub fn value_rr(v: &Value, ttl: u32) -> Box<[u8]> {
    let mut out = Vec::with_capacity(32);
    push_value_rr(&mut out, v, ttl);
    out.into()
}

/// Appends [`value_rr`]`(v, ttl)` to `out`: how every answer is written, straight from the
/// table's values. Only a TXT value allocates (its character-strings).
pub fn push_value_rr(out: &mut Vec<u8>, v: &Value, ttl: u32) {
    out.extend_from_slice(&wire_type(v.record_type()).to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&ttl.to_be_bytes());
    let rdlength_at = out.len();
    out.extend_from_slice(&[0, 0]);
    match v {
        Value::A(a) => out.extend_from_slice(&a.octets()),
        Value::Aaaa(a) => out.extend_from_slice(&a.octets()),
        Value::Cname(n) => push_name(out, n),
        Value::Txt(t) => {
            // Validated by the compiler; a value it would refuse is served as plain text.
            let strings = healthroute_table::txt::character_strings(t)
                .unwrap_or_else(|_| vec![t.as_bytes().iter().take(255).copied().collect()]);
            for s in strings {
                out.push(s.len() as u8);
                out.extend_from_slice(&s);
            }
        }
    }
    let rdlength = (out.len() - rdlength_at - 2) as u16;
    out[rdlength_at..rdlength_at + 2].copy_from_slice(&rdlength.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lower_case_wire_labels() {
        assert_eq!(wire_name("A.Example.com."), b"\x01a\x07example\x03com\x00");
        assert_eq!(wire_name("."), b"\x00");
        let mut buf = [0u8; 256];
        assert_eq!(
            wire_name_in("A.Example.com.", &mut buf),
            Some(&b"\x01a\x07example\x03com\x00"[..])
        );
        let long = format!("{}.", vec!["a".repeat(63); 4].join("."));
        assert_eq!(
            wire_name_in(&long, &mut buf),
            None,
            "256 bytes in wire form"
        );
        let longest = format!("{}.{}.", vec!["a".repeat(63); 3].join("."), "a".repeat(61));
        assert_eq!(wire_name_in(&longest, &mut buf).map(<[u8]>::len), Some(255));
    }

    #[test]
    fn a_zone_holds_its_apex_and_names_below_on_label_boundaries() {
        let apex = wire_name("example.com.");
        assert!(in_zone(&wire_name("example.com."), &apex));
        assert!(in_zone(&wire_name("a.b.example.com."), &apex));
        assert!(!in_zone(&wire_name("badexample.com."), &apex));
        assert!(!in_zone(&wire_name("com."), &apex));
    }
}
