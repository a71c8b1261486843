//! [`KeyRing`]: the keys that seal and open stored responses, parsed from a key file.

use std::{fmt, path::Path, str::FromStr, sync::Arc};

use base64::{Engine as _, engine::general_purpose::STANDARD};
use chacha20poly1305::{KeyInit, XChaCha20Poly1305};

/// The length of a key, in bytes (XChaCha20-Poly1305 takes 256-bit keys).
pub const KEY_LEN: usize = 32;

/// The longest key id accepted, in characters.
pub const MAX_KEY_ID_LEN: usize = 64;

/// The keys that seal and open stored responses: the first seals, every one opens.
///
/// Parsed from text with one key per line, `ID:BASE64`: an id of ASCII letters, digits, `-` and
/// `_` (at most [`MAX_KEY_ID_LEN`] characters, unique in the ring), a colon, and [`KEY_LEN`]
/// random bytes in standard base64 (with padding). Blank lines and lines starting with `#` are
/// ignored; spaces around a line are trimmed. Keys rotate without downtime: add the new key as
/// the first line (new records are sealed with it), keep the old ones below it until the records
/// they sealed have expired, then remove them.
///
/// Each key's cipher is built once, when the ring is parsed; the ring is cheap to clone.
///
/// # Examples
///
/// ```
/// use idem_core::sealing::{KeyRing, KeyRingError};
///
/// let ring: KeyRing = "# newest first\n\
///     2026-12:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=\n\
///     2026-06:ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8=\n"
///     .parse()?;
/// assert_eq!(ring.sealing_id(), "2026-12");
/// assert_eq!(ring.ids().collect::<Vec<_>>(), ["2026-12", "2026-06"]);
///
/// let error = "k1:c2hvcnQ=".parse::<KeyRing>().unwrap_err();
/// assert_eq!(error.to_string(), "line 1: the key is 5 bytes long; a key is 32 random bytes");
/// # Ok::<(), KeyRingError>(())
/// ```
#[derive(Clone)]
pub struct KeyRing(Arc<[SealingKey]>);

/// One key of a ring: its id and its cipher.
pub(crate) struct SealingKey {
    pub(crate) id: Box<str>,
    pub(crate) cipher: XChaCha20Poly1305,
}

/// Why a key file is not a valid [`KeyRing`]. Every variant about a line names it, counting
/// from 1.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyRingError {
    /// The file could not be read.
    #[error("cannot read the key file")]
    Read(#[source] std::io::Error),
    /// The file holds no key.
    #[error("the key file holds no key (one `ID:BASE64` per line)")]
    Empty,
    /// A line without the `:` between id and key.
    #[error("line {line}: expected `ID:BASE64`, found no `:`")]
    MissingSeparator {
        /// The line, from 1.
        line: usize,
    },
    /// An id that is empty, too long, or has a character other than letters, digits, `-`, `_`.
    #[error(
        "line {line}: the key id must be 1 to {MAX_KEY_ID_LEN} ASCII letters, digits, `-` or `_`"
    )]
    InvalidId {
        /// The line, from 1.
        line: usize,
    },
    /// An id already used on an earlier line.
    #[error("line {line}: the key id `{id}` is already used on line {first}")]
    DuplicateId {
        /// The line, from 1.
        line: usize,
        /// The id.
        id: String,
        /// The line that used it first.
        first: usize,
    },
    /// The key is not standard base64.
    #[error("line {line}: the key is not standard base64")]
    InvalidBase64 {
        /// The line, from 1.
        line: usize,
        /// What the decoder refused.
        #[source]
        source: base64::DecodeError,
    },
    /// The key does not decode to [`KEY_LEN`] bytes.
    #[error("line {line}: the key is {len} bytes long; a key is {KEY_LEN} random bytes")]
    WrongLength {
        /// The line, from 1.
        line: usize,
        /// How many bytes it decodes to.
        len: usize,
    },
}

impl KeyRing {
    /// Reads and parses the key file at `path`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, KeyRingError> {
        std::fs::read_to_string(path)
            .map_err(KeyRingError::Read)?
            .parse()
    }

    /// A ring of one key, given as bytes (for tests and for keys from a secret manager).
    ///
    /// # Panics
    ///
    /// If `id` is not a valid key id.
    pub fn single(id: &str, key: [u8; KEY_LEN]) -> Self {
        assert!(valid_id(id), "invalid key id {id:?}");
        Self(Arc::new([SealingKey::new(id, &key)]))
    }

    /// The id of the key that seals new records (the first line).
    pub fn sealing_id(&self) -> &str {
        &self.sealing_key().id
    }

    /// The ids of every key, the sealing one first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.0.iter().map(|key| &*key.id)
    }

    pub(crate) fn sealing_key(&self) -> &SealingKey {
        // A ring is never empty: parsing refuses a file without keys.
        &self.0[0]
    }

    pub(crate) fn find(&self, id: &[u8]) -> Option<&SealingKey> {
        self.0.iter().find(|key| key.id.as_bytes() == id)
    }
}

