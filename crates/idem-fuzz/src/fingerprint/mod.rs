//! The `fingerprint` target: request bodies read as JSON.
//!
//! The canonicalizer inside [`Fingerprint`] is private, but the fingerprint's encoding is
//! documented (a blake3 key derivation over tagged, length-prefixed fields), so the canonical
//! form it hashed can be checked from outside: the fingerprint of a body alone equals the hash of
//! the canonical-JSON field holding the reference's canonical form.

mod canonical;
mod doc;
mod variant;

use idem_core::{Fingerprint, FingerprintMode};

use self::doc::Doc;

/// The blake3 context of fingerprints, from idem-core's documentation.
const CONTEXT: &str = "idem 2026-11 request fingerprint v1";
/// The tags of the body fields, from idem-core's documentation.
const RAW_BODY: u8 = 6;
const CANONICAL_JSON_BODY: u8 = 7;

const JSON: Option<&str> = Some("application/json");

/// Fingerprints `data` as a request body and checks how it was read.
///
/// - Every body is hashed as sent in raw mode, or when its `Content-Type` is not JSON.
/// - Invalid JSON (by serde_json, nesting at most 127 levels as the docs say), JSON with a
///   duplicate member name, and JSON with a number whose canonical exponent is beyond ±2^62 are
///   hashed as sent.
/// - Any other JSON is hashed in the canonical form that a reference written from the docs
///   (member order by UTF-16 code units, RFC 8785 strings, numbers by exact decimal value)
///   gives. That form is its own canonical form, and the same document written with other white
///   space, member order, string escapes and number spellings has the same fingerprint. So has
///   the document re-serialized by serde_json when its `Value` keeps every number by value (it
///   holds a number as a `u64`, `i64` or `f64`); otherwise serde_json's text is hashed in its own
///   canonical form.
///
/// # Panics
///
/// When one of these does not hold.
pub fn fingerprint(data: &[u8]) {
    let json = body(FingerprintMode::Json, JSON, data);
    let raw = body(FingerprintMode::Raw, JSON, data);
    assert_eq!(
        raw,
        documented(RAW_BODY, data),
        "raw mode does not hash the bytes"
    );
    assert_eq!(body(FingerprintMode::Json, Some("text/plain"), data), raw);
    assert_eq!(
        body(
            FingerprintMode::Json,
            Some("Application/Vnd.Idem+JSON ; charset=utf-8"),
            data
        ),
        json,
        "a +json media type is not read as JSON"
    );

    let doc = Doc::parse(data);
    if !doc.as_ref().is_some_and(Doc::imitates_serde_internals) {
        // `Value` also refuses a number beyond `f64`'s range, which is still JSON.
        let in_range =
            |doc: &Doc| doc.all_numbers(&|text| serde_json::from_str::<f64>(text).is_ok());
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(data).is_ok(),
            doc.as_ref().is_some_and(in_range),
            "the oracle and serde_json disagree on whether this is JSON"
        );
    }
    let Some(doc) = doc else {
        assert_eq!(json, raw, "invalid JSON is not hashed as sent");
        return;
    };
    check_document(&doc, data, json);

    let mut loose = Vec::new();
    variant::loose(&doc, &mut loose);
    check_document(&doc, &loose, body(FingerprintMode::Json, JSON, &loose));

    if let Some(canonical) = canonical::canonical(&doc) {
        let written = serde_json::from_slice::<serde_json::Value>(data)
            .ok()
            .filter(|_| !doc.imitates_serde_internals())
            .and_then(|value| serde_json::to_vec_pretty(&value).ok());
        if let Some(written) = written {
            let json = body(FingerprintMode::Json, JSON, &written);
            let reread = Doc::parse(&written).expect("serde_json writes JSON");
            check_document(&reread, &written, json);
            if doc.all_numbers(&kept_by_value) {
                assert_eq!(
                    json,
                    documented(CANONICAL_JSON_BODY, &canonical),
                    "serde_json's re-serialization has another fingerprint"
                );
            }
        }
    }
}

