//! What every other module shares, at the bottom of the crate: the fudge, the OPT record the
//! exchange sends, RCODE mnemonics for messages, and the strict reading of a received message
//! that both the server and the client start with.

use hickory_proto::{
    op::{Edns, Message, ResponseCode},
    rr::RecordType,
};

/// The fudge (seconds) the exchange signs with, and the most it accepts from a peer.
pub const FUDGE: u16 = 300;

/// A DNS header's length; it ends with the four section counts (RFC 1035 section 4.1.1).
pub(crate) const HEADER_LEN: usize = 12;

/// The UDP payload size the exchange advertises in its OPT records (the DNS flag day 2020
/// figure, which avoids IP fragmentation).
pub(crate) const EDNS_PAYLOAD: u16 = 1232;

/// The OPT record of the exchange's messages.
pub(crate) fn exchange_edns() -> Edns {
    let mut edns = Edns::new();
    edns.set_max_payload(EDNS_PAYLOAD);
    edns
}

/// An RCODE's mnemonic as `dig` prints it (`SERVFAIL`), or `RCODE n`.
pub(crate) fn rcode_name(rcode: ResponseCode) -> String {
    let code = u16::from(rcode);
    let name = match code {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        6 => "YXDOMAIN",
        7 => "YXRRSET",
        8 => "NXRRSET",
        9 => "NOTAUTH",
        10 => "NOTZONE",
        16 => "BADVERS",
        _ => return format!("RCODE {code}"),
    };
    name.to_owned()
}

/// A received message, decoded, with what hickory's decoder lets through refused
/// ([`check_tsig_last`]). The error is the reason, for a FORMERR's log line or a health
/// check's status.
pub(crate) fn read_message(bytes: &[u8]) -> Result<Message, String> {
    let message = Message::from_vec(bytes).map_err(|e| e.to_string())?;
    check_tsig_last(bytes)?;
    Ok(message)
}

/// RFC 8945 section 5.1 on the wire: a TSIG RR is the only one of the message and its last
/// record, in the additional section, and the message ends where its last record does.
/// hickory's decoder stops after the counted records whatever follows them, and a MAC covers
/// nothing after its TSIG RR, so this walks the records itself by their lengths alone: names
/// are skipped, never decoded or followed, and nothing is allocated unless it fails.
pub(crate) fn check_tsig_last(message: &[u8]) -> Result<(), String> {
    let count = |at| {
        u16_at(message, at)
            .map(usize::from)
            .ok_or_else(|| "shorter than a DNS header".to_owned())
    };
    let questions = count(4)?;
    let answers = count(6)?;
    let authorities = count(8)?;
    let records = answers + authorities + count(10)?;
    let overrun = || "a question or record runs past the end of the message".to_owned();
    let mut at = HEADER_LEN;
    for _ in 0..questions {
        // QTYPE and QCLASS follow the name.
        at = skip_name(message, at).ok_or_else(overrun)? + 4;
    }
    let mut last_is_tsig = false;
    for index in 0..records {
        // TYPE, CLASS, TTL and RDLENGTH follow the name, then RDATA.
        let fields = skip_name(message, at).ok_or_else(overrun)?;
        let (Some(rtype), Some(rdlength)) = (u16_at(message, fields), u16_at(message, fields + 8))
        else {
            return Err(overrun());
        };
        at = fields + 10 + usize::from(rdlength);
        last_is_tsig = rtype == u16::from(RecordType::TSIG);
        if !last_is_tsig {
            continue;
        }
        if index < answers + authorities {
            let section = if index < answers {
                "answer"
            } else {
                "authority"
            };
            return Err(format!(
                "a TSIG record in the {section} section: it must be the last additional record (RFC 8945 5.1)"
            ));
        }
        if index + 1 < records {
            return Err("a record after the TSIG record, which must be last (RFC 8945 5.1)".into());
        }
    }
    let Some(after) = message.len().checked_sub(at) else {
        return Err(overrun());
    };
    let plural = if after == 1 { "" } else { "s" };
    match after {
        0 => Ok(()),
        _ if last_is_tsig => Err(format!(
            "{after} byte{plural} after the TSIG record, which must end the message (RFC 8945 5.1)"
        )),
        _ => Err(format!("{after} byte{plural} after the last record")),
    }
}

/// Where the name at `at` ends: after its root label or its compression pointer (RFC 1035
/// section 4.1.4). `None` when it runs past the end or uses a retired label type.
fn skip_name(message: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *message.get(at)?;
        match len {
            0 => return Some(at + 1),
            1..=0x3f => at += 1 + usize::from(len),
            0xc0..=0xff => return message.get(at + 1).map(|_| at + 2),
            _ => return None,
        }
    }
}

/// The big-endian `u16` at `at`, if the message is that long.
fn u16_at(message: &[u8], at: usize) -> Option<u16> {
    let bytes = message.get(at..at + 2)?;
    Some(u16::from_be_bytes([bytes[0], bytes[1]]))
}
