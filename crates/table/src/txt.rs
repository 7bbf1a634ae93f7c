//! TXT values as users write them (SEMANTICS D9), turned into RFC 1035 character-strings.
//!
//! - A value that starts with `"` is one or more quoted character-strings, as in a zone file
//!   or Route 53: `"v=spf1 include:_spf.example.com ~all"`, `"part one" "part two"`. Inside
//!   the quotes, `\"` is a quote, `\\` a backslash and `\DDD` the byte with that decimal
//!   value; each string holds at most 255 bytes.
//! - Any other value is one text, split into strings of at most 255 bytes (on character
//!   boundaries).

use crate::error::{Error, TxtProblem};

/// The character-strings of a TXT value, or why it cannot be one.
pub fn character_strings(value: &str) -> Result<Vec<Vec<u8>>, Error> {
    let fail = |problem| Error::Txt {
        value: value.to_owned(),
        problem,
    };
    if !value.trim_start().starts_with('"') {
        return Ok(split_plain(value));
    }
    let mut out = Vec::new();
    let mut chars = value.trim().chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_whitespace() {
            continue;
        }
        if c != '"' {
            return Err(fail(TxtProblem::OutsideQuotes(c)));
        }
        let mut s: Vec<u8> = Vec::new();
        let mut closed = false;
        while let Some(c) = chars.next() {
            match c {
                '"' => {
                    closed = true;
                    break;
                }
                '\\' => match chars.next() {
                    Some(d) if d.is_ascii_digit() => {
                        let mut n = d.to_digit(10).unwrap_or(0);
                        for _ in 0..2 {
                            match chars.next_if(|c| c.is_ascii_digit()) {
                                Some(d) => n = n * 10 + d.to_digit(10).unwrap_or(0),
                                None => {
                                    return Err(fail(TxtProblem::ShortEscape));
                                }
                            }
                        }
                        let byte = u8::try_from(n).map_err(|_| fail(TxtProblem::NotAByte(n)))?;
                        s.push(byte);
                    }
                    Some(e) => {
                        let mut buf = [0u8; 4];
                        s.extend_from_slice(e.encode_utf8(&mut buf).as_bytes());
                    }
                    None => return Err(fail(TxtProblem::EndsInEscape)),
                },
                c => {
                    let mut buf = [0u8; 4];
                    s.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
        if !closed {
            return Err(fail(TxtProblem::Unclosed));
        }
        if s.len() > 255 {
            return Err(fail(TxtProblem::TooLong(s.len())));
        }
        out.push(s);
        if chars.peek().is_some_and(|c| !c.is_whitespace()) {
            return Err(fail(TxtProblem::NotSeparated));
        }
    }
    Ok(out)
}

/// One text in strings of at most 255 bytes, cut on character boundaries.
fn split_plain(text: &str) -> Vec<Vec<u8>> {
    let mut out = vec![Vec::new()];
    for c in text.chars() {
        if out.last().is_some_and(|s| s.len() + c.len_utf8() > 255) {
            out.push(Vec::new());
        }
        if let Some(last) = out.last_mut() {
            let mut buf = [0u8; 4];
            last.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &str) -> Vec<String> {
        character_strings(v)
            .expect("valid")
            .into_iter()
            .map(|s| String::from_utf8_lossy(&s).into_owned())
            .collect()
    }

    // SEM-D9: quoted values are character-strings, as zone files and Route 53 write them.
    #[test]
    fn quoted_values_are_character_strings() {
        assert_eq!(strings(r#""v=spf1 -all""#), ["v=spf1 -all"]);
        assert_eq!(
            strings(r#""part one" "part two""#),
            ["part one", "part two"]
        );
        assert_eq!(
            strings(r#"  "say \"hi\"" "a\\b" "\065""#),
            [r#"say "hi""#, r"a\b", "A"]
        );
        assert_eq!(strings(r#""""#), [""], "an empty string");
    }

    // SEM-D9: an unquoted value is one text, quotes and all, split at 255 bytes.
    #[test]
    fn plain_values_are_split_at_255_bytes() {
        assert_eq!(strings("v=spf1 -all"), ["v=spf1 -all"]);
        assert_eq!(strings(r#"a "quoted" word"#), [r#"a "quoted" word"#]);
        let long = "x".repeat(600);
        let parts = strings(&long);
        assert_eq!(
            parts.iter().map(String::len).collect::<Vec<_>>(),
            [255, 255, 90]
        );
        let wide = "é".repeat(200); // 400 bytes, never cut inside a character
        assert!(
            strings(&wide)
                .iter()
                .all(|s| s.len() <= 255 && s.len() % 2 == 0)
        );
    }

    // SEM-D9: malformed quoting is an error naming the problem.
    #[test]
    fn malformed_quoting_is_an_error() {
        for (bad, why) in [
            (r#""open"#, "not closed"),
            (r#""a" b"#, "outside quotes"),
            (r#""a""b""#, "separated by spaces"),
            (r#""\25""#, "three digits"),
            (r#""\300""#, "not a byte"),
        ] {
            let e = character_strings(bad).expect_err(bad);
            assert!(e.to_string().contains(why), "{bad}: {e}");
        }
        let e = character_strings(&format!("\"{}\"", "x".repeat(256))).expect_err("too long");
        assert!(e.to_string().contains("over 255"), "{e}");
    }
}
