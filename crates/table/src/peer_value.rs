//! A value as it leaves one cluster for another (SEMANTICS X6) and as a Peer check's status
//! shows it (X9): a [`Value`] of the table, which knows its record type.
//!
//! ```text
//!  peer's table Value ─▶ exchange TXT [TYPE, value] ─▶ PeerValue (parsed once, by the reader)
//!     ─▶ checker's view ─▶ HealthCheck status `TYPE value` (this type's serde form)
//!     ─▶ compiler: the values of the group's record type
//! ```
//!
//! Its text form is `TYPE value`: the record type's name, one space, and the value as a
//! RecordGroup writes it (a TXT value as written, quotes included), the form the status has
//! always held. Text is read once, where it enters (the exchange reader, a status read back),
//! and never split apart again downstream.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Error, RecordType, Value};

/// One value a peer cluster answers for a group, with its record type.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerValue(Value);

impl PeerValue {
    /// The value `text` of `record_type` (the two parts of the exchange's TXT record), read
    /// as a RecordGroup's value is (`Value::parse`).
    pub fn parse(record_type: &str, text: &str) -> Result<Self, Error> {
        let rtype = RecordType::from_str(record_type)?;
        Value::parse(rtype, text).map(PeerValue)
    }

    pub fn value(&self) -> &Value {
        &self.0
    }

    pub fn record_type(&self) -> RecordType {
        self.0.record_type()
    }

    /// The value as a RecordGroup writes it, which [`PeerValue::parse`] reads back (a TXT
    /// value as written; `Value`'s `Display` quotes it).
    pub fn text(&self) -> Cow<'_, str> {
        match &self.0 {
            Value::Txt(text) => Cow::Borrowed(text),
            other => Cow::Owned(other.to_string()),
        }
    }

    /// Whether a peer reads this value back as it is: always for a value that was parsed; a
    /// `Value` built by hand (a TXT text that does not parse, a name not normalized) may not.
    pub fn readable(&self) -> bool {
        Value::parse(self.record_type(), &self.text()).as_ref() == Ok(&self.0)
    }

    pub fn into_value(self) -> Value {
        self.0
    }
}

impl From<Value> for PeerValue {
    fn from(value: Value) -> Self {
        PeerValue(value)
    }
}

/// `TYPE value`.
impl fmt::Display for PeerValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.record_type(), self.text())
    }
}

/// Reads `TYPE value` back; the type is the text before the first space.
impl FromStr for PeerValue {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (rtype, text) = s
            .split_once(' ')
            .ok_or_else(|| Error::PeerValueForm(s.to_owned()))?;
        PeerValue::parse(rtype, text)
    }
}

impl Serialize for PeerValue {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PeerValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = Cow::<str>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A list of `TYPE value` texts read back leniently: an entry that does not parse (written by
/// an older or a broken writer) is left out, so one bad entry never makes the whole object
/// unreadable; the compiler never used such an entry.
pub fn deserialize_lenient<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<PeerValue>, D::Error> {
    let texts = Vec::<Cow<'de, str>>::deserialize(d)?;
    Ok(texts.iter().filter_map(|t| t.parse().ok()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    // SEM-X6: every value a group can answer goes out as `TYPE value` and comes back the same.
    #[test]
    fn peer_values_round_trip_through_their_text() -> Result<(), Error> {
        for text in [
            "A 192.0.2.1",
            "AAAA 2001:db8::1",
            "CNAME api.eu-west.example.com.",
            r#"TXT "v=spf1 -all" "second""#,
            "TXT plain text with spaces",
            "TXT ",
        ] {
            let value: PeerValue = text.parse()?;
            assert_eq!(value.to_string(), text);
            assert!(value.readable(), "{text}");
            let json = serde_json::to_string(&value).map_err(|e| Error::Unreadable {
                what: "json",
                reason: e.to_string(),
            })?;
            assert_eq!(json, serde_json::to_string(text).unwrap_or_default());
            assert_eq!(serde_json::from_str::<PeerValue>(&json).ok(), Some(value));
        }
        // The value is parsed as a RecordGroup's: names are normalized.
        assert_eq!(
            "CNAME API.Example.com".parse::<PeerValue>()?.to_string(),
            "CNAME api.example.com."
        );
        Ok(())
    }

    // SEM-X6: text that is not `TYPE value` of a known type is refused, saying why.
    #[test]
    fn malformed_peer_values_are_refused_with_a_clear_error() {
        let err = |text: &str| text.parse::<PeerValue>().err().map(|e| e.to_string());
        assert_eq!(
            err("192.0.2.1"),
            Some(
                "\"192.0.2.1\" is not `TYPE value` (a record type, a space, then the value)".into()
            )
        );
        assert_eq!(
            err("A not-an-address"),
            Some("\"not-an-address\" is not an IPv4 address".into())
        );
        assert_eq!(
            err("MX 10 mail.example.com."),
            Some("unsupported record type \"MX\" (A, AAAA, CNAME, TXT)".into())
        );
        assert!(err(r#"TXT "unclosed"#).is_some());
        // A status entry that does not parse is left out, the others kept.
        let mut d = serde_json::Deserializer::from_str(r#"["A 192.0.2.1", "garbage", "A x"]"#);
        let read = deserialize_lenient(&mut d).unwrap_or_default();
        assert_eq!(read.len(), 1);
        assert_eq!(read[0].to_string(), "A 192.0.2.1");
    }

    #[test]
    fn a_value_built_by_hand_that_a_peer_cannot_read_is_told() {
        assert!(!PeerValue::from(Value::Txt("\"unclosed".into())).readable());
        assert!(!PeerValue::from(Value::Cname("Not.Normal".into())).readable());
    }
}
