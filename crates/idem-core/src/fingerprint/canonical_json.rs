//! Canonical JSON for fingerprints: RFC 8785's member order, white space and string escapes, with
//! numbers written by their exact decimal value.
//!
//! The parser is a small strict one written here rather than a serde_json `Deserialize`:
//!
//! - it writes each number from its text, so no digit is lost: serde_json reads a number as a
//!   `u64`, `i64` or `f64` unless its `arbitrary_precision` feature is on, and a library that
//!   turned that on would change every `serde_json::Value` in its users' applications;
//! - parsing and writing in one pass into one buffer needs no tree of values, so no allocation per
//!   string or node: only the output, the decoded member names and the member table.
//!
//! It accepts exactly RFC 8259's grammar over UTF-8 input (no byte order mark, no trailing
//! commas, no lone surrogates), like serde_json, and nests at most [`MAX_DEPTH`] arrays and
//! objects.
//!
//! # Canonical form
//!
//! - No white space; object members sorted by the UTF-16 code units of their names (RFC 8785
//!   §3.2.3). A duplicate member name makes the document non-canonical.
//! - Strings as RFC 8785 §3.2.2.2 writes them: `"` and `\` escaped, control characters as `\b`,
//!   `\t`, `\n`, `\f`, `\r` or `\u00xx` (lowercase hex), everything else as literal UTF-8.
//! - `true`, `false`, `null` as themselves.
//! - A number as `-?D+(e-?E+)?`: the sign (only for non-zero values), the significant digits with
//!   no leading or trailing zero, and the decimal exponent when it is not zero, with no `+` and
//!   no leading zero. Zero is `0`. So `1.50` is `15e-1`, `100` is `1e2`, `-0.0` is `0`, and
//!   `12345678901234567890` is `1234567890123456789e1`. A value whose exponent in this form is
//!   beyond ±2^62 makes the document non-canonical.

use std::cmp::Ordering;

/// Deepest nesting of arrays and objects accepted: serde_json's, whose recursion limit of 128
/// refuses the 128th level.
const MAX_DEPTH: usize = 127;

/// Largest magnitude of a canonical exponent.
const MAX_EXPONENT: i128 = 1 << 62;

/// Where the exponent written in the input stops growing while it is read: far beyond
/// [`MAX_EXPONENT`] plus any input length, so a saturated exponent is still rejected.
const SATURATED_EXPONENT: i128 = 1 << 100;

/// Returns the canonical form of a JSON document, or `None` when the input is not valid JSON, has
/// a duplicate member name, or a number whose exponent is out of range: the caller then hashes the
/// bytes as sent.
pub(crate) fn canonicalize(input: &[u8]) -> Option<Vec<u8>> {
    let mut parser = Canonicalizer {
        input,
        pos: 0,
        out: Vec::with_capacity(input.len()),
        names: Vec::new(),
        members: Vec::new(),
        scratch: Vec::new(),
    };
    parser.skip_whitespace();
    parser.value(MAX_DEPTH)?;
    parser.skip_whitespace();
    (parser.pos == input.len()).then_some(parser.out)
}

/// One pass over the input that writes the canonical form as it parses.
///
/// Each object's members are written in input order, then moved into sorted order once the object
/// is closed (unless they already are).
struct Canonicalizer<'a> {
    input: &'a [u8],
    pos: usize,
    out: Vec<u8>,
    /// Decoded names of the members of the objects being parsed, innermost last.
    names: Vec<u8>,
    /// Members of the objects being parsed, innermost last.
    members: Vec<Member>,
    /// Holds an object's members while they are written back in order.
    scratch: Vec<u8>,
}

/// A member of an object being parsed.
struct Member {
    /// Its decoded name, in `names`.
    name_start: usize,
    name_end: usize,
    /// Its canonical text (`"name":value`), in `out`.
    start: usize,
    end: usize,
}

/// Bytes that stand for themselves inside a string: all but `"`, `\` and control characters.
const PLAIN: [bool; 256] = {
    let mut table = [true; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = false;
        byte += 1;
    }
    table[b'"' as usize] = false;
    table[b'\\' as usize] = false;
    table
};

