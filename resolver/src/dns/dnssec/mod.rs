//! Signed answers (SEMANTICS K1-K6): DNSSEC online signing of the served zones that have
//! keys, for queries with the DO bit.
//!
//! ```text
//!   zones[i].dnssec (keys: PKCS#8 files, role, state; timing) ──load──▶ Signers (by apex)
//!        └─ every 10 s: a key file that changed (a Secret's new version) ──▶ a new signer,
//!           or, when it cannot be used, the old one kept and the error logged (K5)
//!   handler, DO set, zone signed:
//!     answer RRsets ──▶ each followed by its RRSIGs (signer: cached per RRset variant)
//!     NODATA / no such name ──▶ SOA + RRSIG, and one NSEC at the name (compact denial, RFC
//!                                9824: NOERROR, types at the name or NXNAME) + RRSIG
//!     apex DNSKEY, CDS, CDNSKEY ──▶ from the keys (with or without DO)
//!     glue: unsigned
//! ```
//!
//! ```text
//!   keys.rs    key files, roles and states; DNSKEY, DS, CDS, CDNSKEY
//!   signer.rs  RRSIGs over an RRset, and their bounded cache
//!   mod.rs     the configuration, the signers by zone, a response's sections signed
//! ```
//!
//! Layer: over `wire` and hickory's DNSSEC types; the handler and the fast path (which leaves
//! these queries to the handler) read it. The peer exchange's TSIG is elsewhere (`exchange`).

pub mod keys;
pub mod signer;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use hickory_proto::dnssec::rdata::{DNSSECRData, NSEC};
use hickory_proto::rr::{Name, RData, Record, RecordType};

use crate::error::Error;
use keys::KeyConfig;
pub use signer::{SignerCounters, Timing, ZoneSigner};

/// The `dnssec` sections of a settings file read again, by normalised apex, each checked;
/// or why the file could not be read.
pub type FreshSettings =
    Result<std::collections::HashMap<String, Result<DnssecConfig, String>>, String>;

/// NXNAME (RFC 9824): in an NSEC's type bitmap, the name does not exist.
pub const NXNAME: u16 = 128;

/// How many RRset variants a zone's cache holds by default.
pub const DEFAULT_CACHE_ENTRIES: usize = 100_000;

/// A zone's `dnssec:` settings (K1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnssecConfig {
    pub keys: Vec<KeyConfig>,
    pub timing: Timing,
    pub cache_entries: usize,
}

/// `dnssec:` as written in the configuration file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DnssecEntry {
    pub keys: Vec<KeyConfig>,
    /// "24h": how long a signature holds from its making.
    pub signature_validity: Option<String>,
    /// "12h": a cached signature is made again once this old.
    pub signature_refresh: Option<String>,
    /// "1h": the inception is set this far in the past (clock skew).
    pub inception_backdate: Option<String>,
    pub cache_entries: Option<usize>,
}

impl DnssecEntry {
    /// Checked: durations as the CRDs write them, the refresh below the validity; a relative
    /// key file is read from `base` (the settings file's directory).
    pub fn config(&self, base: &std::path::Path) -> Result<DnssecConfig, (String, String)> {
        let defaults = Timing::default();
        let read = |field: &str, raw: &Option<String>, default: Duration| match raw {
            None => Ok(default),
            Some(raw) => healthroute_api::parse_duration(raw)
                .map(Duration::from_secs)
                .map_err(|e| (field.to_owned(), e.to_string())),
        };
        let timing = Timing {
            validity: read(
                "signatureValidity",
                &self.signature_validity,
                defaults.validity,
            )?,
            refresh: read(
                "signatureRefresh",
                &self.signature_refresh,
                defaults.refresh,
            )?,
            backdate: read(
                "inceptionBackdate",
                &self.inception_backdate,
                defaults.backdate,
            )?,
        };
        if timing.validity < Duration::from_secs(3600) {
            return Err((
                "signatureValidity".into(),
                "at least 1h: a validator's clock may be minutes off".into(),
            ));
        }
        if timing.refresh >= timing.validity {
            return Err((
                "signatureRefresh".into(),
                "below signatureValidity: a signature is made again before it expires".into(),
            ));
        }
        if self.keys.is_empty() {
            return Err(("keys".into(), "at least one key".into()));
        }
        let keys = self
            .keys
            .iter()
            .map(|key| KeyConfig {
                file: base.join(&key.file),
                ..key.clone()
            })
            .collect();
        Ok(DnssecConfig {
            keys,
            timing,
            cache_entries: self.cache_entries.unwrap_or(DEFAULT_CACHE_ENTRIES).max(2),
        })
    }
}

