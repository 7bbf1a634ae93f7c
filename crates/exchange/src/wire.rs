//! What every other module shares, at the bottom of the crate: the fudge, the OPT record the
//! exchange sends, and RCODE mnemonics for messages.

use hickory_proto::op::{Edns, ResponseCode};

/// The fudge (seconds) the exchange signs with, and the most it accepts from a peer.
pub const FUDGE: u16 = 300;

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
