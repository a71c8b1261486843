//! Request fingerprints: a blake3 hash of what makes two requests with one key the same request.
//!
//! # Examples
//!
//! ```
//! use idem_core::{Fingerprint, FingerprintMode};
//!
//! let fingerprint = |body: &[u8]| {
//!     Fingerprint::builder(FingerprintMode::Json)
//!         .method("POST")
//!         .path("/v1/payments")
//!         .query(None)
//!         .body(Some("application/json; charset=utf-8"), body)
//! };
//! let first = fingerprint(br#"{"amount": 100, "currency": "EUR"}"#);
//!
//! // A client that re-serializes its payload on retry is recognized...
//! assert_eq!(first, fingerprint(br#"{"currency":"EUR","amount":1.00e2}"#));
//! // ...but another amount is another request.
//! assert_ne!(first, fingerprint(br#"{"amount": 101, "currency": "EUR"}"#));
//! ```
//!
//! # What is hashed
//!
//! The method, path and query as sent, any extra headers the caller picks, and the body. In
//! [`FingerprintMode::Json`], a body whose `Content-Type` is `application/json` or `…+json` is
//! hashed in a canonical form (RFC 8785's member order, white space and string escapes, numbers
//! by exact decimal value, never through a 64-bit float), so that a retry which re-serializes its
//! payload is not taken for a different request. Invalid JSON, or JSON with a duplicate member
//! name, is hashed as the bytes sent; so is every body in [`FingerprintMode::Raw`].
//!
//! # Encoding
//!
//! The hash is blake3 in key derivation mode with the context `"idem 2026-11 request fingerprint
//! v1"`. Each field is written as a tag byte, then each of its parts as a little-endian `u64`
//! length and the bytes, so the input can be split back into fields in only one way:
//!
//! | field | tag | parts |
//! | --- | --- | --- |
//! | method | 1 | the method |
//! | path | 2 | the path |
//! | no query | 3 | (none) |
//! | query | 4 | the query, without `?` |
//! | header | 5 | the ASCII-lowercased name, the value |
//! | body as sent | 6 | the bytes |
//! | canonical JSON body | 7 | the canonical form |
//!
//! Changing any of this changes every fingerprint, so that stored records no longer match their
//! retries: it needs a new context string.

mod canonical_json;

use std::{fmt, str::FromStr, sync::LazyLock};

use blake3::hazmat::{ContextKey, HasherExt, hash_derive_key_context};

/// blake3 key derivation context; its date and version name this encoding.
const CONTEXT: &str = "idem 2026-11 request fingerprint v1";

/// The tag that starts each field in the hash input.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Field {
    Method = 1,
    Path = 2,
    NoQuery = 3,
    Query = 4,
    Header = 5,
    RawBody = 6,
    CanonicalJsonBody = 7,
}

