//! The server side of the exchange: [`verify_query`] turns received bytes into a
//! [`VerifiedQuery`] (the group asked for and the key that signed) or a [`Rejection`] (a
//! metric label and the response to send, if any), and [`encode_answer`] signs what the group
//! answers with the query's key.
//!
//! ```text
//! bytes ─▶ header ─▶ parse, TSIG last ─▶ one question ─▶ QUERY + exchange name ─▶ TSIG ─▶ key ─▶ MAC ─▶ time ─▶ VerifiedQuery
//!          (none)   FORMERR              FORMERR         REFUSED                 REFUSED  BADKEY BADSIG BADTIME
//! ```

use std::fmt;

use hickory_proto::{
    ProtoError,
    op::{Message, OpCode, Query, ResponseCode},
    rr::{
        DNSClass, Name, RData, Record, RecordType,
        rdata::tsig::{TSIG, TsigError},
    },
};

use crate::{
    MAX_MESSAGE_SIZE,
    answer::{self, PeerAnswer},
    group::parse_qname,
    key::{KeyRing, TsigKey},
    signing,
    wire::{self, FUDGE, HEADER_LEN, exchange_edns},
};

/// The smallest payload every DNS transport carries.
const MIN_PAYLOAD: usize = 512;

/// The header's bits the rejections copy by hand.
const QR: u8 = 0x80;
const OPCODE_MASK: u8 = 0x78;
const RD: u8 = 0x01;

/// A query signed with a key of the ring, within the fudge, asking for one group.
#[derive(Debug, Clone)]
pub struct VerifiedQuery {
    namespace: String,
    name: String,
    key: TsigKey,
    /// What the answer echoes and signs over.
    id: u16,
    question: Query,
    recursion_desired: bool,
    request_mac: Vec<u8>,
    request_edns: bool,
    udp_payload: u16,
}

impl VerifiedQuery {
    /// The group asked for, `(namespace, name)`, lowercased.
    pub fn group(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }

    /// The group's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The group's name (may contain dots).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key that signed the query, and signs the answer: the secret that verified it (a
    /// key's previous secret while its change goes on, X1).
    pub fn key(&self) -> &TsigKey {
        &self.key
    }

    /// The largest answer the client takes over UDP: its EDNS payload size, at least 512
    /// (512 without EDNS). Pass it to [`encode_answer`] for UDP, [`crate::MAX_MESSAGE_SIZE`]
    /// for TCP.
    pub fn max_udp_payload(&self) -> usize {
        usize::from(self.udp_payload)
    }

    /// This query with another key, to sign answers a client must refuse.
    #[cfg(test)]
    pub(crate) fn with_key(mut self, key: TsigKey) -> Self {
        self.key = key;
        self
    }

    /// A response to this query with `rcode` and `answers`, its header as RFC 1035 asks.
    fn response(&self, rcode: ResponseCode, answers: Vec<Record>, truncated: bool) -> Message {
        let mut message = Message::response(self.id, OpCode::Query);
        message.metadata.authoritative = true;
        message.metadata.recursion_desired = self.recursion_desired;
        message.metadata.truncation = truncated;
        message.metadata.response_code = rcode;
        message.add_query(self.question.clone());
        message.insert_answers(answers);
        if self.request_edns {
            message.set_edns(exchange_edns());
        }
        message
    }

    /// `message` encoded and signed with the query's key over the request MAC.
    fn sign(&self, message: &Message, now: u64) -> Result<Vec<u8>, ProtoError> {
        let stub = signing::stub(self.key.algorithm().clone(), now, self.id, None, Vec::new());
        let (bytes, _) =
            signing::sign(message.to_vec()?, &self.key, Some(&self.request_mac), stub)?;
        Ok(bytes)
    }
}

/// Why a query was not answered, with the response to send for it (if any).
#[derive(Debug, Clone)]
pub struct Rejection {
    reason: Reason,
    response: Option<Vec<u8>>,
}

