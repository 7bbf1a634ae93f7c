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
//!
//! The key file is a mounted Secret, which kubelet replaces in every pod when the Secret
//! changes, each pod at its own moment (at its next sync, within about a minute or two).
//! Both sides read the file again every [`KEY_FILE_CHECK`] and hold [`PushKeys`]: the key it
//! holds now and, after a change, the one before it, so that no push is refused while the
//! pods' copies change one by one:
//!
//! ```text
//!   change seen at t   resolver: verifies with the new key, or the one before until t + 300 s
//!                      operator: signs with the key before until t + 120 s (the resolvers
//!                                may not have the new one yet), then with the new one;
//!                                on a 401, once more with the other key (a resolver started
//!                                since holds only the new one; one not yet changed, the old)
//! ```
//!
//! A key rotated because it leaked is thus still used for two minutes and taken for five:
//! restart both Deployments to drop it at once.

use std::fmt;
use std::sync::{PoisonError, RwLock};
use std::time::{Duration, Instant};

use ring::hmac;

/// The path a delta is pushed to.
pub const PATH: &str = "/v1/delta";
/// The scheme of the `Authorization` header.
pub const SCHEME: &str = "HMAC-SHA256";
/// The shortest secret taken: HMAC-SHA256 keys shorter than its output weaken it.
pub const MIN_KEY_BYTES: usize = 32;
/// How long after a side saw its key file change it still signs with the key before
/// (operator): longer than kubelet takes to bring a changed Secret to every other pod (its
/// sync period, a minute, with jitter, plus the cache's delay), so that every resolver holds
/// the new key before it is signed with.
pub const SIGN_PREVIOUS_FOR: Duration = Duration::from_secs(120);
/// How long after a side saw its key file change it still takes (resolver) or tries once
/// more on a refusal (operator) the key before: [`SIGN_PREVIOUS_FOR`] plus the most one pod
/// may see the change after another, so that a resolver that saw it first still takes what
/// a leader that saw it last signs with the key before.
pub const PREVIOUS_KEY_GRACE: Duration = Duration::from_secs(300);
/// How often each side reads its key file again.
pub const KEY_FILE_CHECK: Duration = Duration::from_secs(5);

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

    /// Whether this key and `other` were made from the same secret: each signs a fixed text,
    /// and the tags are compared (the secrets themselves are not kept).
    fn same_secret(&self, other: &PushKey) -> bool {
        const TEXT: &[u8] = b"healthroute push key";
        hmac::sign(&self.0, TEXT).as_ref() == hmac::sign(&other.0, TEXT).as_ref()
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

/// The push keys one side holds: the current key and, for [`PREVIOUS_KEY_GRACE`] after the
/// key file changed, the one before it (a change within the grace retires the older one at
/// once: two keys at most). Shared by the task that reads the key file again and those that
/// sign or verify; the lock is held for one signature at most.
pub struct PushKeys {
    ring: RwLock<Ring>,
}

struct Ring {
    current: PushKey,
    /// The key before `current`, and when the change was seen.
    previous: Option<(PushKey, Instant)>,
}

impl Ring {
    /// The key before the current one while it is still taken at `now`.
    fn previous(&self, now: Instant) -> Option<&PushKey> {
        match &self.previous {
            Some((key, changed)) if now < *changed + PREVIOUS_KEY_GRACE => Some(key),
            _ => None,
        }
    }

    /// The key to sign with at `now`, and the other one still taken (for a second try).
    fn signing(&self, now: Instant) -> (&PushKey, Option<&PushKey>) {
        match &self.previous {
            Some((key, changed)) if now < *changed + SIGN_PREVIOUS_FOR => {
                (key, Some(&self.current))
            }
            _ => (&self.current, self.previous(now)),
        }
    }
}

impl fmt::Debug for PushKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ring = self.ring();
        f.debug_struct("PushKeys")
            .field(
                "changed",
                &ring.previous.as_ref().map(|(_, changed)| changed),
            )
            .finish_non_exhaustive()
    }
}

/// Which of its keys a side verified a push with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verified {
    Current,
    /// The key held before the key file changed, within [`PREVIOUS_KEY_GRACE`].
    Previous,
}

/// What reading the key file again did.
#[derive(Debug)]
pub enum Reload {
    /// The same key: nothing changed.
    Unchanged,
    /// A new key is current; the one before it is still used for a while.
    Changed,
    /// The file could not be read: the keys held are kept.
    Unreadable(std::io::Error),
    /// The file holds no usable key: the keys held are kept.
    Short(ShortKey),
}

