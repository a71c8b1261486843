//! The sealed form of an [`Outcome`]: what stores hold when sealing is on.
//!
//! A sealed outcome is a `StoredResponse`, so every store keeps it unchanged: status
//! `500`, no headers, no trailers, and a body laid out as
//!
//! ```text
//! 0xff "idem-sealed"     magic (0xff: never the start of a UTF-8 text body)
//! u8 2                   version
//! u8 n, n bytes          key id
//! u64, big-endian        the fencing token of the execution that completed the record
//! u64, big-endian        the sealed expiry: the sealer's clock at completion plus the TTL, in
//!                        milliseconds since the Unix epoch
//! 24 bytes               XChaCha20 nonce, random
//! …                      the outcome's encoding (`codec.rs`), encrypted
//! 16 bytes               Poly1305 tag
//! ```
//!
//! The associated data binds everything a replay decision reads: the record's address (scope,
//! then the key length-prefixed), the key id, the fingerprint of the request that ran, the
//! state (completed), the fencing token and the sealed expiry. A sealed body moved to another
//! address, relabelled with another key id, or left under a fingerprint, token or expiry that a
//! store writer changed does not open, or opens only to be refused (see [`Sealed`]).
//!
//! A part of a streamed response ([`Store::append_part`](crate::Store::append_part)) is sealed
//! on its own, in the same framing with magic `0xff "idem-part"`, version 1, the key id, the
//! nonce, the part encrypted and the tag; its associated data is the address, the key id, the
//! state (streaming), the token of the execution that appended it and its index. So a part
//! moved to another address, execution or place in the stream does not open.
//!
//! Version 1 (written by earlier builds) has neither token nor expiry, and its associated data is
//! the address and key id alone; such records still open, bound to their address, until they age
//! out within their TTL.
//!
//! [`Sealed`]: crate::sealing::Sealed

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use chacha20poly1305::{AeadInOut, XNonce};

use crate::{
    Address, DecodeError, FencingToken, Fingerprint, MAX_KEY_LEN, Outcome, StoredResponse,
    Timestamp,
    sealing::key_ring::{KeyRing, MAX_KEY_ID_LEN, SealingKey},
};

const MAGIC: &[u8; 12] = b"\xffidem-sealed";
/// The magic of a sealed part of a streamed response.
const PART_MAGIC: &[u8; 10] = b"\xffidem-part";
/// The most bytes sealing adds to a part: magic, version, key id, nonce and tag.
pub(crate) const MAX_PART_OVERHEAD: usize =
    PART_MAGIC.len() + 2 + MAX_KEY_ID_LEN + NONCE_LEN + TAG_LEN;
/// The version of a sealed part.
const PART_VERSION: u8 = 1;
/// The state a sealed part is bound to.
const STREAMING: u8 = b's';
/// The version written: 2 binds fingerprint, state, token and expiry; 1 the address alone.
const VERSION: u8 = 2;
const VERSION_ADDRESS_ONLY: u8 = 1;
const NONCE_LEN: usize = 24;
const TAG_LEN: usize = 16;
/// The fencing token and the sealed expiry, in a version 2 body.
const BINDING_LEN: usize = 16;
/// The state a sealed outcome is bound to. Only completed records hold an outcome; the byte keeps
/// the associated data unambiguous should another state ever hold one.
const COMPLETED: u8 = b'c';
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
    /// The record does not open with its key: its response, fingerprint, token or sealed expiry
    /// was altered, or it was copied from another address.
    #[error(
        "the record sealed with key `{id}` does not open: it was altered or copied from another address"
    )]
    Inauthentic {
        /// The key id.
        id: String,
    },
    /// The record opened, but its fencing token is not the one its outcome was sealed with: the
    /// token was altered, or an older outcome of the address was put back.
    #[error(
        "the record's fencing token {record} is not the token {sealed} its outcome was sealed with"
    )]
    TokenMismatch {
        /// The token sealed with the outcome.
        sealed: u64,
        /// The token the record holds.
        record: u64,
    },
    /// The record opened, but is still served past the expiry it was sealed with (beyond the
    /// allowed clock skew): its expiry was extended in the store.
    #[error("the record is served {overdue:?} past the expiry it was sealed with")]
    Outlived {
        /// How long past the sealed expiry (and the allowed clock skew) it was read.
        overdue: Duration,
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

/// What a sealed outcome is bound to besides its address and key id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Binding {
    /// The fingerprint of the request that ran.
    pub(crate) fingerprint: Fingerprint,
    /// The fencing token of the execution that completed the record.
    pub(crate) token: FencingToken,
    /// The sealer's clock at completion plus the TTL.
    pub(crate) expires: Timestamp,
}

