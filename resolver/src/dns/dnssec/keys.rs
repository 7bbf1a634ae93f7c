//! A zone's signing keys (K1): read from PKCS#8 PEM files (what `openssl genpkey`, Knot's
//! `keymgr` and `kubectl healthroute dnssec keygen` write), each with its role and whether it
//! signs yet, and the records they make: DNSKEY, DS, CDS and CDNSKEY.
//!
//! Layer: the bottom of `dnssec`, over hickory's DNSSEC types and ring.

use std::path::PathBuf;

use hickory_proto::dnssec::crypto::{EcdsaSigningKey, Ed25519SigningKey};
use hickory_proto::dnssec::rdata::{CDNSKEY, CDS, DNSKEY, DS};
use hickory_proto::dnssec::{Algorithm, DigestType, PublicKey as _, SigningKey};
use hickory_proto::rr::Name;
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, Ed25519KeyPair};

use crate::error::Error;

/// What a key signs (K1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
pub enum KeyRole {
    /// One combined signing key: every RRset (flags 257).
    #[default]
    #[serde(rename = "CSK")]
    Csk,
    /// Key-signing key: the DNSKEY, CDS and CDNSKEY RRsets (flags 257), the key the parent's
    /// DS names.
    #[serde(rename = "KSK")]
    Ksk,
    /// Zone-signing key: every other RRset (flags 256).
    #[serde(rename = "ZSK")]
    Zsk,
}

impl KeyRole {
    /// As the settings write it.
    pub fn name(self) -> &'static str {
        match self {
            KeyRole::Csk => "CSK",
            KeyRole::Ksk => "KSK",
            KeyRole::Zsk => "ZSK",
        }
    }
}

/// Whether a key signs, or is only published in the DNSKEY RRset (K5: a rollover's new key
/// before it is used, and its old key after).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyState {
    #[default]
    Active,
    Published,
}

/// One key as configured.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyConfig {
    /// The PKCS#8 PEM file (a Secret's key, mounted as a file, in a cluster).
    pub file: PathBuf,
    #[serde(default)]
    pub role: KeyRole,
    #[serde(default)]
    pub state: KeyState,
}

/// A key read from its file: the signing half, and its DNSKEY.
pub struct ZoneKey {
    pub role: KeyRole,
    pub state: KeyState,
    pub signing: Box<dyn SigningKey>,
    pub dnskey: DNSKEY,
    pub tag: u16,
    /// The file's bytes, to tell a changed file from an unchanged one (K5).
    pub source: Vec<u8>,
}

impl std::fmt::Debug for ZoneKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself.
        f.debug_struct("ZoneKey")
            .field("role", &self.role)
            .field("state", &self.state)
            .field("algorithm", &self.signing.algorithm())
            .field("tag", &self.tag)
            .finish()
    }
}

impl ZoneKey {
    /// Reads `config.file`.
    pub fn load(config: &KeyConfig) -> Result<ZoneKey, Error> {
        let bad = |why: String| Error::DnssecKey {
            path: config.file.clone(),
            why,
        };
        let source = std::fs::read(&config.file).map_err(|e| bad(e.to_string()))?;
        let mut key = ZoneKey::from_pem(&source, config.role, config.state).map_err(bad)?;
        key.source = source;
        Ok(key)
    }