/// One signed zone: its signer now (with the settings it was made from).
pub struct SignedZone {
    /// Lower-case wire form of the apex.
    pub apex_wire: Box<[u8]>,
    /// The apex as the settings name it, normalised.
    pub apex: String,
    pub signer: ArcSwap<ZoneSigner>,
    pub counters: Arc<SignerCounters>,
    /// The last reload's error, said once until it changes.
    last_error: std::sync::Mutex<Option<String>>,
}

/// The signed zones of the process.
#[derive(Default)]
pub struct Signers {
    zones: Vec<SignedZone>,
}

impl Signers {
    /// Reads every signed zone's keys: a key that cannot be read is an error at start-up,
    /// never a zone served unsigned (K1). `zones`: (apex, its settings).
    pub fn load<'a>(
        zones: impl IntoIterator<Item = (&'a str, &'a DnssecConfig)>,
    ) -> Result<Signers, Error> {
        let mut out = Vec::new();
        for (apex, config) in zones {
            let counters = Arc::new(SignerCounters::default());
            let signer = new_signer(apex, config, counters.clone())?;
            out.push(SignedZone {
                apex_wire: crate::dns::wire::wire_name(apex).into_boxed_slice(),
                apex: apex.to_owned(),
                signer: ArcSwap::from_pointee(signer),
                counters,
                last_error: Default::default(),
            });
        }
        Ok(Signers { zones: out })
    }

    pub fn is_empty(&self) -> bool {
        self.zones.is_empty()
    }

    pub fn zones(&self) -> &[SignedZone] {
        &self.zones
    }

    /// The signer of the zone whose apex is `apex` (lower-case wire form).
    pub fn get(&self, apex: &[u8]) -> Option<Arc<ZoneSigner>> {
        self.zones
            .iter()
            .find(|z| *z.apex_wire == *apex)
            .map(|z| z.signer.load_full())
    }

    /// Takes the settings file's `dnssec` sections as read again (`fresh`, when there is a
    /// file: by normalised apex, or the file's error; `config::dnssec_settings`) and
    /// reads the key files again: a zone whose `dnssec` settings or key files changed gets a
    /// new signer (and an empty cache), unless they cannot be used: then the old one stays,
    /// and the error is returned for the log once (K5). Returns what changed or failed.
    pub fn reload(&self, fresh: Option<FreshSettings>) -> Vec<(String, Result<(), Error>)> {
        let mut out = Vec::new();
        for zone in &self.zones {
            let current = zone.signer.load();
            let config = match &fresh {
                None => Ok(current.config.clone()),
                Some(Err(e)) => Err(e.clone()),
                Some(Ok(zones)) => zones.get(&zone.apex).cloned().unwrap_or_else(|| {
                    Err(format!(
                        "zones[{}].dnssec is gone from the settings: the zone stays signed \
                         with its keys until the resolver restarts",
                        zone.apex
                    ))
                }),
            };
            let outcome = config
                .map_err(|why| Error::DnssecKeys {
                    zone: zone.apex.clone(),
                    why,
                })
                .and_then(|config| {
                    if config == current.config && !keys::changed(&config.keys, &current.keys) {
                        return Ok(None);
                    }
                    new_signer(&zone.apex, &config, zone.counters.clone()).map(Some)
                });
            let mut last = zone.last_error.lock().unwrap_or_else(|p| p.into_inner());
            match outcome {
                Ok(None) => *last = None,
                Ok(Some(signer)) => {
                    *last = None;
                    zone.signer.store(Arc::new(signer));
                    out.push((zone.apex.clone(), Ok(())));
                }
                Err(e) => {
                    let said = e.to_string();
                    if last.as_deref() != Some(said.as_str()) {
                        *last = Some(said);
                        zone.counters
                            .reload_failures
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        out.push((zone.apex.clone(), Err(e)));
                    }
                }
            }
        }
        out
    }
}

fn new_signer(
    apex: &str,
    config: &DnssecConfig,
    counters: Arc<SignerCounters>,
) -> Result<ZoneSigner, Error> {
    let keys = keys::load_all(&config.keys, apex)?;
    let name = Name::from_ascii(apex).map_err(|e| Error::DnssecKeys {
        zone: apex.to_owned(),
        why: e.to_string(),
    })?;
    Ok(ZoneSigner::new(name, keys, config.clone(), counters))
}

/// Now, in Unix seconds.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The apex's key RRsets (K4): DNSKEY (every key, active or published), and CDS and
/// CDNSKEY (every key the parent's DS may name), each with the zone's default TTL.
pub fn key_records(signer: &ZoneSigner, rtype: RecordType, ttl: u32) -> Vec<Record> {
    let apex = &signer.apex;
    signer
        .keys
        .iter()
        .filter_map(|key| {
            let data = match rtype {
                RecordType::DNSKEY => DNSSECRData::DNSKEY(key.dnskey.clone()),
                RecordType::CDS if key.is_entry_point() => DNSSECRData::CDS(key.cds(apex).ok()?),
                RecordType::CDNSKEY if key.is_entry_point() => DNSSECRData::CDNSKEY(key.cdnskey()),
                _ => return None,
            };
            Some(Record::from_rdata(apex.clone(), ttl, RData::DNSSEC(data)))
        })
        .collect()
}