/// An opened outcome, with what its envelope says of the execution that sealed it.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) outcome: Outcome,
    /// The sealed token and expiry; `None` for a version 1 record, bound to its address alone.
    pub(crate) sealed: Option<(FencingToken, Timestamp)>,
}

/// Seals `outcome` for `address` with the ring's first key, bound to `binding`: one allocation
/// for the sealed body, encrypted in place.
pub(crate) fn seal(
    ring: &KeyRing,
    address: &Address,
    binding: &Binding,
    outcome: &Outcome,
) -> Result<StoredResponse, SealingError> {
    let mut bound = [0; BINDING_LEN];
    bound[..8].copy_from_slice(&binding.token.get().to_be_bytes());
    bound[8..].copy_from_slice(&binding.expires.as_millis().to_be_bytes());
    let body = encrypt(
        ring,
        (MAGIC, VERSION, &bound),
        outcome.encoded_len(),
        |body| outcome.encode_into(body),
        |id| AssociatedData::new(address, id, Some(binding)),
    )?;
    Ok(StoredResponse {
        status: STATUS,
        headers: Vec::new(),
        body: Bytes::from(body),
        trailers: None,
        trace: None,
    })
}

/// The sealed body of a plaintext of `plain_len` bytes that `write` appends: `head` (magic, version
/// and the bytes bound in clear after the key id), the ring's first key id, a random nonce, then
/// the plaintext encrypted in place with the associated data `aad` gives for the key id, and the
/// tag. One allocation.
fn encrypt(
    ring: &KeyRing,
    (magic, version, bound): (&[u8], u8, &[u8]),
    plain_len: usize,
    write: impl FnOnce(&mut Vec<u8>),
    aad: impl FnOnce(&[u8]) -> AssociatedData,
) -> Result<Vec<u8>, SealingError> {
    let key = ring.sealing_key();
    let id = key.id.as_bytes();
    let mut nonce = [0; NONCE_LEN];
    getrandom::fill(&mut nonce).map_err(SealingError::Random)?;
    let mut body = Vec::with_capacity(
        magic.len() + 2 + id.len() + bound.len() + NONCE_LEN + plain_len + TAG_LEN,
    );
    body.extend_from_slice(magic);
    body.push(version);
    body.push(id.len() as u8); // Ids are at most 64 bytes (`KeyRing` checks).
    body.extend_from_slice(id);
    body.extend_from_slice(bound);
    body.extend_from_slice(&nonce);
    let start = body.len();
    write(&mut body);
    let tag = key
        .cipher
        .encrypt_inout_detached(
            &XNonce::from(nonce),
            aad(id).as_bytes(),
            (&mut body[start..]).into(),
        )
        .map_err(|_| SealingError::TooLarge)?;
    body.extend_from_slice(&tag);
    Ok(body)
}

/// Opens a sealed outcome stored at `address` for a request with `fingerprint`. The caller has
/// checked [`is_sealed`], and checks the sealed token and expiry it returns.
pub(crate) fn open(
    ring: &KeyRing,
    address: &Address,
    fingerprint: &Fingerprint,
    sealed: StoredResponse,
) -> Result<Opened, SealingError> {
    let body = &sealed.body[MAGIC.len()..];
    let (&version, body) = body.split_first().ok_or(SealingError::Truncated)?;
    let binding_len = match version {
        VERSION => BINDING_LEN,
        VERSION_ADDRESS_ONLY => 0,
        other => return Err(SealingError::UnsupportedVersion(other)),
    };
    let (&id_len, body) = body.split_first().ok_or(SealingError::Truncated)?;
    let id_len = usize::from(id_len);
    if id_len > MAX_KEY_ID_LEN || body.len() < id_len + binding_len + NONCE_LEN + TAG_LEN {
        return Err(SealingError::Truncated);
    }
    let (id, body) = body.split_at(id_len);
    let (binding, body) = body.split_at(binding_len);
    let (nonce, _) = body.split_at(NONCE_LEN);
    let key = ring.find(id).ok_or_else(|| SealingError::UnknownKey {
        id: String::from_utf8_lossy(id).into_owned(),
    })?;
    let nonce = XNonce::try_from(nonce).expect("24 bytes");
    let binding = (binding_len == BINDING_LEN).then(|| {
        let (token, expires) = binding.split_at(8);
        Binding {
            fingerprint: *fingerprint,
            token: FencingToken::new(u64::from_be_bytes(token.try_into().expect("8 bytes"))),
            expires: Timestamp::from_millis(u64::from_be_bytes(
                expires.try_into().expect("8 bytes"),
            )),
        }
    });
    let aad = AssociatedData::new(address, id, binding.as_ref());

    let start = MAGIC.len() + 2 + id_len + binding_len + NONCE_LEN;
    let message = decrypt(key, &nonce, &aad, sealed.body, start)?;
    Ok(Opened {
        outcome: Outcome::decode(&message)?,
        sealed: binding.map(|binding| (binding.token, binding.expires)),
    })
}

