//! The `stored_response` target: stored outcomes read back from a store that may be corrupted.

use arbitrary::{Arbitrary, Unstructured};
use bytes::Bytes;
use idem_core::{DecodeError, Outcome, StoredResponse};

/// Decodes `data` as a stored outcome, then reads `data` as a response to encode.
///
/// - Any bytes decode to an outcome or to the [`DecodeError`] that names their fault: a
///   `BadMagic` without the magic, an `UnsupportedVersion` with the version byte found, an
///   `InvalidStatus` with the status found, never a panic. (A length prefix larger than the
///   input is a `Truncated`; the allocation limit of `scripts/fuzz` catches one that allocates
///   before checking.)
/// - A decoded response is a valid one (status 100–999, non-empty header names) and encodes back
///   to exactly `data`: the encoding has one spelling per response. An unknown outcome has two:
///   its tag, and the `500` response that earlier builds stored for it.
/// - Any response encodes to [`StoredResponse::encoded_len`] bytes that decode to an equal
///   response, and every cut of them is `Truncated`.
///
/// # Panics
///
/// When one of these does not hold.
pub fn stored_response(data: &[u8]) {
    match Outcome::decode(data) {
        Ok(Outcome::Response(response)) => {
            check_valid(&response);
            assert_eq!(response.encoded_len(), data.len());
            assert_eq!(response.encode(), data, "decoded bytes encode differently");
        }
        Ok(Outcome::Unknown) => {
            let legacy = StoredResponse::decode(data).is_ok_and(|r| r.status == 500);
            assert!(
                data == Outcome::Unknown.encode() || legacy,
                "{data:?} decoded as an unknown outcome"
            );
        }
        Err(error) => check_error(data, &error),
    }

    let Ok(response) = Unstructured::new(data).arbitrary::<Response>() else {
        return;
    };
    let response = response.into_stored();
    let encoded = response.encode();
    assert_eq!(encoded.len(), response.encoded_len());
    assert_eq!(StoredResponse::decode(&encoded).as_ref(), Ok(&response));
    let cut = data.first().map_or(0, |b| usize::from(*b)) % encoded.len();
    assert_eq!(
        StoredResponse::decode(&encoded[..cut]),
        Err(DecodeError::Truncated),
        "cut at {cut} of {}",
        encoded.len()
    );
}

fn check_valid(response: &StoredResponse) {
    assert!((100..=999).contains(&response.status), "{response:?}");
    let fields = response
        .headers
        .iter()
        .chain(response.trailers.iter().flatten());
    for (name, _) in fields {
        assert!(!name.is_empty(), "an empty header name was decoded");
    }
}

fn check_error(data: &[u8], error: &DecodeError) {
    match *error {
        DecodeError::Truncated => {}
        DecodeError::BadMagic => assert_ne!(data.get(..3), Some(&b"IDR"[..])),
        DecodeError::UnsupportedVersion(version) => {
            assert_eq!(data.get(3), Some(&version));
            assert!(version > 2, "{error:?}");
        }
        DecodeError::InvalidStatus(status) => {
            assert_eq!(data.get(4..6), Some(&status.to_le_bytes()[..]));
            assert!(!(100..=999).contains(&status));
        }
        DecodeError::InvalidHeaderName => {}
        DecodeError::InvalidTrailerFlag(flag) => assert!(flag > 1, "{error:?}"),
        DecodeError::TrailingBytes(count) => {
            assert!(count > 0 && count < data.len(), "{error:?}");
            assert_eq!(
                Outcome::decode(&data[..data.len() - count]).map(|r| r.encoded_len()),
                Ok(data.len() - count),
                "the bytes before the trailing ones are not a record"
            );
        }
        ref other => panic!("an unknown error {other:?}"),
    }
}

/// A response to encode, made from the fuzzer's bytes.
#[derive(Debug, Arbitrary)]
struct Response {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
    trailers: Option<Vec<(String, Vec<u8>)>>,
}

impl Response {
    /// A valid response: the status brought into 100–999, empty names replaced.
    fn into_stored(self) -> StoredResponse {
        let fields = |fields: Vec<(String, Vec<u8>)>| {
            fields
                .into_iter()
                .map(|(name, value)| {
                    let name = if name.is_empty() {
                        "x".to_owned()
                    } else {
                        name
                    };
                    (name, Bytes::from(value))
                })
                .collect()
        };
        StoredResponse {
            status: 100 + self.status % 900,
            headers: fields(self.headers),
            body: Bytes::from(self.body),
            trailers: self.trailers.map(fields),
            trace: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_valid_corrupted_and_empty_records() {
        let valid = StoredResponse::new(201)
            .header("content-type", "text/plain")
            .body("paid")
            .trailer("grpc-status", "0")
            .encode();
        let mut trailing = valid.clone();
        trailing.push(0);
        let mut huge_count = b"IDR\x01\xc8\x00".to_vec();
        huge_count.extend_from_slice(&u32::MAX.to_le_bytes());
        for input in [
            &valid[..],
            &trailing,
            &huge_count,
            b"",
            b"IDR\x02",
            b"IDR\x02\x00",
            b"IDR\x03",
            b"IDR\x01\x00\x00",
        ] {
            stored_response(input);
        }
    }
}
