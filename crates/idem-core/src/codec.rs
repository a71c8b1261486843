//! The compact, versioned binary encoding of an [`Outcome`] that stores keep.
//!
//! `"IDR"`, then a tag: `0x01` for a [`StoredResponse`] (layout version 1, below), `0x02` for
//! [`Outcome::Unknown`], after which nothing follows, `0x03` for a response with the trace
//! context of its execution: 16 bytes of trace id, 8 of span id and the trace flags, then the
//! layout of version 1 from the status on. A response without a trace context is written as
//! version 1, so builds that predate the tag `0x03` read every record written without tracing. A build that predates the tag `0x02`
//! reads it as an unsupported version. Builds before that kept an unknown outcome as a response
//! of its own (a `500` problem document); those bytes still decode as [`Outcome::Unknown`].
//!
//! Layout of a response, version 1, integers little-endian:
//!
//! ```text
//! "IDR" 0x01            magic and version
//! u16                   status
//! u32 n, n × field      headers
//! u64 len, len bytes    body
//! u8 0 | u8 1, u32 n, n × field   trailers: absent, or present
//! field = u16 name_len, name (UTF-8), u32 value_len, value
//! ```
//!
//! Decoding never panics and never trusts a length before checking it against the input, so a
//! corrupted record gives a [`DecodeError`], not a crash or a huge allocation.

use bytes::Bytes;

use crate::{OUTCOME_UNKNOWN_TYPE, Outcome, StoredResponse, TraceContext};

const MAGIC: &[u8; 3] = b"IDR";
/// The tag of a response: its layout's version.
const VERSION: u8 = 1;
/// The tag of an unknown outcome.
const UNKNOWN: u8 = 2;
/// The tag of a response with its trace context: a version 1 layout after the context.
const TRACED: u8 = 3;
/// A trace context: trace id, span id, flags.
const TRACE_LEN: usize = 16 + 8 + 1;
/// The smallest encoded header line: two empty lengths.
const MIN_FIELD_LEN: usize = 2 + 4;

/// Why stored bytes are not a valid [`Outcome`] or [`StoredResponse`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The bytes do not start with the record magic.
    #[error("not a stored response (bad magic)")]
    BadMagic,
    /// A version this build does not know (written by a newer idem).
    #[error("stored response version {0} is not supported")]
    UnsupportedVersion(u8),
    /// The bytes end before the record does.
    #[error("stored response is truncated")]
    Truncated,
    /// A status outside 100–999.
    #[error("stored response has an invalid status {0}")]
    InvalidStatus(u16),
    /// A header or trailer name that is empty or not UTF-8.
    #[error("stored response has an invalid header name")]
    InvalidHeaderName,
    /// The trailer flag is neither 0 nor 1.
    #[error("stored response has an invalid trailer flag {0}")]
    InvalidTrailerFlag(u8),
    /// A trace context whose trace or span id is all zeroes.
    #[error("stored response has an invalid trace context")]
    InvalidTraceContext,
    /// Bytes left over after the record.
    #[error("stored response has {0} trailing bytes")]
    TrailingBytes(usize),
}

impl Outcome {
    /// The number of bytes [`Outcome::encode`] produces.
    pub fn encoded_len(&self) -> usize {
        match self {
            Outcome::Response(response) => response.encoded_len(),
            Outcome::Unknown => MAGIC.len() + 1,
        }
    }

    /// Encodes the outcome: a response as [`StoredResponse::encode`] does, an unknown outcome as
    /// its tag.
    ///
    /// # Panics
    ///
    /// As [`StoredResponse::encode`].
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoding to `out` (see [`StoredResponse::encode_into`]).
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        match self {
            Outcome::Response(response) => response.encode_into(out),
            Outcome::Unknown => {
                out.extend_from_slice(MAGIC);
                out.push(UNKNOWN);
            }
        }
    }

    /// Decodes bytes written by [`Outcome::encode`] or [`StoredResponse::encode`]; the response
    /// that earlier builds stored for an unknown outcome decodes as [`Outcome::Unknown`].
    pub fn decode(input: &[u8]) -> Result<Self, DecodeError> {
        if input.get(..MAGIC.len()) == Some(MAGIC) && input.get(MAGIC.len()) == Some(&UNKNOWN) {
            return match input.len() - MAGIC.len() - 1 {
                0 => Ok(Outcome::Unknown),
                extra => Err(DecodeError::TrailingBytes(extra)),
            };
        }
        let response = StoredResponse::decode(input)?;
        if response == legacy_outcome_unknown() {
            return Ok(Outcome::Unknown);
        }
        Ok(Outcome::Response(response))
    }
}

