//! The zones' own records in wire form (D1, D6, D12): the apex, its SOA (in full, and
//! compressed against the apex for replies), its NS RRs with the glue of the nameservers served
//! here, and the RFC 8482 answer to ANY. Built once per table from the configuration; every RR
//! is kept without its owner, which the writer adds per reply.
//!
//! Layer: the bottom of the serving table, over `wire` only.

use std::collections::HashMap;
use std::net::IpAddr;

use crate::dns::wire::{TYPE_HINFO, TYPE_NS, TYPE_SOA, is_label_prefix, rr, wire_name};
use crate::error::Error;

/// The SOA's REFRESH, RETRY and EXPIRE. No server transfers our zones (each resolver builds
/// them from the table), so they steer nothing; they are the values RIPE-203 recommends and
/// Zonemaster checks for (ZONE02-ZONE05: it warned about an EXPIRE of one day).
const SOA_REFRESH: u32 = 14_400;
const SOA_RETRY: u32 = 3_600;
const SOA_EXPIRE: u32 = 604_800;

/// One served zone: its apex and the records only the apex has.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZoneConfig {
    /// Lower-case FQDN with the trailing dot.
    pub apex: String,
    /// Name servers announced at the apex (D12); default `ns.<zone>`, without an address.
    pub nameservers: Vec<NameServer>,
    /// The SOA's MNAME; default the first nameserver (D12).
    pub mname: Option<String>,
    /// The SOA's RNAME; default `hostmaster.<zone>` (D12).
    pub rname: Option<String>,
    /// TTL of answers without their own, and the SOA minimum (negative TTL, D1, D7).
    pub default_ttl: u32,
    /// Signed answers (K1): the zone's keys and timing.
    pub dnssec: Option<crate::dns::dnssec::DnssecConfig>,
}

/// A name server of a zone (D12): its name, and the addresses the resolver answers for that
/// name and gives as glue when the name lies in a served zone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NameServer {
    /// An FQDN; normalised when the table is built.
    pub name: String,
    pub addresses: Vec<IpAddr>,
}

impl From<&str> for NameServer {
    /// A name server known by name only (`--nameserver`): no address is served for it.
    fn from(name: &str) -> Self {
        NameServer {
            name: name.to_owned(),
            addresses: Vec::new(),
        }
    }
}

/// A served zone in wire form.
pub struct ServedZone {
    /// Lower-case wire form of the apex.
    pub apex: Box<[u8]>,
    /// The SOA RR (no owner), its RDATA names written in full.
    pub soa: Box<[u8]>,
    /// The same SOA with its RDATA names that end in the apex compressed (for replies).
    pub soa_compressed: SoaTail,
    /// The NS RRs (no owner).
    pub ns: Box<[Box<[u8]>]>,
    /// The addresses of the NS names the resolver serves, for the additional section of an
    /// NS answer (D12): one RRset per name and address type, in NS order.
    pub glue: Box<[Glue]>,
    /// The RFC 8482 answer to ANY: an HINFO RR (no owner).
    pub any: Box<[u8]>,
    /// The zone is signed (K1): a query with DO, or for its keys, is the handler's.
    pub signed: bool,
}

/// One glue RRset of an NS answer: the A or AAAA RRs (no owner) of the name server whose
/// name is the RDATA of NS RR number `ns`.
#[derive(Debug)]
pub struct Glue {
    /// Index in [`ServedZone::ns`] of the NS RR naming the owner.
    pub ns: usize,
    /// Where that NS RR's RDATA (the owner's name, in full) starts, counted from the start of
    /// the NS RRset as the fast path writes it (each NS RR after a 2-byte owner pointer): the
    /// target of the glue's owner pointers.
    pub name_at: usize,
    pub rrs: Box<[Box<[u8]>]>,
}

/// The zone's SOA RR after its owner name, for replies. Names in its RDATA that end in the
/// apex are compressed to a pointer at the apex, which every negative answer has as the tail
/// of a name it already holds; [`SoaTail::apex_pointers`] says where those pointers go, and the
/// writer fills them in per reply. Uncompressed, the SOA made NODATA and NXDOMAIN answers about
/// 20 bytes longer than other servers'.
#[derive(Debug)]
pub struct SoaTail {
    /// TYPE, CLASS, TTL, RDLENGTH and RDATA, with zeros where the pointers go.
    pub bytes: Box<[u8]>,
    /// Offsets in `bytes` of the 2-byte pointers to the apex (0, 1 or 2 of them).
    pub apex_pointers: Box<[usize]>,
}

