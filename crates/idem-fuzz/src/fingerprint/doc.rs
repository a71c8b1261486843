//! [`Doc`]: a JSON document as serde_json reads it, with its members in order and repeats kept.

use std::fmt;

use serde::{
    Deserialize, Deserializer,
    de::{MapAccess, Visitor},
};
use serde_json::value::RawValue;

/// Deepest nesting of arrays and objects, as idem-core documents it (serde_json's limit).
const MAX_DEPTH: usize = 127;

/// The names serde_json gives the maps it fakes for raw values (and, with `arbitrary_precision`,
/// numbers).
const SERDE_INTERNALS: &str = "$serde_json::private::";

/// A JSON value; numbers are kept as written.
#[derive(Debug)]
pub(super) enum Doc {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Doc>),
    Object(Vec<(String, Doc)>),
}

impl Doc {
    /// The document serde_json reads from `input`, or `None` when serde_json refuses it or it
    /// nests deeper than [`MAX_DEPTH`].
    ///
    /// Each value is read as a [`RawValue`] first: serde_json's grammar and UTF-8 checks, with
    /// each number's text as written.
    pub(super) fn parse(input: &[u8]) -> Option<Self> {
        let raw: &RawValue = serde_json::from_slice(input).ok()?;
        Self::from_raw(raw, MAX_DEPTH)
    }

    /// `depth` is how many more arrays and objects may be opened.
    fn from_raw(raw: &RawValue, depth: usize) -> Option<Self> {
        let text = raw.get();
        Some(match text.as_bytes().first()? {
            b'{' => {
                let depth = depth.checked_sub(1)?;
                let Members(members) = serde_json::from_str(text).ok()?;
                let members = members
                    .into_iter()
                    .map(|(name, value)| Some((name, Self::from_raw(value, depth)?)))
                    .collect::<Option<_>>()?;
                Self::Object(members)
            }
            b'[' => {
                let depth = depth.checked_sub(1)?;
                let items: Vec<&RawValue> = serde_json::from_str(text).ok()?;
                let items = items
                    .into_iter()
                    .map(|item| Self::from_raw(item, depth))
                    .collect::<Option<_>>()?;
                Self::Array(items)
            }
            b'"' => Self::String(serde_json::from_str(text).ok()?),
            b't' => Self::Bool(true),
            b'f' => Self::Bool(false),
            b'n' => Self::Null,
            _ => Self::Number(text.to_owned()),
        })
    }

    /// Whether `keep` holds for the text of every number in the document.
    pub(super) fn all_numbers(&self, keep: &impl Fn(&str) -> bool) -> bool {
        match self {
            Self::Number(text) => keep(text),
            Self::Array(items) => items.iter().all(|item| item.all_numbers(keep)),
            Self::Object(members) => members.iter().all(|(_, value)| value.all_numbers(keep)),
            Self::Null | Self::Bool(_) | Self::String(_) => true,
        }
    }

    /// Whether a member name could pass for one of serde_json's internal maps, which
    /// `serde_json::Value` would read as a number or a raw value.
    pub(super) fn imitates_serde_internals(&self) -> bool {
        match self {
            Self::Array(items) => items.iter().any(Self::imitates_serde_internals),
            Self::Object(members) => members.iter().any(|(name, value)| {
                name.starts_with(SERDE_INTERNALS) || value.imitates_serde_internals()
            }),
            _ => false,
        }
    }
}

/// An object's members in order, repeats kept, values not read yet.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(MembersVisitor(std::marker::PhantomData))
    }
}

struct MembersVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for MembersVisitor<'a> {
    type Value = Members<'a>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
            members.push(member);
        }
        Ok(Members(members))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_member_order_repeats_and_number_spelling() {
        let doc = Doc::parse(br#" {"b": [1.50, true, null], "a": "\u00e9", "b": -0e7} "#).unwrap();
        let Doc::Object(members) = doc else {
            panic!("{doc:?}")
        };
        let names: Vec<_> = members.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["b", "a", "b"]);
        assert!(
            matches!(&members[0].1, Doc::Array(items) if matches!(&items[0], Doc::Number(n) if n == "1.50"))
        );
        assert!(matches!(&members[1].1, Doc::String(s) if s == "é"));
        assert!(matches!(&members[2].1, Doc::Number(n) if n == "-0e7"));
    }

    #[test]
    fn an_object_imitating_a_number_stays_an_object() {
        let doc = Doc::parse(br#"{"$serde_json::private::Number":"1"}"#).unwrap();
        assert!(matches!(&doc, Doc::Object(members) if members.len() == 1));
        assert!(doc.imitates_serde_internals());
    }

    #[test]
    fn refuses_what_serde_json_refuses() {
        for input in [
            &b""[..],
            b"[1,]",
            b"\"\\ud800\"",
            b"\"\xff\"",
            b"{\"a\":\"\xc3\"}",
            b"01",
            b"1 2",
            b"\xef\xbb\xbf{}",
        ] {
            assert!(Doc::parse(input).is_none(), "{}", input.escape_ascii());
        }
    }
}
