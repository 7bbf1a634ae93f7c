//! TSIG keys: from configuration text (name, algorithm, base64 secret inline or in a file) to
//! a [`TsigKey`], and the [`KeyRing`] a client signs with (its first key) and a server verifies
//! with (any of its keys). The secret lives only inside hickory's `TSigner`; nothing here
//! prints it.
//!
//! # A secret that changes under its name (X1)
//! A key file read again may hold another secret for the same key name: a Secret rotated in
//! both clusters, each at its own moment. [`KeyRing::rotated`] keeps the secret the key signed
//! with as its *previous* one, so that neither side ever signs with a secret the other cannot
//! have yet:
//!
//! ```text
//!  change at t      t + ROTATION_WINDOW          t + 2 × ROTATION_WINDOW
//!  ───┼──────────────────────┼──────────────────────────┼──────────────▶
//!     │ signs: previous      │ signs: new               │ signs: new
//!     │ accepts: new, prev.  │ accepts: new, previous   │ accepts: new
//! ```
//!
//! A peer that changes its copy up to a window later still verifies our queries (we sign with
//! the secret it has), and its own queries, signed with the previous secret until its window
//! ends, are still accepted here. An answer is signed with the secret that verified the
//! query, so each side reads answers with the secret it signed with.

use std::{fmt, path::PathBuf};

use hickory_proto::rr::{Name, TSigner, rdata::tsig::TsigAlgorithm};
use serde::Deserialize;

use crate::{error::Error, wire::FUDGE};

/// The shortest secret accepted, in bytes (RFC 8945 section 6 asks for at least half the
/// hash's output; hmac-sha256 keys are usually 32 bytes).
pub const MIN_SECRET_LEN: usize = 16;

/// The one algorithm the exchange speaks.
const ALGORITHM: &str = "hmac-sha256";

/// How long, in seconds, after a key's secret changes under its name, queries stay signed with
/// the previous secret; it is accepted for twice as long (module docs). Both clusters' copies
/// of a Secret must change within this of each other: kubelet brings a changed Secret to every
/// pod within about a minute plus its cache TTL, and the peer cluster's pods pick up their
/// own copy on their own schedule (another kubelet, another `kubectl apply`), so 10 minutes
/// leaves room for both without keeping a replaced secret alive for long.
pub const ROTATION_WINDOW: u64 = 600;

/// One key as the resolver's and the checker's configuration spell it.
///
/// ```yaml
/// name: hr-peer.
/// algorithm: hmac-sha256        # the default, and the only one accepted
/// secretFile: /etc/healthroute/peer-key   # or `secret: <base64>`
/// ```
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeyConfig {
    /// The key's name, a DNS name shared with the peer (`hr-peer.`).
    pub name: String,
    /// `hmac-sha256`.
    #[serde(default = "default_algorithm")]
    pub algorithm: String,
    /// The secret in base64.
    #[serde(default)]
    pub secret: Option<String>,
    /// A file holding the secret in base64 (a mounted Kubernetes Secret); surrounding
    /// whitespace is ignored.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
}

fn default_algorithm() -> String {
    ALGORITHM.to_owned()
}

impl fmt::Debug for KeyConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyConfig")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .field("secret", &self.secret.as_ref().map(|_| Redacted))
            .field("secret_file", &self.secret_file)
            .finish()
    }
}

impl KeyConfig {
    /// The key, reading `secretFile` if that is where the secret is.
    pub fn load(&self) -> Result<TsigKey, Error> {
        self.read().map(|(key, _)| key)
    }

    /// The key and, when its secret is in `secretFile`, the bytes read from it (to tell later
    /// whether the file changed; they hold the secret).
    pub fn read(&self) -> Result<(TsigKey, Option<Vec<u8>>), Error> {
        match self.read_secret_file()? {
            Some(bytes) => Ok((self.load_secret(&bytes)?, Some(bytes))),
            None => {
                let secret = self.secret.as_deref().unwrap_or_default();
                Ok((TsigKey::new(&self.name, &self.algorithm, secret)?, None))
            }
        }
    }

