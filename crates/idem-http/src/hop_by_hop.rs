//! Hop-by-hop headers (RFC 9110 §7.6.1): the fields that describe one connection, not the
//! message, and that a proxy or a replay must not pass on.
//!
//! They are the fixed [`FIXED`] names and every name the message's `Connection` header lists.
//!
//! # Examples
//!
//! ```
//! use http::{HeaderMap, HeaderValue};
//! use idem_http::hop_by_hop::{self, HopByHop};
//!
//! let mut headers = HeaderMap::new();
//! headers.insert("connection", HeaderValue::from_static("close, X-Private"));
//! headers.insert("x-private", HeaderValue::from_static("1"));
//! headers.insert("keep-alive", HeaderValue::from_static("timeout=5"));
//! headers.insert("content-type", HeaderValue::from_static("text/plain"));
//!
//! assert!(HopByHop::of(&headers).contains("X-PRIVATE"));
//! hop_by_hop::remove(&mut headers);
//! let left: Vec<_> = headers.keys().map(|name| name.as_str()).collect();
//! assert_eq!(left, ["content-type"]);
//! ```

use http::{
    HeaderMap, HeaderName, HeaderValue,
    header::{CONNECTION, TE, TRANSFER_ENCODING, UPGRADE},
};

/// The hop-by-hop headers every message has, whatever its `Connection` header lists: RFC 9110
/// §7.6.1's, with `Proxy-Connection`, which is not standard but still sent.
pub const FIXED: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// Whether `name` is one of the [`FIXED`] hop-by-hop names. A header map's names are lowercase,
/// so this compares them as they are (the standard ones by their tag, not their text).
pub fn is_fixed(name: &HeaderName) -> bool {
    *name == CONNECTION
        || *name == TE
        || *name == TRANSFER_ENCODING
        || *name == UPGRADE
        || matches!(name.as_str(), "keep-alive" | "proxy-connection")
}

/// The hop-by-hop header names of one message: the [`FIXED`] ones and those its `Connection`
/// header lists.
#[derive(Debug, Clone, Default)]
pub struct HopByHop<'a> {
    listed: Vec<&'a [u8]>,
}

impl<'a> HopByHop<'a> {
    /// The hop-by-hop names given the values of a message's `Connection` header lines.
    pub fn new(connection: impl IntoIterator<Item = &'a [u8]>) -> Self {
        let listed = connection
            .into_iter()
            .flat_map(|value| value.split(|b| *b == b','))
            .map(<[u8]>::trim_ascii)
            .filter(|name| !name.is_empty())
            .collect();
        Self { listed }
    }

    /// The hop-by-hop names of the message with `headers`.
    pub fn of(headers: &'a HeaderMap) -> Self {
        Self::new(
            headers
                .get_all(CONNECTION)
                .iter()
                .map(HeaderValue::as_bytes),
        )
    }

    /// Whether `name` (ASCII case-insensitive) is hop-by-hop in this message.
    pub fn contains(&self, name: &str) -> bool {
        FIXED.iter().any(|h| h.eq_ignore_ascii_case(name))
            || self
                .listed
                .iter()
                .any(|l| l.eq_ignore_ascii_case(name.as_bytes()))
    }
}

/// Removes the hop-by-hop headers from `headers`: the [`FIXED`] ones and those `Connection`
/// lists. A message without any (no `Connection` header names others) costs one pass over its
/// names.
pub fn remove(headers: &mut HeaderMap) {
    if !headers.keys().any(is_fixed) {
        return;
    }
    let hop_by_hop: Vec<http::HeaderName> = {
        let names = HopByHop::of(headers);
        headers
            .keys()
            .filter(|name| names.contains(name.as_str()))
            .cloned()
            .collect()
    };
    for name in hop_by_hop {
        headers.remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(lines: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in lines {
            map.append(*name, HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn names_listed_in_connection_are_hop_by_hop() {
        let map = headers(&[
            ("connection", "close, X-Private ,x-other"),
            ("connection", "x-third"),
        ]);
        let names = HopByHop::of(&map);
        for name in [
            "x-private",
            "X-Other",
            "x-third",
            "close",
            "connection",
            "te",
        ] {
            assert!(names.contains(name), "{name}");
        }
        for name in ["x-privat", "content-type", "", "trailer"] {
            assert!(!names.contains(name), "{name}");
        }
    }

    #[test]
    fn the_fixed_names_are_recognised_by_their_header_name() {
        for name in FIXED {
            assert!(is_fixed(&HeaderName::from_static(name)), "{name}");
        }
        for name in [
            "content-type",
            "x-private",
            "trailer",
            "keep-alive-x",
            "host",
        ] {
            assert!(!is_fixed(&HeaderName::from_static(name)), "{name}");
        }
    }

    #[test]
    fn without_connection_only_the_fixed_names_are_hop_by_hop() {
        let names = HopByHop::new([]);
        assert!(names.contains("Transfer-Encoding"));
        assert!(names.contains("proxy-connection"));
        assert!(!names.contains("x-private"));
        let empty = HopByHop::new([&b" , ,"[..]]);
        assert!(!empty.contains(""));
    }

    #[test]
    fn remove_drops_the_fixed_and_the_connection_named_headers() {
        let mut map = headers(&[
            ("content-type", "text/plain"),
            ("connection", "keep-alive, x-hop"),
            ("x-hop", "1"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("upgrade", "h2c"),
            ("proxy-connection", "keep-alive"),
            ("x-end", "2"),
        ]);
        remove(&mut map);
        assert_eq!(
            map,
            headers(&[("content-type", "text/plain"), ("x-end", "2")])
        );
    }
}
