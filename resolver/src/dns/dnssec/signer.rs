//! One zone's signer: RRSIGs over an RRset (K2, K3), kept per RRset variant in a bounded cache
//! so that a signed answer does not cost a signature per query.
//!
//! ```text
//!   RRset (owner, type, TTL, values) ─▶ canonical key ─▶ cache hit, made less than `refresh`
//!        ago? ─▶ its RRSIGs (owner set to the name as asked)
//!                                      └▶ else one RRSIG per active key that signs the type,
//!                                         inception now - backdate, expiration now + validity
//! ```
//!
//! The cache holds two generations of at most `capacity / 2` entries each: a lookup finds an
//! entry in either (and moves it into the newer), and when the newer is full the older is
//! dropped. An entry is its RRset's canonical form (the key) and its RRSIGs: at 10,000 names
//! with two variants each about 20,000 entries (docs/benchmarks.md).
//!
//! Layer: over `keys`; `dnssec::with_rrsigs` (the handler) and the fast path call it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::dnssec::TBS;
use hickory_proto::dnssec::rdata::{DNSSECRData, RRSIG, SigInput};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType, SerialNumber};
use hickory_proto::serialize::binary::{BinDecoder, BinEncodable, Restrict};

use super::DnssecConfig;
use super::keys::ZoneKey;

/// How long signatures hold, and how long a cached one is served (K3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// From the signing to the expiration.
    pub validity: Duration,
    /// A cached signature is made again once it is this old: every signature served has at
    /// least `validity - refresh` left.
    pub refresh: Duration,
    /// The inception is set this far in the past, for validators whose clock is behind.
    pub backdate: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            validity: Duration::from_secs(24 * 3600),
            refresh: Duration::from_secs(12 * 3600),
            backdate: Duration::from_secs(3600),
        }
    }
}

/// The signer's counters, for /metrics (K6).
#[derive(Debug, Default)]
pub struct SignerCounters {
    pub signatures: AtomicU64,
    pub cache_hits: AtomicU64,
    pub cache_misses: AtomicU64,
    /// Key files that changed but could not be used (the old keys kept signing, K5).
    pub reload_failures: AtomicU64,
}

struct Entry {
    /// The RRSIGs' RDATA in wire form: copied as they are by the fast path, read back into
    /// records by the handler (a second copy as hickory records held every entry twice).
    wire: Box<[Box<[u8]>]>,
    /// When they were made (Unix seconds).
    made: u64,
    /// The earliest expiration among them (Unix seconds).
    expires: u64,
}

/// Two generations of entries by the RRset's canonical form.
struct Cache {
    newer: HashMap<Box<[u8]>, Entry>,
    older: HashMap<Box<[u8]>, Entry>,
    half: usize,
}

impl Cache {
    fn new(capacity: usize) -> Self {
        Cache {
            newer: HashMap::new(),
            older: HashMap::new(),
            half: (capacity / 2).max(1),
        }
    }

    fn get(&mut self, key: &[u8]) -> Option<&Entry> {
        if !self.newer.contains_key(key)
            && let Some((k, entry)) = self.older.remove_entry(key)
        {
            self.insert(k, entry);
        }
        self.newer.get(key)
    }

