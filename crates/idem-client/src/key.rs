//! The key of an operation: made up or given, and written into its header.

use http::HeaderValue;
use idem_core::{IdempotencyKey, KeyError};

/// A fresh key for a new operation: a random UUID (version 4), which no other client picks.
pub(crate) fn generate() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Checks `key` — the key itself, not a header value — and writes it as a header value: bare
/// (`order-42`) when every character allows it, else an RFC 8941 string (`"order 42"`), so that
/// any key of 1 to 255 printable ASCII characters can be sent.
pub(crate) fn encode(key: &str) -> Result<(IdempotencyKey, HeaderValue), KeyError> {
    if let Some((position, &byte)) = key
        .as_bytes()
        .iter()
        .enumerate()
        .find(|(_, byte)| !(0x20..=0x7e).contains(*byte))
    {
        return Err(KeyError::InvalidCharacter { byte, position });
    }
    let value = if key.bytes().all(is_bare) {
        key.to_owned()
    } else {
        let mut quoted = String::with_capacity(key.len() + 2);
        quoted.push('"');
        for c in key.chars() {
            if matches!(c, '"' | '\\') {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        quoted
    };
    // The empty key and the length limit are idem-core's to judge.
    let parsed = IdempotencyKey::parse_header(value.as_bytes())?;
    debug_assert_eq!(parsed.as_str(), key);
    let header = HeaderValue::try_from(value).expect("printable ASCII is a valid header value");
    Ok((parsed, header))
}

/// Whether `byte` may appear in a bare key: visible ASCII but `"`, `,` and `;`.
fn is_bare(byte: u8) -> bool {
    matches!(byte, 0x21..=0x7e) && !matches!(byte, b'"' | b',' | b';')
}

#[cfg(test)]
mod tests {
    use idem_core::MAX_KEY_LEN;

    use super::*;

    fn header(key: &str) -> Result<String, KeyError> {
        encode(key).map(|(parsed, value)| {
            assert_eq!(parsed.as_str(), key);
            value.to_str().unwrap().to_owned()
        })
    }

    #[test]
    fn generated_keys_are_fresh_uuid_v4s_sent_bare() {
        let (a, b) = (generate(), generate());
        assert_ne!(a, b);
        assert_eq!(uuid::Uuid::parse_str(&a).unwrap().get_version_num(), 4);
        assert_eq!(header(&a), Ok(a.clone()));
    }

    #[test]
    fn the_shared_keys() {
        for case in crate::cases::shared_cases()["keys"].as_array().unwrap() {
            let key = case["key"].as_str().unwrap();
            match case["header"].as_str() {
                Some(expected) => assert_eq!(header(key), Ok(expected.to_owned()), "{key:?}"),
                None => assert!(header(key).is_err(), "{key:?}"),
            }
        }
    }

    #[test]
    fn the_length_limit_is_the_key_s() {
        let max = "k".repeat(MAX_KEY_LEN);
        assert_eq!(header(&max), Ok(max.clone()));
        let quoted_max = " ".repeat(MAX_KEY_LEN);
        assert_eq!(header(&quoted_max), Ok(format!("\"{quoted_max}\"")));
        assert_eq!(
            header(&"k".repeat(MAX_KEY_LEN + 1)),
            Err(KeyError::TooLong {
                len: MAX_KEY_LEN + 1
            })
        );
    }

    #[test]
    fn empty_keys_and_unprintable_characters_are_refused() {
        assert_eq!(header(""), Err(KeyError::Empty));
        assert_eq!(
            header("a\nb"),
            Err(KeyError::InvalidCharacter {
                byte: b'\n',
                position: 1
            })
        );
        assert_eq!(
            header("é"),
            Err(KeyError::InvalidCharacter {
                byte: 0xc3,
                position: 0
            })
        );
        assert_eq!(
            header("k\x7f"),
            Err(KeyError::InvalidCharacter {
                byte: 0x7f,
                position: 1
            })
        );
    }
}
