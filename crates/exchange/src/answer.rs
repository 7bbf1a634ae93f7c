//! What a peer answers for a group ([`PeerAnswer`]) and one healthy value as a TXT record's
//! character-strings: `[TYPE, value]`, the value split into further strings of at most 255
//! bytes (on character boundaries) when longer, which the reader joins again and parses into
//! a [`PeerValue`] (the table's value, typed): the text is read here and nowhere downstream.

use healthroute_table::PeerValue;
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

/// The TXT data carrying `value`; `None` if a peer could not read it back (a value built
/// by hand whose text does not parse as its type).
pub(crate) fn to_txt(value: &PeerValue) -> Option<TXT> {
    if !value.readable() {
        return None;
    }
    let mut strings = vec![value.record_type().as_str().to_owned()];
    strings.extend(split(&value.text()));
    Some(TXT::new(strings))
}

/// The value a TXT record carries: `Ok(None)` for one that cannot be used (a record type this
/// version does not serve, a newer peer's; a value that does not parse as its type), which the
/// reader skips while it keeps the rest, as the compiler did with text; an error for a record
/// that is not `[TYPE, value]` at all, which makes the whole answer malformed.
pub(crate) fn from_txt(txt: &TXT) -> Result<Option<PeerValue>, String> {
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
    let value =
        String::from_utf8(value.concat()).map_err(|_| "the value is not UTF-8 text".to_owned())?;
    Ok(PeerValue::parse(&String::from_utf8_lossy(record_type), &value).ok())
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
    use healthroute_table::Value;

    #[test]
    fn values_round_trip_through_txt_including_long_and_empty_ones() -> Result<(), String> {
        let long = "é".repeat(300) + "x";
        for (record_type, text) in [
            ("A", "192.0.2.1"),
            ("AAAA", "2001:db8::1"),
            ("CNAME", "api.example.com."),
            ("TXT", r#""v=spf1 -all" "second""#),
            ("TXT", long.as_str()),
            ("TXT", ""),
        ] {
            let value = PeerValue::parse(record_type, text).map_err(|e| e.to_string())?;
            let txt = to_txt(&value).ok_or("no TXT")?;
            assert!(txt.txt_data.iter().all(|s| s.len() <= MAX_STRING));
            assert_eq!(from_txt(&txt)?, Some(value));
        }
        Ok(())
    }

    #[test]
    fn txt_without_type_and_value_is_refused() {
        for strings in [vec![], vec!["A"]] {
            let txt = TXT::new(strings.into_iter().map(String::from).collect());
            assert!(from_txt(&txt).is_err());
        }
        let txt = TXT::new(vec!["not a type".into(), "x".into()]);
        assert!(from_txt(&txt).is_err());
        let txt = TXT::from_bytes(vec![b"A", &[0xff, 0xfe]]);
        assert!(from_txt(&txt).is_err());
        assert!(to_txt(&PeerValue::from(Value::Txt("\"unclosed".into()))).is_none());
    }

    // SEM-X6: a value of a type this version serves is parsed as such; one that does not
    // parse, or of a type it does not serve (a newer peer's), is passed over, and the rest of
    // the answer is used.
    #[test]
    fn values_are_parsed_as_their_type_and_unusable_ones_passed_over() {
        let txt = |t: &str, v: &str| TXT::new(vec![t.into(), v.into()]);
        assert_eq!(
            from_txt(&txt("A", "192.0.2.1")),
            Ok(Some(PeerValue::from(Value::A(
                "192.0.2.1".parse().expect("ip")
            ))))
        );
        assert_eq!(from_txt(&txt("A", "192.0.2.300")), Ok(None));
        assert_eq!(from_txt(&txt("MX", "10 mail.example.com.")), Ok(None));
    }
}
