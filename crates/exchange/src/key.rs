//! TSIG keys: from configuration text (name, algorithm, base64 secret inline or in a file) to
//! a [`TsigKey`], and the [`KeyRing`] a client signs with (its first key) and a server verifies
//! with (any of its keys). The secret lives only inside hickory's `TSigner`; nothing here
//! prints it.

use std::{fmt, path::PathBuf};

use hickory_proto::rr::{Name, TSigner, rdata::tsig::TsigAlgorithm};
use serde::Deserialize;

use crate::{error::Error, wire::FUDGE};

/// The shortest secret accepted, in bytes (RFC 8945 section 6 asks for at least half the
/// hash's output; hmac-sha256 keys are usually 32 bytes).
pub const MIN_SECRET_LEN: usize = 16;

/// The one algorithm the exchange speaks.
const ALGORITHM: &str = "hmac-sha256";

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
        let secret = match (&self.secret, &self.secret_file) {
            (Some(secret), None) => secret.clone(),
            (None, Some(path)) => {
                std::fs::read_to_string(path).map_err(|source| Error::SecretFile {
                    key: self.name.clone(),
                    path: path.clone(),
                    source,
                })?
            }
            _ => {
                return Err(Error::SecretSource {
                    key: self.name.clone(),
                });
            }
        };
        TsigKey::new(&self.name, &self.algorithm, &secret)
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
/// accepts any, so a key is rotated by configuring servers with `[new, old]` first.
#[derive(Clone, Debug)]
pub struct KeyRing {
    /// The key clients sign with; held apart so that a ring is never empty.
    signing: TsigKey,
    /// The keys a server accepts besides the signing key, in configuration order.
    others: Vec<TsigKey>,
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
        let mut keys = keys.into_iter();
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

    /// The key a client signs with.
    pub fn signing_key(&self) -> &TsigKey {
        &self.signing
    }

    /// The ring's keys, the signing key first.
    pub fn keys(&self) -> impl Iterator<Item = &TsigKey> {
        std::iter::once(&self.signing).chain(&self.others)
    }

    /// The key a TSIG RR designates, if the ring has it.
    pub(crate) fn find(&self, name: &Name, algorithm: &TsigAlgorithm) -> Option<&TsigKey> {
        self.keys().find(|k| k.matches(name, algorithm))
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
        assert_eq!(ring.signing_key().name().to_ascii(), "hr-peer-2026.");
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
