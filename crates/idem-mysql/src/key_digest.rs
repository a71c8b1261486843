//! The digest of an idempotency key that the table keeps instead of the key.

use idem_core::IdempotencyKey;
use sha2::{Digest, Sha256};

/// SHA-256 of the key's bytes: what the `key_digest` column holds.
pub(crate) fn key_digest(key: &IdempotencyKey) -> [u8; 32] {
    Sha256::digest(key.as_str().as_bytes()).into()
}