    /// The bytes `secretFile` holds now (`None` for an inline secret): the path is read each
    /// time, so that a file replaced by a rename (as kubelet updates a mounted Secret) is
    /// seen. Exactly one of `secret` and `secretFile` must be given.
    pub fn read_secret_file(&self) -> Result<Option<Vec<u8>>, Error> {
        match (&self.secret, &self.secret_file) {
            (Some(_), None) => Ok(None),
            (None, Some(path)) => {
                std::fs::read(path)
                    .map(Some)
                    .map_err(|source| Error::SecretFile {
                        key: self.name.clone(),
                        path: path.clone(),
                        source,
                    })
            }
            _ => Err(Error::SecretSource {
                key: self.name.clone(),
            }),
        }
    }

    /// The key with `secret` (base64, as a `secretFile` holds it, surrounding whitespace
    /// ignored) instead of the configured secret: a key file read again.
    pub fn load_secret(&self, secret: &[u8]) -> Result<TsigKey, Error> {
        // Not UTF-8 is not base64 either: the decoder then says where.
        TsigKey::new(
            &self.name,
            &self.algorithm,
            &String::from_utf8_lossy(secret),
        )
    }
}

/// Stands for a secret in `Debug` output.
struct Redacted;

impl fmt::Debug for Redacted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// A TSIG key: a name, hmac-sha256 and a secret of at least [`MIN_SECRET_LEN`] bytes.
/// Cloning is cheap (the secret is shared).
#[derive(Clone)]
pub struct TsigKey {
    signer: TSigner,
}

impl TsigKey {
    /// A key from configuration text: `name` a DNS name (made fully qualified), `algorithm`
    /// `hmac-sha256` (any case, an ending dot allowed), `secret_base64` standard padded base64
    /// (surrounding whitespace ignored).
    pub fn new(name: &str, algorithm: &str, secret_base64: &str) -> Result<Self, Error> {
        let key_name = parse_key_name(name)?;
        let key = key_name.to_ascii();
        if !algorithm
            .trim_end_matches('.')
            .eq_ignore_ascii_case(ALGORITHM)
        {
            return Err(Error::UnsupportedAlgorithm {
                key,
                algorithm: algorithm.to_owned(),
            });
        }
        let secret = data_encoding::BASE64
            .decode(secret_base64.trim().as_bytes())
            .map_err(|source| Error::SecretNotBase64 {
                key: key.clone(),
                source,
            })?;
        Self::from_secret(key_name, secret)
    }

    /// A key from its name and raw secret.
    fn from_secret(name: Name, secret: Vec<u8>) -> Result<Self, Error> {
        if secret.len() < MIN_SECRET_LEN {
            return Err(Error::SecretTooShort {
                key: name.to_ascii(),
                len: secret.len(),
                min: MIN_SECRET_LEN,
            });
        }
        let key = name.to_ascii();
        let signer = TSigner::new(secret, TsigAlgorithm::HmacSha256, name, FUDGE).map_err(|e| {
            Error::UnsupportedAlgorithm {
                key,
                algorithm: format!("{ALGORITHM} ({e})"),
            }
        })?;
        Ok(Self { signer })
    }

    /// The key's name, fully qualified (`hr-peer.`).
    pub fn name(&self) -> &Name {
        self.signer.signer_name()
    }

    /// The key's algorithm (always hmac-sha256).
    pub fn algorithm(&self) -> &TsigAlgorithm {
        self.signer.algorithm()
    }

    /// Whether a TSIG RR's key name and algorithm designate this key (names compare without
    /// regard to case, as DNS names do).
    pub(crate) fn matches(&self, name: &Name, algorithm: &TsigAlgorithm) -> bool {
        let mut name = name.clone();
        name.set_fqdn(true);
        self.name() == &name && self.algorithm() == algorithm
    }

    /// hickory's signer, holding the secret.
    pub(crate) fn signer(&self) -> &TSigner {
        &self.signer
    }
}

