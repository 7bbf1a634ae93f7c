//! The peer-cluster exchange's wire protocol, as pure functions over bytes (no sockets, no
//! runtime): the checker asks a peer cluster's resolvers what a RecordGroup answers there, and
//! the resolver's exchange listener answers. Both directions are signed with TSIG (RFC 8945,
//! hmac-sha256).
//!
//! ```text
//!  checker (client)                                   resolver (server, exchange listener)
//!  Query::new(ns, name, &ring, now) ── query bytes ──▶ verify_query(bytes, &ring, now)
//!                                                       ├─ Err(Rejection): count label(),
//!                                                       │  send response() if any
//!                                                       └─ Ok(VerifiedQuery): look the group up,
//!  PendingQuery::read_answer(bytes, now) ◀── answer ── encode_answer(&verified, &answer, now, max)
//!  -> PeerAnswer or ExchangeError (shown in the health check's status)
//! ```
//!
//! # Keys
//! A [`TsigKey`] is a name (a DNS name such as `hr-peer.`), the algorithm `hmac-sha256` (the
//! only one accepted) and a secret of at least 16 bytes, configured in base64 inline or in a
//! file ([`KeyConfig`]). A [`KeyRing`] holds one or more keys with distinct names: the client
//! signs with the first, the server accepts any of them, so a key is rotated without an outage
//! (servers get `[new, old]`, then clients switch to `new`, then `old` goes). A key's secret
//! may also change under its name ([`KeyRing::rotated`], a key file read again): the previous
//! secret keeps signing for [`ROTATION_WINDOW`] and is accepted for twice as long, so that two
//! clusters that change their copies at different moments refuse nothing. Secrets never
//! appear in `Debug` output.
//!
//! # Query
//! For the RecordGroup `namespace/name`: one question `<name>.<namespace>.exchange.healthroute.invalid.`
//! (the `.invalid` TLD of RFC 6761 is resolved by no one else), QTYPE TXT, class IN, opcode
//! QUERY, RD clear, a random ID, an EDNS OPT advertising 1232 bytes, and the TSIG RR last in the
//! additional section (fudge 300 s, time signed = the caller's `now` in Unix seconds). The group
//! name may contain dots and the namespace is one label, so the server parses from the right.
//!
//! # Server verification ([`verify_query`]), in RFC 8945 section 5.2's order
//! | what is wrong                                   | response                                   | [`Rejection::label`] |
//! |-------------------------------------------------|--------------------------------------------|----------------------|
//! | shorter than a header, or a response (QR set)   | none                                       | `malformed`          |
//! | unparseable, or bytes after the last record     | FORMERR, header only                       | `malformed`          |
//! | a TSIG RR not the last record (RFC 8945 5.1)    | FORMERR, header only                       | `malformed`          |
//! | not exactly one question                        | FORMERR, header only                       | `malformed`          |
//! | opcode not QUERY, or not an exchange question   | REFUSED, unsigned                          | `not_exchange`       |
//! | no TSIG                                         | REFUSED, unsigned                          | `unsigned`           |
//! | key name or algorithm not in the ring           | NOTAUTH, **unsigned** TSIG, error BADKEY   | `bad_key`            |
//! | MAC verifies with no accepted secret of the key | NOTAUTH, unsigned TSIG, error BADSIG       | `bad_signature`      |
//! | time signed outside the fudge of `now`          | NOTAUTH, **signed** TSIG, error BADTIME    | `bad_time`           |
//!
//! The fudge applied is the request's, capped at 300 s so that a client cannot widen the
//! replay window. A BADTIME response carries the request's time signed (so that the client's
//! own time check passes) and the server's time in other-data (RFC 8945 section 5.2.3).
//! Rejections echo the question and nothing else: no answer records, nothing about groups.
//!
//! A key's accepted secrets are its current one, then its previous one while a change of
//! secret goes on (truncated MACs never verify).
//!
//! # Answer ([`encode_answer`])
//! Signed with the key that signed the query, with the secret that verified it, its MAC
//! covering the request MAC (RFC 8945 section 5.3); AA set, RD copied, an OPT if the query had
//! one.
//! - [`PeerAnswer::Healthy`]: NOERROR, one TXT RR per value, owner = QNAME, TTL 0, its
//!   character-strings `[TYPE, value]`: TYPE the record type name (`A`, `AAAA`, `CNAME`,
//!   `TXT`) and the value's text as a RecordGroup writes it, split into further 255-byte
//!   strings when longer (the reader joins them). A value a peer could not read back (built
//!   by hand, its text not parsing as its type) makes the answer SERVFAIL.
//! - [`PeerAnswer::NothingHealthy`]: NOERROR with no answer (the group exists but answers only
//!   its last resort, or nothing).
//! - [`PeerAnswer::NoSuchGroup`]: NXDOMAIN, no records.
//!
//! An answer larger than `max_size` (the request's UDP payload, [`VerifiedQuery::max_udp_payload`],
//! or 65,535 over TCP) is sent with TC set and no records, still signed, so that the client
//! retries over TCP.
//!
//! # Client ([`PendingQuery::read_answer`])
//! Checks, in order: a DNS response with nothing after its last record and a TSIG only as that
//! record (RFC 8945 section 5.1, as the server reads queries); the query's ID and question; TC
//! ([`ExchangeError::Truncated`]: retry over TCP); a TSIG (else unsigned / refused); the peer's
//! TSIG error if BADKEY or BADSIG (unsigned by the RFC, so reported as the peer's word); the same
//! key; the MAC over the request MAC; BADTIME (the peer's clock); the time within the fudge; then
//! the RCODE and the TXT records, each parsed into a [`PeerValue`] (one of a type this version
//! does not serve is passed over; one that does not parse as its type makes the answer
//! malformed). Every failure is an [`ExchangeError`] whose message is meant for
//! a health check's status. The MAC is checked with the secret the query was signed with (the
//! one the peer must sign with), whichever of a key's secrets that was.

mod answer;
mod client;
mod error;
mod group;
mod key;
mod server;
mod signing;
mod wire;

#[cfg(test)]
mod tests;

pub use answer::PeerAnswer;
pub use client::{PendingQuery, Query};
pub use error::{Error, ExchangeError};
pub use group::EXCHANGE_ZONE;
/// One value a group answers, typed (the table's value): what [`PeerAnswer::Healthy`] holds.
pub use healthroute_table::PeerValue;
pub use key::{KeyConfig, KeyRing, MIN_SECRET_LEN, ROTATION_WINDOW, TsigKey};
pub use server::{Reason, Rejection, VerifiedQuery, encode_answer, verify_query};
pub use wire::FUDGE;

/// The largest DNS message (its TCP length prefix is 16 bits).
pub const MAX_MESSAGE_SIZE: usize = 65_535;
