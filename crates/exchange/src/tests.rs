//! The protocol end to end, over bytes: query → verify → answer → read, each rejection with
//! its RCODE and TSIG error, key rotation, tampering, truncation, and hostile bytes.

use hickory_proto::{
    op::{Message, OpCode, Query as Question, ResponseCode},
    rr::{
        Name, RData, Record, RecordType,
        rdata::{TXT, tsig::TsigError},
    },
    serialize::binary::{BinEncodable, BinEncoder},
};
use proptest::prelude::*;

use crate::{
    ExchangeError, KeyRing, PeerAnswer, PeerValue, Query, Reason, Rejection, TsigKey,
    encode_answer, signing, verify_query,
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const NOW: u64 = 1_780_000_000;
const TCP: usize = crate::MAX_MESSAGE_SIZE;

fn key(name: &str, secret: &str) -> Result<TsigKey, crate::Error> {
    TsigKey::new(
        name,
        "hmac-sha256",
        &data_encoding::BASE64.encode(secret.as_bytes()),
    )
}

fn old_key() -> Result<TsigKey, crate::Error> {
    key("hr-peer-old.", "the old secret, 32 bytes long...")
}

fn new_key() -> Result<TsigKey, crate::Error> {
    key("hr-peer-new.", "the new secret, 32 bytes long...")
}

fn ring(keys: &[TsigKey]) -> Result<KeyRing, crate::Error> {
    KeyRing::new(keys.to_vec())
}

/// A peer value from its two wire parts (the tests write valid ones).
fn peer_value(record_type: &str, text: impl AsRef<str>) -> PeerValue {
    PeerValue::parse(record_type, text.as_ref()).expect("a valid peer value")
}

fn healthy() -> PeerAnswer {
    PeerAnswer::Healthy(vec![
        peer_value("A", "192.0.2.1"),
        peer_value("AAAA", "2001:db8::1"),
        peer_value("CNAME", "api.eu-west.example.com."),
        peer_value("TXT", "\"v=spf1 -all\""),
        peer_value("TXT", "x".repeat(600)),
    ])
}

/// A query signed (or not) as the tests need: any name, type, opcode, key and time.
fn custom_query(
    qname: &str,
    qtype: RecordType,
    op_code: OpCode,
    key: Option<&TsigKey>,
    time: u64,
) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let mut message = Message::new(4242, hickory_proto::op::MessageType::Query, op_code);
    message.add_query(Question::query(Name::from_ascii(qname)?, qtype));
    let bytes = message.to_vec()?;
    Ok(match key {
        None => bytes,
        Some(key) => {
            let stub = signing::stub(key.algorithm().clone(), time, 4242, None, Vec::new());
            signing::sign(bytes, key, None, stub)?.0
        }
    })
}

/// The rejection's response, parsed, after the checks every rejection shares: a response
/// with no answer, authority or additional records.
fn rejected_response(rejection: &Rejection) -> Result<Message, Box<dyn std::error::Error>> {
    let bytes = rejection.response().ok_or("no response")?;
    let message = Message::from_vec(bytes)?;
    assert_eq!(
        message.message_type,
        hickory_proto::op::MessageType::Response
    );
    assert!(message.answers.is_empty(), "{message:?}");
    assert!(message.authorities.is_empty(), "{message:?}");
    assert!(message.additionals.is_empty(), "{message:?}");
    Ok(message)
}

fn round_trip(answer: &PeerAnswer) -> Result<PeerAnswer, Box<dyn std::error::Error>> {
    let keys = ring(&[new_key()?])?;
    let Query { bytes, pending } = Query::new("shop", "api", &keys, NOW)?;
    let verified = verify_query(&bytes, &keys, NOW + 1)?;
    assert_eq!(verified.group(), ("shop", "api"));
    let answer = encode_answer(&verified, answer, NOW + 1, TCP);
    Ok(pending.read_answer(&answer, NOW + 2)?)
}

#[test]
fn each_peer_answer_round_trips() -> TestResult {
    for answer in [
        healthy(),
        PeerAnswer::NothingHealthy,
        PeerAnswer::NoSuchGroup,
    ] {
        assert_eq!(round_trip(&answer)?, answer);
    }
    assert_eq!(
        round_trip(&PeerAnswer::Healthy(vec![]))?,
        PeerAnswer::NothingHealthy
    );
    Ok(())
}

#[test]
fn values_are_read_back_sorted_without_duplicates() -> TestResult {
    let sent = PeerAnswer::Healthy(vec![
        peer_value("A", "192.0.2.9"),
        peer_value("A", "192.0.2.1"),
        peer_value("A", "192.0.2.9"),
    ]);
    assert_eq!(
        round_trip(&sent)?,
        PeerAnswer::Healthy(vec![
            peer_value("A", "192.0.2.1"),
            peer_value("A", "192.0.2.9"),
        ])
    );
    Ok(())
}