/// The types an apex holds beside its groups' (K4).
pub const APEX_TYPES: [RecordType; 5] = [
    RecordType::NS,
    RecordType::SOA,
    RecordType::DNSKEY,
    RecordType::CDS,
    RecordType::CDNSKEY,
];

/// Each RRset of `records` (consecutive records of one owner and type) followed by its
/// RRSIGs (K2), made by the signer of the zone the owner is in (`signer_of`; a CNAME chain
/// may cross zones); an RRset of an unsigned zone goes without.
pub fn with_rrsigs(
    signer_of: &dyn Fn(&Name) -> Option<Arc<ZoneSigner>>,
    records: Vec<Record>,
    now: u64,
) -> Vec<Record> {
    let mut out = Vec::with_capacity(records.len() * 2);
    let mut start = 0;
    while start < records.len() {
        let first = &records[start];
        let end = records[start..]
            .iter()
            .position(|r| r.record_type() != first.record_type() || r.name != first.name)
            .map_or(records.len(), |n| start + n);
        let rrset = &records[start..end];
        out.extend_from_slice(rrset);
        if let Some(signer) = signer_of(&first.name) {
            out.extend(signer.rrsigs(&first.name, rrset, now));
        }
        start = end;
    }
    out
}

/// The NSEC of compact denial (K3, RFC 9824) at `name`: next name `\000.name`, and the types
/// at the name (`None`: the name does not exist, NXNAME), with RRSIG and NSEC.
pub fn denial(name: &Name, types: Option<&[RecordType]>, ttl: u32) -> Option<Record> {
    let next = name.prepend_label(&b"\x00"[..]).ok()?;
    let mut bitmap = vec![RecordType::RRSIG, RecordType::NSEC];
    match types {
        Some(types) => bitmap.extend_from_slice(types),
        None => bitmap.push(RecordType::Unknown(NXNAME)),
    }
    Some(Record::from_rdata(
        name.clone(),
        ttl,
        RData::DNSSEC(DNSSECRData::NSEC(NSEC::new(next, bitmap))),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-K1: the timing's defaults and its checks.
    #[test]
    fn the_timing_reads_as_durations_and_is_checked() {
        let entry = |validity: Option<&str>, refresh: Option<&str>| DnssecEntry {
            keys: vec![KeyConfig {
                file: "k.pem".into(),
                role: Default::default(),
                state: Default::default(),
            }],
            signature_validity: validity.map(Into::into),
            signature_refresh: refresh.map(Into::into),
            inception_backdate: None,
            cache_entries: None,
        };
        let base = std::path::Path::new("/etc/healthroute");
        let config = entry(None, None).config(base).expect("defaults");
        assert_eq!(
            config.keys[0].file,
            base.join("k.pem"),
            "beside the settings"
        );
        assert_eq!(config.timing, Timing::default());
        assert_eq!(config.cache_entries, DEFAULT_CACHE_ENTRIES);
        let custom = entry(Some("336h"), Some("168h"))
            .config(base)
            .expect("two weeks");
        assert_eq!(custom.timing.validity, Duration::from_secs(336 * 3600));
        for (validity, refresh, field) in [
            (Some("30m"), None, "signatureValidity"),
            (Some("2h"), Some("2h"), "signatureRefresh"),
            (Some("1d"), None, "signatureValidity"),
        ] {
            let (at, why) = entry(validity, refresh).config(base).expect_err(field);
            assert_eq!(at, field, "{why}");
        }
    }

    // SEM-K3: compact denial: the NSEC at the name, next `\000.name`, NXNAME for a name that
    // does not exist, the name's types for one that does.
    #[test]
    fn denial_is_one_nsec_at_the_name() {
        let name = Name::from_ascii("nope.example.com.").expect("name");
        let nsec = denial(&name, None, 60).expect("nsec");
        let RData::DNSSEC(DNSSECRData::NSEC(data)) = &nsec.data else {
            panic!("{nsec:?}");
        };
        assert_eq!(
            data.next_domain_name().to_string(),
            "\\000.nope.example.com."
        );
        let types: Vec<RecordType> = data.type_bit_maps().collect();
        assert!(types.contains(&RecordType::Unknown(NXNAME)), "{types:?}");
        let nodata = denial(&name, Some(&[RecordType::A]), 60).expect("nsec");
        let RData::DNSSEC(DNSSECRData::NSEC(data)) = &nodata.data else {
            panic!("{nodata:?}");
        };
        let types: Vec<RecordType> = data.type_bit_maps().collect();
        assert_eq!(
            types,
            [RecordType::A, RecordType::RRSIG, RecordType::NSEC],
            "in type order"
        );
    }
}
