//! The idempotency key: a validated newtype parsed from a header value.

use std::{fmt, str::FromStr, sync::LazyLock};

use blake3::hazmat::{ContextKey, HasherExt, hash_derive_key_context};

/// The longest key accepted, in characters of the unquoted value.
pub const MAX_KEY_LEN: usize = 255;

/// The header that carries the key, as the IETF draft spells it: the HTTP layer's and the
/// gateway's default, and the header idem's client sends.
pub const KEY_HEADER: &str = "Idempotency-Key";

/// A validated idempotency key.
///
/// Parsed from the value of an `Idempotency-Key` header, in either of two forms:
///
/// - an RFC 8941 sf-string: `"8e03978e-40d5"`, quoted, printable ASCII including space, with `\"`
///   and `\\` escapes;
/// - a bare key of visible ASCII (0x21–0x7E) other than `"`, `,` and `;` (Stripe style: a UUID is a
///   bare key even though it starts with a digit, which RFC 8941's sf-token would refuse).
///
/// The key is the unquoted value, so `"abc"` and `abc` are the same key. It is 1 to
/// [`MAX_KEY_LEN`] characters long. Leading and trailing spaces or tabs (HTTP's optional white
/// space) are ignored; parameters (`"k";p=1`) and lists (`a, b`) are refused.
///
/// # Examples
///
/// ```
/// use idem_core::{IdempotencyKey, KeyError};
///
/// let quoted: IdempotencyKey = r#""order \"42\"""#.parse()?;
/// assert_eq!(quoted.as_str(), r#"order "42""#);
///
/// let bare: IdempotencyKey = "7f8a9b3c-1d2e-4f5a-8b6c-7d8e9f0a1b2c".parse()?;
/// assert_eq!(bare.as_str(), "7f8a9b3c-1d2e-4f5a-8b6c-7d8e9f0a1b2c");
/// assert_eq!("abc".parse::<IdempotencyKey>()?, r#""abc""#.parse()?);
///
/// assert_eq!("a, b".parse::<IdempotencyKey>(), Err(KeyError::List));
/// # Ok::<(), KeyError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(Box<str>);

/// Why a header value is not a valid idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The value is empty (or `""`).
    #[error("the idempotency key is empty")]
    Empty,
    /// The unquoted value is longer than [`MAX_KEY_LEN`] characters.
    #[error("the idempotency key is {len} characters long; at most {MAX_KEY_LEN} are allowed")]
    TooLong {
        /// Length of the unquoted value.
        len: usize,
    },
    /// A byte that the key syntax does not allow (a control character, non-ASCII, a space or `"`
    /// in a bare key).
    #[error(
        "the idempotency key has a character that is not allowed (byte 0x{byte:02x} at position {position})"
    )]
    InvalidCharacter {
        /// The offending byte.
        byte: u8,
        /// Its position in the header value, from 0.
        position: usize,
    },
    /// A quoted key without its closing quote.
    #[error("the quoted idempotency key has no closing quote")]
    Unterminated,
    /// A backslash in a quoted key that is not followed by `"` or `\`.
    #[error("the quoted idempotency key has an escape other than \\\" or \\\\")]
    InvalidEscape,
    /// Structured-field parameters after the key (`"k";p=1`).
    #[error("the idempotency key has parameters; send the key alone")]
    Parameters,
    /// A comma-separated list instead of one key.
    #[error("the idempotency key header holds a list; send exactly one key")]
    List,
    /// Characters after the closing quote of a quoted key.
    #[error("the quoted idempotency key is followed by other characters")]
    TrailingCharacters,
    /// The key header was sent more than once. Raised by HTTP front ends, which see the header
    /// lines; a single value cannot be repeated.
    #[error("the idempotency key header was sent more than once")]
    Repeated,
}