impl Canonicalizer<'_> {
    fn peek(&self) -> Option<u8> {
        self.input.get(self.pos).copied()
    }

    fn next_byte(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    fn skip_digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    /// Parses one value; `depth` is how many more arrays and objects may be opened.
    fn value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'{' => self.object(depth.checked_sub(1)?),
            b'[' => self.array(depth.checked_sub(1)?),
            b'"' => {
                self.pos += 1;
                self.string(false)
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn literal(&mut self, literal: &[u8]) -> Option<()> {
        let end = self.pos + literal.len();
        (self.input.get(self.pos..end)? == literal).then_some(())?;
        self.pos = end;
        self.out.extend_from_slice(literal);
        Some(())
    }

    fn array(&mut self, depth: usize) -> Option<()> {
        self.pos += 1;
        self.out.push(b'[');
        self.skip_whitespace();
        if self.peek()? == b']' {
            self.pos += 1;
        } else {
            loop {
                self.value(depth)?;
                self.skip_whitespace();
                match self.next_byte()? {
                    b',' => self.out.push(b','),
                    b']' => break,
                    _ => return None,
                }
                self.skip_whitespace();
            }
        }
        self.out.push(b']');
        Some(())
    }

    fn object(&mut self, depth: usize) -> Option<()> {
        self.pos += 1;
        self.out.push(b'{');
        let body = self.out.len();
        let first_member = self.members.len();
        let first_name = self.names.len();
        self.skip_whitespace();
        if self.peek()? == b'}' {
            self.pos += 1;
        } else {
            loop {
                if self.next_byte()? != b'"' {
                    return None;
                }
                let start = self.out.len();
                let name_start = self.names.len();
                self.string(true)?;
                let name_end = self.names.len();
                self.skip_whitespace();
                if self.next_byte()? != b':' {
                    return None;
                }
                self.out.push(b':');
                self.skip_whitespace();
                self.value(depth)?;
                self.members.push(Member {
                    name_start,
                    name_end,
                    start,
                    end: self.out.len(),
                });
                self.skip_whitespace();
                match self.next_byte()? {
                    b',' => self.out.push(b','),
                    b'}' => break,
                    _ => return None,
                }
                self.skip_whitespace();
            }
            self.sort_members(body, first_member)?;
        }
        self.members.truncate(first_member);
        self.names.truncate(first_name);
        self.out.push(b'}');
        Some(())
    }

    /// Puts the members of the object whose text starts at `body` in order, or returns `None` if
    /// two share a name.
    fn sort_members(&mut self, body: usize, first_member: usize) -> Option<()> {
        let names = &self.names;
        let name = |member: &Member| &names[member.name_start..member.name_end];
        let members = &mut self.members[first_member..];
        let in_order = |members: &[Member]| {
            members
                .windows(2)
                .all(|pair| utf16_cmp(name(&pair[0]), name(&pair[1])) == Ordering::Less)
        };
        if in_order(members) {
            return Some(());
        }
        members.sort_unstable_by(|a, b| utf16_cmp(name(a), name(b)));
        if !in_order(members) {
            return None;
        }
        self.scratch.clear();
        self.scratch.extend_from_slice(&self.out[body..]);
        self.out.truncate(body);
        for (i, member) in members.iter().enumerate() {
            if i > 0 {
                self.out.push(b',');
            }
            self.out
                .extend_from_slice(&self.scratch[member.start - body..member.end - body]);
        }
        Some(())
    }

    /// Parses a string whose opening quote was consumed and writes it canonically; a member name
    /// is also decoded into `names`.
    fn string(&mut self, is_name: bool) -> Option<()> {
        self.out.push(b'"');
        loop {
            let start = self.pos;
            while self.peek().is_some_and(|byte| PLAIN[usize::from(byte)]) {
                self.pos += 1;
            }
            // Runs end at ASCII bytes, never inside a UTF-8 sequence, so each can be checked alone.
            let run = &self.input[start..self.pos];
            if !run.is_ascii() {
                std::str::from_utf8(run).ok()?;
            }
            self.out.extend_from_slice(run);
            if is_name {
                self.names.extend_from_slice(run);
            }
            match self.next_byte()? {
                b'"' => break,
                b'\\' => {
                    let decoded = self.escape()?;
                    self.push_char(decoded, is_name);
                }
                _ => return None,
            }
        }
        self.out.push(b'"');
        Some(())
    }

    /// Decodes the escape sequence after a `\`.
    fn escape(&mut self) -> Option<char> {
        Some(match self.next_byte()? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let unit = self.hex4()?;
                if (0xD800..0xDC00).contains(&unit) {
                    if self.next_byte()? != b'\\' || self.next_byte()? != b'u' {
                        return None;
                    }
                    let low = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&low) {
                        return None;
                    }
                    char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?
                } else {
                    // A lone low surrogate is not a char.
                    char::from_u32(unit)?
                }
            }
            _ => return None,
        })
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.input.get(self.pos..self.pos + 4)?;
        self.pos += 4;
        digits.iter().try_fold(0, |unit, &digit| {
            Some(unit << 4 | char::from(digit).to_digit(16)?)
        })
    }

    /// Writes a character that came from an escape sequence.
    fn push_char(&mut self, decoded: char, is_name: bool) {
        let mut buf = [0; 4];
        let utf8 = decoded.encode_utf8(&mut buf).as_bytes();
        if is_name {
            self.names.extend_from_slice(utf8);
        }
        let escaped: &[u8] = match decoded {
            '"' => b"\\\"",
            '\\' => b"\\\\",
            '\u{8}' => b"\\b",
            '\t' => b"\\t",
            '\n' => b"\\n",
            '\u{c}' => b"\\f",
            '\r' => b"\\r",
            '\0'..='\u{1f}' => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                let byte = utf8[0];
                &[
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    HEX[usize::from(byte >> 4)],
                    HEX[usize::from(byte & 0xf)],
                ]
            }
            _ => utf8,
        };
        self.out.extend_from_slice(escaped);
    }

    fn number(&mut self) -> Option<()> {
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.next_byte()? {
            b'0' => {}
            b'1'..=b'9' => self.skip_digits(),
            _ => return None,
        }
        let int = int_start..self.pos;
        let mut fraction = self.pos..self.pos;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            let start = self.pos;
            self.skip_digits();
            if self.pos == start {
                return None;
            }
            fraction = start..self.pos;
        }
        let mut exponent: i128 = 0;
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            let exponent_negative = self.peek() == Some(b'-');
            if let Some(b'-' | b'+') = self.peek() {
                self.pos += 1;
            }
            let start = self.pos;
            while let Some(digit @ b'0'..=b'9') = self.peek() {
                exponent = (exponent * 10 + i128::from(digit - b'0')).min(SATURATED_EXPONENT);
                self.pos += 1;
            }
            if self.pos == start {
                return None;
            }
            if exponent_negative {
                exponent = -exponent;
            }
        }
        let (int, fraction) = (&self.input[int], &self.input[fraction]);
        write_number(&mut self.out, negative, int, fraction, exponent)
    }
}

