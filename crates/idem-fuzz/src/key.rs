//! The `key` target: `Idempotency-Key` header values.

use idem_core::{IdempotencyKey, KeyError, MAX_KEY_LEN};

/// Parses `data` as a key header value and checks the result against a reference written from
/// the key syntax of docs/http.md, Sending a key.
///
/// - A valid key is the reference's unquoted value, 1 to [`MAX_KEY_LEN`] printable ASCII
///   characters; written back as an sf-string (and as a bare key when it is one) it parses to
///   itself, with or without white space around it.
/// - An invalid value gives the error that names its fault: `Empty` and `TooLong` for a
///   well-formed value of the wrong length, `InvalidCharacter` with the byte found at the
///   position given, `List` and `Parameters` only with a `,` or `;` in the value.
///
/// # Panics
///
/// When one of these does not hold.
pub fn key(data: &[u8]) {
    let parsed = IdempotencyKey::parse_header(data);
    assert_eq!(
        IdempotencyKey::try_from(data),
        parsed,
        "TryFrom<&[u8]> and parse_header disagree"
    );
    if let Ok(text) = std::str::from_utf8(data) {
        assert_eq!(text.parse::<IdempotencyKey>(), parsed, "FromStr disagrees");
    }
    match (parsed, unquoted(data)) {
        (Ok(key), Some(expected)) => {
            assert_eq!(key.as_str(), expected, "not the unquoted value");
            check_valid(&key);
        }
        (Err(KeyError::Empty), Some(expected)) => assert_eq!(expected, "", "Empty for a key"),
        (Err(KeyError::TooLong { len }), Some(expected)) => {
            assert_eq!(len, expected.len(), "TooLong gives another length");
            assert!(len > MAX_KEY_LEN, "TooLong for {len} characters");
        }
        (Err(error), None) => check_malformed(data, &error),
        (parsed, expected) => {
            panic!("parsed {parsed:?}, but the syntax gives {expected:?} for {data:?}")
        }
    }
}

/// What a valid key must satisfy whatever the header value was.
fn check_valid(key: &IdempotencyKey) {
    let text = key.as_str();
    assert!(
        (1..=MAX_KEY_LEN).contains(&text.len()),
        "a key of {} characters",
        text.len()
    );
    assert!(
        text.bytes().all(|b| (0x20..=0x7e).contains(&b)),
        "a key with a byte outside printable ASCII"
    );
    assert_eq!(key.to_string(), text);

    let quoted = format!("\"{}\"", text.replace('\\', r"\\").replace('"', "\\\""));
    assert_eq!(
        quoted.parse::<IdempotencyKey>().as_ref(),
        Ok(key),
        "{quoted:?} is not the same key"
    );
    let padded = format!(" \t{quoted}\t ");
    assert_eq!(padded.parse::<IdempotencyKey>().as_ref(), Ok(key));
    if text.bytes().all(is_bare) {
        assert_eq!(text.parse::<IdempotencyKey>().as_ref(), Ok(key));
    }
}

/// What an error must satisfy for a value that is not a key of any length.
fn check_malformed(data: &[u8], error: &KeyError) {
    let trimmed = trim_ows(data);
    let quoted = trimmed.first() == Some(&b'"');
    match *error {
        KeyError::InvalidCharacter { byte, position } => {
            assert_eq!(data.get(position), Some(&byte), "{error:?} in {data:?}");
            let allowed = if quoted {
                // The opening quote is at position 0 of the trimmed value, never reported.
                (0x20..=0x7e).contains(&byte)
            } else {
                is_bare(byte)
            };
            assert!(!allowed, "{error:?} for an allowed byte in {data:?}");
        }
        KeyError::List => assert!(trimmed.contains(&b','), "List without a comma"),
        KeyError::Parameters => assert!(trimmed.contains(&b';'), "Parameters without a ';'"),
        KeyError::Unterminated | KeyError::TrailingCharacters => {
            assert!(quoted, "{error:?} for a bare value {data:?}");
        }
        KeyError::InvalidEscape => {
            assert!(quoted && trimmed.contains(&b'\\'), "{error:?} for {data:?}");
        }
        ref other => panic!("{other:?} for a malformed value {data:?}"),
    }
}

/// The key a header value holds by the syntax, of any length, or `None` when it is malformed.
///
/// Written from the syntax, independently of the parser: a bare key of visible ASCII but `"`,
/// `,` and `;`, or an sf-string of printable ASCII with `\"` and `\\` escapes, with spaces and
/// tabs around either.
fn unquoted(data: &[u8]) -> Option<String> {
    let value = trim_ows(data);
    let Some(inner) = value.strip_prefix(b"\"") else {
        return value
            .iter()
            .all(|&b| is_bare(b))
            .then(|| value.iter().map(|&b| char::from(b)).collect());
    };
    let inner = inner.strip_suffix(b"\"")?;
    let mut key = String::with_capacity(inner.len());
    let mut bytes = inner.iter();
    while let Some(&b) = bytes.next() {
        match b {
            b'\\' => match bytes.next() {
                Some(&escaped @ (b'"' | b'\\')) => key.push(char::from(escaped)),
                _ => return None,
            },
            b'"' => return None,
            0x20..=0x7e => key.push(char::from(b)),
            _ => return None,
        }
    }
    Some(key)
}

fn trim_ows(data: &[u8]) -> &[u8] {
    let is_ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = data.iter().position(|b| !is_ows(b)).unwrap_or(data.len());
    let end = data
        .iter()
        .rposition(|b| !is_ows(b))
        .map_or(start, |i| i + 1);
    &data[start..end]
}

fn is_bare(b: u8) -> bool {
    (0x21..=0x7e).contains(&b) && !matches!(b, b'"' | b',' | b';')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_reads_both_forms() {
        assert_eq!(unquoted(b" abc\t").as_deref(), Some("abc"));
        assert_eq!(unquoted(br#""a \"b\" \\""#).as_deref(), Some(r#"a "b" \"#));
        assert_eq!(unquoted(b"\"\"").as_deref(), Some(""));
        assert_eq!(unquoted(b"").as_deref(), Some(""));
        assert_eq!(unquoted(b"a b"), None);
        assert_eq!(unquoted(b"\"a\\\""), None);
        assert_eq!(unquoted(b"\"a\"b\""), None);
        assert_eq!(unquoted(b"\"a\\n\""), None);
    }

    #[test]
    fn accepts_the_edge_cases_of_the_syntax() {
        for value in [
            &b"a"[..],
            b"\"a b\"",
            b"\"\\\"\"",
            b"\"",
            b"\"\"",
            b"",
            b" \t ",
            b"a,b",
            b"\"a\";p=1",
            b"a ;p",
            b"\"a\" x",
            b"\xff",
            b"\"\xc3\xa9\"",
            &[b'k'; MAX_KEY_LEN],
            &[b'k'; MAX_KEY_LEN + 1],
        ] {
            key(value);
        }
    }
}