/// Seals part `index` of the stream of the execution `token` at `address`, with the ring's first
/// key.
pub(crate) fn seal_part(
    ring: &KeyRing,
    address: &Address,
    token: FencingToken,
    index: u32,
    part: &[u8],
) -> Result<Bytes, SealingError> {
    let body = encrypt(
        ring,
        (PART_MAGIC, PART_VERSION, &[]),
        part.len(),
        |body| body.extend_from_slice(part),
        |id| AssociatedData::part(address, id, token, index),
    )?;
    Ok(Bytes::from(body))
}

/// Opens part `index` of the stream of the execution `token` at `address`; a part in clear is
/// [`SealingError::Plaintext`].
pub(crate) fn open_part(
    ring: &KeyRing,
    address: &Address,
    token: FencingToken,
    index: u32,
    sealed: Bytes,
) -> Result<Bytes, SealingError> {
    let body = sealed
        .strip_prefix(PART_MAGIC.as_slice())
        .ok_or(SealingError::Plaintext)?;
    let (&version, body) = body.split_first().ok_or(SealingError::Truncated)?;
    if version != PART_VERSION {
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
    let aad = AssociatedData::part(address, id, token, index);
    let start = PART_MAGIC.len() + 2 + id_len + NONCE_LEN;
    decrypt(key, &nonce, &aad, sealed, start)
}

/// The plaintext of `sealed`, whose ciphertext starts at `start` and ends with the tag, decrypted
/// in place: in the body itself when the store handed over the only reference (the usual case),
/// in a copy otherwise.
fn decrypt(
    key: &SealingKey,
    nonce: &XNonce,
    aad: &AssociatedData,
    sealed: Bytes,
    start: usize,
) -> Result<Bytes, SealingError> {
    let mut buffer = sealed
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    let end = buffer.len() - TAG_LEN;
    let (message, tag) = buffer[start..].split_at_mut(end - start);
    let tag = chacha20poly1305::Tag::try_from(&*tag).expect("16 bytes");
    key.cipher
        .decrypt_inout_detached(nonce, aad.as_bytes(), message.into(), &tag)
        .map_err(|_| SealingError::Inauthentic {
            id: key.id.to_string(),
        })?;
    buffer.truncate(end);
    Ok(buffer.freeze().split_off(start))
}

/// The length of the longest associated data: scope, key length, key, id length, id, then
/// fingerprint, state, token and expiry.
const AAD_MAX_LEN: usize = 32 + 1 + MAX_KEY_LEN + 1 + MAX_KEY_ID_LEN + 32 + 1 + BINDING_LEN;

/// The associated data of a record, on the stack.
struct AssociatedData {
    bytes: [u8; AAD_MAX_LEN],
    len: usize,
}

impl AssociatedData {
    /// The data for a version 2 record with `binding`, or a version 1 record without.
    fn new(address: &Address, id: &[u8], binding: Option<&Binding>) -> Self {
        let key = address.key.as_str().as_bytes();
        let mut data = Self {
            bytes: [0; AAD_MAX_LEN],
            len: 0,
        };
        data.push(address.scope.as_bytes());
        data.push(&[key.len() as u8]); // Keys are at most 255 bytes (`IdempotencyKey` checks).
        data.push(key);
        data.push(&[id.len() as u8]);
        data.push(id);
        if let Some(binding) = binding {
            data.push(binding.fingerprint.as_bytes());
            data.push(&[COMPLETED]);
            data.push(&binding.token.get().to_be_bytes());
            data.push(&binding.expires.as_millis().to_be_bytes());
        }
        data
    }

    /// The data of part `index` of the stream of the execution `token`.
    fn part(address: &Address, id: &[u8], token: FencingToken, index: u32) -> Self {
        let mut data = Self::new(address, id, None);
        data.push(&[STREAMING]);
        data.push(&token.get().to_be_bytes());
        data.push(&index.to_be_bytes());
        data
    }

    fn push(&mut self, part: &[u8]) {
        self.bytes[self.len..self.len + part.len()].copy_from_slice(part);
        self.len += part.len();
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}