    /// A key from PKCS#8 PEM text: ECDSA P-256 (algorithm 13) or Ed25519 (15).
    pub fn from_pem(pem: &[u8], role: KeyRole, state: KeyState) -> Result<ZoneKey, String> {
        let der = pem_der(pem)?;
        let signing: Box<dyn SigningKey> = if let Ok(pair) =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &der, &SystemRandom::new())
        {
            Box::new(EcdsaSigningKey::from_ecdsa(
                pair,
                Algorithm::ECDSAP256SHA256,
            ))
        } else if let Ok(pair) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der) {
            Box::new(Ed25519SigningKey::from_ed25519(pair))
        } else {
            return Err(
                "not a PKCS#8 private key of ECDSA P-256 (algorithm 13) or Ed25519 \
                        (algorithm 15)"
                    .into(),
            );
        };
        let public = signing.to_public_key().map_err(|e| e.to_string())?;
        let flags = if role == KeyRole::Zsk { 256 } else { 257 };
        let dnskey = DNSKEY::with_flags(flags, public);
        let tag = dnskey.calculate_key_tag().map_err(|e| e.to_string())?;
        Ok(ZoneKey {
            role,
            state,
            signing,
            dnskey,
            tag,
            source: Vec::new(),
        })
    }

    pub fn algorithm(&self) -> Algorithm {
        self.signing.algorithm()
    }

    /// Signs the DNSKEY, CDS and CDNSKEY RRsets (a KSK or a CSK that is active).
    pub fn signs_keys(&self) -> bool {
        self.state == KeyState::Active && self.role != KeyRole::Zsk
    }

    /// Signs every other RRset (a ZSK or a CSK that is active).
    pub fn signs_data(&self) -> bool {
        self.state == KeyState::Active && self.role != KeyRole::Ksk
    }

    /// A key the parent's DS may name (flags 257: a KSK or a CSK).
    pub fn is_entry_point(&self) -> bool {
        self.role != KeyRole::Zsk
    }

    /// Its DS (SHA-256), for the parent zone of `apex` (K4).
    pub fn ds(&self, apex: &Name) -> Result<DS, String> {
        let digest = self
            .dnskey
            .to_digest(apex, DigestType::SHA256)
            .map_err(|e| e.to_string())?;
        Ok(DS::new(
            self.tag,
            self.algorithm(),
            DigestType::SHA256,
            digest.as_ref().to_vec(),
        ))
    }

    /// Its CDS (RFC 7344), the DS as the child publishes it.
    pub fn cds(&self, apex: &Name) -> Result<CDS, String> {
        let ds = self.ds(apex)?;
        Ok(CDS::new(
            ds.key_tag(),
            Some(ds.algorithm()),
            ds.digest_type(),
            ds.digest().to_vec(),
        ))
    }

    /// Its CDNSKEY (RFC 7344).
    pub fn cdnskey(&self) -> CDNSKEY {
        CDNSKEY::with_flags(
            self.dnskey.flags(),
            Some(self.algorithm()),
            self.dnskey.public_key().public_bytes().to_vec(),
        )
    }
}

/// A new private key in PKCS#8 PEM: ECDSA P-256 for algorithm 13, Ed25519 for 15.
pub fn generate_pem(algorithm: u8) -> Result<String, String> {
    let rng = SystemRandom::new();
    let der = match algorithm {
        13 => EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng),
        15 => Ed25519KeyPair::generate_pkcs8(&rng),
        other => return Err(format!("algorithm {other} is not served: 13 or 15")),
    }
    .map_err(|_| "the system's random source failed".to_owned())?;
    let body = data_encoding::BASE64.encode(der.as_ref());
    let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END PRIVATE KEY-----\n");
    Ok(pem)
}