impl IdempotencyKey {
    /// Parses a header value given as raw bytes (header values need not be UTF-8).
    pub fn parse_header(value: &[u8]) -> Result<Self, KeyError> {
        let start = value
            .iter()
            .position(|b| !is_ows(*b))
            .unwrap_or(value.len());
        let end = value
            .iter()
            .rposition(|b| !is_ows(*b))
            .map_or(start, |i| i + 1);
        let trimmed = &value[start..end];
        let key = match trimmed.first() {
            None => return Err(KeyError::Empty),
            Some(b'"') => parse_sf_string(trimmed, start)?,
            Some(_) => parse_bare(trimmed, start)?,
        };
        if key.is_empty() {
            return Err(KeyError::Empty);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong { len: key.len() });
        }
        Ok(Self(key.into_boxed_str()))
    }

    /// The unquoted key.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// SHA-256 of the key's text: how stores that do not keep keys in clear (SQLite, PostgreSQL)
    /// address a record, and how a listed record ([`Listed`](crate::Listed)) names its key.
    pub fn sha256(&self) -> [u8; 32] {
        use sha2::Digest;
        sha2::Sha256::digest(self.0.as_bytes()).into()
    }

    /// A short, stable, non-reversible digest of the key, for logs (keys are never logged in clear).
    ///
    /// Keyed by the process's [`DigestKey`](crate::DigestKey) when one is installed.
    pub fn digest(&self) -> String {
        if let Some(key) = crate::log_digest::for_keys() {
            return blake3::keyed_hash(key, self.0.as_bytes()).to_hex()[..16].to_owned();
        }
        // `blake3::derive_key` with the context hashed once, not for every request (and a new
        // hasher from it rather than a clone of a prepared one: that copies its 2 KiB).
        static CONTEXT: LazyLock<ContextKey> =
            LazyLock::new(|| hash_derive_key_context("idem 2026 key digest for logs"));
        let hash = blake3::Hasher::new_from_context_key(&CONTEXT)
            .update(self.0.as_bytes())
            .finalize();
        hash.to_hex()[..16].to_owned()
    }
}

fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn parse_sf_string(value: &[u8], offset: usize) -> Result<String, KeyError> {
    let mut key = String::with_capacity(value.len());
    let mut i = 1;
    loop {
        let Some(&b) = value.get(i) else {
            return Err(KeyError::Unterminated);
        };
        match b {
            b'\\' => match value.get(i + 1) {
                Some(&e @ (b'"' | b'\\')) => {
                    key.push(char::from(e));
                    i += 2;
                }
                Some(_) => return Err(KeyError::InvalidEscape),
                None => return Err(KeyError::Unterminated),
            },
            b'"' => break,
            0x20..=0x7e => {
                key.push(char::from(b));
                i += 1;
            }
            _ => {
                return Err(KeyError::InvalidCharacter {
                    byte: b,
                    position: offset + i,
                });
            }
        }
    }
    match value.get(i + 1) {
        None => Ok(key),
        Some(_) => Err(classify_trailer(&value[i + 1..])),
    }
}

/// What follows a complete key: a list, parameters, or something else.
fn classify_trailer(rest: &[u8]) -> KeyError {
    match rest.iter().find(|b| !is_ows(**b)) {
        Some(b',') => KeyError::List,
        Some(b';') => KeyError::Parameters,
        _ => KeyError::TrailingCharacters,
    }
}

fn parse_bare(value: &[u8], offset: usize) -> Result<String, KeyError> {
    for (i, &b) in value.iter().enumerate() {
        match b {
            b',' => return Err(KeyError::List),
            b';' => return Err(KeyError::Parameters),
            b'"' | 0..=0x20 | 0x7f.. => {
                // `a , b` and `a ;p` are still a list and parameters, not a stray space.
                if is_ows(b) {
                    let trailer = classify_trailer(&value[i..]);
                    if trailer != KeyError::TrailingCharacters {
                        return Err(trailer);
                    }
                }
                return Err(KeyError::InvalidCharacter {
                    byte: b,
                    position: offset + i,
                });
            }
            _ => {}
        }
    }
    Ok(std::str::from_utf8(value)
        .expect("every byte is visible ASCII, so valid UTF-8")
        .to_owned())
}

impl FromStr for IdempotencyKey {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_header(s.as_bytes())
    }
}

impl TryFrom<&[u8]> for IdempotencyKey {
    type Error = KeyError;

    fn try_from(value: &[u8]) -> Result<Self, Self::Error> {
        Self::parse_header(value)
    }
}