#[test]
fn answers_carry_the_right_rcode_and_records() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let Query { bytes, .. } = Query::new("shop", "api", &keys, NOW)?;
    let verified = verify_query(&bytes, &keys, NOW)?;
    for (answer, rcode, count) in [
        (healthy(), ResponseCode::NoError, 5),
        (PeerAnswer::NothingHealthy, ResponseCode::NoError, 0),
        (PeerAnswer::NoSuchGroup, ResponseCode::NXDomain, 0),
    ] {
        let message = Message::from_vec(&encode_answer(&verified, &answer, NOW, TCP))?;
        assert_eq!(message.response_code, rcode);
        assert_eq!(message.answers.len(), count);
        assert!(message.authoritative);
        assert!(message.answers.iter().all(|r| r.ttl == 0
            && r.record_type() == RecordType::TXT
            && r.name.to_ascii() == "api.shop.exchange.healthroute.invalid."));
        let signature = message.signature().ok_or("unsigned answer")?;
        assert_eq!(signature.name, *new_key()?.name());
        assert_eq!(signature.data.error, None);
    }
    Ok(())
}

#[test]
fn queries_are_what_the_protocol_says() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let Query { bytes, pending } = Query::new("shop", "api.v2", &keys, NOW)?;
    let message = Message::from_vec(&bytes)?;
    assert_eq!(message.op_code, OpCode::Query);
    assert!(!message.recursion_desired);
    assert_eq!(message.id, pending.id());
    assert_eq!(message.queries.len(), 1);
    assert_eq!(
        message.queries[0].name().to_ascii(),
        "api.v2.shop.exchange.healthroute.invalid."
    );
    assert_eq!(message.queries[0].query_type(), RecordType::TXT);
    let tsig = &message.signature().ok_or("unsigned query")?.data;
    assert_eq!(tsig.fudge, 300);
    assert_eq!(tsig.time, NOW);
    assert_eq!(tsig.mac.len(), 32);
    Ok(())
}

#[test]
fn group_names_with_dots_round_trip() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let Query { bytes, pending } = Query::new("shop", "api.v2.internal", &keys, NOW)?;
    let verified = verify_query(&bytes, &keys, NOW)?;
    assert_eq!(verified.group(), ("shop", "api.v2.internal"));
    assert_eq!(verified.namespace(), "shop");
    assert_eq!(verified.name(), "api.v2.internal");
    let answer = encode_answer(&verified, &healthy(), NOW, TCP);
    assert_eq!(pending.read_answer(&answer, NOW)?, healthy());
    Ok(())
}

#[test]
fn groups_that_cannot_be_named_fail_at_query_time() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let err = Query::new("Shop", "api", &keys, NOW).err();
    assert!(
        matches!(err, Some(crate::Error::GroupName { .. })),
        "{err:?}"
    );
    Ok(())
}

#[test]
fn unsigned_queries_are_refused_without_records() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let bytes = custom_query(
        "api.shop.exchange.healthroute.invalid.",
        RecordType::TXT,
        OpCode::Query,
        None,
        NOW,
    )?;
    let rejection = verify_query(&bytes, &keys, NOW).err().ok_or("accepted")?;
    assert_eq!(rejection.label(), "unsigned");
    assert_eq!(rejection.reason(), &Reason::Unsigned);
    let response = rejected_response(&rejection)?;
    assert_eq!(response.response_code, ResponseCode::Refused);
    assert!(response.signature().is_none());
    assert_eq!(response.id, 4242);
    Ok(())
}

#[test]
fn unknown_keys_get_notauth_with_an_unsigned_badkey() -> TestResult {
    let server = ring(&[new_key()?])?;
    let client = ring(&[key("someone-else.", "a secret of some sixteen bytes")?])?;
    let Query { bytes, pending } = Query::new("shop", "api", &client, NOW)?;
    let rejection = verify_query(&bytes, &server, NOW).err().ok_or("accepted")?;
    assert_eq!(rejection.label(), "bad_key");
    let response = rejected_response(&rejection)?;
    assert_eq!(response.response_code, ResponseCode::NotAuth);
    let tsig = &response.signature().ok_or("no TSIG")?.data;
    assert_eq!(tsig.error, Some(TsigError::BadKey));
    assert!(tsig.mac.is_empty(), "BADKEY must be unsigned");
    let err = pending.read_answer(rejection.response().ok_or("none")?, NOW);
    assert_eq!(
        err,
        Err(ExchangeError::KeyRejected {
            key: "someone-else.".into()
        })
    );
    let text = err.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains("BADKEY (the key name someone-else. is not known there)"));
    Ok(())
}

#[test]
fn a_wrong_secret_gets_notauth_with_an_unsigned_badsig() -> TestResult {
    let server = ring(&[new_key()?])?;
    let client = ring(&[key("hr-peer-new.", "not the secret the server has!!")?])?;
    let Query { bytes, pending } = Query::new("shop", "api", &client, NOW)?;
    let rejection = verify_query(&bytes, &server, NOW).err().ok_or("accepted")?;
    assert_eq!(rejection.label(), "bad_signature");
    let response = rejected_response(&rejection)?;
    assert_eq!(response.response_code, ResponseCode::NotAuth);
    let tsig = &response.signature().ok_or("no TSIG")?.data;
    assert_eq!(tsig.error, Some(TsigError::BadSig));
    assert!(tsig.mac.is_empty(), "BADSIG must be unsigned");
    assert!(matches!(
        pending.read_answer(rejection.response().ok_or("none")?, NOW),
        Err(ExchangeError::SignatureRejected { .. })
    ));
    Ok(())
}