/// The DER inside a `-----BEGIN PRIVATE KEY-----` block.
fn pem_der(pem: &[u8]) -> Result<Vec<u8>, String> {
    let text = std::str::from_utf8(pem).map_err(|_| "not PEM text".to_owned())?;
    let begin = "-----BEGIN PRIVATE KEY-----";
    let end = "-----END PRIVATE KEY-----";
    let Some(start) = text.find(begin) else {
        return Err(if text.contains("-----BEGIN") {
            "not a PKCS#8 key (`-----BEGIN PRIVATE KEY-----`); convert it with \
             `openssl pkcs8 -topk8 -nocrypt`"
                .into()
        } else {
            "no `-----BEGIN PRIVATE KEY-----` block".into()
        });
    };
    let body = &text[start + begin.len()..];
    let Some(stop) = body.find(end) else {
        return Err("no `-----END PRIVATE KEY-----` line".into());
    };
    let base64: String = body[..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    data_encoding::BASE64
        .decode(base64.as_bytes())
        .map_err(|e| format!("the key's base64 is broken: {e}"))
}

/// The keys of a zone read from their files; at least one signs the data and one the keys.
pub fn load_all(configs: &[KeyConfig], apex: &str) -> Result<Vec<ZoneKey>, Error> {
    let keys = configs
        .iter()
        .map(ZoneKey::load)
        .collect::<Result<Vec<_>, _>>()?;
    check_roles(&keys).map_err(|why| Error::DnssecKeys {
        zone: apex.to_owned(),
        why,
    })?;
    Ok(keys)
}

/// A zone's keys must sign both the DNSKEY RRset and the data, each key's tag must be its own.
fn check_roles(keys: &[ZoneKey]) -> Result<(), String> {
    if keys.is_empty() {
        return Err("no key: list at least one under dnssec.keys".into());
    }
    if !keys.iter().any(ZoneKey::signs_keys) {
        return Err("no active CSK or KSK signs the DNSKEY RRset".into());
    }
    if !keys.iter().any(ZoneKey::signs_data) {
        return Err("no active CSK or ZSK signs the zone's data".into());
    }
    for (i, key) in keys.iter().enumerate() {
        if keys[..i].iter().any(|k| k.dnskey == key.dnskey) {
            return Err(format!("keys[{i}] is listed twice (tag {})", key.tag));
        }
    }
    Ok(())
}

/// Whether any key file of `configs` now reads differently from `keys` (K5).
pub fn changed(configs: &[KeyConfig], keys: &[ZoneKey]) -> bool {
    configs.len() != keys.len()
        || configs
            .iter()
            .zip(keys)
            .any(|(c, k)| std::fs::read(&c.file).map_or(true, |bytes| bytes != k.source))
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-K1: a key is read from PKCS#8 PEM, its algorithm from the key (13 or 15); anything
    // else is a clear error, never a zone served unsigned.
    #[test]
    fn keys_are_read_from_pkcs8_pem_and_bad_ones_refused() {
        for algorithm in [13u8, 15] {
            let pem = generate_pem(algorithm).expect("generates");
            let key =
                ZoneKey::from_pem(pem.as_bytes(), KeyRole::Csk, KeyState::Active).expect("reads");
            assert_eq!(u8::from(key.algorithm()), algorithm);
            assert_eq!(key.dnskey.flags(), 257);
            let zsk =
                ZoneKey::from_pem(pem.as_bytes(), KeyRole::Zsk, KeyState::Active).expect("reads");
            assert_eq!(zsk.dnskey.flags(), 256);
        }
        let errors = [
            ("", "no `-----BEGIN PRIVATE KEY-----` block"),
            (
                "-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n",
                "openssl pkcs8 -topk8",
            ),
            (
                "-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----\n",
                "base64",
            ),
            (
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
                "algorithm 13",
            ),
        ];
        for (pem, why) in errors {
            let err =
                ZoneKey::from_pem(pem.as_bytes(), KeyRole::Csk, KeyState::Active).expect_err(pem);
            assert!(err.contains(why), "{pem:?}: {err}");
        }
        assert!(generate_pem(8).is_err(), "RSA is not served");
    }

    // SEM-K1: a zone's keys sign both its DNSKEY RRset and its data, each key once.
    #[test]
    fn a_zones_keys_must_sign_keys_and_data() {
        let pem = generate_pem(13).expect("generates");
        let key = |role, state| ZoneKey::from_pem(pem.as_bytes(), role, state).expect("reads");
        assert!(check_roles(&[]).is_err());
        assert!(check_roles(&[key(KeyRole::Csk, KeyState::Active)]).is_ok());
        let only_ksk = check_roles(&[key(KeyRole::Ksk, KeyState::Active)]);
        assert!(only_ksk.is_err_and(|e| e.contains("data")));
        let published = check_roles(&[key(KeyRole::Csk, KeyState::Published)]);
        assert!(published.is_err_and(|e| e.contains("DNSKEY")));
        let twice = check_roles(&[
            key(KeyRole::Csk, KeyState::Active),
            key(KeyRole::Csk, KeyState::Published),
        ]);
        assert!(twice.is_err_and(|e| e.contains("twice")));
        let other = generate_pem(13).expect("generates");
        let zsk =
            ZoneKey::from_pem(other.as_bytes(), KeyRole::Zsk, KeyState::Active).expect("reads");
        assert!(check_roles(&[key(KeyRole::Ksk, KeyState::Active), zsk]).is_ok());
    }

    // SEM-K4: the DS is the SHA-256 of the apex and the DNSKEY, naming its tag and algorithm.
    #[test]
    fn the_ds_names_the_keys_tag_and_digest() {
        let pem = generate_pem(13).expect("generates");
        let key = ZoneKey::from_pem(pem.as_bytes(), KeyRole::Csk, KeyState::Active).expect("reads");
        let apex = Name::from_ascii("example.com.").expect("name");
        let ds = key.ds(&apex).expect("ds");
        assert_eq!(ds.key_tag(), key.tag);
        assert_eq!(u8::from(ds.algorithm()), 13);
        assert_eq!(ds.digest().len(), 32);
        assert!(ds.covers(&apex, &key.dnskey).expect("checks"));
        let cds = key.cds(&apex).expect("cds");
        assert_eq!(cds.digest(), ds.digest());
    }
}