/// Whether serde_json's `Value` keeps the number written `text` by value.
fn kept_by_value(text: &str) -> bool {
    let written = serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|value| serde_json::to_string(&value).ok());
    written.is_some_and(|written| canonical::number(&written) == canonical::number(text))
}

/// Checks the fingerprint of `text`, a spelling of `doc`.
fn check_document(doc: &Doc, text: &[u8], json: Fingerprint) {
    match canonical::canonical(doc) {
        None => assert_eq!(
            json,
            documented(RAW_BODY, text),
            "JSON with a duplicate name or an exponent out of range is not hashed as sent"
        ),
        Some(canonical) => {
            let expected = documented(CANONICAL_JSON_BODY, &canonical);
            assert_eq!(
                json,
                expected,
                "not hashed in the reference's canonical form {:?} (from {:?})",
                String::from_utf8_lossy(&canonical),
                String::from_utf8_lossy(text)
            );
            assert_eq!(
                body(FingerprintMode::Json, JSON, &canonical),
                expected,
                "the canonical form is not its own canonical form"
            );
        }
    }
}

/// The fingerprint of a request made of this body alone.
fn body(mode: FingerprintMode, content_type: Option<&str>, body: &[u8]) -> Fingerprint {
    Fingerprint::builder(mode).body(content_type, body)
}

/// The fingerprint of one body field, by the documented encoding.
fn documented(tag: u8, bytes: &[u8]) -> Fingerprint {
    let mut hasher = blake3::Hasher::new_derive_key(CONTEXT);
    hasher.update(&[tag]);
    hasher.update(&(bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
    Fingerprint::from_bytes(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_encoding_is_the_crates() {
        let canonical = br#"{"a":[],"b":1}"#;
        assert_eq!(
            body(FingerprintMode::Json, JSON, br#"{"b":1.0, "a":[]}"#),
            documented(CANONICAL_JSON_BODY, canonical)
        );
        assert_eq!(
            body(FingerprintMode::Raw, JSON, canonical),
            documented(RAW_BODY, canonical)
        );
    }

    #[test]
    fn accepts_the_documented_edge_cases() {
        for input in [
            &br#"{"b":[1.50,true,null],"a":"\u00e9"}"#[..],
            br#"{"a":1,"\u0061":2}"#,
            br#"{"$serde_json::private::Number":"1"}"#,
            br#"{"$serde_json::private::RawValue":"1"}"#,
            b"12345678901234567891",
            b"1e4611686018427387904",
            b"1e4611686018427387905",
            b"0.1e4611686018427387905",
            b"-0.000e-7",
            b"\"\\ud83d\\ude00\"",
            b"\"\\ud800\"",
            b"\xef\xbb\xbf{}",
            b"",
            &b"[".repeat(100_000),
        ] {
            fingerprint(input);
        }
    }

    #[test]
    fn numbers_serde_json_rounds_are_told_apart() {
        for (text, kept) in [
            ("1.50", true),
            ("-0", true),
            ("18446744073709551615", true),
            ("0.1", true),
            ("18446744073709551616", false),
            ("123456789012345678901234", false),
            ("1e400", false),
        ] {
            assert_eq!(kept_by_value(text), kept, "{text}");
        }
        for input in [
            &b"[18446744073709551616, 0.30000000000000000001, 1e400]"[..],
            b"{\"a\": 1e-400, \"b\": 123456789012345678901234}",
        ] {
            fingerprint(input);
        }
    }

    #[test]
    fn accepts_the_nesting_limit_and_refuses_one_more() {
        let nested = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        assert!(Doc::parse(nested(127).as_bytes()).is_some());
        assert!(Doc::parse(nested(128).as_bytes()).is_none());
        fingerprint(nested(127).as_bytes());
        fingerprint(nested(128).as_bytes());
    }
}