impl Reload {
    /// Whether the key changed, nothing did, or the file was refused, with the words to say.
    pub fn outcome(self) -> Result<Option<String>, String> {
        match self {
            Reload::Unchanged => Ok(None),
            changed @ Reload::Changed => Ok(Some(changed.to_string())),
            failed => Err(failed.to_string()),
        }
    }
}

impl fmt::Display for Reload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reload::Unchanged => f.write_str("the push key is unchanged"),
            Reload::Changed => write!(
                f,
                "the push key changed: pushes are signed with the one before it for {} s more \
                 (until every pod has the new one) and it is still taken for {} s",
                SIGN_PREVIOUS_FOR.as_secs(),
                PREVIOUS_KEY_GRACE.as_secs()
            ),
            Reload::Unreadable(e) => write!(f, "cannot read it ({e}); keeping the key held"),
            Reload::Short(e) => write!(f, "{e}; keeping the key held"),
        }
    }
}

impl From<PushKey> for PushKeys {
    fn from(key: PushKey) -> Self {
        PushKeys::new(key)
    }
}

impl From<PushKey> for std::sync::Arc<PushKeys> {
    fn from(key: PushKey) -> Self {
        std::sync::Arc::new(PushKeys::new(key))
    }
}

impl PushKeys {
    pub fn new(current: PushKey) -> Self {
        PushKeys {
            ring: RwLock::new(Ring {
                current,
                previous: None,
            }),
        }
    }

    fn ring(&self) -> std::sync::RwLockReadGuard<'_, Ring> {
        self.ring.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `Authorization` header value for `body` at `now`: with the key before the last
    /// change for [`SIGN_PREVIOUS_FOR`] after it, else with the current key.
    pub fn authorization(&self, body: &[u8], now: Instant) -> String {
        self.ring().signing(now).0.authorization(body)
    }

    /// The `Authorization` header value for `body` with the other key still in use at `now`,
    /// if any: what the operator sends once more when a resolver refused the first (its copy
    /// of the Secret changed before, or after, the operator's).
    pub fn fallback_authorization(&self, body: &[u8], now: Instant) -> Option<String> {
        Some(self.ring().signing(now).1?.authorization(body))
    }

    /// Which key `authorization` signs `body` with: the current one, else the previous one
    /// while it is still taken at `now` ([`PREVIOUS_KEY_GRACE`]); `None` when neither.
    pub fn verify(&self, body: &[u8], authorization: &str, now: Instant) -> Option<Verified> {
        let ring = self.ring();
        if ring.current.verify(body, authorization) {
            Some(Verified::Current)
        } else if ring
            .previous(now)
            .is_some_and(|key| key.verify(body, authorization))
        {
            Some(Verified::Previous)
        } else {
            None
        }
    }

    /// Takes the key file's content as read at `now`: a new key becomes the current one and
    /// the current one the previous, from `now`. The same key, or content that is not a key,
    /// changes nothing.
    pub fn offer(&self, secret: &[u8], now: Instant) -> Reload {
        let key = match PushKey::new(secret) {
            Ok(key) => key,
            Err(e) => return Reload::Short(e),
        };
        let mut ring = self.ring.write().unwrap_or_else(PoisonError::into_inner);
        if ring.current.same_secret(&key) {
            return Reload::Unchanged;
        }
        let before = std::mem::replace(&mut ring.current, key);
        ring.previous = Some((before, now));
        Reload::Changed
    }

    /// What a key-file follower (`healthroute_admin::key_file::follow`, in both binaries)
    /// makes of one read of the file now: the same key, a new one in use, or a refusal, each
    /// with the words to say.
    pub fn take_file(&self, read: std::io::Result<Vec<u8>>) -> Result<Option<String>, String> {
        self.reload(read, Instant::now()).outcome()
    }

