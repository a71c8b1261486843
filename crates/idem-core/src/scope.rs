//! Scopes (whose key is it) and record addresses (scope + key).

use std::{fmt, sync::LazyLock};

use blake3::hazmat::{ContextKey, HasherExt, hash_derive_key_context};

use crate::IdempotencyKey;

/// A 32-byte hash of the caller's identity, so that two tenants that pick the same key never see
/// each other's responses.
///
/// The identity (by default the `Authorization` header) is never stored: only this hash is.
///
/// # Examples
///
/// ```
/// use idem_core::Scope;
///
/// let alice = Scope::from_identity([b"Bearer alice".as_slice()]);
/// let bob = Scope::from_identity([b"Bearer bob".as_slice()]);
/// assert_ne!(alice, bob);
/// assert_ne!(alice, Scope::ANONYMOUS);
/// assert_eq!(alice.to_string().parse::<Scope>()?, alice);
/// # Ok::<(), idem_core::InvalidScope>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Scope([u8; 32]);

/// A scope given as text that is not 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a scope is 64 hexadecimal digits")]
pub struct InvalidScope;

impl Scope {
    /// The scope of callers that send none of the scope headers, and of every caller when scoping
    /// is off. All zeros, which no identity hashes to in practice.
    pub const ANONYMOUS: Scope = Scope([0; 32]);

    /// Hashes the parts of an identity (for example the values of the scope headers, in the
    /// configured order). The parts are length-prefixed, so `["ab", "c"]` and `["a", "bc"]` differ.
    pub fn from_identity<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> Self {
        // The derive-key context hashed once, not for every request.
        static CONTEXT: LazyLock<ContextKey> =
            LazyLock::new(|| hash_derive_key_context("idem 2026-11 scope v1"));
        let mut hasher = blake3::Hasher::new_from_context_key(&CONTEXT);
        for part in parts {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part);
        }
        Scope(*hasher.finalize().as_bytes())
    }

    /// Wraps raw bytes (as read back from a store).
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Scope(bytes)
    }

    /// The hash.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The scope as logs show it: its hash in hex, or, when the process has a
    /// [`DigestKey`](crate::DigestKey) installed, a keyed hash of it (64 hex digits either way),
    /// so that logs cannot be matched against guessed credentials.
    pub fn digest(&self) -> String {
        match crate::log_digest::for_scopes() {
            Some(key) => blake3::keyed_hash(key, &self.0).to_hex().to_string(),
            None => self.to_string(),
        }
    }

    /// Whether this is [`Scope::ANONYMOUS`].
    pub fn is_anonymous(&self) -> bool {
        *self == Self::ANONYMOUS
    }
}

impl TryFrom<&[u8]> for Scope {
    type Error = InvalidScope;

    fn try_from(bytes: &[u8]) -> Result<Self, Self::Error> {
        bytes.try_into().map(Scope).map_err(|_| InvalidScope)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Scope({self})")
    }
}

impl std::str::FromStr for Scope {
    type Err = InvalidScope;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.as_bytes();
        if s.len() != 64 {
            return Err(InvalidScope);
        }
        let mut out = [0; 32];
        for (byte, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
            let hex = std::str::from_utf8(pair).map_err(|_| InvalidScope)?;
            *byte = u8::from_str_radix(hex, 16).map_err(|_| InvalidScope)?;
        }
        Ok(Scope(out))
    }
}

/// Where a record lives: the caller's scope and the idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Address {
    /// Whose key it is.
    pub scope: Scope,
    /// The key.
    pub key: IdempotencyKey,
}

impl Address {
    /// The address of `key` in `scope`.
    pub fn new(scope: Scope, key: IdempotencyKey) -> Self {
        Self { scope, key }
    }

    /// The address of `key` in the anonymous scope.
    pub fn anonymous(key: IdempotencyKey) -> Self {
        Self::new(Scope::ANONYMOUS, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_parts_are_length_prefixed() {
        let ab_c = Scope::from_identity([b"ab".as_slice(), b"c"]);
        let a_bc = Scope::from_identity([b"a".as_slice(), b"bc"]);
        assert_ne!(ab_c, a_bc);
    }

    #[test]
    fn no_identity_is_not_the_anonymous_scope_constant() {
        // The anonymous scope is explicit; hashing nothing is a different value.
        assert_ne!(Scope::from_identity([]), Scope::ANONYMOUS);
        assert!(Scope::ANONYMOUS.is_anonymous());
    }

    #[test]
    fn hex_round_trips_and_rejects_bad_text() {
        let s = Scope::from_identity([b"Bearer x".as_slice()]);
        assert_eq!(s.to_string().len(), 64);
        assert_eq!(s.to_string().parse::<Scope>(), Ok(s));
        assert_eq!("00".parse::<Scope>(), Err(InvalidScope));
        assert_eq!("zz".repeat(32).parse::<Scope>(), Err(InvalidScope));
        assert_eq!("é".repeat(32).parse::<Scope>(), Err(InvalidScope));
    }
}