/// Writes the number `[-]int.fraction × 10^exponent` canonically, or returns `None` if its
/// canonical exponent is out of range.
fn write_number(
    out: &mut Vec<u8>,
    negative: bool,
    int: &[u8],
    fraction: &[u8],
    exponent: i128,
) -> Option<()> {
    let is_zero = |digit: &u8| *digit == b'0';
    let trailing_zeros = |digits: &[u8]| digits.iter().rev().take_while(|d| is_zero(d)).count();
    let leading_zeros = |digits: &[u8]| digits.iter().take_while(|d| is_zero(d)).count();

    let fraction = &fraction[..fraction.len() - trailing_zeros(fraction)];
    let (int, exponent) = if fraction.is_empty() {
        let zeros = trailing_zeros(int);
        (&int[..int.len() - zeros], exponent + zeros as i128)
    } else {
        (int, exponent - fraction.len() as i128)
    };
    let int = &int[leading_zeros(int)..];
    let fraction = if int.is_empty() {
        &fraction[leading_zeros(fraction)..]
    } else {
        fraction
    };
    if int.is_empty() && fraction.is_empty() {
        out.push(b'0');
        return Some(());
    }
    if exponent.abs() > MAX_EXPONENT {
        return None;
    }
    if negative {
        out.push(b'-');
    }
    out.extend_from_slice(int);
    out.extend_from_slice(fraction);
    if exponent != 0 {
        out.push(b'e');
        if exponent < 0 {
            out.push(b'-');
        }
        let mut magnitude = exponent.unsigned_abs();
        let mut digits = [0; 20];
        let mut start = digits.len();
        while magnitude > 0 {
            start -= 1;
            digits[start] = b'0' + (magnitude % 10) as u8;
            magnitude /= 10;
        }
        out.extend_from_slice(&digits[start..]);
    }
    Some(())
}

