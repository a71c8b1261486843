//! Other spellings of a document: what a client that re-serializes its payload might send.

use super::{
    canonical::{NumberParts, comma_separated},
    doc::Doc,
};

/// Writes `doc` as differently as JSON allows without changing it: white space between every
/// token, members in reverse order, every character of every string as a `\u` escape (UTF-16
/// surrogate pairs beyond the basic plane), and every number as `0.digits` with the exponent
/// shifted to match.
pub(super) fn loose(doc: &Doc, out: &mut Vec<u8>) {
    const GAP: &[u8] = b" \n\t\r";
    out.extend_from_slice(GAP);
    match doc {
        Doc::Null => out.extend_from_slice(b"null"),
        Doc::Bool(value) => out.extend_from_slice(if *value { b"true" } else { b"false" }),
        Doc::Number(text) => number(text, out),
        Doc::String(text) => string(text, out),
        // A loose spelling never fails: every item is written, and each list answers `Some`.
        Doc::Array(items) => {
            out.push(b'[');
            comma_separated(items, out, |item, out| {
                loose(item, out);
                Some(())
            });
            out.extend_from_slice(GAP);
            out.push(b']');
        }
        Doc::Object(members) => {
            out.push(b'{');
            comma_separated(members.iter().rev(), out, |(name, value), out| {
                out.extend_from_slice(GAP);
                string(name, out);
                out.extend_from_slice(GAP);
                out.push(b':');
                loose(value, out);
                Some(())
            });
            out.extend_from_slice(GAP);
            out.push(b'}');
        }
    }
    out.extend_from_slice(GAP);
}

fn string(text: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for unit in text.encode_utf16() {
        out.extend_from_slice(format!("\\u{unit:04X}").as_bytes());
    }
    out.push(b'"');
}

/// `-int.fraction e exponent` as `-0.intfraction e (exponent + len(int))`; a number whose
/// exponent saturated is written as it was, as its value cannot be shifted.
fn number(text: &str, out: &mut Vec<u8>) {
    let parts = NumberParts::new(text);
    if parts.saturated {
        out.extend_from_slice(text.as_bytes());
        return;
    }
    let sign = if parts.negative { "-" } else { "" };
    let exponent = parts.exponent + parts.int.len() as i128;
    let shifted = format!("{sign}0.{}{}E{exponent:+}", parts.int, parts.fraction);
    out.extend_from_slice(shifted.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(doc: &Doc) -> String {
        let mut out = Vec::new();
        loose(doc, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn numbers_keep_their_value() {
        for (text, expected) in [
            ("12.5e3", "0.125E+5"),
            ("-0.5", "-0.05E+1"),
            ("7", "0.7E+1"),
            ("1e-9", "0.1E-8"),
        ] {
            assert_eq!(written(&Doc::Number(text.into())).trim(), expected);
        }
    }

    #[test]
    fn strings_are_all_escapes_and_members_reversed() {
        let doc = Doc::Object(vec![
            ("a".into(), Doc::String("é😀".into())),
            ("b".into(), Doc::Null),
        ]);
        let text: String = written(&doc).split_whitespace().collect();
        assert_eq!(text, r#"{"\u0062":null,"\u0061":"\u00E9\uD83D\uDE00"}"#);
    }
}