#[test]
fn times_outside_the_fudge_get_a_signed_badtime_both_ways() -> TestResult {
    let keys = ring(&[new_key()?])?;
    for client_now in [NOW - 301, NOW + 301] {
        let Query { bytes, pending } = Query::new("shop", "api", &keys, client_now)?;
        let rejection = verify_query(&bytes, &keys, NOW).err().ok_or("accepted")?;
        assert_eq!(rejection.label(), "bad_time");
        assert_eq!(
            rejection.reason(),
            &Reason::BadTime {
                key: "hr-peer-new.".into(),
                signed: client_now,
                now: NOW
            }
        );
        let response = rejected_response(&rejection)?;
        assert_eq!(response.response_code, ResponseCode::NotAuth);
        let tsig = &response.signature().ok_or("no TSIG")?.data;
        assert_eq!(tsig.error, Some(TsigError::BadTime));
        assert_eq!(tsig.mac.len(), 32, "BADTIME must be signed");
        assert_eq!(tsig.time, client_now);
        assert_eq!(tsig.other, NOW.to_be_bytes()[2..].to_vec());
        // The client verifies the signature and learns the peer's clock.
        assert_eq!(
            pending.read_answer(rejection.response().ok_or("none")?, client_now),
            Err(ExchangeError::ClockSkew {
                peer_time: NOW,
                our_time: client_now,
                fudge: 300
            })
        );
    }
    for client_now in [NOW - 300, NOW + 300] {
        let Query { bytes, .. } = Query::new("shop", "api", &keys, client_now)?;
        assert!(verify_query(&bytes, &keys, NOW).is_ok());
    }
    Ok(())
}

#[test]
fn questions_outside_the_exchange_are_refused_unsigned() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let key = new_key()?;
    for (qname, qtype, op_code) in [
        ("www.example.com.", RecordType::TXT, OpCode::Query),
        (
            "api.shop.exchange.healthroute.invalid.",
            RecordType::A,
            OpCode::Query,
        ),
        (
            "shop.exchange.healthroute.invalid.",
            RecordType::TXT,
            OpCode::Query,
        ),
        (
            "api.shop.exchange.healthroute.invalid.",
            RecordType::TXT,
            OpCode::Update,
        ),
        (
            "api.shop.exchange.healthroute.invalid.",
            RecordType::TXT,
            OpCode::Notify,
        ),
    ] {
        let bytes = custom_query(qname, qtype, op_code, Some(&key), NOW)?;
        let rejection = verify_query(&bytes, &keys, NOW).err().ok_or("accepted")?;
        assert_eq!(
            rejection.label(),
            "not_exchange",
            "{qname} {qtype} {op_code:?}"
        );
        let response = rejected_response(&rejection)?;
        assert_eq!(response.response_code, ResponseCode::Refused);
        assert_eq!(response.op_code, op_code);
        assert!(response.signature().is_none());
    }
    Ok(())
}

#[test]
fn malformed_queries_get_formerr_or_nothing() -> TestResult {
    let keys = ring(&[new_key()?])?;
    // Shorter than a header: nothing to answer.
    let rejection = verify_query(&[1, 2, 3], &keys, NOW)
        .err()
        .ok_or("accepted")?;
    assert_eq!(rejection.label(), "malformed");
    assert!(rejection.response().is_none());
    // A header announcing a question that is not there: FORMERR, header only.
    let header = [0x12, 0x34, 0x00, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    let rejection = verify_query(&header, &keys, NOW).err().ok_or("accepted")?;
    assert_eq!(rejection.label(), "malformed");
    let response = rejection.response().ok_or("no response")?;
    assert_eq!(response.len(), 12);
    let message = Message::from_vec(response)?;
    assert_eq!(message.response_code, ResponseCode::FormErr);
    assert_eq!(message.id, 0x1234);
    // No question at all: FORMERR.
    let header = [0x12, 0x34, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0];
    let rejection = verify_query(&header, &keys, NOW).err().ok_or("accepted")?;
    assert_eq!(rejection.label(), "malformed");
    assert_eq!(
        Message::from_vec(rejection.response().ok_or("no response")?)?.response_code,
        ResponseCode::FormErr
    );
    // A response is never answered (no loops between servers).
    let Query { bytes, .. } = Query::new("shop", "api", &keys, NOW)?;
    let verified = verify_query(&bytes, &keys, NOW)?;
    let answer = encode_answer(&verified, &healthy(), NOW, TCP);
    let rejection = verify_query(&answer, &keys, NOW).err().ok_or("accepted")?;
    assert_eq!(rejection.label(), "malformed");
    assert!(rejection.into_response().is_none());
    Ok(())
}

/// A signed exchange query without EDNS, cut in two: the message as signed (ARCOUNT 0) and
/// its TSIG RR, to be put back wherever a test needs it.
fn query_and_tsig() -> Result<(Vec<u8>, Vec<u8>), Box<dyn std::error::Error>> {
    let qname = "api.shop.exchange.healthroute.invalid.";
    let unsigned = custom_query(qname, RecordType::TXT, OpCode::Query, None, NOW)?;
    let signed = custom_query(
        qname,
        RecordType::TXT,
        OpCode::Query,
        Some(&new_key()?),
        NOW,
    )?;
    let tsig = signed.get(unsigned.len()..).ok_or("no TSIG")?.to_vec();
    Ok((unsigned, tsig))
}

/// `message` with the header's count at `at` (6 answer, 8 authority, 10 additional) set.
fn with_count(mut message: Vec<u8>, at: usize, count: u16) -> Vec<u8> {
    message[at..at + 2].copy_from_slice(&count.to_be_bytes());
    message
}

/// `message` with `record` appended as one more additional record.
fn with_additional(message: &[u8], record: &Record) -> Result<Vec<u8>, Box<dyn std::error::Error>> {
    let count = u16::from_be_bytes([message[10], message[11]]) + 1;
    let mut out = with_count(message.to_vec(), 10, count);
    let mut encoded = Vec::new();
    record.emit(&mut BinEncoder::new(&mut encoded))?;
    out.extend_from_slice(&encoded);
    Ok(out)
}

/// A TXT record of the exchange question's name.
fn txt_record() -> Result<Record, Box<dyn std::error::Error>> {
    Ok(Record::from_rdata(
        Name::from_ascii("api.shop.exchange.healthroute.invalid.")?,
        0,
        RData::TXT(TXT::new(vec!["A".into(), "192.0.2.66".into()])),
    ))
}

/// The checks every misplaced-TSIG query shares: FORMERR, header only (a valid DNS response
/// with the query's ID and no section), counted as `malformed`.
fn assert_formerr(bytes: &[u8], keys: &KeyRing) -> Result<Reason, Box<dyn std::error::Error>> {
    let rejection = verify_query(bytes, keys, NOW).err().ok_or("accepted")?;
    assert_eq!(rejection.label(), "malformed", "{rejection}");
    let response = rejected_response(&rejection)?;
    assert_eq!(rejection.response().map(<[u8]>::len), Some(12));
    assert_eq!(response.response_code, ResponseCode::FormErr);
    assert_eq!(response.id, u16::from_be_bytes([bytes[0], bytes[1]]));
    assert!(response.queries.is_empty());
    assert!(response.signature().is_none());
    Ok(rejection.reason().clone())
}

// SEM-X7: RFC 8945 section 5.1, the TSIG "MUST be the last record": bytes after it are
// covered by no MAC, so a query that carries them is FORMERR, never answered.
#[test]
fn bytes_after_the_tsig_get_formerr() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let Query { bytes, .. } = Query::new("shop", "api", &keys, NOW)?;
    for tail in [&[0u8][..], &[0; 4], b"trailing junk", &bytes] {
        let mut extended = bytes.clone();
        extended.extend_from_slice(tail);
        let reason = assert_formerr(&extended, &keys)?;
        let bytes_after = match tail.len() {
            1 => "1 byte".to_owned(),
            n => format!("{n} bytes"),
        };
        assert_eq!(
            reason,
            Reason::Malformed(format!(
                "{bytes_after} after the TSIG record, which must end the message (RFC 8945 5.1)"
            ))
        );
    }
    Ok(())
}