/// The 32-byte blake3 fingerprint of a request.
///
/// Built with [`Fingerprint::builder`]; written as 64 lowercase hexadecimal digits, and parsed from
/// 64 hexadecimal digits in either case.
///
/// # Examples
///
/// ```
/// use idem_core::Fingerprint;
///
/// let fingerprint = Fingerprint::from_bytes([0xab; 32]);
/// let text = fingerprint.to_string();
/// assert_eq!(text, "ab".repeat(32));
/// assert_eq!(text.parse::<Fingerprint>(), Ok(fingerprint));
/// assert!("abc".parse::<Fingerprint>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// Wraps 32 bytes, such as a fingerprint read back from a store.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// The 32 bytes of the fingerprint.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Starts fingerprinting a request; `mode` says how its body is read.
    pub fn builder(mode: FingerprintMode) -> FingerprintBuilder {
        // The derive-key context hashed once, not for every request.
        static CONTEXT_KEY: LazyLock<ContextKey> =
            LazyLock::new(|| hash_derive_key_context(CONTEXT));
        FingerprintBuilder {
            context: &CONTEXT_KEY,
            fields: Vec::with_capacity(128),
            mode,
        }
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut text = [0; 64];
        for (pair, byte) in text.chunks_exact_mut(2).zip(self.0) {
            pair[0] = HEX[usize::from(byte >> 4)];
            pair[1] = HEX[usize::from(byte & 0xf)];
        }
        f.pad(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for Fingerprint {
    type Err = InvalidFingerprint;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.as_bytes();
        if text.len() != 64 {
            return Err(InvalidFingerprint);
        }
        let digit = |digit: u8| {
            char::from(digit)
                .to_digit(16)
                .map(|value| value as u8)
                .ok_or(InvalidFingerprint)
        };
        let mut bytes = [0; 32];
        for (byte, pair) in bytes.iter_mut().zip(text.chunks_exact(2)) {
            *byte = (digit(pair[0])? << 4) | digit(pair[1])?;
        }
        Ok(Self(bytes))
    }
}

impl TryFrom<&[u8]> for Fingerprint {
    type Error = InvalidFingerprint;

    fn try_from(bytes: &[u8]) -> Result<Self, Self::Error> {
        bytes.try_into().map(Self).map_err(|_| InvalidFingerprint)
    }
}

/// Not a fingerprint: it is 32 bytes, written as 64 hexadecimal digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid fingerprint: expected 32 bytes, or 64 hexadecimal digits")]
pub struct InvalidFingerprint;

/// How a request body is read into its fingerprint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum FingerprintMode {
    /// A body whose media type is `application/json` or `…+json` is canonicalized first, so that
    /// member order, white space, string escapes and the spelling of numbers don't matter. Any
    /// other body, invalid JSON, and JSON with a duplicate member name are hashed as sent.
    #[default]
    Json,
    /// Every body is hashed as sent.
    Raw,
}

/// Hashes a request field by field; made by [`Fingerprint::builder`], finished by
/// [`body`](Self::body).
///
/// Fields are hashed in the order they are given, so callers must give them in one fixed order.
#[derive(Debug, Clone)]
pub struct FingerprintBuilder {
    context: &'static ContextKey,
    /// The fields before the body, encoded as they are hashed: hashed in one call with the body
    /// (a call of blake3's costs about as much as hashing a hundred bytes), and no 1.9 KB hasher
    /// copied by every consuming setter.
    fields: Vec<u8>,
    mode: FingerprintMode,
}

impl FingerprintBuilder {
    /// Adds the request method, as sent (methods are case-sensitive).
    #[must_use]
    pub fn method(mut self, method: &str) -> Self {
        self.field(Field::Method, &[method.as_bytes()]);
        self
    }

    /// Adds the request path, as sent.
    #[must_use]
    pub fn path(mut self, path: &str) -> Self {
        self.field(Field::Path, &[path.as_bytes()]);
        self
    }

    /// Adds the query as sent, without the `?`. `None` (no `?`) and `Some("")` (a bare `?`) are
    /// different requests.
    #[must_use]
    pub fn query(mut self, query: Option<&str>) -> Self {
        match query {
            Some(query) => self.field(Field::Query, &[query.as_bytes()]),
            None => self.field(Field::NoQuery, &[]),
        }
        self
    }

    /// Adds a header. Its name is compared case-insensitively; every call is hashed, in order, so
    /// a repeated header counts each time.
    #[must_use]
    pub fn header(mut self, name: &str, value: &[u8]) -> Self {
        let name = name.to_ascii_lowercase();
        self.field(Field::Header, &[name.as_bytes(), value]);
        self
    }

    /// Adds the body and its `Content-Type`, and returns the fingerprint.
    #[must_use]
    pub fn body(mut self, content_type: Option<&str>, body: &[u8]) -> Fingerprint {
        let canonical = match self.mode {
            FingerprintMode::Json if content_type.is_some_and(is_json) => {
                canonical_json::canonicalize(body)
            }
            _ => None,
        };
        let (tag, body) = match &canonical {
            Some(canonical) => (Field::CanonicalJsonBody, &canonical[..]),
            None => (Field::RawBody, body),
        };
        // The body is hashed where it is, not copied after the fields.
        self.field(tag, &[]);
        self.fields
            .extend_from_slice(&(body.len() as u64).to_le_bytes());
        let mut hasher = blake3::Hasher::new_from_context_key(self.context);
        hasher.update(&self.fields);
        hasher.update(body);
        Fingerprint(hasher.finalize().into())
    }