/// Orders UTF-8 strings by their UTF-16 code units, as RFC 8785 §3.2.3 sorts member names.
///
/// UTF-8 byte order is code point order, which differs from UTF-16 order only for U+E000..=U+FFFF
/// (lead bytes 0xEE and 0xEF): UTF-16 puts them after the supplementary planes (lead bytes
/// 0xF0..=0xF4), which it writes as surrogates 0xD800..=0xDFFF. Those lead bytes never occur
/// elsewhere in UTF-8, so ranking them above 0xF4 at the first difference is enough.
fn utf16_cmp(a: &[u8], b: &[u8]) -> Ordering {
    let rank = |byte: u8| match byte {
        0xEE => 0xFE,
        0xEF => 0xFF,
        other => other,
    };
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => rank(a[i]).cmp(&rank(b[i])),
        None => a.len().cmp(&b.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn canonical(input: &str) -> Option<String> {
        canonicalize(input.as_bytes()).map(|out| String::from_utf8(out).unwrap())
    }

    #[track_caller]
    fn assert_canonical(input: &str, expected: &str) {
        assert_eq!(
            canonical(input).as_deref(),
            Some(expected),
            "input: {input}"
        );
    }

    #[test]
    fn sorts_members_and_drops_white_space() {
        assert_canonical(
            "{ \"b\" : [ 1.50 , true , null ] ,\n\t\"a\" : \"\\u00e9\" }\r\n",
            r#"{"a":"é","b":[15e-1,true,null]}"#,
        );
        assert_canonical(
            r#"{"z":{"y":1,"x":{"c":[],"b":{},"a":""}},"a":[{"b":1,"a":2}]}"#,
            r#"{"a":[{"a":2,"b":1}],"z":{"x":{"a":"","b":{},"c":[]},"y":1}}"#,
        );
    }

    #[test]
    fn sorts_member_names_by_utf16_code_units() {
        // RFC 8785 §3.2.3.
        assert_canonical(
            r#"{
                "\u20ac": "Euro Sign",
                "\r": "Carriage Return",
                "\ufb33": "Hebrew Letter Dalet With Dagesh",
                "1": "One",
                "\ud83d\ude00": "Emoji: Grinning Face",
                "\u0080": "Control",
                "\u00f6": "Latin Small Letter O With Diaeresis"
            }"#,
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
             \"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\
             \"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}",
        );
    }

    #[test]
    fn sorts_by_decoded_names_not_by_their_escapes() {
        // `"` (0x22) sorts before `#` (0x23) although its escape starts with `\` (0x5c).
        assert_canonical(r##"{"#":1,"\"":2}"##, r##"{"\"":2,"#":1}"##);
        assert_canonical(r#"{"b":1,"\u0061":2}"#, r#"{"a":2,"b":1}"#);
    }

    #[test]
    fn writes_strings_as_rfc_8785() {
        // RFC 8785 §3.2.2.2.
        assert_canonical(
            r#""\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/""#,
            r#""€$\u000f\nA'B\"\\\\\"/""#,
        );
        assert_canonical(r#""\u0041""#, r#""A""#);
        assert_canonical(r#""\/""#, r#""/""#);
        assert_canonical(
            r#""\b\f\n\r\t\u0000\u001F\u007f""#,
            "\"\\b\\f\\n\\r\\t\\u0000\\u001f\u{7f}\"",
        );
        assert_canonical("\"\u{2028}é😀\"", "\"\u{2028}é😀\"");
        assert_canonical(r#""\uD83D\uDE00""#, "\"😀\"");
    }

    #[test]
    fn writes_numbers_by_exact_decimal_value() {
        for one in [
            "1", "1.0", "1e0", "1E+0", "10e-1", "0.1e1", "100e-2", "0.001e3",
        ] {
            assert_canonical(one, "1");
        }
        for zero in ["0", "-0", "0.0", "-0.000e-7", "0e99999999999999999999999"] {
            assert_canonical(zero, "0");
        }
        assert_canonical("1.50", "15e-1");
        assert_canonical("-1.50", "-15e-1");
        assert_canonical("100", "1e2");
        assert_canonical("120.5", "1205e-1");
        assert_canonical("0.001", "1e-3");
        assert_canonical("-12.3400e10", "-1234e8");
        assert_canonical("12345678901234567890", "1234567890123456789e1");
        assert_canonical("12345678901234567891", "12345678901234567891");
        assert_canonical("1e400", "1e400");
        assert_canonical("1e-400", "1e-400");
        assert_canonical("123456789.123456789e-20", "123456789123456789e-29");
        assert_canonical("4611686018427387904e0", "4611686018427387904");
    }

    #[test]
    fn accepts_canonical_exponents_up_to_two_to_the_62() {
        assert_canonical("1e4611686018427387904", "1e4611686018427387904");
        assert_canonical("1e-4611686018427387904", "1e-4611686018427387904");
        assert_canonical("10e4611686018427387903", "1e4611686018427387904");
        assert_eq!(canonical("1e4611686018427387905"), None);
        assert_eq!(canonical("10e4611686018427387904"), None);
        assert_eq!(canonical("-1e-4611686018427387905"), None);
        assert_eq!(
            canonical("1e99999999999999999999999999999999999999999"),
            None
        );
        assert_canonical("0.1e4611686018427387905", "1e4611686018427387904");
    }

    #[test]
    fn rejects_duplicate_member_names() {
        assert_eq!(canonical(r#"{"a":1,"a":1}"#), None);
        assert_eq!(canonical(r#"{"b":0,"a":1,"\u0061":2}"#), None);
        assert_eq!(canonical(r#"[{"x":{"a":1,"a":2}}]"#), None);
        assert_canonical(r#"[{"a":1},{"a":1}]"#, r#"[{"a":1},{"a":1}]"#);
        assert_canonical(r#"{"a":{"a":1}}"#, r#"{"a":{"a":1}}"#);
    }

    #[test]
    fn rejects_what_rfc_8259_does_not_allow() {
        let invalid: &[&[u8]] = &[
            b"",
            b" ",
            b"{",
            b"{}}",
            b"[1,]",
            b"{\"a\":1,}",
            b"{a:1}",
            b"{'a':1}",
            b"{\"a\" 1}",
            b"[1 2]",
            b"01",
            b"-",
            b"1.",
            b".5",
            b"+1",
            b"1e",
            b"1e+",
            b"0x10",
            b"NaN",
            b"Infinity",
            b"tru",
            b"nul",
            b"True",
            b"\"abc",
            b"\"a\tb\"",
            b"\"a\nb\"",
            b"\"\\x\"",
            b"\"\\u12\"",
            b"\"\\u12g4\"",
            b"\"\\ud800\"",
            b"\"\\udc00\"",
            b"\"\\ud800\\u0041\"",
            b"\"\\ud800x\"",
            b"\"\xff\"",
            b"\"\xc3\"",
            b"\"\xed\xa0\x80\"",
            b"\xef\xbb\xbf{}",
            b"{} {}",
            b"1 2",
            b"[]\x0b",
        ];
        for input in invalid {
            assert_eq!(canonicalize(input), None, "input: {}", input.escape_ascii());
            assert!(serde_json::from_slice::<serde_json::Value>(input).is_err());
        }
    }

    #[test]
    fn accepts_any_value_at_the_top_level() {
        assert_canonical(" \"x\" ", r#""x""#);
        assert_canonical("true", "true");
        assert_canonical("null", "null");
        assert_canonical("-7", "-7");
        assert_canonical("[]", "[]");
        assert_canonical("{ }", "{}");
    }

    #[test]
    fn limits_nesting_as_serde_json_does() {
        let arrays = |depth: usize| format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        let objects = |depth: usize| format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        for nested in [arrays, objects] {
            let deepest = nested(MAX_DEPTH);
            assert_eq!(canonical(&deepest), Some(deepest.clone()));
            assert!(serde_json::from_str::<serde_json::Value>(&deepest).is_ok());
            let too_deep = nested(MAX_DEPTH + 1);
            assert_eq!(canonical(&too_deep), None);
            assert!(serde_json::from_str::<serde_json::Value>(&too_deep).is_err());
        }
        assert_eq!(MAX_DEPTH, 127);
        assert_eq!(canonical(&"[".repeat(100_000)), None);
    }

    #[test]
    fn compares_names_in_utf16_order() {
        let sorted = [
            "", "\r", "1", "a", "ab", "\u{80}", "\u{d7ff}", "😀", "\u{e000}", "\u{ffff}",
        ];
        for (i, a) in sorted.iter().enumerate() {
            for (j, b) in sorted.iter().enumerate() {
                assert_eq!(
                    utf16_cmp(a.as_bytes(), b.as_bytes()),
                    i.cmp(&j),
                    "{a:?} {b:?}"
                );
            }
        }
    }

    /// A JSON document whose members can be written in either order.
    #[derive(Debug, Clone)]
    enum Doc {
        Scalar(String),
        Array(Vec<Doc>),
        Object(Vec<(String, Doc)>),
    }

    impl Doc {
        fn render(&self, reversed: bool, spaced: bool, out: &mut String) {
            let gap = if spaced { " \n" } else { "" };
            match self {
                Doc::Scalar(text) => out.push_str(text),
                Doc::Array(items) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(gap);
                        item.render(reversed, spaced, out);
                    }
                    out.push_str(gap);
                    out.push(']');
                }
                Doc::Object(members) => {
                    out.push('{');
                    let mut members: Vec<_> = members.iter().collect();
                    if reversed {
                        members.reverse();
                    }
                    for (i, (name, value)) in members.into_iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(gap);
                        out.push_str(&serde_json::to_string(name).unwrap());
                        out.push_str(gap);
                        out.push(':');
                        value.render(reversed, spaced, out);
                    }
                    out.push('}');
                }
            }
        }
    }

    fn doc() -> impl Strategy<Value = Doc> {
        let scalar = prop_oneof![
            Just("true".to_owned()),
            Just("null".to_owned()),
            "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,12})?([eE][-+]?[0-9]{1,4})?",
            any::<String>().prop_map(|s| serde_json::to_string(&s).unwrap()),
        ]
        .prop_map(Doc::Scalar);
        scalar.prop_recursive(4, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Doc::Array),
                prop::collection::btree_map(any::<String>(), inner, 0..6)
                    .prop_map(|members| Doc::Object(members.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn member_order_and_white_space_never_change_the_canonical_form(doc in doc()) {
            let (mut plain, mut shuffled) = (String::new(), String::new());
            doc.render(false, false, &mut plain);
            doc.render(true, true, &mut shuffled);
            let canonical = canonicalize(plain.as_bytes()).unwrap();
            prop_assert_eq!(canonicalize(shuffled.as_bytes()), Some(canonical.clone()));
            prop_assert_eq!(canonicalize(&canonical), Some(canonical.clone()));
            // JSON by serde_json's grammar; not read into a `Value`, which refuses a number beyond
            // `f64`'s range.
            prop_assert!(std::str::from_utf8(&canonical).is_ok());
            prop_assert!(serde_json::from_slice::<serde::de::IgnoredAny>(&canonical).is_ok());
        }
    }
}
