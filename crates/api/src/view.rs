//! What a checker reports of one check: the names both the checkers (in the resolvers and the
//! operator) and the compiler read.

use crate::PeerValue;

/// In a view's message: the checker refused to probe the target (its policy denies the
/// address, or the request would carry unsafe bytes; SEMANTICS H12).
pub const DENIED_BY_POLICY: &str = "denied by checker policy";

/// One checker's thresholded view of one check.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckerView {
    pub checker: String,
    pub zone: Option<String>,
    pub healthy: bool,
    /// The last observation's reason ("200 OK in 3 ms", "connect refused").
    pub message: Option<String>,
    /// A Peer check's values as the peer last answered them (SEMANTICS X4), parsed where
    /// they entered (the exchange reader, a status read back).
    pub values: Vec<PeerValue>,
}
