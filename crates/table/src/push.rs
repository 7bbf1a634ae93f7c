//! Pushed deltas (P12): the leader sends each delta it publishes straight to the resolvers,
//! beside its ConfigMap, so that a change waits for one API server write instead of two.
//!
//! ```text
//!   operator leader ──POST /v1/delta  (the delta's JSON, as published)──▶ resolver
//!                     Authorization: HMAC-SHA256 <base64 of HMAC(key, body)>
//! ```
//!
//! The body is the delta exactly as its ConfigMap holds it, so the resolver's watch and the
//! push carry the same bytes; the key is a secret both sides read from a file. What a
//! resolver does with a pushed delta is [`crate::published::Assembler::push_delta`].

use std::fmt;

use ring::hmac;

/// The path a delta is pushed to.
pub const PATH: &str = "/v1/delta";
/// The scheme of the `Authorization` header.
pub const SCHEME: &str = "HMAC-SHA256";
/// The shortest secret taken: HMAC-SHA256 keys shorter than its output weaken it.
pub const MIN_KEY_BYTES: usize = 32;
/// On a resolver's checker Lease: where its push listener is reached (`host:port`).
pub const ADDRESS_ANNOTATION: &str = "healthroute.io/push-address";

/// The shared secret of pushes.
#[derive(Clone)]
pub struct PushKey(hmac::Key);

impl fmt::Debug for PushKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PushKey(..)")
    }
}

/// Why a secret is not a push key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the push key holds {0} bytes (whitespace around it ignored); it needs {MIN_KEY_BYTES} or more, e.g. `head -c 32 /dev/urandom | base64`"
)]
pub struct ShortKey(pub usize);

impl PushKey {
    /// A key from a file's content: the bytes between leading and trailing whitespace (a
    /// Secret's file often ends with a newline), used as they are.
    pub fn new(secret: &[u8]) -> Result<Self, ShortKey> {
        let secret = secret.trim_ascii();
        if secret.len() < MIN_KEY_BYTES {
            return Err(ShortKey(secret.len()));
        }
        Ok(PushKey(hmac::Key::new(hmac::HMAC_SHA256, secret)))
    }

    /// The `Authorization` header value for `body`.
    pub fn authorization(&self, body: &[u8]) -> String {
        let tag = hmac::sign(&self.0, body);
        format!("{SCHEME} {}", data_encoding::BASE64.encode(tag.as_ref()))
    }

    /// Whether `authorization` signs `body` with this key (compared in constant time).
    pub fn verify(&self, body: &[u8], authorization: &str) -> bool {
        let Some(encoded) = authorization
            .strip_prefix(SCHEME)
            .and_then(|rest| rest.strip_prefix(' '))
        else {
            return false;
        };
        let Ok(tag) = data_encoding::BASE64.decode(encoded.trim().as_bytes()) else {
            return false;
        };
        hmac::verify(&self.0, body, &tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"0123456789abcdef0123456789abcdef\n";

    // SEM-P12: a push verifies with the key it was signed with, and with no other, and not
    // once its body changed.
    #[test]
    fn a_push_verifies_only_with_its_key_and_body() {
        let key = PushKey::new(SECRET).expect("key");
        let body = br#"{"base":1,"baseHash":"00","previous":1,"generation":2}"#;
        let auth = key.authorization(body);
        assert!(auth.starts_with("HMAC-SHA256 "), "{auth}");
        assert!(key.verify(body, &auth));
        let other = PushKey::new(b"another secret of thirty-two bytes!").expect("key");
        assert!(!other.verify(body, &auth));
        assert!(!key.verify(br#"{"base":1}"#, &auth));
        assert!(!key.verify(body, "Bearer abc"));
        assert!(!key.verify(body, "HMAC-SHA256 not base64!"));
        assert!(!key.verify(body, ""));
    }

    // SEM-P12: a key is 32 bytes or more, whitespace around it ignored.
    #[test]
    fn a_short_key_is_refused_with_its_length() {
        assert_eq!(PushKey::new(b"  short\n").expect_err("short"), ShortKey(5));
        let e = PushKey::new(b"").expect_err("empty").to_string();
        assert!(e.contains("32 or more"), "{e}");
        assert!(PushKey::new(SECRET).is_ok());
    }
}