// SEM-X7: a record after the TSIG in the additional section (an OPT, a TXT, a second TSIG)
// is FORMERR, even though the MAC covers everything before it.
#[test]
fn a_record_after_the_tsig_gets_formerr() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let (unsigned, tsig) = query_and_tsig()?;
    let signed = [unsigned.as_slice(), &tsig].concat();
    let signed = with_count(signed, 10, 1);
    let opt = Record::from(&crate::wire::exchange_edns());
    let queries = [
        with_additional(&signed, &opt)?,
        with_additional(&signed, &txt_record()?)?,
        with_count([signed.as_slice(), &tsig].concat(), 10, 2),
        // Query::new's own query: OPT then TSIG, and a TXT after them.
        with_additional(
            &Query::new("shop", "api", &keys, NOW)?.bytes,
            &txt_record()?,
        )?,
    ];
    for query in &queries {
        assert_formerr(query, &keys)?;
        assert_eq!(
            crate::wire::check_tsig_last(query),
            Err("a record after the TSIG record, which must be last (RFC 8945 5.1)".into())
        );
    }
    Ok(())
}

// SEM-X7: a TSIG in the answer or authority section is FORMERR, whether or not another one
// ends the additional section.
#[test]
fn a_tsig_outside_the_additional_section_gets_formerr() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let (unsigned, tsig) = query_and_tsig()?;
    for (count_at, section) in [(6, "answer"), (8, "authority")] {
        let moved = with_count([unsigned.as_slice(), &tsig].concat(), count_at, 1);
        let twice = with_count([moved.as_slice(), &tsig].concat(), 10, 1);
        for query in [moved, twice] {
            assert_formerr(&query, &keys)?;
            assert_eq!(
                crate::wire::check_tsig_last(&query),
                Err(format!(
                    "a TSIG record in the {section} section: it must be the last additional record (RFC 8945 5.1)"
                ))
            );
        }
    }
    Ok(())
}

// SEM-X7: the same queries, intact, are answered: strictness refuses only what follows the
// TSIG.
#[test]
fn the_intact_signed_query_is_answered() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let (unsigned, tsig) = query_and_tsig()?;
    let bare = with_count([unsigned.as_slice(), &tsig].concat(), 10, 1);
    let Query { bytes, pending } = Query::new("shop", "api", &keys, NOW)?;
    for query in [&bare, &bytes] {
        assert_eq!(crate::wire::check_tsig_last(query), Ok(()));
        let verified = verify_query(query, &keys, NOW)?;
        assert_eq!(verified.group(), ("shop", "api"));
    }
    let verified = verify_query(&bytes, &keys, NOW)?;
    let answer = encode_answer(&verified, &healthy(), NOW, TCP);
    assert_eq!(pending.read_answer(&answer, NOW)?, healthy());
    Ok(())
}