/// Two keys are the same key when name, algorithm and secret agree (however they were
/// configured: inline or from a file).
impl PartialEq for TsigKey {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
            && self.algorithm() == other.algorithm()
            && self.signer.key() == other.signer.key()
    }
}

impl Eq for TsigKey {}

impl fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TsigKey")
            .field("name", &self.name().to_ascii())
            .field("algorithm", &self.algorithm().to_string())
            .field("secret", &Redacted)
            .finish()
    }
}

fn parse_key_name(name: &str) -> Result<Name, Error> {
    let invalid = |reason: String| Error::KeyName {
        name: name.to_owned(),
        reason,
    };
    if name.trim_end_matches('.').is_empty() {
        return Err(invalid("it is empty".to_owned()));
    }
    let mut parsed = Name::from_ascii(name).map_err(|e| invalid(e.to_string()))?;
    parsed.set_fqdn(true);
    Ok(parsed)
}

/// One or more keys with distinct names. The client signs with the first; the server
/// accepts any, so a key is rotated by configuring servers with `[new, old]` first. A key
/// whose secret changed under its name ([`KeyRing::rotated`]) also holds its previous secret
/// for a while (module docs).
#[derive(Clone, Debug)]
pub struct KeyRing {
    /// The key clients sign with; held apart so that a ring is never empty.
    signing: RingKey,
    /// The keys a server accepts besides the signing key, in configuration order.
    others: Vec<RingKey>,
}

/// One key of a ring: the secret read last, and the one before it while a change of secret
/// goes on. Both have the key's name and algorithm.
#[derive(Clone, Debug)]
pub(crate) struct RingKey {
    current: TsigKey,
    previous: Option<Previous>,
}

/// A replaced secret, and when (Unix seconds) it was replaced.
#[derive(Clone, Debug)]
struct Previous {
    key: TsigKey,
    since: u64,
}

impl RingKey {
    fn new(current: TsigKey) -> Self {
        RingKey {
            current,
            previous: None,
        }
    }

    /// The secret queries are signed with at `now`: the previous one for a window after a
    /// change, then the current one.
    fn signing(&self, now: u64) -> &TsigKey {
        match &self.previous {
            Some(p) if now < p.since.saturating_add(ROTATION_WINDOW) => &p.key,
            _ => &self.current,
        }
    }

    /// The previous secret, while it is still accepted at `now` (two windows after the
    /// change).
    fn previous(&self, now: u64) -> Option<&TsigKey> {
        self.previous
            .as_ref()
            .filter(|p| now < p.since.saturating_add(2 * ROTATION_WINDOW))
            .map(|p| &p.key)
    }

    /// The secrets a server accepts at `now`, the current one first.
    pub(crate) fn accepted(&self, now: u64) -> impl Iterator<Item = &TsigKey> {
        std::iter::once(&self.current).chain(self.previous(now))
    }

    /// The current secret: the key's name and algorithm.
    pub(crate) fn current(&self) -> &TsigKey {
        &self.current
    }

    /// This key after its secret was read again at `now` as `fresh` (same name).
    fn rotated(&self, fresh: TsigKey, now: u64) -> RingKey {
        if fresh == self.current {
            // Unchanged: a change under way goes on.
            return self.clone();
        }
        // The secret that signs until now is the one a peer surely has: it stays the
        // previous one (a second change within the window does not move it).
        let signing = self.signing(now);
        if fresh == *signing {
            return RingKey::new(fresh);
        }
        RingKey {
            previous: Some(Previous {
                key: signing.clone(),
                since: now,
            }),
            current: fresh,
        }
    }
}

impl KeyRing {
    /// A ring of `keys`, the first being the one clients sign with.
    pub fn new(keys: Vec<TsigKey>) -> Result<Self, Error> {
        for (i, key) in keys.iter().enumerate() {
            if keys[..i].iter().any(|k| k.name() == key.name()) {
                return Err(Error::DuplicateKey {
                    key: key.name().to_ascii(),
                });
            }
        }
        let mut keys = keys.into_iter().map(RingKey::new);
        let signing = keys.next().ok_or(Error::NoKeys)?;
        Ok(Self {
            signing,
            others: keys.collect(),
        })
    }

