//! [`KeyPrefix`]: the namespace of a store's keys in Redis.

use std::{fmt, str::FromStr};

/// The longest prefix accepted.
const MAX_LEN: usize = 64;

/// The first part of every key and channel a [`RedisStore`](crate::RedisStore) uses, so that
/// several stores (or other applications) can share one Redis. `idem` by default.
///
/// 1 to 64 ASCII letters, digits, `-`, `_`, `.` and `:`: nothing that would end a Cluster hash
/// tag (`{`, `}`) or mean something in a `SCAN` pattern.
///
/// # Examples
///
/// ```
/// use idem_redis::{InvalidPrefix, KeyPrefix};
///
/// let prefix: KeyPrefix = "payments:idem".parse()?;
/// assert_eq!(prefix.as_str(), "payments:idem");
/// assert_eq!(KeyPrefix::default().as_str(), "idem");
/// assert_eq!("{tag}".parse::<KeyPrefix>(), Err(InvalidPrefix));
/// # Ok::<(), InvalidPrefix>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct KeyPrefix(Box<str>);

/// A prefix that is empty, too long, or has a character other than ASCII letters, digits, `-`,
/// `_`, `.` and `:`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a key prefix is 1 to 64 ASCII letters, digits, '-', '_', '.' or ':'")]
pub struct InvalidPrefix;

impl KeyPrefix {
    /// The prefix.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for KeyPrefix {
    /// `idem`.
    fn default() -> Self {
        Self("idem".into())
    }
}

impl FromStr for KeyPrefix {
    type Err = InvalidPrefix;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let allowed = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':');
        if s.is_empty() || s.len() > MAX_LEN || !s.bytes().all(allowed) {
            return Err(InvalidPrefix);
        }
        Ok(Self(s.into()))
    }
}

impl TryFrom<&str> for KeyPrefix {
    type Error = InvalidPrefix;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        s.parse()
    }
}

impl fmt::Display for KeyPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for KeyPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyPrefix({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_safe_characters_only() {
        for ok in ["idem", "a", "payments:idem-v2.test_1", &"x".repeat(64)] {
            assert_eq!(
                ok.parse::<KeyPrefix>().map(|p| p.to_string()),
                Ok(ok.into())
            );
        }
        for bad in [
            "",
            "{idem}",
            "a}b",
            "a*",
            "a?",
            "a[b]",
            "a b",
            "é",
            &"x".repeat(65),
        ] {
            assert_eq!(bad.parse::<KeyPrefix>(), Err(InvalidPrefix), "{bad:?}");
        }
    }
}