// SEM-X7, the client's side: an answer with anything after its TSIG is never accepted, and
// the status says what followed it.
#[test]
fn answers_with_data_after_the_tsig_fail() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let Query { bytes, pending } = Query::new("shop", "api", &keys, NOW)?;
    let verified = verify_query(&bytes, &keys, NOW)?;
    let answer = encode_answer(&verified, &healthy(), NOW, TCP);
    let mut extended = answer.clone();
    extended.extend_from_slice(&[0; 3]);
    let err = pending
        .read_answer(&extended, NOW)
        .err()
        .ok_or("accepted")?;
    assert_eq!(err.label(), "malformed");
    assert_eq!(
        err.to_string(),
        "peer's answer is not a DNS response: 3 bytes after the TSIG record, which must end the message (RFC 8945 5.1)"
    );
    let err = pending
        .read_answer(&with_additional(&answer, &txt_record()?)?, NOW)
        .err()
        .ok_or("accepted")?;
    assert!(matches!(err, ExchangeError::Malformed { .. }), "{err}");
    // Unsigned answers are read as strictly: bytes after the last record are malformed.
    let mut message = Message::from_vec(&answer)?;
    message.signature = None;
    let mut unsigned = message.to_vec()?;
    unsigned.push(0);
    assert_eq!(
        pending.read_answer(&unsigned, NOW),
        Err(ExchangeError::Malformed {
            reason: "1 byte after the last record".into()
        })
    );
    assert_eq!(pending.read_answer(&answer, NOW)?, healthy());
    Ok(())
}

#[test]
fn rotation_accepts_old_and_new_and_answers_with_the_key_used() -> TestResult {
    let server = ring(&[new_key()?, old_key()?])?;
    for client_key in [old_key()?, new_key()?] {
        let client = ring(std::slice::from_ref(&client_key))?;
        let Query { bytes, pending } = Query::new("shop", "api", &client, NOW)?;
        let verified = verify_query(&bytes, &server, NOW)?;
        assert_eq!(verified.key().name(), client_key.name());
        let answer = encode_answer(&verified, &healthy(), NOW, TCP);
        let signer = Message::from_vec(&answer)?
            .signature()
            .map(|s| s.name.clone())
            .ok_or("unsigned")?;
        assert_eq!(&signer, client_key.name());
        assert_eq!(pending.read_answer(&answer, NOW)?, healthy());
    }
    Ok(())
}

/// The secret of "hr-peer." before its Secret changed.
fn before() -> Result<TsigKey, crate::Error> {
    key("hr-peer.", "the secret before, 32 bytes long")
}

/// The secret of the same key name after the change.
fn after() -> Result<TsigKey, crate::Error> {
    key("hr-peer.", "the secret after it, 32 bytes...")
}

const WINDOW: u64 = crate::ROTATION_WINDOW;

/// One exchange of `client` with `server` at `now`: the client's query verified, answered and
/// read back, or the label of what refused it.
fn exchange(client: &KeyRing, server: &KeyRing, now: u64) -> Result<(), String> {
    let Query { bytes, pending } =
        Query::new("shop", "api", client, now).map_err(|e| e.to_string())?;
    let verified = verify_query(&bytes, server, now).map_err(|r| r.label().to_owned())?;
    let answer = encode_answer(&verified, &healthy(), now, TCP);
    match pending.read_answer(&answer, now) {
        Ok(read) if read == healthy() => Ok(()),
        Ok(read) => Err(format!("read {read:?}")),
        Err(e) => Err(e.label().to_owned()),
    }
}

// SEM-X1: after a key's secret changed under its name, a query signed with the previous
// secret still verifies for two windows and not after; the answer is signed with the secret
// that verified the query (the client reads it with the secret it signed with); the new
// secret verifies at once and from then on.
#[test]
fn a_changed_secret_accepts_the_previous_one_for_two_windows() -> TestResult {
    let changed = ring(&[before()?])?.rotated(ring(&[after()?])?, NOW);
    for at in [NOW, NOW + WINDOW, NOW + 2 * WINDOW - 1] {
        for client in [before()?, after()?] {
            let Query { bytes, pending } =
                Query::new("shop", "api", &ring(std::slice::from_ref(&client))?, at)?;
            let verified = verify_query(&bytes, &changed, at)?;
            assert_eq!(verified.key(), &client, "the secret that verified, at {at}");
            let answer = encode_answer(&verified, &healthy(), at, TCP);
            assert_eq!(pending.read_answer(&answer, at)?, healthy());
            // Signed with that secret, not the other one of the key.
            let other = if client == before()? {
                after()?
            } else {
                before()?
            };
            let with_other = verified.clone().with_key(other);
            assert_eq!(
                pending.read_answer(&encode_answer(&with_other, &healthy(), at, TCP), at),
                Err(ExchangeError::BadSignature)
            );
        }
    }
    for at in [NOW + 2 * WINDOW, NOW + 3 * WINDOW] {
        assert_eq!(
            exchange(&ring(&[before()?])?, &changed, at),
            Err("bad_signature".into())
        );
        assert_eq!(exchange(&ring(&[after()?])?, &changed, at), Ok(()));
    }
    // A signed BADTIME is signed with the previous secret too, which the client verifies.
    let Query { bytes, pending } = Query::new("shop", "api", &ring(&[before()?])?, NOW - 400)?;
    let rejection = verify_query(&bytes, &changed, NOW)
        .err()
        .ok_or("accepted")?;
    assert_eq!(rejection.label(), "bad_time");
    assert!(matches!(
        pending.read_answer(rejection.response().ok_or("none")?, NOW - 400),
        Err(ExchangeError::ClockSkew { .. })
    ));
    Ok(())
}