/// What was wrong with a query, in RFC 8945 section 5.2's order of checks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// Not a DNS query, not exactly one question, bytes after the last record, or a TSIG RR
    /// that is not the last record (RFC 8945 section 5.1).
    Malformed(String),
    /// Not an exchange question (another opcode, name, type or class).
    NotExchange(String),
    /// No TSIG.
    Unsigned,
    /// Signed with a key (name and algorithm) the ring does not have.
    BadKey { key: String },
    /// The MAC does not verify with the ring's key of that name.
    BadSignature { key: String },
    /// Signed at a time outside the fudge of the server's clock.
    BadTime { key: String, signed: u64, now: u64 },
}

impl Rejection {
    /// A stable metric label: `malformed`, `not_exchange`, `unsigned`, `bad_key`,
    /// `bad_signature` or `bad_time`.
    pub fn label(&self) -> &'static str {
        match self.reason {
            Reason::Malformed(_) => "malformed",
            Reason::NotExchange(_) => "not_exchange",
            Reason::Unsigned => "unsigned",
            Reason::BadKey { .. } => "bad_key",
            Reason::BadSignature { .. } => "bad_signature",
            Reason::BadTime { .. } => "bad_time",
        }
    }

    /// What was wrong.
    pub fn reason(&self) -> &Reason {
        &self.reason
    }

    /// The response to send, if any: `None` when not even a header could be read (or the
    /// message is itself a response). It holds no answer records and no group information.
    pub fn response(&self) -> Option<&[u8]> {
        self.response.as_deref()
    }

    /// The response to send, if any, by value.
    pub fn into_response(self) -> Option<Vec<u8>> {
        self.response
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            Reason::Malformed(why) => write!(f, "malformed query: {why}"),
            Reason::NotExchange(why) => write!(f, "not an exchange query: {why}"),
            Reason::Unsigned => f.write_str("unsigned query"),
            Reason::BadKey { key } => write!(f, "query signed with unknown key {key}"),
            Reason::BadSignature { key } => {
                write!(f, "query's signature does not verify with key {key}")
            }
            Reason::BadTime { key, signed, now } => write!(
                f,
                "query signed with key {key} at {signed}, more than {FUDGE} s from our clock ({now})"
            ),
        }
    }
}

impl std::error::Error for Rejection {}

/// Checks a received query: a single exchange question, signed by a key of `keys` within the
/// fudge of `now` (Unix seconds), with the key's current secret or, while a change of secret
/// goes on, its previous one ([`KeyRing::rotated`]). Never panics, whatever the bytes.
///
/// ```text
///   read_query (framing: FORMERR) ─▶ exchange_question (REFUSED) ─▶ authenticate (TSIG,
///   RFC 8945 section 5.2: REFUSED, BADKEY, BADSIG, BADTIME) ─▶ VerifiedQuery
/// ```
pub fn verify_query(bytes: &[u8], keys: &KeyRing, now: u64) -> Result<VerifiedQuery, Rejection> {
    let (header, request) = read_query(bytes)?;
    let (question, namespace, name) = exchange_question(&request, header)?;
    let key = authenticate(bytes, &request, header, keys, now)?;
    Ok(VerifiedQuery {
        namespace,
        name,
        key,
        id: request.id,
        question,
        recursion_desired: request.recursion_desired,
        request_mac: request
            .signature()
            .map(|s| s.data.mac.clone())
            .unwrap_or_default(),
        request_edns: request.edns.is_some(),
        udp_payload: request.max_payload(),
    })
}

/// The query's header and message, read strictly: nothing after the last record, a TSIG
/// only as the last (RFC 8945 section 5.1). Too short or a response: no reply at all.
fn read_query(bytes: &[u8]) -> Result<(&[u8], Message), Rejection> {
    let Some(header) = bytes.get(..HEADER_LEN) else {
        return Err(Rejection {
            reason: Reason::Malformed("shorter than a DNS header".into()),
            response: None,
        });
    };
    if header[2] & QR != 0 {
        // Answering a response could start a loop between two servers.
        return Err(Rejection {
            reason: Reason::Malformed("a response, not a query".into()),
            response: None,
        });
    }
    let request = wire::read_message(bytes).map_err(|why| formerr(header, why))?;
    Ok((header, request))
}

fn formerr(header: &[u8], why: String) -> Rejection {
    Rejection {
        reason: Reason::Malformed(why),
        response: Some(bare_response(header, ResponseCode::FormErr)),
    }
}