/// What builds before the tag `0x02` stored for an unknown outcome: a `500` whose only header is
/// `content-type: application/problem+json` and whose body is this problem document.
fn legacy_outcome_unknown() -> StoredResponse {
    let body = format!(
        concat!(
            r#"{{"type":"{}","title":"Outcome unknown","status":500,"#,
            r#""detail":"The request was sent but its result was lost; it may have taken effect and will not be executed again under this key."}}"#
        ),
        OUTCOME_UNKNOWN_TYPE
    );
    StoredResponse::new(500)
        .header("content-type", "application/problem+json")
        .body(body)
}

impl StoredResponse {
    /// The number of bytes [`StoredResponse::encode`] produces.
    pub fn encoded_len(&self) -> usize {
        let fields = |f: &[(String, Bytes)]| {
            4 + f
                .iter()
                .map(|(n, v)| MIN_FIELD_LEN + n.len() + v.len())
                .sum::<usize>()
        };
        4 + self.trace.map_or(0, |_| TRACE_LEN)
            + 2
            + fields(&self.headers)
            + 8
            + self.body.len()
            + 1
            + self.trailers.as_deref().map_or(0, fields)
    }

    /// Encodes the response (current version).
    ///
    /// # Panics
    ///
    /// If a header name is longer than 65,535 bytes or a value longer than 4 GiB, which no HTTP
    /// implementation produces.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut out);
        out
    }

    /// Appends the encoding to `out` (which callers size with [`StoredResponse::encoded_len`]),
    /// so that a caller that frames it, as sealing does, allocates once.
    pub(crate) fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        match &self.trace {
            None => out.push(VERSION),
            Some(trace) => {
                out.push(TRACED);
                out.extend_from_slice(&trace.trace_id());
                out.extend_from_slice(&trace.span_id());
                out.push(trace.flags());
            }
        }
        out.extend_from_slice(&self.status.to_le_bytes());
        encode_fields(out, &self.headers);
        out.extend_from_slice(&(self.body.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.body);
        match &self.trailers {
            None => out.push(0),
            Some(trailers) => {
                out.push(1);
                encode_fields(out, trailers);
            }
        }
    }

    /// Decodes bytes written by [`StoredResponse::encode`].
    pub fn decode(input: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader(input);
        if r.take(3)? != MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let trace = match r.u8()? {
            VERSION => None,
            TRACED => {
                let (trace_id, span_id, flags) = (r.array()?, r.array()?, r.u8()?);
                let trace = TraceContext::new(trace_id, span_id, flags)
                    .map_err(|_| DecodeError::InvalidTraceContext)?;
                Some(trace)
            }
            other => return Err(DecodeError::UnsupportedVersion(other)),
        };
        let status = r.u16()?;
        if !(100..=999).contains(&status) {
            return Err(DecodeError::InvalidStatus(status));
        }
        let headers = r.fields()?;
        let body_len = usize::try_from(r.u64()?).map_err(|_| DecodeError::Truncated)?;
        let body = Bytes::copy_from_slice(r.take(body_len)?);
        let trailers = match r.u8()? {
            0 => None,
            1 => Some(r.fields()?),
            flag => return Err(DecodeError::InvalidTrailerFlag(flag)),
        };
        if !r.0.is_empty() {
            return Err(DecodeError::TrailingBytes(r.0.len()));
        }
        Ok(Self {
            status,
            headers,
            body,
            trailers,
            trace,
        })
    }
}