// SEM-X1: the key's previous secret signs queries for a window after the change (a peer that
// has not read its copy yet still verifies them), the new one after it.
#[test]
fn the_previous_secret_signs_for_a_window_then_the_new_one() -> TestResult {
    let changed = ring(&[before()?])?.rotated(ring(&[after()?])?, NOW);
    let (old_peer, new_peer) = (ring(&[before()?])?, ring(&[after()?])?);
    for at in [NOW, NOW + WINDOW - 1] {
        assert_eq!(changed.signing_key(at), &before()?);
        assert_eq!(exchange(&changed, &old_peer, at), Ok(()), "at {at}");
    }
    for at in [NOW + WINDOW, NOW + 3 * WINDOW] {
        assert_eq!(changed.signing_key(at), &after()?);
        assert_eq!(exchange(&changed, &new_peer, at), Ok(()), "at {at}");
        assert_eq!(
            exchange(&changed, &old_peer, at),
            Err("bad_signature".into())
        );
    }
    Ok(())
}

// SEM-X1: two clusters change their copies of the Secret at different moments, in either
// order, up to a window apart: every exchange in both directions, before, during and after,
// verifies and is read back. Further apart than a window, the early side's new secret is
// refused by the late side until it changes too.
#[test]
fn two_clusters_changing_apart_refuse_nothing() -> TestResult {
    for (gap, refuses) in [
        (0, false),
        (1, false),
        (59, false),
        (WINDOW, false),
        (WINDOW + 60, true),
    ] {
        // East changes first here; west first is the same with the roles swapped, and both
        // directions are asked.
        let (east_at, west_at) = (NOW, NOW + gap);
        let (mut east, mut west) = (ring(&[before()?])?, ring(&[before()?])?);
        let (mut east_changed, mut west_changed) = (false, false);
        let mut refused = Vec::new();
        for at in (NOW - 60..NOW + gap + 3 * WINDOW).step_by(5) {
            if at >= east_at && !east_changed {
                east = east.rotated(ring(&[after()?])?, east_at);
                east_changed = true;
            }
            if at >= west_at && !west_changed {
                west = west.rotated(ring(&[after()?])?, west_at);
                west_changed = true;
            }
            for (client, server, way) in [(&east, &west, "east→west"), (&west, &east, "west→east")]
            {
                if let Err(e) = exchange(client, server, at) {
                    refused.push(format!("{way} at +{} s: {e}", at - NOW));
                }
            }
        }
        assert_eq!(
            !refused.is_empty(),
            refuses,
            "changed {gap} s apart: {refused:?}"
        );
        assert_eq!(east.signing_key(NOW + gap + 3 * WINDOW), &after()?);
    }
    Ok(())
}

// SEM-X1: a key read again with the same secret keeps its change under way; a second change
// within the window keeps the secret that signs as the previous one; going back to it ends the
// change; once the previous secret expires `settled` drops it. Another key name (X1's two
// keys) starts with no previous secret, and the ring takes the fresh names and order.
#[test]
fn rotations_follow_what_signs() -> TestResult {
    let third = key("hr-peer.", "a third secret, also 32 bytes...")?;
    let changed = ring(&[before()?])?.rotated(ring(&[after()?])?, NOW);
    let again = changed.rotated(ring(&[after()?])?, NOW + 10);
    assert_eq!(again.signing_key(NOW + WINDOW - 1), &before()?);
    assert_eq!(
        exchange(&ring(&[before()?])?, &again, NOW + 2 * WINDOW - 1),
        Ok(())
    );

    let twice = changed.rotated(ring(std::slice::from_ref(&third))?, NOW + 60);
    assert_eq!(twice.signing_key(NOW + 60 + WINDOW - 1), &before()?);
    assert_eq!(twice.signing_key(NOW + 60 + WINDOW), &third);
    assert_eq!(
        exchange(&ring(&[after()?])?, &twice, NOW + 61),
        Err("bad_signature".into())
    );
    assert_eq!(exchange(&ring(&[before()?])?, &twice, NOW + 61), Ok(()));

    let back = changed.rotated(ring(&[before()?])?, NOW + 60);
    assert_eq!(back.signing_key(NOW + 60), &before()?);
    assert_eq!(
        exchange(&ring(&[after()?])?, &back, NOW + 61),
        Err("bad_signature".into())
    );

    // After the window the new secret signs; a change then makes it the previous one.
    let later = changed.rotated(ring(std::slice::from_ref(&third))?, NOW + WINDOW);
    assert_eq!(later.signing_key(NOW + WINDOW), &after()?);
    assert_eq!(
        exchange(&ring(&[before()?])?, &later, NOW + WINDOW),
        Err("bad_signature".into())
    );

    assert!(!changed.has_expired(NOW + 2 * WINDOW - 1));
    assert!(changed.has_expired(NOW + 2 * WINDOW));
    let settled = changed.settled(NOW + 2 * WINDOW);
    assert!(!settled.has_expired(NOW + 2 * WINDOW));
    assert_eq!(
        exchange(&ring(&[before()?])?, &settled, NOW + 1),
        Err("bad_signature".into())
    );
    assert_eq!(changed.settled(NOW).signing_key(NOW), &before()?);

    // X1's two keys: a new name joins without a previous secret, first in the fresh order.
    let two = changed.rotated(ring(&[new_key()?, after()?])?, NOW + 1);
    assert_eq!(two.signing_key(NOW + 1), &new_key()?);
    assert_eq!(exchange(&ring(&[before()?])?, &two, NOW + 1), Ok(()));
    assert_eq!(exchange(&ring(&[new_key()?])?, &two, NOW + 1), Ok(()));
    Ok(())
}