    fn insert(&mut self, key: Box<[u8]>, entry: Entry) {
        if self.newer.len() >= self.half && !self.newer.contains_key(&key) {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(key, entry);
    }

    fn len(&self) -> usize {
        self.newer.len() + self.older.len()
    }

    fn earliest_expiry(&self) -> Option<u64> {
        self.newer
            .values()
            .chain(self.older.values())
            .map(|e| e.expires)
            .min()
    }
}

/// A zone's signer: its apex, its keys and the cache of what they signed.
pub struct ZoneSigner {
    pub apex: Name,
    pub keys: Vec<ZoneKey>,
    /// The settings it was made from (the key files' paths and states, the timing).
    pub config: DnssecConfig,
    cache: Mutex<Cache>,
    /// The zone's, kept across signers (a key change makes a new signer): they only go up.
    pub counters: Arc<SignerCounters>,
}

impl ZoneSigner {
    pub fn new(
        apex: Name,
        keys: Vec<ZoneKey>,
        config: DnssecConfig,
        counters: Arc<SignerCounters>,
    ) -> Self {
        ZoneSigner {
            apex,
            keys,
            cache: Mutex::new(Cache::new(config.cache_entries)),
            config,
            counters,
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Entries in the cache.
    pub fn cached(&self) -> usize {
        self.cache().len()
    }

    /// The earliest expiration (Unix seconds) of the signatures the cache would serve.
    pub fn earliest_expiry(&self) -> Option<u64> {
        self.cache().earliest_expiry()
    }

    /// The fast path's hit: hands the RDATA of the RRSIGs cached for the RRset `key`
    /// ([`rrset_key`]) to `write`, when they were made less than `refresh` ago; false (and
    /// nothing written) otherwise: the handler signs it, and fills the cache.
    pub fn cached_wire(&self, key: &[u8], now: u64, write: impl FnOnce(&[Box<[u8]>])) -> bool {
        let mut cache = self.cache();
        match cache.get(key) {
            Some(entry) if now < entry.made + self.config.timing.refresh.as_secs() => {
                self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                write(&entry.wire);
                true
            }
            _ => false,
        }
    }

    /// The RRSIGs of one RRset (every record owned by `owner`, of one type and TTL), from the
    /// cache when they were made less than `refresh` ago; owned by `owner` as given. Empty
    /// when no key can sign it (a signing failure is logged: the answer goes out without its
    /// RRSIG, which a validator rejects, rather than not at all).
    pub fn rrsigs(&self, owner: &Name, rrset: &[Record], now: u64) -> Vec<Record> {
        let Some(first) = rrset.first() else {
            return Vec::new();
        };
        let rtype = first.record_type();
        let key = canonical(owner, rtype, first.ttl, rrset);
        {
            let mut cache = self.cache();
            if let Some(entry) = cache.get(&key)
                && now < entry.made + self.config.timing.refresh.as_secs()
                && let Some(rrsigs) = records_of(&entry.wire, owner, first.ttl)
            {
                self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
                return rrsigs;
            }
        }
        self.counters.cache_misses.fetch_add(1, Ordering::Relaxed);
        let keys_rrset = matches!(
            rtype,
            RecordType::DNSKEY | RecordType::CDS | RecordType::CDNSKEY
        );
        let inception = now.saturating_sub(self.config.timing.backdate.as_secs());
        let expiration = now + self.config.timing.validity.as_secs();
        let mut rrsigs = Vec::new();
        for zone_key in self.keys.iter().filter(|k| {
            if keys_rrset {
                k.signs_keys()
            } else {
                k.signs_data()
            }
        }) {
            let input = SigInput {
                type_covered: rtype,
                algorithm: zone_key.algorithm(),
                num_labels: owner.num_labels(),
                original_ttl: first.ttl,
                // RFC 4034 3.1.5: serial number arithmetic on 32 bits.
                sig_expiration: SerialNumber::new(expiration as u32),
                sig_inception: SerialNumber::new(inception as u32),
                key_tag: zone_key.tag,
                signer_name: self.apex.clone(),
            };
            let signed = TBS::from_input(owner, DNSClass::IN, &input, rrset.iter())
                .map_err(|e| e.to_string())
                .and_then(|tbs| zone_key.signing.sign(&tbs).map_err(|e| e.to_string()));
            match signed {
                Ok(signature) => {
                    self.counters.signatures.fetch_add(1, Ordering::Relaxed);
                    rrsigs.push(Record::from_rdata(
                        owner.clone(),
                        first.ttl,
                        RData::DNSSEC(DNSSECRData::RRSIG(RRSIG::from_sig(input, signature))),
                    ));
                }
                Err(error) => {
                    tracing::error!(%owner, r#type = %rtype, key_tag = zone_key.tag, %error, "could not sign an RRset");
                }
            }
        }
        if !rrsigs.is_empty() {
            let wire = rrsigs
                .iter()
                .filter_map(|r| r.data.to_bytes().ok().map(Vec::into_boxed_slice))
                .collect();
            self.cache().insert(
                key.into_boxed_slice(),
                Entry {
                    wire,
                    made: now,
                    expires: expiration,
                },
            );
        }
        rrsigs
    }
}

/// The RRset's canonical form (RFC 4034 6.2: lower-case owner, type, TTL, each RDATA,
/// sorted): equal for two answers exactly when one's RRSIGs fit the other.
fn canonical(owner: &Name, rtype: RecordType, ttl: u32, rrset: &[Record]) -> Vec<u8> {
    let owner = owner.to_lowercase().to_bytes().unwrap_or_default();
    // The values come from the table, normalised: their wire form is canonical.
    let datas: Vec<Vec<u8>> = rrset
        .iter()
        .filter_map(|r| r.data.to_bytes().ok())
        .collect();
    let mut datas: Vec<&[u8]> = datas.iter().map(Vec::as_slice).collect();
    rrset_key(&owner, u16::from(rtype), ttl, &mut datas)
}

/// The cache key of an RRset from its parts in wire form: the owner in lower case, the type,
/// the TTL, and each RDATA (sorted here, duplicates dropped). The handler (hickory records)
/// and the fast path (the reply's bytes) make the same key for the same RRset.
pub fn rrset_key(owner: &[u8], rtype: u16, ttl: u32, datas: &mut Vec<&[u8]>) -> Vec<u8> {
    datas.sort_unstable();
    datas.dedup();
    let mut key =
        Vec::with_capacity(owner.len() + 6 + datas.iter().map(|d| d.len() + 2).sum::<usize>());
    key.extend_from_slice(owner);
    key.extend_from_slice(&rtype.to_be_bytes());
    key.extend_from_slice(&ttl.to_be_bytes());
    for data in datas.iter() {
        key.extend_from_slice(&(data.len() as u16).to_be_bytes());
        key.extend_from_slice(data);
    }
    key
}

/// The RRSIG records of cached RDATA, owned by `owner` with the RRset's `ttl`; `None` if
/// one does not read back (then it is signed anew).
fn records_of(wire: &[Box<[u8]>], owner: &Name, ttl: u32) -> Option<Vec<Record>> {
    wire.iter()
        .map(|rdata| {
            let length = Restrict::new(u16::try_from(rdata.len()).ok()?);
            let data = RData::read(&mut BinDecoder::new(rdata), RecordType::RRSIG, length).ok()?;
            Some(Record::from_rdata(owner.clone(), ttl, data))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use hickory_proto::dnssec::Verifier as _;
    use hickory_proto::rr::rdata::A;

    use super::*;
    use crate::dns::dnssec::keys::{KeyRole, KeyState, generate_pem};

    fn signer(capacity: usize) -> ZoneSigner {
        let pem = generate_pem(13).expect("generates");
        let key = ZoneKey::from_pem(pem.as_bytes(), KeyRole::Csk, KeyState::Active).expect("key");
        ZoneSigner::new(
            Name::from_ascii("example.com.").expect("name"),
            vec![key],
            DnssecConfig {
                keys: Vec::new(),
                timing: Timing::default(),
                cache_entries: capacity,
            },
            Default::default(),
        )
    }

    fn a(owner: &Name, last: u8) -> Record {
        Record::from_rdata(
            owner.clone(),
            30,
            RData::A(A(Ipv4Addr::new(192, 0, 2, last))),
        )
    }

    fn rrsig(record: &Record) -> &RRSIG {
        match &record.data {
            RData::DNSSEC(DNSSECRData::RRSIG(sig)) => sig,
            other => panic!("not an RRSIG: {other:?}"),
        }
    }

    // SEM-K3: an RRset's RRSIG verifies with the zone's DNSKEY, holds from an hour before
    // it was made for a day, and is made once per RRset variant: the same values in another
    // order or another case of the owner come from the cache, others are signed anew.
    #[test]
    fn an_rrset_is_signed_once_per_variant() {
        let s = signer(100);
        let owner = Name::from_ascii("api.example.com.").expect("name");
        let now = 1_800_000_000;
        let rrset = [a(&owner, 1), a(&owner, 2)];
        let sigs = s.rrsigs(&owner, &rrset, now);
        assert_eq!(sigs.len(), 1);
        let sig = rrsig(&sigs[0]);
        assert_eq!(sig.input().sig_inception.get(), (now - 3600) as u32);
        assert_eq!(sig.input().sig_expiration.get(), (now + 86_400) as u32);
        assert_eq!(sig.input().num_labels, 3);
        s.keys[0]
            .dnskey
            .verify_rrsig(&owner, DNSClass::IN, sig, rrset.iter())
            .expect("verifies");
        let upper = Name::from_ascii("API.example.COM.").expect("name");
        let swapped = [a(&upper, 2), a(&upper, 1)];
        let again = s.rrsigs(&upper, &swapped, now + 10);
        assert_eq!(rrsig(&again[0]).sig(), sig.sig(), "from the cache");
        assert_eq!(again[0].name, upper, "owned by the name as asked");
        assert_eq!(s.counters.signatures.load(Ordering::Relaxed), 1);
        assert_eq!(s.counters.cache_hits.load(Ordering::Relaxed), 1);
        let other = s.rrsigs(&owner, &[a(&owner, 1)], now);
        assert_ne!(rrsig(&other[0]).sig(), sig.sig());
        assert_eq!(s.counters.signatures.load(Ordering::Relaxed), 2);
        // Past the refresh: made again.
        let later = now + 12 * 3600;
        let renewed = s.rrsigs(&owner, &rrset, later);
        assert_eq!(
            rrsig(&renewed[0]).input().sig_expiration.get(),
            (later + 86_400) as u32
        );
        assert_eq!(s.counters.signatures.load(Ordering::Relaxed), 3);
    }

    // SEM-K1 SEM-K3: with a KSK and a ZSK, the KSK signs the DNSKEY RRset (and CDS,
    // CDNSKEY) and the ZSK the data; a published key signs nothing; Ed25519 (15) signs as
    // ECDSA P-256 (13) does, and both verify.
    #[test]
    fn each_role_signs_its_rrsets() {
        let key = |algorithm, role, state| {
            let pem = generate_pem(algorithm).expect("generates");
            ZoneKey::from_pem(pem.as_bytes(), role, state).expect("key")
        };
        for algorithm in [13u8, 15] {
            let keys = vec![
                key(algorithm, KeyRole::Ksk, KeyState::Active),
                key(algorithm, KeyRole::Zsk, KeyState::Active),
                key(algorithm, KeyRole::Zsk, KeyState::Published),
            ];
            let tags: Vec<u16> = keys.iter().map(|k| k.tag).collect();
            let apex = Name::from_ascii("example.com.").expect("name");
            let s = ZoneSigner::new(
                apex.clone(),
                keys,
                DnssecConfig {
                    keys: Vec::new(),
                    timing: Timing::default(),
                    cache_entries: 10,
                },
                Default::default(),
            );
            let dnskeys: Vec<Record> = s
                .keys
                .iter()
                .map(|k| {
                    Record::from_rdata(
                        apex.clone(),
                        60,
                        RData::DNSSEC(DNSSECRData::DNSKEY(k.dnskey.clone())),
                    )
                })
                .collect();
            let now = 1_800_000_000;
            let on_keys = s.rrsigs(&apex, &dnskeys, now);
            assert_eq!(on_keys.len(), 1);
            assert_eq!(rrsig(&on_keys[0]).input().key_tag, tags[0], "the KSK's");
            s.keys[0]
                .dnskey
                .verify_rrsig(&apex, DNSClass::IN, rrsig(&on_keys[0]), dnskeys.iter())
                .expect("verifies");
            let owner = Name::from_ascii("api.example.com.").expect("name");
            let data = [a(&owner, 1)];
            let on_data = s.rrsigs(&owner, &data, now);
            assert_eq!(on_data.len(), 1, "the published ZSK signs nothing");
            assert_eq!(rrsig(&on_data[0]).input().key_tag, tags[1], "the ZSK's");
            assert_eq!(u8::from(rrsig(&on_data[0]).input().algorithm), algorithm);
            s.keys[1]
                .dnskey
                .verify_rrsig(&owner, DNSClass::IN, rrsig(&on_data[0]), data.iter())
                .expect("verifies");
        }
    }

    // SEM-K3: the cache is bounded: past its capacity the older half goes.
    #[test]
    fn the_cache_is_bounded() {
        let s = signer(10);
        let now = 1_800_000_000;
        for i in 0..100u8 {
            let owner = Name::from_ascii(format!("n{i}.example.com.")).expect("name");
            s.rrsigs(&owner, &[a(&owner, i)], now);
            assert!(s.cached() <= 10, "{}", s.cached());
        }
        assert_eq!(s.earliest_expiry(), Some(now + 86_400));
    }
}
