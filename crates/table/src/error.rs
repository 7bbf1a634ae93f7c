//! What can be wrong with a value, a name or a published table.

use crate::GroupKey;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("unsupported record type {0:?} (A, AAAA, CNAME, TXT)")]
    UnsupportedType(String),
    #[error("{0:?} is not `TYPE value` (a record type, a space, then the value)")]
    PeerValueForm(String),
    #[error("{raw:?} is not an {family} address")]
    NotAnAddress { raw: String, family: &'static str },
    #[error("{0:?} is not a DNS name")]
    EmptyName(String),
    #[error("{0:?} is longer than 253 characters")]
    NameTooLong(String),
    #[error("{name:?} is not a DNS name (label {label:?})")]
    BadLabel { name: String, label: String },
    #[error("TXT value of {0} bytes is over 4096")]
    TxtTooLong(usize),
    #[error("TXT value {value:?}: {problem}")]
    Txt { value: String, problem: TxtProblem },
    #[error(
        "RecordGroup {group} alone encodes to {kib} KiB; a table shard (one ConfigMap) holds at most {max_kib} KiB"
    )]
    GroupTooLarge {
        group: GroupKey,
        kib: usize,
        max_kib: usize,
    },
    #[error("table shard {index} is {kib} KiB, over the {max_kib} KiB a ConfigMap can hold")]
    ShardTooLarge {
        index: usize,
        kib: usize,
        max_kib: usize,
    },
    #[error("the table's shard count did not settle")]
    ShardCountUnsettled,
    #[error("{what}: {reason}")]
    Unreadable { what: &'static str, reason: String },
    /// A complete published table whose generation is not above the one the reader already
    /// assembled: a second writer, or an older table written late. It is not served (P4).
    #[error(
        "the published table has generation {generation} with new content, but generation {serving} is already served; kept serving it"
    )]
    NotNewer { generation: u64, serving: u64 },
}

/// Why a quoted TXT value is not a list of character-strings (D9).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxtProblem {
    #[error("text outside quotes ({0:?}); quote every part, or none")]
    OutsideQuotes(char),
    #[error("\\DDD needs three digits")]
    ShortEscape,
    #[error("\\{0} is not a byte")]
    NotAByte(u32),
    #[error("ends inside an escape")]
    EndsInEscape,
    #[error("a quote is not closed")]
    Unclosed,
    #[error("a quoted string of {0} bytes is over 255; split it into several")]
    TooLong(usize),
    #[error("quoted strings must be separated by spaces")]
    NotSeparated,
}
