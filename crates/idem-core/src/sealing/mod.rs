//! Stored outcomes protected at rest: [`Sealed`] encrypts them under a rotating [`KeyRing`].
//!
//! Behind the `sealing` cargo feature. Responses are sealed with XChaCha20-Poly1305 (a random
//! 24-byte nonce per record, so random nonces never collide in practice) with the record's address,
//! the key id, the request's fingerprint, the fencing token and a sealed expiry as associated
//! data. The sealed form is a
//! [`StoredResponse`](crate::StoredResponse), so every store holds it unchanged; its layout is
//! described in the source of the `envelope` module.
//!
//! # Examples
//!
//! ```
//! use idem_core::{MemoryStore, sealing::{KeyRing, Sealed}};
//!
//! let ring: KeyRing = "k1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=".parse()?;
//! let store = Sealed::new(MemoryStore::new(), ring);
//! assert_eq!(store.ring().sealing_id(), "k1");
//! # Ok::<(), idem_core::sealing::KeyRingError>(())
//! ```

mod envelope;
mod key_ring;
mod sealed;
#[cfg(test)]
mod tests;

pub use envelope::{SealingError, is_sealed};
pub use key_ring::{KEY_LEN, KeyRing, KeyRingError, MAX_KEY_ID_LEN};
pub use sealed::{DEFAULT_CLOCK_SKEW, Sealed};