#[test]
fn tampered_answers_fail() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let Query { bytes, pending } = Query::new("shop", "api", &keys, NOW)?;
    let verified = verify_query(&bytes, &keys, NOW)?;
    let answer = encode_answer(&verified, &healthy(), NOW, TCP);
    // A changed address: "192.0.2.1" → "192.0.2.9".
    let at = answer
        .windows(9)
        .position(|w| w == b"192.0.2.1")
        .ok_or("value not found")?;
    let mut tampered = answer.clone();
    tampered[at + 8] = b'9';
    assert_eq!(
        pending.read_answer(&tampered, NOW),
        Err(ExchangeError::BadSignature)
    );
    // A changed header bit (AA cleared).
    let mut tampered = answer.clone();
    tampered[2] &= !0x04;
    assert_eq!(
        pending.read_answer(&tampered, NOW),
        Err(ExchangeError::BadSignature)
    );
    // The signature stripped: ARCOUNT less one, the TSIG RR cut off.
    let message = Message::from_vec(&answer)?;
    let mut stripped = message.clone();
    stripped.signature = None;
    assert_eq!(
        pending.read_answer(&stripped.to_vec()?, NOW),
        Err(ExchangeError::Unsigned {
            rcode: "NOERROR".into()
        })
    );
    Ok(())
}

#[test]
fn answers_signed_with_another_key_fail() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let Query { bytes, pending } = Query::new("shop", "api", &keys, NOW)?;
    let verified = verify_query(&bytes, &keys, NOW)?;
    // Another key name.
    let answer = encode_answer(&verified.clone().with_key(old_key()?), &healthy(), NOW, TCP);
    assert!(matches!(
        pending.read_answer(&answer, NOW),
        Err(ExchangeError::WrongKey { .. })
    ));
    // The same name with another secret.
    let impostor = key("hr-peer-new.", "an impostor's 32-byte secret....")?;
    let answer = encode_answer(&verified.with_key(impostor), &healthy(), NOW, TCP);
    assert_eq!(
        pending.read_answer(&answer, NOW),
        Err(ExchangeError::BadSignature)
    );
    Ok(())
}

#[test]
fn answers_to_another_query_or_old_answers_fail() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let first = Query::new("shop", "api", &keys, NOW)?;
    let mut second = Query::new("shop", "api", &keys, NOW)?;
    while second.pending.id() == first.pending.id() {
        second = Query::new("shop", "api", &keys, NOW)?;
    }
    let verified = verify_query(&first.bytes, &keys, NOW)?;
    let answer = encode_answer(&verified, &healthy(), NOW, TCP);
    assert_eq!(
        second.pending.read_answer(&answer, NOW),
        Err(ExchangeError::Mismatch)
    );
    // The first query's answer read 301 s later: signed outside the fudge.
    assert!(matches!(
        first.pending.read_answer(&answer, NOW + 301),
        Err(ExchangeError::BadTime { .. })
    ));
    // A query is not an answer.
    assert!(matches!(
        first.pending.read_answer(&first.bytes, NOW),
        Err(ExchangeError::Malformed { .. })
    ));
    Ok(())
}

#[test]
fn large_answers_are_truncated_for_udp_and_whole_for_tcp() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let Query { bytes, pending } = Query::new("shop", "api", &keys, NOW)?;
    let verified = verify_query(&bytes, &keys, NOW)?;
    assert_eq!(verified.max_udp_payload(), 1232);
    let mut values: Vec<_> = (0..100)
        .map(|i| peer_value("AAAA", format!("2001:db8::{i:x}")))
        .collect();
    values.sort();
    let many = PeerAnswer::Healthy(values);
    let udp = encode_answer(&verified, &many, NOW, verified.max_udp_payload());
    assert!(udp.len() <= 1232, "{}", udp.len());
    let message = Message::from_vec(&udp)?;
    assert!(message.truncation);
    assert!(message.answers.is_empty());
    assert!(message.signature().is_some_and(|s| s.data.mac.len() == 32));
    assert_eq!(
        pending.read_answer(&udp, NOW),
        Err(ExchangeError::Truncated)
    );
    let tcp = encode_answer(&verified, &many, NOW, TCP);
    assert_eq!(pending.read_answer(&tcp, NOW)?, many);
    // Without EDNS the limit is 512.
    let bare = custom_query(
        "api.shop.exchange.healthroute.invalid.",
        RecordType::TXT,
        OpCode::Query,
        Some(&new_key()?),
        NOW,
    )?;
    let verified = verify_query(&bare, &keys, NOW)?;
    assert_eq!(verified.max_udp_payload(), 512);
    let udp = encode_answer(&verified, &healthy(), NOW, verified.max_udp_payload());
    assert!(udp.len() <= 512);
    assert!(Message::from_vec(&udp)?.truncation);
    Ok(())
}

