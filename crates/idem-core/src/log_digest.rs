//! [`DigestKey`]: makes the key and scope digests printed in logs keyed.
//!
//! Unkeyed, a key's digest is the same in every deployment, so someone who reads the logs can
//! test guesses (sequential order numbers, a customer's known key) against it, and a scope, the
//! hash of a credential, against guessed credentials. With a secret digest key installed, both are
//! keyed BLAKE3 hashes that only the holder of the key can reproduce.

use std::{fmt, sync::OnceLock};

/// The length of a digest key, in bytes.
pub const DIGEST_KEY_LEN: usize = 32;

/// The process's digest keys, derived from the installed [`DigestKey`]: one for idempotency
/// keys, one for scopes, so that the two kinds of digest never coincide.
struct Installed {
    source: [u8; DIGEST_KEY_LEN],
    keys: [u8; 32],
    scopes: [u8; 32],
}

static INSTALLED: OnceLock<Installed> = OnceLock::new();

/// The context of the scope digests' key, in logs and at rest.
const SCOPES_CONTEXT: &str = "idem 2026 keyed scope digest for logs";

/// A secret key for the digests printed in logs ([`IdempotencyKey::digest`] and
/// [`Scope::digest`]), installed once per process with [`DigestKey::install`].
///
/// [`IdempotencyKey::digest`]: crate::IdempotencyKey::digest
/// [`Scope::digest`]: crate::Scope::digest
#[derive(Clone, PartialEq, Eq)]
pub struct DigestKey([u8; DIGEST_KEY_LEN]);

/// Another digest key is already installed in this process.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("another digest key is already installed in this process")]
pub struct DigestKeyInstalled;

impl DigestKey {
    /// A key of 32 secret random bytes.
    pub const fn new(bytes: [u8; DIGEST_KEY_LEN]) -> Self {
        Self(bytes)
    }

    /// Makes every digest printed from now on keyed by this key. Installing the same key again is
    /// harmless; another key is refused, since digests must stay comparable within one process.
    pub fn install(&self) -> Result<(), DigestKeyInstalled> {
        let installed = INSTALLED.get_or_init(|| Installed {
            source: self.0,
            keys: blake3::derive_key("idem 2026 keyed key digest for logs", &self.0),
            scopes: blake3::derive_key(SCOPES_CONTEXT, &self.0),
        });
        if installed.source == self.0 {
            Ok(())
        } else {
            Err(DigestKeyInstalled)
        }
    }
}

impl DigestKey {
    /// The keys of the digests a store keeps under
    /// [`KeyedAddresses`](crate::KeyedAddresses): the scopes' (the same as the logs', so that
    /// listings and logs show one scope digest) and the idempotency keys'.
    pub(crate) fn at_rest(&self) -> ([u8; 32], [u8; 32]) {
        (
            blake3::derive_key(SCOPES_CONTEXT, &self.0),
            blake3::derive_key("idem 2026-12 keyed key digest at rest", &self.0),
        )
    }
}

impl fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("DigestKey(..)")
    }
}

/// The key for idempotency-key digests, if a digest key is installed.
pub(crate) fn for_keys() -> Option<&'static [u8; 32]> {
    INSTALLED.get().map(|installed| &installed.keys)
}

/// The key for scope digests, if a digest key is installed.
pub(crate) fn for_scopes() -> Option<&'static [u8; 32]> {
    INSTALLED.get().map(|installed| &installed.scopes)
}