fn encode_fields(out: &mut Vec<u8>, fields: &[(String, Bytes)]) {
    let count = u32::try_from(fields.len()).expect("fewer than 2^32 header lines");
    out.extend_from_slice(&count.to_le_bytes());
    for (name, value) in fields {
        let name_len = u16::try_from(name.len()).expect("header name under 64 KiB");
        let value_len = u32::try_from(value.len()).expect("header value under 4 GiB");
        out.extend_from_slice(&name_len.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(&value_len.to_le_bytes());
        out.extend_from_slice(value);
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.0.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        self.array().map(u16::from_le_bytes)
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        self.array().map(u32::from_le_bytes)
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        self.array().map(u64::from_le_bytes)
    }

    fn fields(&mut self) -> Result<Vec<(String, Bytes)>, DecodeError> {
        let count = self.u32()? as usize;
        // A corrupted count must not make us allocate more than the input could hold.
        if count > self.0.len() / MIN_FIELD_LEN {
            return Err(DecodeError::Truncated);
        }
        let mut fields = Vec::with_capacity(count);
        for _ in 0..count {
            let name_len = usize::from(self.u16()?);
            let name = std::str::from_utf8(self.take(name_len)?)
                .ok()
                .filter(|n| !n.is_empty())
                .ok_or(DecodeError::InvalidHeaderName)?;
            let name = name.to_owned();
            let value_len = self.u32()? as usize;
            let value = Bytes::copy_from_slice(self.take(value_len)?);
            fields.push((name, value));
        }
        Ok(fields)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StoredResponse {
        StoredResponse::new(200)
            .header("content-type", "application/grpc")
            .header("x-repeat", "1")
            .header("x-repeat", &b"\xff\x00binary"[..])
            .body(&b"\x00\x01\x02"[..])
            .trailer("grpc-status", "0")
    }

    #[test]
    fn round_trips_headers_body_and_trailers() {
        let r = sample();
        let bytes = r.encode();
        assert_eq!(bytes.len(), r.encoded_len());
        assert_eq!(StoredResponse::decode(&bytes), Ok(r));
    }

    #[test]
    fn a_traced_response_keeps_its_trace_context_and_an_untraced_one_stays_version_1() {
        let context: TraceContext = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            .parse()
            .unwrap();
        let traced = sample().trace(context);
        let bytes = traced.encode();
        assert_eq!(bytes.len(), traced.encoded_len());
        assert_eq!(&bytes[..4], b"IDR\x03");
        assert_eq!(&bytes[4..20], &context.trace_id());
        assert_eq!(&bytes[20..28], &context.span_id());
        assert_eq!(bytes[28], 0x01);
        // After the context, the layout of version 1.
        assert_eq!(&bytes[29..], &sample().encode()[4..]);
        assert_eq!(StoredResponse::decode(&bytes), Ok(traced.clone()));
        assert_eq!(
            Outcome::decode(&bytes),
            Ok(Outcome::Response(traced.clone()))
        );
        assert_eq!(&sample().encode()[..4], b"IDR\x01");

        let mut zeroed = bytes.clone();
        zeroed[4..20].fill(0);
        assert_eq!(
            StoredResponse::decode(&zeroed),
            Err(DecodeError::InvalidTraceContext)
        );
        assert_eq!(
            StoredResponse::decode(&bytes[..20]),
            Err(DecodeError::Truncated)
        );
    }

    #[test]
    fn no_trailers_and_empty_trailers_are_different() {
        let none = StoredResponse::new(204);
        let mut empty = StoredResponse::new(204);
        empty.trailers = Some(Vec::new());
        assert_eq!(StoredResponse::decode(&none.encode()), Ok(none.clone()));
        assert_eq!(StoredResponse::decode(&empty.encode()), Ok(empty.clone()));
        assert_ne!(none.encode(), empty.encode());
    }

    #[test]
    fn every_truncation_is_a_typed_error() {
        let bytes = sample().encode();
        for len in 0..bytes.len() {
            let err = StoredResponse::decode(&bytes[..len]).unwrap_err();
            assert!(
                matches!(err, DecodeError::Truncated | DecodeError::BadMagic),
                "at {len}: {err:?}"
            );
        }
    }

    #[test]
    fn corrupted_headers_are_rejected() {
        let mut bytes = sample().encode();
        bytes[3] = 9;
        assert_eq!(
            StoredResponse::decode(&bytes),
            Err(DecodeError::UnsupportedVersion(9))
        );
        let mut bytes = sample().encode();
        bytes[0] = b'X';
        assert_eq!(StoredResponse::decode(&bytes), Err(DecodeError::BadMagic));
        let mut bytes = sample().encode();
        bytes[4..6].copy_from_slice(&42u16.to_le_bytes());
        assert_eq!(
            StoredResponse::decode(&bytes),
            Err(DecodeError::InvalidStatus(42))
        );
        let mut bytes = sample().encode();
        bytes.push(0);
        assert_eq!(
            StoredResponse::decode(&bytes),
            Err(DecodeError::TrailingBytes(1))
        );
    }

    #[test]
    fn huge_counts_do_not_allocate() {
        let mut bytes = b"IDR\x01\xc8\x00".to_vec();
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(StoredResponse::decode(&bytes), Err(DecodeError::Truncated));
        let mut bytes = b"IDR\x01\xc8\x00\x00\x00\x00\x00".to_vec();
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(StoredResponse::decode(&bytes), Err(DecodeError::Truncated));
    }

    #[test]
    fn invalid_names_and_flags_are_rejected() {
        let mut empty_name = b"IDR\x01\xc8\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00".to_vec();
        empty_name.extend_from_slice(&[0; 9]);
        assert_eq!(
            StoredResponse::decode(&empty_name),
            Err(DecodeError::InvalidHeaderName)
        );
        let mut bad_flag = StoredResponse::new(200).encode();
        *bad_flag.last_mut().unwrap() = 7;
        assert_eq!(
            StoredResponse::decode(&bad_flag),
            Err(DecodeError::InvalidTrailerFlag(7))
        );
    }

    #[test]
    fn outcomes_round_trip_and_a_response_keeps_its_encoding() {
        let response = sample();
        let outcome = Outcome::from(response.clone());
        assert_eq!(outcome.encode(), response.encode());
        assert_eq!(outcome.encoded_len(), response.encoded_len());
        assert_eq!(Outcome::decode(&outcome.encode()), Ok(outcome));
        assert_eq!(Outcome::Unknown.encode(), b"IDR\x02");
        assert_eq!(Outcome::Unknown.encoded_len(), 4);
        assert_eq!(Outcome::decode(b"IDR\x02"), Ok(Outcome::Unknown));
    }

    #[test]
    fn an_unknown_outcome_with_bytes_after_its_tag_is_rejected() {
        assert_eq!(
            Outcome::decode(b"IDR\x02\x00"),
            Err(DecodeError::TrailingBytes(1))
        );
        assert_eq!(
            Outcome::decode(b"IDR\x04"),
            Err(DecodeError::UnsupportedVersion(4))
        );
        assert_eq!(Outcome::decode(b"IDR"), Err(DecodeError::Truncated));
    }

    /// The bytes that builds before the tag `0x02` stored for an unknown outcome.
    fn legacy_outcome_unknown_bytes() -> Vec<u8> {
        [
            &b"IDR\x01"[..],
            b"\xf4\x01",
            b"\x01\x00\x00\x00",
            b"\x0c\x00content-type",
            b"\x18\x00\x00\x00application/problem+json",
            b"\xd3\x00\x00\x00\x00\x00\x00\x00",
            br#"{"type":"urn:idem:problem:outcome-unknown","title":"Outcome unknown","status":500,"#,
            br#""detail":"The request was sent but its result was lost; it may have taken effect "#,
            br#"and will not be executed again under this key."}"#,
            b"\x00",
        ]
        .concat()
    }

    #[test]
    fn the_response_stored_for_an_unknown_outcome_by_earlier_builds_decodes_as_unknown() {
        let legacy = legacy_outcome_unknown_bytes();
        assert_eq!(Outcome::decode(&legacy), Ok(Outcome::Unknown));
        assert_eq!(legacy_outcome_unknown().encode(), legacy);
        // The same problem with one more header is a response like any other.
        let mut other = legacy_outcome_unknown();
        other.headers.push(("x-extra".to_owned(), Bytes::from("1")));
        assert_eq!(
            Outcome::decode(&other.encode()),
            Ok(Outcome::Response(other))
        );
    }
}
