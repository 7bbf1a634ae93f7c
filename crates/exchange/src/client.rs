//! The client side of the exchange: [`Query::new`] encodes and signs the question for a
//! group, and its [`PendingQuery`] reads the peer's answer back, checking that it answers this
//! query, is signed by the same key over our MAC, and is recent.
//!
//! ```text
//! bytes ─▶ response, TSIG last? ─▶ ID + question ─▶ TC ─▶ TSIG ─▶ BADKEY/BADSIG ─▶ key ─▶ MAC ─▶ BADTIME ─▶ time ─▶ RCODE ─▶ TXT
//!          Malformed               Mismatch        Truncated  Refused/Unsigned  WrongKey  BadSignature  ClockSkew  BadTime  Rcode  MalformedAnswer
//! ```

use hickory_proto::{
    op::{Message, MessageType, Query as Question, ResponseCode},
    rr::{
        DNSClass, Name, RData, RecordType,
        rdata::tsig::{TSIG, TsigError},
    },
};

use crate::{
    answer::{self, PeerAnswer},
    error::{Error, ExchangeError},
    group,
    key::{KeyRing, TsigKey},
    signing,
    wire::{self, FUDGE, exchange_edns, rcode_name},
};

/// A signed exchange query: the bytes to send and what reading its answer needs.
#[derive(Debug)]
pub struct Query {
    /// The query as sent over UDP (prefix the length for TCP).
    pub bytes: Vec<u8>,
    /// Reads the answer to these bytes.
    pub pending: PendingQuery,
}

impl Query {
    /// The query for the RecordGroup `namespace/name`, signed with the ring's signing key at
    /// `now` (Unix seconds; [`KeyRing::signing_key`]: the previous secret while a change of
    /// secret is new), with a random ID. The answer is read with the same secret: a peer signs
    /// it with the one that verified the query. Fails only for a group the exchange cannot
    /// name.
    pub fn new(namespace: &str, name: &str, keys: &KeyRing, now: u64) -> Result<Self, Error> {
        let qname = group::qname(namespace, name).map_err(|reason| Error::GroupName {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            reason,
        })?;
        let mut message = Message::query();
        message.metadata.recursion_desired = false;
        message.add_query(Question::query(qname.clone(), RecordType::TXT));
        message.set_edns(exchange_edns());
        let key = keys.signing_key(now).clone();
        let id = message.id;
        let encode = |e: hickory_proto::ProtoError| Error::Encode(e.to_string());
        let stub = signing::stub(key.algorithm().clone(), now, id, None, Vec::new());
        let (bytes, request_mac) =
            signing::sign(message.to_vec().map_err(encode)?, &key, None, stub).map_err(encode)?;
        Ok(Self {
            bytes,
            pending: PendingQuery {
                id,
                qname,
                key,
                request_mac,
            },
        })
    }
}

/// What reading the answer to a [`Query`] needs: its ID, question, key and MAC.
#[derive(Debug, Clone)]
pub struct PendingQuery {
    id: u16,
    qname: Name,
    key: TsigKey,
    request_mac: Vec<u8>,
}

impl PendingQuery {
    /// The query's ID, to match datagrams to queries.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The answer the peer sent, checked at `now` (Unix seconds). Never panics, whatever the
    /// bytes.
    pub fn read_answer(&self, bytes: &[u8], now: u64) -> Result<PeerAnswer, ExchangeError> {
        // Strict, as the server reads queries: a MAC covers nothing after its TSIG RR.
        let response =
            wire::read_message(bytes).map_err(|reason| ExchangeError::Malformed { reason })?;
        if response.message_type != MessageType::Response {
            return Err(ExchangeError::Malformed {
                reason: "a query, not a response".into(),
            });
        }
        self.check_match(&response)?;
        if response.truncation {
            return Err(ExchangeError::Truncated);
        }
        let rcode = response.response_code;
        let Some(signature) = response.signature() else {
            return Err(match rcode {
                ResponseCode::Refused => ExchangeError::Refused,
                rcode => ExchangeError::Unsigned {
                    rcode: rcode_name(rcode),
                },
            });
        };
        self.check_signature(bytes, &signature.name, &signature.data, now)?;
        match rcode {
            ResponseCode::NoError => self.values(&response),
            ResponseCode::NXDomain => Ok(PeerAnswer::NoSuchGroup),
            rcode => Err(ExchangeError::Rcode {
                rcode: rcode_name(rcode),
            }),
        }
    }