fn refused(request: &Message, header: &[u8], reason: Reason) -> Rejection {
    Rejection {
        reason,
        response: Some(rejection_response(
            request,
            header,
            ResponseCode::Refused,
            None,
        )),
    }
}

/// The one question, an exchange question (a QUERY for TXT IN under the exchange zone), and
/// the group `(namespace, name)` it asks for.
fn exchange_question(
    request: &Message,
    header: &[u8],
) -> Result<(Query, String, String), Rejection> {
    let [question] = request.queries.as_slice() else {
        return Err(formerr(
            header,
            format!(
                "{} questions, an exchange query has one",
                request.queries.len()
            ),
        ));
    };
    let refused = |reason| refused(request, header, reason);
    if request.op_code != OpCode::Query {
        return Err(refused(Reason::NotExchange(format!(
            "opcode {:?}",
            request.op_code
        ))));
    }
    if question.query_type() != RecordType::TXT || question.query_class() != DNSClass::IN {
        return Err(refused(Reason::NotExchange(format!(
            "{} {} question",
            question.query_class(),
            question.query_type()
        ))));
    }
    let Some((namespace, name)) = parse_qname(question.name()) else {
        return Err(refused(Reason::NotExchange(format!(
            "{} is not under {}",
            question.name(),
            crate::EXCHANGE_ZONE
        ))));
    };
    Ok((question.clone(), namespace, name))
}

/// The key (with the secret that verified the MAC) that signed the query within the fudge,
/// or the rejection RFC 8945 section 5.2 gives.
fn authenticate(
    bytes: &[u8],
    request: &Message,
    header: &[u8],
    keys: &KeyRing,
    now: u64,
) -> Result<TsigKey, Rejection> {
    let Some(signature) = request.signature() else {
        return Err(refused(request, header, Reason::Unsigned));
    };
    let tsig = &signature.data;
    let key_text = signature.name.to_ascii();
    let not_auth = |reason, tail| Rejection {
        reason,
        response: Some(rejection_response(
            request,
            header,
            ResponseCode::NotAuth,
            Some(tail),
        )),
    };

    // RFC 8945 section 5.2.1: an unknown key gets an unsigned BADKEY.
    let Some(entry) = keys.find(&signature.name, &tsig.algorithm) else {
        let unsigned = TSIG::new(
            tsig.algorithm.clone(),
            now,
            FUDGE,
            Vec::new(),
            request.id,
            Some(TsigError::BadKey),
            Vec::new(),
        );
        let tail = Tail::Unsigned(signature.name.clone(), unsigned);
        return Err(not_auth(Reason::BadKey { key: key_text }, tail));
    };

    // Section 5.2.2: a MAC that does not verify gets an unsigned BADSIG. The key's current
    // secret is tried first, then its previous one while a change of secret goes on (X1);
    // whichever verifies signs what we send back.
    let verified = signing::covered_data(bytes, None)
        .ok()
        .and_then(|(covered, _, _)| {
            entry
                .accepted(now)
                .find(|secret| signing::verifies(secret, &covered, &tsig.mac))
        });
    let Some(key) = verified else {
        let key = entry.current();
        let unsigned = signing::stub(
            key.algorithm().clone(),
            now,
            request.id,
            Some(TsigError::BadSig),
            Vec::new(),
        );
        let tail = Tail::Unsigned(key.name().clone(), unsigned);
        return Err(not_auth(Reason::BadSignature { key: key_text }, tail));
    };

    // Section 5.2.3: a time outside the fudge gets a signed BADTIME carrying the request's
    // time signed (so that the client's own time check passes) and our time in other-data.
    if !signing::within_fudge(tsig.time, tsig.fudge, now) {
        let our_time = (now & 0xffff_ffff_ffff).to_be_bytes()[2..].to_vec();
        let stub = signing::stub(
            key.algorithm().clone(),
            tsig.time,
            request.id,
            Some(TsigError::BadTime),
            our_time,
        );
        let tail = Tail::Signed(key.clone(), tsig.mac.clone(), stub);
        let reason = Reason::BadTime {
            key: key_text,
            signed: tsig.time,
            now,
        };
        return Err(not_auth(reason, tail));
    }
    Ok(key.clone())
}

