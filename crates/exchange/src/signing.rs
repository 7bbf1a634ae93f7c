//! TSIG over encoded messages (RFC 8945 section 4.3): append a TSIG RR, signed or not, to a
//! message encoded without one, and find the data a received TSIG's MAC covers. Both the
//! query and the answer go through here, so the two sides compute the MAC the same way: over
//! the exact bytes sent (with the request MAC first for a response), then the TSIG variables.
//!
//! hickory's `TSigner::verify_message_byte` is not used: it subtracts the fudge from a
//! received time without a check, which a hostile message turns into an overflow.

use hickory_proto::{
    ProtoError,
    rr::{
        Name,
        rdata::tsig::{TSIG, TsigAlgorithm, TsigError, make_tsig_record, signed_bitmessage_to_buf},
    },
    serialize::binary::{BinEncodable, BinEncoder},
};

use crate::{key::TsigKey, wire::FUDGE};

/// The TSIG fields of a message about to be signed (its MAC is computed later).
pub(crate) fn stub(
    algorithm: TsigAlgorithm,
    time: u64,
    original_id: u16,
    error: Option<TsigError>,
    other: Vec<u8>,
) -> TSIG {
    TSIG::new(
        algorithm,
        time,
        FUDGE,
        Vec::new(),
        original_id,
        error,
        other,
    )
}

/// `message` (encoded without TSIG) with `tsig` signed by `key` appended, and the MAC. A
/// response passes the request's MAC, which the new MAC then covers.
pub(crate) fn sign(
    message: Vec<u8>,
    key: &TsigKey,
    request_mac: Option<&[u8]>,
    tsig: TSIG,
) -> Result<(Vec<u8>, Vec<u8>), ProtoError> {
    let mut covered = Vec::with_capacity(message.len() + 128);
    if let Some(mac) = request_mac {
        let len = u16::try_from(mac.len()).map_err(|_| ProtoError::from("request MAC too long"))?;
        covered.extend_from_slice(&len.to_be_bytes());
        covered.extend_from_slice(mac);
    }
    covered.extend_from_slice(&message);
    let mut variables = Vec::new();
    tsig.emit_tsig_for_mac(&mut BinEncoder::new(&mut variables), key.name())?;
    covered.extend_from_slice(&variables);
    let mac = key
        .signer()
        .sign(&covered)
        .map_err(|e| ProtoError::from(e.to_string()))?;
    let signed = append(message, key.name().clone(), tsig.set_mac(mac.clone()))?;
    Ok((signed, mac))
}

/// `message` (encoded without TSIG) with `tsig` appended as the last additional record, as it
/// is (unsigned when its MAC is empty).
pub(crate) fn append(
    mut message: Vec<u8>,
    key_name: Name,
    tsig: TSIG,
) -> Result<Vec<u8>, ProtoError> {
    let count = message
        .get(10..12)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .ok_or_else(|| ProtoError::from("message shorter than a header"))?;
    let count = count
        .checked_add(1)
        .ok_or_else(|| ProtoError::from("no room for a TSIG record"))?;
    message[10..12].copy_from_slice(&count.to_be_bytes());
    // A fresh encoder: nothing in the TSIG RR is compressed (RFC 8945 section 4.2 forbids it
    // for the algorithm name).
    let mut record = Vec::new();
    make_tsig_record(key_name, tsig)
        .into_record_of_rdata()
        .emit(&mut BinEncoder::new(&mut record))?;
    message.extend_from_slice(&record);
    Ok(message)
}

/// The data a received message's TSIG MAC covers, and its TSIG RR's key name and fields.
/// `message` must already have been read by [`crate::wire::read_message`] with a TSIG:
/// hickory's function adds the header's section counts unchecked, which a successful parse
/// keeps small, and covers only what comes before the TSIG RR, which that read checks is
/// last.
pub(crate) fn covered_data(
    message: &[u8],
    request_mac: Option<&[u8]>,
) -> Result<(Vec<u8>, Name, TSIG), ProtoError> {
    let (covered, record) = signed_bitmessage_to_buf(message, request_mac, true)?;
    let record = *record;
    Ok((covered, record.name, record.data))
}

/// Whether `mac` is `key`'s MAC of `covered`, in constant time. A truncated MAC (RFC 8945
/// section 5.2.2.1) never verifies: the exchange has no reason to accept one.
pub(crate) fn verifies(key: &TsigKey, covered: &[u8], mac: &[u8]) -> bool {
    key.signer().verify(covered, mac).is_ok()
}

/// Whether a time signed is within the fudge of `now`; the fudge is the message's, capped at
/// [`FUDGE`] so that a signer cannot widen the replay window.
pub(crate) fn within_fudge(signed: u64, fudge: u16, now: u64) -> bool {
    signed.abs_diff(now) <= u64::from(fudge.min(FUDGE))
}