    /// The response has this query's ID and question; an error response may leave the
    /// question out.
    fn check_match(&self, response: &Message) -> Result<(), ExchangeError> {
        if response.id != self.id {
            return Err(ExchangeError::Mismatch);
        }
        match response.queries.as_slice() {
            [q] if q.name() == &self.qname
                && q.query_type() == RecordType::TXT
                && q.query_class() == DNSClass::IN =>
            {
                Ok(())
            }
            [] if response.response_code != ResponseCode::NoError => Ok(()),
            _ => Err(ExchangeError::Mismatch),
        }
    }

    /// RFC 8945 section 5.3.2's checks of a response's TSIG, and the peer's TSIG error.
    fn check_signature(
        &self,
        bytes: &[u8],
        key_name: &Name,
        tsig: &TSIG,
        now: u64,
    ) -> Result<(), ExchangeError> {
        let our_key = || self.key.name().to_ascii();
        // BADKEY and BADSIG come unsigned (RFC 8945 section 5.3.2): the peer's word, which
        // can only fail the exchange, never make it succeed.
        match tsig.error {
            Some(TsigError::BadKey) => return Err(ExchangeError::KeyRejected { key: our_key() }),
            Some(TsigError::BadSig) => {
                return Err(ExchangeError::SignatureRejected { key: our_key() });
            }
            _ => {}
        }
        if !self.key.matches(key_name, &tsig.algorithm) {
            return Err(ExchangeError::WrongKey {
                expected: our_key(),
                got: format!("{} ({})", key_name.to_ascii(), tsig.algorithm),
            });
        }
        let verified = signing::covered_data(bytes, Some(&self.request_mac))
            .is_ok_and(|(covered, _, _)| signing::verifies(&self.key, &covered, &tsig.mac));
        if !verified {
            return Err(ExchangeError::BadSignature);
        }
        match tsig.error {
            None => {}
            Some(TsigError::BadTime) => {
                return Err(ExchangeError::ClockSkew {
                    peer_time: time_48(&tsig.other).unwrap_or(tsig.time),
                    our_time: now,
                    fudge: tsig.fudge.min(FUDGE),
                });
            }
            Some(other) => {
                return Err(ExchangeError::PeerTsigError {
                    code: u16::from(other),
                });
            }
        }
        if !signing::within_fudge(tsig.time, tsig.fudge, now) {
            return Err(ExchangeError::BadTime {
                signed: tsig.time,
                now,
                fudge: tsig.fudge.min(FUDGE),
            });
        }
        Ok(())
    }

    /// A NOERROR response's values, sorted: every answer a `[TYPE, value]` TXT of the
    /// question's name.
    fn values(&self, response: &Message) -> Result<PeerAnswer, ExchangeError> {
        let malformed = |reason: String| ExchangeError::MalformedAnswer { reason };
        let mut values = Vec::with_capacity(response.answers.len());
        for record in &response.answers {
            if record.name != self.qname {
                return Err(malformed(format!(
                    "owner {} is not the question",
                    record.name
                )));
            }
            if record.dns_class != DNSClass::IN {
                return Err(malformed(format!("class {}, not IN", record.dns_class)));
            }
            let RData::TXT(txt) = &record.data else {
                return Err(malformed(format!(
                    "{} record, not TXT",
                    record.record_type()
                )));
            };
            values.extend(answer::from_txt(txt).map_err(malformed)?);
        }
        // An RRset has no order and no duplicates: sorted, two reads of the same answer
        // compare equal whatever order the peer (or a middlebox) sent.
        values.sort();
        values.dedup();
        Ok(if values.is_empty() {
            PeerAnswer::NothingHealthy
        } else {
            PeerAnswer::Healthy(values)
        })
    }
}

/// A 48-bit time from BADTIME's other-data (RFC 8945 section 5.2.3).
fn time_48(other: &[u8]) -> Option<u64> {
    let bytes: [u8; 6] = other.try_into().ok()?;
    Some(
        bytes
            .iter()
            .fold(0u64, |time, &b| (time << 8) | u64::from(b)),
    )
}