impl AsRef<str> for IdempotencyKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Keys can carry customer data; debug output shows only their digest.
        write!(f, "IdempotencyKey({})", self.digest())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Result<String, KeyError> {
        s.parse::<IdempotencyKey>().map(|k| k.as_str().to_owned())
    }

    #[test]
    fn digest_is_the_first_8_bytes_of_the_derived_key_in_hex() {
        // Operators match log lines across versions by digest: it must never change.
        let digest = "pay-1".parse::<IdempotencyKey>().unwrap().digest();
        let derived = blake3::derive_key("idem 2026 key digest for logs", b"pay-1");
        let expected: String = derived[..8].iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(digest, expected);
        assert_eq!(digest.len(), 16);
    }

    #[test]
    fn quoted_and_bare_forms_give_the_same_key() {
        assert_eq!(key("\"abc\""), Ok("abc".into()));
        assert_eq!(key("abc"), Ok("abc".into()));
        assert_eq!(key("  abc\t"), Ok("abc".into()));
    }

    #[test]
    fn uuid_is_a_bare_key() {
        let uuid = "7f8a9b3c-1d2e-4f5a-8b6c-7d8e9f0a1b2c";
        assert_eq!(key(uuid), Ok(uuid.into()));
    }

    #[test]
    fn quoted_key_unescapes_quote_and_backslash_and_keeps_spaces() {
        assert_eq!(key(r#""a \"b\" \\ c""#), Ok(r#"a "b" \ c"#.into()));
    }

    #[test]
    fn empty_values_are_refused() {
        assert_eq!(key(""), Err(KeyError::Empty));
        assert_eq!(key("   "), Err(KeyError::Empty));
        assert_eq!(key("\"\""), Err(KeyError::Empty));
    }

    #[test]
    fn length_limit_counts_the_unquoted_value() {
        let max = "k".repeat(MAX_KEY_LEN);
        assert_eq!(key(&max), Ok(max.clone()));
        assert_eq!(key(&format!("\"{max}\"")), Ok(max.clone()));
        assert_eq!(
            key(&"k".repeat(MAX_KEY_LEN + 1)),
            Err(KeyError::TooLong { len: 256 })
        );
        let escaped = format!("\"{}\"", "\\\\".repeat(MAX_KEY_LEN));
        assert_eq!(key(&escaped), Ok("\\".repeat(MAX_KEY_LEN)));
    }

    #[test]
    fn lists_and_parameters_are_refused() {
        assert_eq!(key("a,b"), Err(KeyError::List));
        assert_eq!(key("a , b"), Err(KeyError::List));
        assert_eq!(key("\"a\", \"b\""), Err(KeyError::List));
        assert_eq!(key("\"a\";p=1"), Err(KeyError::Parameters));
        assert_eq!(key("a;p=1"), Err(KeyError::Parameters));
        assert_eq!(key("a ;p"), Err(KeyError::Parameters));
    }

    #[test]
    fn bad_characters_are_refused_with_their_position() {
        assert_eq!(
            key("ab c"),
            Err(KeyError::InvalidCharacter {
                byte: b' ',
                position: 2
            })
        );
        assert_eq!(
            key("a\"b"),
            Err(KeyError::InvalidCharacter {
                byte: b'"',
                position: 1
            })
        );
        assert_eq!(
            IdempotencyKey::parse_header(b"a\x01").map(|_| ()),
            Err(KeyError::InvalidCharacter {
                byte: 1,
                position: 1
            })
        );
        assert_eq!(
            IdempotencyKey::parse_header("\"é\"".as_bytes()).map(|_| ()),
            Err(KeyError::InvalidCharacter {
                byte: 0xc3,
                position: 1
            })
        );
        assert_eq!(
            IdempotencyKey::parse_header(b"k\x7f").map(|_| ()),
            Err(KeyError::InvalidCharacter {
                byte: 0x7f,
                position: 1
            })
        );
    }

    #[test]
    fn malformed_quoted_keys_are_refused() {
        assert_eq!(key("\"abc"), Err(KeyError::Unterminated));
        assert_eq!(key("\"abc\\"), Err(KeyError::Unterminated));
        assert_eq!(key(r#""a\nb""#), Err(KeyError::InvalidEscape));
        assert_eq!(key("\"abc\"def"), Err(KeyError::TrailingCharacters));
    }

    #[test]
    fn debug_output_hides_the_key() {
        let k: IdempotencyKey = "secret-card-4242".parse().unwrap();
        let shown = format!("{k:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert_eq!(shown.len(), "IdempotencyKey()".len() + 16);
    }
}