    fn field(&mut self, tag: Field, parts: &[&[u8]]) {
        self.fields.push(tag as u8);
        for part in parts {
            self.fields
                .extend_from_slice(&(part.len() as u64).to_le_bytes());
            self.fields.extend_from_slice(part);
        }
    }
}

/// Whether a `Content-Type` names JSON: its media type, without parameters, is `application/json`
/// or ends with `+json`, in any case.
fn is_json(content_type: &str) -> bool {
    let media_type = content_type
        .split_once(';')
        .map_or(content_type, |(media_type, _)| media_type)
        .trim()
        .as_bytes();
    media_type.eq_ignore_ascii_case(b"application/json")
        || media_type
            .len()
            .checked_sub(5)
            .is_some_and(|suffix| media_type[suffix..].eq_ignore_ascii_case(b"+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const JSON: Option<&str> = Some("application/json");

    fn request(mode: FingerprintMode) -> FingerprintBuilder {
        Fingerprint::builder(mode)
            .method("POST")
            .path("/v1/payments")
            .query(Some("expand=charges"))
    }

    fn json(body: &str) -> Fingerprint {
        request(FingerprintMode::Json).body(JSON, body.as_bytes())
    }

    fn raw(body: &str) -> Fingerprint {
        request(FingerprintMode::Raw).body(JSON, body.as_bytes())
    }

    #[test]
    fn encoding_is_the_documented_one() {
        let fingerprint = Fingerprint::builder(FingerprintMode::Json)
            .method("POST")
            .path("/a")
            .query(None)
            .header("X-Tenant", b"t1")
            .body(JSON, br#"{"b":1.0, "a":[]}"#);

        let mut hasher = blake3::Hasher::new_derive_key("idem 2026-11 request fingerprint v1");
        hasher.update(b"\x01\x04\0\0\0\0\0\0\0POST");
        hasher.update(b"\x02\x02\0\0\0\0\0\0\0/a");
        hasher.update(b"\x03");
        hasher.update(b"\x05\x08\0\0\0\0\0\0\0x-tenant\x02\0\0\0\0\0\0\0t1");
        hasher.update(b"\x07\x0e\0\0\0\0\0\0\0{\"a\":[],\"b\":1}");
        assert_eq!(fingerprint.as_bytes(), hasher.finalize().as_bytes());
        assert_eq!(
            fingerprint.to_string(),
            "27b19a8158ed32b319d77814572c7125276b981010099d1204b122c28a4c26f6"
        );
    }

    #[test]
    fn member_order_and_white_space_do_not_matter() {
        assert_eq!(
            json(r#"{"amount":100,"currency":"EUR"}"#),
            json("{\n  \"currency\" : \"EUR\",\n  \"amount\" : 100\n}\n")
        );
    }

    #[test]
    fn string_escapes_do_not_matter() {
        assert_eq!(json(r#"{"a":"\u0041"}"#), json(r#"{"a":"A"}"#));
        assert_eq!(json(r#"{"a":"\/"}"#), json(r#"{"a":"/"}"#));
        assert_eq!(json(r#"{"\u00e9":"\u00E9"}"#), json(r#"{"é":"é"}"#));
        assert_ne!(json(r#"{"a":"A"}"#), json(r#"{"a":"a"}"#));
    }

    #[test]
    fn numbers_compare_by_exact_decimal_value() {
        let one = json(r#"{"n":1}"#);
        for same in ["1.0", "1e0", "10e-1", "0.1e1", "1.000E+0"] {
            assert_eq!(json(&format!(r#"{{"n":{same}}}"#)), one, "{same}");
        }
        assert_eq!(json(r#"{"n":-0}"#), json(r#"{"n":0}"#));
        assert_ne!(
            json(r#"{"id":12345678901234567890}"#),
            json(r#"{"id":12345678901234567891}"#)
        );
        assert_eq!(json(r#"{"n":1e400}"#), json(r#"{"n":10e399}"#));
        assert_ne!(json(r#"{"n":1e400}"#), json(r#"{"n":1e401}"#));
        assert_ne!(json(r#"{"n":1}"#), json(r#"{"n":"1"}"#));
    }

    #[test]
    fn duplicate_member_names_are_hashed_as_sent() {
        let body = r#"{"a":1,"a":2}"#;
        assert_eq!(json(body), raw(body));
        assert_ne!(json(body), json(r#"{"a":1, "a":2}"#));
    }

    #[test]
    fn invalid_json_is_hashed_as_sent() {
        for body in [
            "{\"a\":1,}",
            "",
            "{\"a\":\"\\ud800\"}",
            "[1e99999999999999999999]",
        ] {
            assert_eq!(json(body), raw(body), "{body}");
        }
        assert_ne!(json("{\"a\":1,}"), json("{\"a\":1 ,}"));
    }

    #[test]
    fn a_raw_body_never_equals_a_canonical_one() {
        // `{"a":1}` is its own canonical form; the tags keep raw and canonical apart.
        assert_ne!(json(r#"{"a":1}"#), raw(r#"{"a":1}"#));
    }

    #[test]
    fn json_suffix_media_types_with_parameters_are_json() {
        for content_type in [
            "application/problem+json; charset=utf-8",
            "Application/JSON",
            " application/json ;charset=utf-8",
            "application/vnd.api+JSON",
        ] {
            let fingerprint = |body: &str| {
                request(FingerprintMode::Json).body(Some(content_type), body.as_bytes())
            };
            assert_eq!(
                fingerprint(r#"{"a":1}"#),
                fingerprint(r#"{ "a": 1 }"#),
                "{content_type}"
            );
        }
    }

    #[test]
    fn other_media_types_are_hashed_as_sent() {
        for content_type in [
            Some("text/plain"),
            Some("application/jsonl"),
            Some("application/x-www-form-urlencoded"),
            Some("text/plain; profile=application/json"),
            Some(""),
            None,
        ] {
            let fingerprint =
                |body: &str| request(FingerprintMode::Json).body(content_type, body.as_bytes());
            assert_ne!(
                fingerprint(r#"{"a":1}"#),
                fingerprint(r#"{ "a": 1 }"#),
                "{content_type:?}"
            );
            assert_eq!(
                fingerprint(r#"{"a":1}"#),
                request(FingerprintMode::Raw).body(content_type, br#"{"a":1}"#)
            );
        }
    }

    #[test]
    fn raw_mode_sees_white_space() {
        assert_ne!(raw(r#"{"a":1}"#), raw(r#"{ "a": 1 }"#));
        assert_eq!(raw(r#"{"a":1}"#), raw(r#"{"a":1}"#));
    }

    #[test]
    fn every_field_changes_the_fingerprint() {
        let build = |method, path, query, header: Option<(&str, &[u8])>, body: &[u8]| {
            let builder = Fingerprint::builder(FingerprintMode::Json)
                .method(method)
                .path(path)
                .query(query);
            let builder = match header {
                Some((name, value)) => builder.header(name, value),
                None => builder,
            };
            builder.body(JSON, body)
        };
        let base = build("POST", "/a", Some("x=1"), Some(("x-tenant", b"t1")), b"{}");
        let variants = [
            build("PATCH", "/a", Some("x=1"), Some(("x-tenant", b"t1")), b"{}"),
            build("post", "/a", Some("x=1"), Some(("x-tenant", b"t1")), b"{}"),
            build("POST", "/b", Some("x=1"), Some(("x-tenant", b"t1")), b"{}"),
            build("POST", "/a", Some("x=2"), Some(("x-tenant", b"t1")), b"{}"),
            build("POST", "/a", None, Some(("x-tenant", b"t1")), b"{}"),
            build("POST", "/a", Some("x=1"), Some(("x-tenant", b"t2")), b"{}"),
            build("POST", "/a", Some("x=1"), Some(("x-region", b"t1")), b"{}"),
            build("POST", "/a", Some("x=1"), None, b"{}"),
            build("POST", "/a", Some("x=1"), Some(("x-tenant", b"t1")), b"[]"),
        ];
        for (i, variant) in variants.iter().enumerate() {
            assert_ne!(*variant, base, "variant {i}");
        }
        assert_eq!(
            build("POST", "/a", Some("x=1"), Some(("x-tenant", b"t1")), b"{}"),
            base
        );
    }

    #[test]
    fn field_boundaries_cannot_be_moved() {
        let mode = FingerprintMode::Raw;
        let split = |path, query| {
            Fingerprint::builder(mode)
                .method("GET")
                .path(path)
                .query(Some(query))
                .body(None, b"")
        };
        assert_ne!(split("/a", "b"), split("/ab", ""));
        assert_ne!(split("/a", "b"), split("/a?b", ""));
        assert_ne!(
            Fingerprint::builder(mode)
                .method("PO")
                .path("ST/a")
                .body(None, b""),
            Fingerprint::builder(mode)
                .method("POST")
                .path("/a")
                .body(None, b"")
        );
        assert_ne!(
            Fingerprint::builder(mode)
                .header("a", b"bc")
                .body(None, b""),
            Fingerprint::builder(mode)
                .header("ab", b"c")
                .body(None, b"")
        );
        assert_ne!(
            Fingerprint::builder(mode).path("/a").body(None, b""),
            Fingerprint::builder(mode).query(Some("/a")).body(None, b"")
        );
    }

    #[test]
    fn no_query_differs_from_an_empty_query() {
        let fingerprint = |query| request(FingerprintMode::Raw).query(query).body(None, b"");
        assert_ne!(fingerprint(None), fingerprint(Some("")));
    }

    #[test]
    fn header_names_are_case_insensitive_and_repeats_count() {
        let fingerprint = |headers: &[(&str, &[u8])]| {
            headers
                .iter()
                .fold(request(FingerprintMode::Json), |builder, (name, value)| {
                    builder.header(name, value)
                })
                .body(None, b"")
        };
        assert_eq!(
            fingerprint(&[("X-Tenant", b"t1")]),
            fingerprint(&[("x-tenant", b"t1")])
        );
        assert_ne!(
            fingerprint(&[("x-tenant", b"t1")]),
            fingerprint(&[("x-tenant", b"T1")])
        );
        assert_ne!(
            fingerprint(&[("x-tenant", b"t1")]),
            fingerprint(&[("x-tenant", b"t1"), ("x-tenant", b"t1")])
        );
        assert_ne!(
            fingerprint(&[("a", b"1"), ("b", b"2")]),
            fingerprint(&[("b", b"2"), ("a", b"1")])
        );
    }

    #[test]
    fn hex_text_round_trips() {
        let fingerprint = json(r#"{"a":1}"#);
        let text = fingerprint.to_string();
        assert_eq!(text.len(), 64);
        assert_eq!(text, format!("{fingerprint:?}"));
        assert_eq!(text.parse::<Fingerprint>(), Ok(fingerprint));
        assert_eq!(
            text.to_ascii_uppercase().parse::<Fingerprint>(),
            Ok(fingerprint)
        );

        let bytes: [u8; 32] = std::array::from_fn(|i| i as u8 * 8);
        let expected = "0008101820283038404850586068707880889098a0a8b0b8c0c8d0d8e0e8f0f8";
        assert_eq!(Fingerprint::from_bytes(bytes).to_string(), expected);
        assert_eq!(expected.parse(), Ok(Fingerprint::from_bytes(bytes)));
    }

    #[test]
    fn malformed_hex_is_rejected() {
        let valid = "ab".repeat(32);
        for text in [
            "",
            &valid[..63],
            &format!("{valid}0"),
            &format!("{}g", &valid[..63]),
            &format!("+{}", &valid[..63]),
            &format!(" {}", &valid[..63]),
        ] {
            assert_eq!(
                text.parse::<Fingerprint>(),
                Err(InvalidFingerprint),
                "{text}"
            );
        }
        assert_eq!(
            "é".repeat(32).parse::<Fingerprint>(),
            Err(InvalidFingerprint)
        );
    }

    #[test]
    fn only_32_bytes_make_a_fingerprint() {
        let bytes = [7; 33];
        assert_eq!(
            Fingerprint::try_from(&bytes[..32]),
            Ok(Fingerprint::from_bytes([7; 32]))
        );
        assert_eq!(Fingerprint::try_from(&bytes[..]), Err(InvalidFingerprint));
        assert_eq!(Fingerprint::try_from(&bytes[..31]), Err(InvalidFingerprint));
        assert_eq!(Fingerprint::try_from(&[][..]), Err(InvalidFingerprint));
    }
}