impl SealingKey {
    fn new(id: &str, key: &[u8; KEY_LEN]) -> Self {
        Self {
            id: id.into(),
            cipher: XChaCha20Poly1305::new(key.into()),
        }
    }
}

fn valid_id(id: &str) -> bool {
    (1..=MAX_KEY_ID_LEN).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl FromStr for KeyRing {
    type Err = KeyRingError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut keys: Vec<(usize, SealingKey)> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line_no = index + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (id, encoded) = line
                .split_once(':')
                .ok_or(KeyRingError::MissingSeparator { line: line_no })?;
            if !valid_id(id) {
                return Err(KeyRingError::InvalidId { line: line_no });
            }
            if let Some((first, _)) = keys.iter().find(|(_, key)| &*key.id == id) {
                return Err(KeyRingError::DuplicateId {
                    line: line_no,
                    id: id.to_owned(),
                    first: *first,
                });
            }
            let bytes = STANDARD
                .decode(encoded)
                .map_err(|source| KeyRingError::InvalidBase64 {
                    line: line_no,
                    source,
                })?;
            let key: [u8; KEY_LEN] =
                bytes
                    .as_slice()
                    .try_into()
                    .map_err(|_| KeyRingError::WrongLength {
                        line: line_no,
                        len: bytes.len(),
                    })?;
            keys.push((line_no, SealingKey::new(id, &key)));
        }
        if keys.is_empty() {
            return Err(KeyRingError::Empty);
        }
        Ok(Self(keys.into_iter().map(|(_, key)| key).collect()))
    }
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The ids only: key material never reaches a log.
        f.debug_tuple("KeyRing")
            .field(&self.ids().collect::<Vec<_>>())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

    fn error(text: &str) -> String {
        text.parse::<KeyRing>().unwrap_err().to_string()
    }

    #[test]
    fn first_key_seals_and_every_key_is_kept_in_order() {
        let ring: KeyRing = format!("\n# comment\n  new:{A}  \r\nold_1:{A}\n")
            .parse()
            .unwrap();
        assert_eq!(ring.sealing_id(), "new");
        assert_eq!(ring.ids().collect::<Vec<_>>(), ["new", "old_1"]);
        assert_eq!(format!("{ring:?}"), r#"KeyRing(["new", "old_1"])"#);
    }

    #[test]
    fn each_malformed_line_is_named_by_its_number() {
        assert_eq!(
            error(&format!("a:{A}\n\nno-colon\n")),
            "line 3: expected `ID:BASE64`, found no `:`"
        );
        assert_eq!(
            error(&format!("a:{A}\nbad id:{A}")),
            "line 2: the key id must be 1 to 64 ASCII letters, digits, `-` or `_`"
        );
        assert_eq!(
            error(&format!(":{A}")),
            "line 1: the key id must be 1 to 64 ASCII letters, digits, `-` or `_`"
        );
        assert_eq!(
            error(&format!("{}:{A}", "k".repeat(65))),
            "line 1: the key id must be 1 to 64 ASCII letters, digits, `-` or `_`"
        );
        assert_eq!(
            error(&format!("a:{A}\n# c\na:{A}")),
            "line 3: the key id `a` is already used on line 1"
        );
        assert_eq!(
            error("k:not base64!"),
            "line 1: the key is not standard base64"
        );
        // URL-safe base64 is not standard base64.
        assert_eq!(error("k:-_-_"), "line 1: the key is not standard base64");
        assert_eq!(
            error("\n\nk:c2hvcnQ="),
            "line 3: the key is 5 bytes long; a key is 32 random bytes"
        );
        let long = STANDARD.encode([7u8; 33]);
        assert_eq!(
            error(&format!("k:{long}")),
            "line 1: the key is 33 bytes long; a key is 32 random bytes"
        );
    }

    #[test]
    fn a_file_without_keys_is_refused() {
        assert_eq!(
            error("# nothing yet\n\n"),
            "the key file holds no key (one `ID:BASE64` per line)"
        );
        assert!(matches!("".parse::<KeyRing>(), Err(KeyRingError::Empty)));
    }

    #[test]
    fn a_missing_file_is_a_read_error() {
        let error = KeyRing::from_file("/nonexistent/idem-keys").unwrap_err();
        assert!(
            matches!(&error, KeyRingError::Read(e) if e.kind() == std::io::ErrorKind::NotFound)
        );
    }
}