#[test]
fn rejections_read_by_the_client_say_what_happened() -> TestResult {
    let keys = ring(&[new_key()?])?;
    let Query { bytes, pending } = Query::new("shop", "api", &keys, NOW)?;
    // The TSIG cut off: the server refuses it unsigned.
    let mut message = Message::from_vec(&bytes)?;
    message.signature = None;
    let rejection = verify_query(&message.to_vec()?, &keys, NOW)
        .err()
        .ok_or("accepted")?;
    let err = pending.read_answer(rejection.response().ok_or("none")?, NOW);
    assert_eq!(err, Err(ExchangeError::Refused));
    // A signed SERVFAIL (a value the server could not encode).
    let verified = verify_query(&bytes, &keys, NOW)?;
    let bad = PeerAnswer::Healthy(vec![PeerValue::from(healthroute_table::Value::Txt(
        "\"unclosed".into(),
    ))]);
    assert_eq!(
        pending.read_answer(&encode_answer(&verified, &bad, NOW, TCP), NOW),
        Err(ExchangeError::Rcode {
            rcode: "SERVFAIL".into()
        })
    );
    Ok(())
}

#[test]
fn error_labels_are_distinct() {
    let errors = [
        ExchangeError::Malformed {
            reason: String::new(),
        },
        ExchangeError::Mismatch,
        ExchangeError::Truncated,
        ExchangeError::Refused,
        ExchangeError::Unsigned {
            rcode: String::new(),
        },
        ExchangeError::KeyRejected { key: String::new() },
        ExchangeError::SignatureRejected { key: String::new() },
        ExchangeError::ClockSkew {
            peer_time: 0,
            our_time: 0,
            fudge: 0,
        },
        ExchangeError::PeerTsigError { code: 0 },
        ExchangeError::WrongKey {
            expected: String::new(),
            got: String::new(),
        },
        ExchangeError::BadSignature,
        ExchangeError::BadTime {
            signed: 0,
            now: 0,
            fudge: 0,
        },
        ExchangeError::Rcode {
            rcode: String::new(),
        },
        ExchangeError::MalformedAnswer {
            reason: String::new(),
        },
    ];
    let labels: std::collections::BTreeSet<_> = errors.iter().map(ExchangeError::label).collect();
    assert_eq!(labels.len(), errors.len());
}

proptest! {
    #[test]
    fn hostile_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        let keys = ring(&[new_key().map_err(|e| TestCaseError::fail(e.to_string()))?])
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let _ = verify_query(&bytes, &keys, NOW);
        // The walk behind SEM-X7 also runs alone: most of these bytes never parse.
        let _ = crate::wire::check_tsig_last(&bytes);
        let query = Query::new("shop", "api", &keys, NOW).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let _ = query.pending.read_answer(&bytes, NOW);
    }

    #[test]
    fn mutated_messages_never_panic(
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..8),
        cut in any::<usize>(),
    ) {
        let fail = |e: &dyn std::fmt::Display| TestCaseError::fail(e.to_string());
        let keys = ring(&[new_key().map_err(|e| fail(&e))?]).map_err(|e| fail(&e))?;
        let Query { bytes, pending } = Query::new("shop", "api", &keys, NOW).map_err(|e| fail(&e))?;
        let verified = verify_query(&bytes, &keys, NOW).map_err(|e| fail(&e))?;
        let answer = encode_answer(&verified, &healthy(), NOW, TCP);
        for original in [bytes, answer] {
            let mut mutated = original.clone();
            for (at, byte) in &edits {
                let len = mutated.len();
                mutated[at % len] = *byte;
            }
            mutated.truncate(cut % (original.len() + 1));
            let _ = verify_query(&mutated, &keys, NOW);
            let _ = pending.read_answer(&mutated, NOW);
            let _ = crate::wire::check_tsig_last(&mutated);
        }
    }

    // SEM-X7: whatever follows a signed query's TSIG, the query is FORMERR and malformed, and
    // whatever follows a signed answer's, the answer is malformed.
    #[test]
    fn anything_after_the_tsig_is_malformed(tail in proptest::collection::vec(any::<u8>(), 1..80)) {
        let fail = |e: &dyn std::fmt::Display| TestCaseError::fail(e.to_string());
        let keys = ring(&[new_key().map_err(|e| fail(&e))?]).map_err(|e| fail(&e))?;
        let Query { bytes, pending } = Query::new("shop", "api", &keys, NOW).map_err(|e| fail(&e))?;
        let verified = verify_query(&bytes, &keys, NOW).map_err(|e| fail(&e))?;
        let answer = encode_answer(&verified, &healthy(), NOW, TCP);
        let query = [bytes.as_slice(), &tail].concat();
        let rejection = verify_query(&query, &keys, NOW).err();
        prop_assert_eq!(rejection.as_ref().map(Rejection::label), Some("malformed"));
        let response = rejection.as_ref().and_then(Rejection::response).map(Message::from_vec);
        prop_assert!(
            matches!(&response, Some(Ok(m)) if m.response_code == ResponseCode::FormErr),
            "{:?}", response
        );
        let read = pending.read_answer(&[answer.as_slice(), &tail].concat(), NOW);
        prop_assert!(matches!(read, Err(ExchangeError::Malformed { .. })), "{:?}", read);
    }
}
