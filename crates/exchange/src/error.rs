//! The crate's two error enums, apart because they have different readers and lifetimes:
//! [`Error`] is configuration (keys, a group that cannot be named), met once at startup or when
//! a RecordGroup is compiled, and keeps its `#[source]` (I/O, base64); [`ExchangeError`] is one
//! exchange's failure, met on every check, shown to users in a health check's status and
//! counted by [`ExchangeError::label`], so it is a plain value (`Clone`, `PartialEq`) that a
//! checker can store and compare between rounds.

use std::path::PathBuf;

use thiserror::Error;

/// A configuration problem: a key that cannot be used, or a group that cannot be asked.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The key name is not a DNS name.
    #[error("TSIG key name {name:?} is not a DNS name: {reason}")]
    KeyName { name: String, reason: String },

    /// Only hmac-sha256 is accepted.
    #[error(
        "TSIG key {key}: algorithm {algorithm:?} is not supported; the exchange uses hmac-sha256"
    )]
    UnsupportedAlgorithm { key: String, algorithm: String },

    /// The secret is not base64.
    #[error("TSIG key {key}: the secret is not base64 (standard alphabet, padded): {source}")]
    SecretNotBase64 {
        key: String,
        #[source]
        source: data_encoding::DecodeError,
    },

    /// The secret is empty or too short to be a key.
    #[error(
        "TSIG key {key}: the secret has {len} bytes, it needs at least {min} (make one with `openssl rand -base64 32`)"
    )]
    SecretTooShort { key: String, len: usize, min: usize },

    /// Neither or both of `secret` and `secretFile`.
    #[error("TSIG key {key}: give exactly one of secret and secretFile")]
    SecretSource { key: String },

    /// `secretFile` cannot be read.
    #[error("TSIG key {key}: cannot read secretFile {}: {source}", path.display())]
    SecretFile {
        key: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A key ring needs at least one key.
    #[error("no TSIG key is configured for the exchange: it needs at least one")]
    NoKeys,

    /// Two keys of a ring have the same name: a peer could not tell which one signed.
    #[error("TSIG key {key} is configured twice: each key of the ring needs its own name")]
    DuplicateKey { key: String },

    /// The group's namespace and name do not make an exchange question.
    #[error("RecordGroup {namespace}/{name} cannot be asked over the exchange: {reason}")]
    GroupName {
        namespace: String,
        name: String,
        reason: String,
    },

    /// Encoding or signing a query failed (hickory's error, as text).
    #[error("cannot encode the exchange query: {0}")]
    Encode(String),
}

/// Why an exchange with a peer failed. The message is written for a user reading a health
/// check's status; [`ExchangeError::label`] is a stable metric label.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ExchangeError {
    /// The bytes are not a DNS response.
    #[error("peer's answer is not a DNS response: {reason}")]
    Malformed { reason: String },

    /// A response to another query (ID or question differ): late, or spoofed.
    #[error("peer's answer does not match the query (another ID or question)")]
    Mismatch,

    /// TC is set: ask again over TCP.
    #[error("peer's answer is truncated: ask again over TCP")]
    Truncated,

    /// REFUSED without TSIG: the peer did not take the query as an exchange query.
    #[error(
        "peer refused the query (REFUSED, unsigned): is the address the peer's exchange listener?"
    )]
    Refused,

    /// Any other response without TSIG.
    #[error("peer answered unsigned ({rcode})")]
    Unsigned { rcode: String },

    /// The peer does not know our key (its word only: BADKEY responses are unsigned).
    #[error("peer refused: BADKEY (the key name {key} is not known there)")]
    KeyRejected { key: String },

    /// Our MAC did not verify there (its word only: BADSIG responses are unsigned).
    #[error("peer refused: BADSIG (the key {key} has another secret there)")]
    SignatureRejected { key: String },

    /// The peer's clock and ours differ by more than the fudge (signed BADTIME).
    #[error(
        "peer refused: BADTIME (its clock says {peer_time}, ours {our_time}: more than {fudge} s apart)"
    )]
    ClockSkew {
        peer_time: u64,
        our_time: u64,
        fudge: u16,
    },

    /// Another TSIG error from the peer (BADTRUNC, or a code we do not know).
    #[error("peer refused: TSIG error {code}")]
    PeerTsigError { code: u16 },

    /// The response is signed with another key than the query.
    #[error("peer signed with key {got}, not with {expected}")]
    WrongKey { expected: String, got: String },

    /// The response's MAC does not verify with our key.
    #[error("peer's signature does not verify")]
    BadSignature,

    /// The response's time signed is outside the fudge of our clock.
    #[error("peer's answer is signed at {signed}, more than {fudge} s from our clock ({now})")]
    BadTime { signed: u64, now: u64, fudge: u16 },

    /// A signed response with an RCODE other than NOERROR and NXDOMAIN.
    #[error("peer answered {rcode}")]
    Rcode { rcode: String },

    /// An answer record that is not a `[TYPE, value]` TXT record of the question's name.
    #[error("peer's answer has a record that is not a [TYPE, value] TXT: {reason}")]
    MalformedAnswer { reason: String },
}

impl ExchangeError {
    /// A short stable label for metrics, one per variant.
    pub fn label(&self) -> &'static str {
        match self {
            ExchangeError::Malformed { .. } => "malformed",
            ExchangeError::Mismatch => "mismatch",
            ExchangeError::Truncated => "truncated",
            ExchangeError::Refused => "refused",
            ExchangeError::Unsigned { .. } => "unsigned",
            ExchangeError::KeyRejected { .. } => "bad_key",
            ExchangeError::SignatureRejected { .. } => "bad_signature",
            ExchangeError::ClockSkew { .. } => "bad_time",
            ExchangeError::PeerTsigError { .. } => "tsig_error",
            ExchangeError::WrongKey { .. } => "wrong_key",
            ExchangeError::BadSignature => "answer_bad_signature",
            ExchangeError::BadTime { .. } => "answer_bad_time",
            ExchangeError::Rcode { .. } => "rcode",
            ExchangeError::MalformedAnswer { .. } => "malformed_answer",
        }
    }
}
