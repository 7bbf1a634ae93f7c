//! What a peer answers for a group ([`PeerAnswer`]) and one healthy value as a TXT record's
//! character-strings: `[TYPE, value]`, the value split into further strings of at most 255
//! bytes (on character boundaries) when longer, which the reader joins again.

use hickory_proto::rr::rdata::TXT;

/// The longest character-string (its length is one byte).
const MAX_STRING: usize = 255;

/// What a group answers as healthy in the peer cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerAnswer {
    /// The values the group currently answers. Read back sorted and without duplicates (an
    /// RRset has no order); an empty list is sent as, and read back as,
    /// [`PeerAnswer::NothingHealthy`].
    Healthy(Vec<PeerValue>),
    /// The group exists but answers only its last resort, or nothing (NOERROR, no records).
    NothingHealthy,
    /// No such group in the peer cluster (NXDOMAIN).
    NoSuchGroup,
}

/// One value a group answers: its record type's name and the value's presentation text.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerValue {
    /// `A`, `AAAA`, `CNAME` or `TXT`: at most 255 bytes of ASCII letters and digits.
    pub record_type: String,
    /// The value as a zone file writes it (`192.0.2.1`, `api.example.com.`, `"v=spf1 -all"`).
    pub value: String,
}

impl PeerValue {
    /// A value of `record_type`.
    pub fn new(record_type: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            record_type: record_type.into(),
            value: value.into(),
        }
    }

    /// The TXT data carrying this value; `None` if the type's name is not one a peer could
    /// read back (empty, too long, or not letters and digits).
    pub(crate) fn to_txt(&self) -> Option<TXT> {
        if !is_type_name(self.record_type.as_bytes()) {
            return None;
        }
        let mut strings = vec![self.record_type.clone()];
        strings.extend(split(&self.value));
        Some(TXT::new(strings))
    }

    /// The value a TXT record carries, or why it carries none.
    pub(crate) fn from_txt(txt: &TXT) -> Result<Self, String> {
        let (record_type, value) = match &*txt.txt_data {
            [record_type, value @ ..] if !value.is_empty() => (record_type, value),
            strings => {
                return Err(format!(
                    "{} character-strings, it needs a type and a value",
                    strings.len()
                ));
            }
        };
        if !is_type_name(record_type) {
            return Err(format!(
                "record type {:?} is not a type name",
                String::from_utf8_lossy(record_type)
            ));
        }
        let value = String::from_utf8(value.concat())
            .map_err(|_| "the value is not UTF-8 text".to_owned())?;
        Ok(Self {
            record_type: String::from_utf8_lossy(record_type).into_owned(),
            value,
        })
    }
}

/// A record type's mnemonic: 1 to 255 ASCII letters and digits (`A`, `AAAA`, `TYPE65534`).
fn is_type_name(name: &[u8]) -> bool {
    (1..=MAX_STRING).contains(&name.len()) && name.iter().all(u8::is_ascii_alphanumeric)
}

/// `text` in strings of at most 255 bytes cut on character boundaries; one empty string for
/// an empty text, so that the value is always there.
fn split(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for c in text.chars() {
        if out
            .last()
            .is_some_and(|s| s.len() + c.len_utf8() > MAX_STRING)
        {
            out.push(String::new());
        }
        if let Some(s) = out.last_mut() {
            s.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_through_txt_including_long_and_empty_ones() -> Result<(), String> {
        let long = "é".repeat(300) + "x";
        for value in [
            PeerValue::new("A", "192.0.2.1"),
            PeerValue::new("AAAA", "2001:db8::1"),
            PeerValue::new("CNAME", "api.example.com."),
            PeerValue::new("TXT", r#""v=spf1 -all" "second""#),
            PeerValue::new("TXT", long.as_str()),
            PeerValue::new("TXT", ""),
        ] {
            let txt = value.to_txt().ok_or("no TXT")?;
            assert!(txt.txt_data.iter().all(|s| s.len() <= MAX_STRING));
            assert_eq!(PeerValue::from_txt(&txt)?, value);
        }
        Ok(())
    }

    #[test]
    fn txt_without_type_and_value_is_refused() {
        for strings in [vec![], vec!["A"]] {
            let txt = TXT::new(strings.into_iter().map(String::from).collect());
            assert!(PeerValue::from_txt(&txt).is_err());
        }
        let txt = TXT::new(vec!["not a type".into(), "x".into()]);
        assert!(PeerValue::from_txt(&txt).is_err());
        let txt = TXT::from_bytes(vec![b"A", &[0xff, 0xfe]]);
        assert!(PeerValue::from_txt(&txt).is_err());
        assert!(PeerValue::new("", "x").to_txt().is_none());
    }
}