/// A name server's address RRsets (A, then AAAA; the empty ones left out), by wire name.
pub(super) type Hosts = HashMap<Box<[u8]>, Vec<Box<[Box<[u8]>]>>>;

/// The glue of an NS RRset: the address RRsets of each NS name in `hosts`, in NS order.
pub(super) fn glue(ns: &[Box<[u8]>], hosts: &Hosts) -> Box<[Glue]> {
    let mut out = Vec::new();
    let mut at = 0;
    for (k, record) in ns.iter().enumerate() {
        // The RR after its 2-byte owner pointer; its RDATA after TYPE..RDLENGTH.
        let name_at = at + 2 + 10;
        at += 2 + record.len();
        let Some(sets) = record.get(10..).and_then(|name| hosts.get(name)) else {
            continue;
        };
        out.extend(sets.iter().map(|rrs| Glue {
            ns: k,
            name_at,
            rrs: rrs.clone(),
        }));
    }
    out.into()
}

/// The wire form of zone `z`, with `serial` in its SOA; its glue is filled in once the
/// table's names are known.
pub(super) fn served_zone(z: &ZoneConfig, serial: u32) -> Result<ServedZone, Error> {
    let apex_name = normalize(&z.apex)?;
    let apex = wire_name(&apex_name);
    let ns_names: Vec<String> = if z.nameservers.is_empty() {
        vec![format!("ns.{apex_name}")]
    } else {
        z.nameservers
            .iter()
            .map(|n| normalize(&n.name))
            .collect::<Result<_, _>>()?
    };
    let mname = match &z.mname {
        Some(n) => normalize(n)?,
        None => ns_names
            .first()
            .cloned()
            .unwrap_or_else(|| format!("ns.{apex_name}")),
    };
    let rname = match &z.rname {
        Some(n) => normalize(n)?,
        None => format!("hostmaster.{apex_name}"),
    };
    let ttl = z.default_ttl;
    let mut soa_rdata = Vec::with_capacity(64);
    soa_rdata.extend(wire_name(&mname));
    soa_rdata.extend(wire_name(&rname));
    for v in [serial, SOA_REFRESH, SOA_RETRY, SOA_EXPIRE, ttl] {
        soa_rdata.extend_from_slice(&v.to_be_bytes());
    }
    Ok(ServedZone {
        soa: rr(TYPE_SOA, ttl, &soa_rdata),
        soa_compressed: soa_tail(&apex, &mname, &rname, serial, ttl),
        ns: ns_names
            .iter()
            .map(|n| rr(TYPE_NS, ttl, &wire_name(n)))
            .collect(),
        // Filled in once the table's names are known (a RecordGroup may hold an NS name).
        glue: Box::new([]),
        // HINFO "RFC8482" "".
        any: rr(TYPE_HINFO, ttl, b"\x07RFC8482\x00"),
        apex: apex.into(),
        signed: z.dnssec.is_some(),
    })
}

pub(super) fn normalize(raw: &str) -> Result<String, Error> {
    Ok(healthroute_table::normalize_name(raw)?)
}

/// A zone's SOA RR after the owner name, its RDATA names compressed against the apex.
fn soa_tail(apex_wire: &[u8], mname: &str, rname: &str, serial: u32, minimum: u32) -> SoaTail {
    let mut rdata = Vec::with_capacity(64);
    let mut apex_pointers = Vec::new();
    for name in [mname, rname] {
        let wire = wire_name(name);
        match wire.strip_suffix(apex_wire) {
            // A suffix on a label boundary: the labels before the apex, then the pointer.
            Some(prefix) if is_label_prefix(prefix) => {
                rdata.extend_from_slice(prefix);
                apex_pointers.push(10 + rdata.len());
                rdata.extend_from_slice(&[0xC0, 0]);
            }
            _ => rdata.extend(wire),
        }
    }
    for v in [serial, SOA_REFRESH, SOA_RETRY, SOA_EXPIRE, minimum] {
        rdata.extend_from_slice(&v.to_be_bytes());
    }
    SoaTail {
        bytes: rr(TYPE_SOA, minimum, &rdata),
        apex_pointers: apex_pointers.into(),
    }
}