/// The answer to a verified query, signed with its key at `now`: no larger than `max_size`
/// (clamped to 512..=65,535), else TC with no records so that the client asks over TCP.
/// A value a peer could not read back (its text not parsing as its type) makes the answer
/// SERVFAIL.
pub fn encode_answer(
    query: &VerifiedQuery,
    answer: &PeerAnswer,
    now: u64,
    max_size: usize,
) -> Vec<u8> {
    let max_size = max_size.clamp(MIN_PAYLOAD, MAX_MESSAGE_SIZE);
    let (rcode, records) = match answer {
        PeerAnswer::Healthy(values) => {
            let txts: Option<Vec<_>> = values.iter().map(answer::to_txt).collect();
            match txts {
                Some(txts) => (
                    ResponseCode::NoError,
                    txts.into_iter()
                        .map(|txt| {
                            Record::from_rdata(query.question.name().clone(), 0, RData::TXT(txt))
                        })
                        .collect(),
                ),
                None => (ResponseCode::ServFail, Vec::new()),
            }
        }
        PeerAnswer::NothingHealthy => (ResponseCode::NoError, Vec::new()),
        PeerAnswer::NoSuchGroup => (ResponseCode::NXDomain, Vec::new()),
    };
    let full = query.response(rcode, records, false);
    if let Ok(bytes) = query.sign(&full, now) {
        // hickory sets TC itself when records did not fit its 65,535-byte encoder.
        let truncated = bytes.get(2).is_some_and(|b| b & 0x02 != 0);
        if bytes.len() <= max_size && !truncated {
            return bytes;
        }
    }
    let truncated = query.response(rcode, Vec::new(), true);
    query
        .sign(&truncated, now)
        .or_else(|_| {
            query.sign(
                &query.response(ResponseCode::ServFail, Vec::new(), false),
                now,
            )
        })
        .unwrap_or_else(|_| {
            let header = [
                (query.id >> 8) as u8,
                query.id as u8,
                if query.recursion_desired { RD } else { 0 },
                0,
            ];
            bare_response(&header, ResponseCode::ServFail)
        })
}

/// What ends a NOTAUTH response: a TSIG RR unsigned (BADKEY, BADSIG) or signed (BADTIME).
enum Tail {
    Unsigned(Name, TSIG),
    Signed(TsigKey, Vec<u8>, TSIG),
}

/// A rejection's response: the request's header bits and question, `rcode`, no records but
/// the OPT (if the request had one) and the TSIG tail. Falls back to a bare header if it
/// cannot be encoded.
fn rejection_response(
    request: &Message,
    header: &[u8],
    rcode: ResponseCode,
    tail: Option<Tail>,
) -> Vec<u8> {
    let mut response = Message::response(request.id, request.op_code);
    response.metadata.recursion_desired = request.recursion_desired;
    response.metadata.response_code = rcode;
    response.add_queries(request.queries.iter().cloned());
    if request.edns.is_some() {
        response.set_edns(exchange_edns());
    }
    let encoded = response.to_vec().and_then(|bytes| match tail {
        None => Ok(bytes),
        Some(Tail::Unsigned(key_name, tsig)) => signing::append(bytes, key_name, tsig),
        Some(Tail::Signed(key, request_mac, tsig)) => {
            signing::sign(bytes, &key, Some(&request_mac), tsig).map(|(bytes, _)| bytes)
        }
    });
    encoded.unwrap_or_else(|_| bare_response(header, rcode))
}

/// A response that is only a header: the request's ID, opcode and RD, `rcode`, no sections.
/// `header` holds at least the request's first three bytes.
fn bare_response(header: &[u8], rcode: ResponseCode) -> Vec<u8> {
    let byte = |i: usize| header.get(i).copied().unwrap_or(0);
    let rcode = u16::from(rcode);
    let mut out = vec![0; HEADER_LEN];
    out[0] = byte(0);
    out[1] = byte(1);
    out[2] = QR | (byte(2) & (OPCODE_MASK | RD));
    out[3] = (rcode & 0x0f) as u8;
    out
}