    /// The ring from configuration, reading each `secretFile`.
    pub fn from_config(configs: &[KeyConfig]) -> Result<Self, Error> {
        Self::new(
            configs
                .iter()
                .map(KeyConfig::load)
                .collect::<Result<_, _>>()?,
        )
    }

    /// The key a client signs with at `now` (Unix seconds): the first key, with its previous
    /// secret for [`ROTATION_WINDOW`] after that secret changed.
    pub fn signing_key(&self, now: u64) -> &TsigKey {
        self.signing.signing(now)
    }

    /// The ring's keys with their current secrets, the signing key first.
    pub fn keys(&self) -> impl Iterator<Item = &TsigKey> {
        self.entries().map(RingKey::current)
    }

    fn entries(&self) -> impl Iterator<Item = &RingKey> {
        std::iter::once(&self.signing).chain(&self.others)
    }

    /// The key a TSIG RR designates, if the ring has it.
    pub(crate) fn find(&self, name: &Name, algorithm: &TsigAlgorithm) -> Option<&RingKey> {
        self.entries().find(|k| k.current.matches(name, algorithm))
    }

    /// This ring after its keys were read again at `now` (Unix seconds): `fresh` holds them as
    /// read (its names and order win). A key whose secret changed keeps the secret it signed
    /// with as its previous one: that one still signs for [`ROTATION_WINDOW`] and is accepted
    /// for twice as long, while the new one is accepted at once. A key with the same secret
    /// keeps its state; a new name starts with no previous secret.
    pub fn rotated(&self, fresh: KeyRing, now: u64) -> KeyRing {
        let rotate = |key: RingKey| match self
            .entries()
            .find(|k| k.current.name() == key.current.name())
        {
            Some(old) => old.rotated(key.current, now),
            None => key,
        };
        KeyRing {
            signing: rotate(fresh.signing),
            others: fresh.others.into_iter().map(rotate).collect(),
        }
    }

    /// Whether some key holds a previous secret no longer accepted at `now`, which
    /// [`KeyRing::settled`] would drop.
    pub fn has_expired(&self, now: u64) -> bool {
        self.entries()
            .any(|k| k.previous.is_some() && k.previous(now).is_none())
    }

