//! What the unit tests of several modules read from a response.

use http::Response;

/// A response's headers, in order, as name and text pairs.
pub(crate) fn header_pairs<B>(response: &Response<B>) -> Vec<(&str, &str)> {
    response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
        .collect()
}
