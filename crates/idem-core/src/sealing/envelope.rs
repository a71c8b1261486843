//! The sealed form of an [`Outcome`]: what stores hold when sealing is on.
//!
//! A sealed outcome is a `StoredResponse`, so every store keeps it unchanged: status
//! `500`, no headers, no trailers, and a body laid out as
//!
//! ```text
//! 0xff "idem-sealed"     magic (0xff: never the start of a UTF-8 text body)
//! u8 1                   version
//! u8 n, n bytes          key id
//! 24 bytes               XChaCha20 nonce, random
//! …                      the outcome's encoding (`codec.rs`), encrypted
//! 16 bytes               Poly1305 tag
//! ```
//!
//! The associated data is the record's address (scope, then the key length-prefixed) and the key
//! id, so a sealed body moved to another address, or relabelled with another key id, does not
//! open.

use bytes::{Bytes, BytesMut};
use chacha20poly1305::{AeadInOut, XNonce};

use crate::{
    Address, DecodeError, MAX_KEY_LEN, Outcome, StoredResponse,
    sealing::key_ring::{KeyRing, MAX_KEY_ID_LEN},
};

const MAGIC: &[u8; 12] = b"\xffidem-sealed";
const VERSION: u8 = 1;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// The status a sealed response carries; a store never looks at it, and a sealed record replayed
/// by a front end that does not open it (sealing turned off too early) is at least an error.
const STATUS: u16 = 500;

/// Why a response could not be sealed, or a sealed record not opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SealingError {
    /// The operating system gave no random bytes for the nonce.
    #[error("no random bytes for the nonce")]
    Random(#[source] getrandom::Error),
    /// The cipher refused the response (longer than XChaCha20 can encrypt, 256 GiB).
    #[error("the response is too large to seal")]
    TooLarge,
    /// The record is sealed with a key id that is not in the ring (removed too early, or a ring
    /// from another deployment).
    #[error("the record is sealed with key `{id}`, which is not in the key ring")]
    UnknownKey {
        /// The id found in the record (lossily decoded).
        id: String,
    },
    /// The record does not open with its key: it was altered, or copied from another address.
    #[error(
        "the record sealed with key `{id}` does not open: it was altered or copied from another address"
    )]
    Inauthentic {
        /// The key id.
        id: String,
    },
    /// The sealed body is shorter than its framing, or its key id is not valid.
    #[error("the sealed record is truncated")]
    Truncated,
    /// A version of the sealed framing this build does not know (written by a newer idem).
    #[error("sealed record version {0} is not supported")]
    UnsupportedVersion(u8),
    /// The record opened, but what it holds is not a stored outcome.
    #[error("the sealed record holds no valid outcome")]
    Decode(#[from] DecodeError),
    /// The record is not sealed, and the store was told to refuse plaintext.
    #[error("the record is not sealed, and only sealed records are accepted")]
    Plaintext,
}

/// Whether `response` is in the sealed form (written by a sealing store): what a listing shows
/// of a record under [`Sealed`](crate::sealing::Sealed), whose outcome opens only with its key.
pub fn is_sealed(response: &StoredResponse) -> bool {
    response.status == STATUS
        && response.headers.is_empty()
        && response.trailers.is_none()
        && response.body.starts_with(MAGIC)
}

/// Seals `outcome` for `address` with the ring's first key: one allocation for the sealed body,
/// encrypted in place.
pub(crate) fn seal(
    ring: &KeyRing,
    address: &Address,
    outcome: &Outcome,
) -> Result<StoredResponse, SealingError> {
    let key = ring.sealing_key();
    let id = key.id.as_bytes();
    let mut nonce = [0; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(SealingError::Random)?;

    let plain_len = outcome.encoded_len();
    let mut body = Vec::with_capacity(MAGIC.len() + 2 + id.len() + NONCE_LEN + plain_len + TAG_LEN);
    body.extend_from_slice(MAGIC);
    body.push(VERSION);
    body.push(id.len() as u8); // Ids are at most 64 bytes (`KeyRing` checks).
    body.extend_from_slice(id);
    body.extend_from_slice(&nonce);
    let start = body.len();
    outcome.encode_into(&mut body);
    let tag = key
        .cipher
        .encrypt_inout_detached(
            &XNonce::from(nonce),
            AssociatedData::new(address, id).as_bytes(),
            (&mut body[start..]).into(),
        )
        .map_err(|_| SealingError::TooLarge)?;
    body.extend_from_slice(&tag);
    Ok(StoredResponse {
        status: STATUS,
        headers: Vec::new(),
        body: Bytes::from(body),
        trailers: None,
    })
}

/// Opens a sealed outcome stored at `address`. The caller has checked [`is_sealed`].
pub(crate) fn open(
    ring: &KeyRing,
    address: &Address,
    sealed: StoredResponse,
) -> Result<Outcome, SealingError> {
    let body = &sealed.body[MAGIC.len()..];
    let (&version, body) = body.split_first().ok_or(SealingError::Truncated)?;
    if version != VERSION {
        return Err(SealingError::UnsupportedVersion(version));
    }
    let (&id_len, body) = body.split_first().ok_or(SealingError::Truncated)?;
    let id_len = usize::from(id_len);
    if id_len > MAX_KEY_ID_LEN || body.len() < id_len + NONCE_LEN + TAG_LEN {
        return Err(SealingError::Truncated);
    }
    let (id, body) = body.split_at(id_len);
    let (nonce, _) = body.split_at(NONCE_LEN);
    let key = ring.find(id).ok_or_else(|| SealingError::UnknownKey {
        id: String::from_utf8_lossy(id).into_owned(),
    })?;
    let nonce = XNonce::try_from(nonce).expect("24 bytes");
    let aad = AssociatedData::new(address, id);

    let start = MAGIC.len() + 2 + id_len + NONCE_LEN;
    // Decrypted in place: in the body itself when the store handed over the only reference
    // (the usual case), in a copy otherwise.
    let mut buffer = sealed
        .body
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    let end = buffer.len() - TAG_LEN;
    let (message, tag) = buffer[start..].split_at_mut(end - start);
    let tag = chacha20poly1305::Tag::try_from(&*tag).expect("16 bytes");
    key.cipher
        .decrypt_inout_detached(&nonce, aad.as_bytes(), message.into(), &tag)
        .map_err(|_| SealingError::Inauthentic {
            id: key.id.to_string(),
        })?;
    Ok(Outcome::decode(message)?)
}

/// The associated data of a record, on the stack: scope, key length, key, id length, id.
struct AssociatedData {
    bytes: [u8; 32 + 1 + MAX_KEY_LEN + 1 + MAX_KEY_ID_LEN],
    len: usize,
}

impl AssociatedData {
    fn new(address: &Address, id: &[u8]) -> Self {
        let key = address.key.as_str().as_bytes();
        let mut bytes = [0; 32 + 1 + MAX_KEY_LEN + 1 + MAX_KEY_ID_LEN];
        let mut len = 0;
        for part in [
            address.scope.as_bytes().as_slice(),
            &[key.len() as u8], // Keys are at most 255 bytes (`IdempotencyKey` checks).
            key,
            &[id.len() as u8],
            id,
        ] {
            bytes[len..len + part.len()].copy_from_slice(part);
            len += part.len();
        }
        Self { bytes, len }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}