    /// This ring without the previous secrets no longer accepted at `now`, so that a replaced
    /// secret does not stay in memory.
    pub fn settled(&self, now: u64) -> KeyRing {
        let settle = |k: &RingKey| RingKey {
            current: k.current.clone(),
            previous: k.previous(now).and(k.previous.clone()),
        };
        KeyRing {
            signing: settle(&self.signing),
            others: self.others.iter().map(settle).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "c2l4dGVlbi1ieXRlcy1zZWNyZXQtZm9yLXRlc3Rz"; // 30 bytes

    #[test]
    fn a_key_from_config_text() -> Result<(), Error> {
        let key = TsigKey::new("hr-peer", "HMAC-SHA256.", SECRET)?;
        assert_eq!(key.name().to_ascii(), "hr-peer.");
        assert_eq!(key.algorithm(), &TsigAlgorithm::HmacSha256);
        Ok(())
    }

    #[test]
    fn other_algorithms_are_refused_with_a_clear_error() {
        let err = TsigKey::new("hr-peer.", "hmac-sha512", SECRET).err();
        assert!(
            matches!(&err, Some(Error::UnsupportedAlgorithm { algorithm, .. }) if algorithm == "hmac-sha512"),
            "{err:?}"
        );
        let text = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(text.contains("hmac-sha256"), "{text}");
    }

    #[test]
    fn bad_base64_empty_and_short_secrets_are_refused() {
        assert!(matches!(
            TsigKey::new("hr-peer.", "hmac-sha256", "not base64!"),
            Err(Error::SecretNotBase64 { .. })
        ));
        assert!(matches!(
            TsigKey::new("hr-peer.", "hmac-sha256", ""),
            Err(Error::SecretTooShort { len: 0, .. })
        ));
        // 15 bytes.
        assert!(matches!(
            TsigKey::new("hr-peer.", "hmac-sha256", "MTIzNDU2Nzg5MDEyMzQ1"),
            Err(Error::SecretTooShort { len: 15, .. })
        ));
    }

    #[test]
    fn key_names_must_be_dns_names() {
        assert!(matches!(
            TsigKey::new("", "hmac-sha256", SECRET),
            Err(Error::KeyName { .. })
        ));
        assert!(matches!(
            TsigKey::new("a..b", "hmac-sha256", SECRET),
            Err(Error::KeyName { .. })
        ));
    }

    #[test]
    fn debug_does_not_print_the_secret() -> Result<(), Error> {
        let config = KeyConfig {
            name: "hr-peer.".into(),
            algorithm: "hmac-sha256".into(),
            secret: Some(SECRET.into()),
            secret_file: None,
        };
        let key = config.load()?;
        let ring = KeyRing::new(vec![key.clone()])?;
        let decoded = String::from_utf8_lossy(
            &data_encoding::BASE64
                .decode(SECRET.as_bytes())
                .unwrap_or_default(),
        )
        .into_owned();
        for text in [
            format!("{config:?}"),
            format!("{key:?}"),
            format!("{ring:?}"),
            format!("{key:#?}"),
        ] {
            assert!(!text.contains(SECRET), "{text}");
            assert!(!text.contains(&decoded), "{text}");
            assert!(text.contains("hr-peer."), "{text}");
            assert!(text.contains("<redacted>"), "{text}");
        }
        Ok(())
    }

    #[test]
    fn rings_refuse_no_keys_and_duplicate_names() -> Result<(), Error> {
        assert!(matches!(KeyRing::new(vec![]), Err(Error::NoKeys)));
        let a = TsigKey::new("hr-peer.", "hmac-sha256", SECRET)?;
        let b = TsigKey::new("HR-PEER", "hmac-sha256", SECRET)?;
        assert!(matches!(
            KeyRing::new(vec![a, b]),
            Err(Error::DuplicateKey { .. })
        ));
        Ok(())
    }

    #[test]
    fn config_reads_yaml_in_camel_case_and_secret_files() -> Result<(), Box<dyn std::error::Error>>
    {
        let dir = std::env::temp_dir().join(format!("hr-exchange-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("peer-key");
        std::fs::write(&path, format!("{SECRET}\n"))?;
        let yaml = format!(
            "- name: hr-peer-2026.\n  secretFile: {}\n- name: hr-peer-2025.\n  algorithm: hmac-sha256\n  secret: {SECRET}\n",
            path.display()
        );
        let configs: Vec<KeyConfig> = serde_saphyr::from_str(&yaml)?;
        assert_eq!(configs[0].secret_file.as_deref(), Some(path.as_path()));
        assert_eq!(configs[0].algorithm, "hmac-sha256");
        let ring = KeyRing::from_config(&configs)?;
        assert_eq!(ring.signing_key(0).name().to_ascii(), "hr-peer-2026.");
        assert_eq!(ring.keys().count(), 2);
        std::fs::remove_dir_all(&dir)?;
        Ok(())
    }

    #[test]
    fn config_needs_exactly_one_secret_source_and_a_readable_file() {
        let mut config = KeyConfig {
            name: "hr-peer.".into(),
            algorithm: "hmac-sha256".into(),
            secret: None,
            secret_file: None,
        };
        assert!(matches!(config.load(), Err(Error::SecretSource { .. })));
        config.secret = Some(SECRET.into());
        config.secret_file = Some("/nonexistent".into());
        assert!(matches!(config.load(), Err(Error::SecretSource { .. })));
        config.secret = None;
        let err = config.load().err();
        assert!(matches!(&err, Some(Error::SecretFile { .. })), "{err:?}");
        let yaml = "name: x.\nsecret_file: /y\n";
        assert!(serde_saphyr::from_str::<KeyConfig>(yaml).is_err());
    }
}
