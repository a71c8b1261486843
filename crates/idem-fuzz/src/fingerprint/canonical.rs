//! The reference canonical form, written from idem-core's documentation of it.

use super::doc::Doc;

/// Largest magnitude of a canonical exponent.
const MAX_EXPONENT: i128 = 1 << 62;
/// Where a written exponent stops growing as it is read: beyond any canonical exponent.
const SATURATED_EXPONENT: i128 = 10i128.pow(30);

/// The canonical form of `doc`, or `None` when it has a duplicate member name or a number whose
/// canonical exponent is beyond ±2^62.
pub(super) fn canonical(doc: &Doc) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    write(doc, &mut out)?;
    Some(out)
}

fn write(doc: &Doc, out: &mut Vec<u8>) -> Option<()> {
    match doc {
        Doc::Null => out.extend_from_slice(b"null"),
        Doc::Bool(true) => out.extend_from_slice(b"true"),
        Doc::Bool(false) => out.extend_from_slice(b"false"),
        Doc::Number(text) => out.extend_from_slice(number(text)?.as_bytes()),
        Doc::String(text) => string(text, out),
        Doc::Array(items) => {
            out.push(b'[');
            comma_separated(items, out, write)?;
            out.push(b']');
        }
        Doc::Object(members) => {
            let mut sorted: Vec<_> = members.iter().collect();
            // RFC 8785 §3.2.3: by UTF-16 code units.
            sorted.sort_by(|(a, _), (b, _)| a.encode_utf16().cmp(b.encode_utf16()));
            if sorted.windows(2).any(|pair| pair[0].0 == pair[1].0) {
                return None;
            }
            out.push(b'{');
            comma_separated(sorted, out, |(name, value), out| {
                string(name, out);
                out.push(b':');
                write(value, out)
            })?;
            out.push(b'}');
        }
    }
    Some(())
}

/// Writes each of `items` with `write_item`, a `,` between two, the elements of a JSON array or
/// the members of an object; `None` as soon as an item cannot be written.
pub(super) fn comma_separated<T>(
    items: impl IntoIterator<Item = T>,
    out: &mut Vec<u8>,
    mut write_item: impl FnMut(T, &mut Vec<u8>) -> Option<()>,
) -> Option<()> {
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_item(item, out)?;
    }
    Some(())
}

/// RFC 8785 §3.2.2.2: `"` and `\` escaped, control characters as their short escape or
/// `\u00xx`, everything else as itself.
fn string(text: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    for c in text.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\0'..='\u{1f}' => out.extend_from_slice(format!("\\u{:04x}", u32::from(c)).as_bytes()),
            _ => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out.push(b'"');
}

/// A number as `-?D+(e-?E+)?`: significant digits without leading or trailing zeros, and the
/// decimal exponent when it is not zero; zero is `0`.
pub(super) fn number(text: &str) -> Option<String> {
    let parts = NumberParts::new(text);
    let digits = format!("{}{}", parts.int, parts.fraction);
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some("0".to_owned());
    }
    let significant = digits.trim_end_matches('0');
    let exponent =
        parts.exponent - parts.fraction.len() as i128 + (digits.len() - significant.len()) as i128;
    if exponent.abs() > MAX_EXPONENT {
        return None;
    }
    let sign = if parts.negative { "-" } else { "" };
    Some(match exponent {
        0 => format!("{sign}{significant}"),
        _ => format!("{sign}{significant}e{exponent}"),
    })
}

/// A JSON number taken apart: `-int.fraction e exponent`.
pub(super) struct NumberParts<'a> {
    pub(super) negative: bool,
    pub(super) int: &'a str,
    pub(super) fraction: &'a str,
    /// Saturated at ±[`SATURATED_EXPONENT`].
    pub(super) exponent: i128,
    /// Whether the exponent was written with so many digits that it saturated.
    pub(super) saturated: bool,
}

impl<'a> NumberParts<'a> {
    /// Takes apart a number that serde_json accepted.
    pub(super) fn new(text: &'a str) -> Self {
        let (negative, text) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let (mantissa, exponent) = text.split_once(['e', 'E']).unwrap_or((text, "0"));
        let (int, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
        let (exponent_negative, digits) = match exponent.as_bytes().first() {
            Some(b'-') => (true, &exponent[1..]),
            Some(b'+') => (false, &exponent[1..]),
            _ => (false, exponent),
        };
        let magnitude = digits.bytes().fold(0i128, |value, digit| {
            (value * 10 + i128::from(digit - b'0')).min(SATURATED_EXPONENT)
        });
        Self {
            negative,
            int,
            fraction,
            exponent: if exponent_negative {
                -magnitude
            } else {
                magnitude
            },
            saturated: magnitude == SATURATED_EXPONENT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_written_by_exact_decimal_value() {
        for (text, expected) in [
            ("1", Some("1")),
            ("1.0", Some("1")),
            ("10e-1", Some("1")),
            ("0.001e3", Some("1")),
            ("-0.000e-7", Some("0")),
            ("0e99999999999999999999999", Some("0")),
            ("1.50", Some("15e-1")),
            ("100", Some("1e2")),
            ("100.5", Some("1005e-1")),
            ("-12.3400e10", Some("-1234e8")),
            ("12345678901234567890", Some("1234567890123456789e1")),
            ("1e4611686018427387904", Some("1e4611686018427387904")),
            ("1e4611686018427387905", None),
            ("0.1e4611686018427387905", Some("1e4611686018427387904")),
            ("-1e-4611686018427387905", None),
            ("1e99999999999999999999999999999999999999999", None),
        ] {
            assert_eq!(number(text).as_deref(), expected, "{text}");
        }
    }

    #[test]
    fn members_are_sorted_by_utf16_code_units_and_repeats_refused() {
        let doc = |members: &[(&str, Doc)]| {
            Doc::Object(
                members
                    .iter()
                    .map(|(name, _)| (name.to_string(), Doc::Null))
                    .collect(),
            )
        };
        let written = canonical(&doc(&[
            ("\u{e000}", Doc::Null),
            ("😀", Doc::Null),
            ("b", Doc::Null),
        ]));
        assert_eq!(
            String::from_utf8(written.unwrap()).unwrap(),
            "{\"b\":null,\"😀\":null,\"\u{e000}\":null}"
        );
        assert_eq!(canonical(&doc(&[("a", Doc::Null), ("a", Doc::Null)])), None);
    }

    #[test]
    fn strings_are_escaped_as_rfc_8785() {
        let mut out = Vec::new();
        string("\"\\\u{8}\t\n\u{c}\r\u{1}\u{1f}\u{7f}é/", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "\"\\\"\\\\\\b\\t\\n\\f\\r\\u0001\\u001f\u{7f}é/\""
        );
    }
}