    /// [`PushKeys::offer`] of a read of the key file (`std::fs::read`).
    pub fn reload(&self, read: std::io::Result<Vec<u8>>, now: Instant) -> Reload {
        match read {
            Ok(secret) => self.offer(&secret, now),
            Err(e) => Reload::Unreadable(e),
        }
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

    const NEW: &[u8] = b"the key after the Secret changed, 32+ bytes\n";

    // SEM-P12: after the key file changes, a push signed with either key verifies until the
    // grace passes, then only the new one; the same key again, a short one or an unreadable
    // file change nothing.
    #[test]
    fn the_previous_key_is_taken_for_the_grace_only() {
        let t0 = Instant::now();
        let keys = PushKeys::new(PushKey::new(SECRET).expect("key"));
        let (old, new) = (
            PushKey::new(SECRET).expect("key"),
            PushKey::new(NEW).expect("key"),
        );
        let body = br#"{"generation":2}"#;
        let (old_auth, new_auth) = (old.authorization(body), new.authorization(body));
        assert_eq!(keys.verify(body, &old_auth, t0), Some(Verified::Current));
        assert_eq!(keys.authorization(body, t0), old_auth);
        assert!(keys.fallback_authorization(body, t0).is_none());

        assert!(matches!(keys.offer(SECRET, t0), Reload::Unchanged));
        assert!(
            matches!(
                keys.offer(b" \n0123456789abcdef0123456789abcdef", t0),
                Reload::Unchanged
            ),
            "whitespace is not the key"
        );
        assert!(matches!(
            keys.offer(b"short", t0),
            Reload::Short(ShortKey(5))
        ));
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert!(matches!(
            keys.reload(Err(missing), t0),
            Reload::Unreadable(_)
        ));
        assert_eq!(keys.verify(body, &new_auth, t0), None);

        let t1 = t0 + Duration::from_secs(10);
        assert!(matches!(keys.reload(Ok(NEW.to_vec()), t1), Reload::Changed));
        assert_eq!(keys.verify(body, &new_auth, t1), Some(Verified::Current));
        assert_eq!(keys.verify(body, &old_auth, t1), Some(Verified::Previous));
        let last = t1 + PREVIOUS_KEY_GRACE - Duration::from_millis(1);
        assert_eq!(keys.verify(body, &old_auth, last), Some(Verified::Previous));
        let after = t1 + PREVIOUS_KEY_GRACE;
        assert_eq!(keys.verify(body, &old_auth, after), None);
        assert_eq!(keys.verify(body, &new_auth, after), Some(Verified::Current));
    }

    // SEM-P12: after the change a signer keeps the key before until every pod has the new
    // one, with the new one as its second try; then the new one, with the key before as its
    // second try until the grace passes; then the new one alone.
    #[test]
    fn a_signer_moves_to_the_new_key_after_the_others_have_it() {
        let t0 = Instant::now();
        let keys = PushKeys::new(PushKey::new(SECRET).expect("key"));
        let body = b"{}";
        let old = PushKey::new(SECRET).expect("key").authorization(body);
        let new = PushKey::new(NEW).expect("key").authorization(body);
        assert!(matches!(keys.offer(NEW, t0), Reload::Changed));
        let at = |s: u64| t0 + Duration::from_secs(s);
        for t in [at(0), at(SIGN_PREVIOUS_FOR.as_secs() - 1)] {
            assert_eq!(keys.authorization(body, t), old);
            assert_eq!(keys.fallback_authorization(body, t), Some(new.clone()));
        }
        let switched = t0 + SIGN_PREVIOUS_FOR;
        assert_eq!(keys.authorization(body, switched), new);
        assert_eq!(
            keys.fallback_authorization(body, switched),
            Some(old.clone())
        );
        let over = t0 + PREVIOUS_KEY_GRACE;
        assert_eq!(keys.authorization(body, over), new);
        assert_eq!(keys.fallback_authorization(body, over), None);
    }

    // SEM-P12: a second change within the grace retires the oldest key at once.
    #[test]
    fn two_keys_at_most() {
        let t0 = Instant::now();
        let keys = PushKeys::new(PushKey::new(SECRET).expect("key"));
        let body = b"{}";
        let first = PushKey::new(SECRET).expect("key").authorization(body);
        let second = PushKey::new(NEW).expect("key").authorization(body);
        assert!(matches!(keys.offer(NEW, t0), Reload::Changed));
        let third = b"a third key, thirty-two bytes or more";
        assert!(matches!(keys.offer(third, t0), Reload::Changed));
        assert_eq!(keys.verify(body, &second, t0), Some(Verified::Previous));
        assert_eq!(keys.verify(body, &first, t0), None);
        assert_eq!(keys.authorization(body, t0), second);
    }

    // SEM-X10: neither the keys nor what a reload says show the secret.
    #[test]
    fn keys_and_reloads_hold_no_secret() {
        let keys = PushKeys::new(PushKey::new(SECRET).expect("key"));
        let shown = format!("{keys:?} {}", keys.offer(NEW, Instant::now()));
        assert!(
            !shown.contains("0123456789abcdef") && !shown.contains("after the Secret"),
            "{shown}"
        );
    }
}
