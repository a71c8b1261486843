//! The response stored under a completed key, replayed to every retry.

use bytes::Bytes;

use crate::TraceContext;

/// The problem `type` (RFC 9457) that HTTP front ends answer an [`Outcome::Unknown`](crate::Outcome::Unknown)
/// with, and that clients recognise it by.
pub const OUTCOME_UNKNOWN_TYPE: &str = "urn:idem:problem:outcome-unknown";

/// A complete response, as stored under a key and replayed: status, headers in order with
/// repeats, body bytes and optional trailers (gRPC's status travels in trailers).
///
/// Header names are kept as given (HTTP front ends store them in lower case); values are bytes.
///
/// # Examples
///
/// ```
/// use idem_core::StoredResponse;
///
/// let response = StoredResponse::new(201)
///     .header("content-type", "application/json")
///     .header("set-cookie", "a=1")
///     .header("set-cookie", "b=2")
///     .body(r#"{"id":"ch_1"}"#);
/// let bytes = response.encode();
/// assert_eq!(StoredResponse::decode(&bytes)?, response);
/// # Ok::<(), idem_core::DecodeError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The status code (100–999).
    pub status: u16,
    /// The header lines, in order, with repeats.
    pub headers: Vec<(String, Bytes)>,
    /// The body.
    pub body: Bytes,
    /// The trailer lines, if the response had trailers.
    pub trailers: Option<Vec<(String, Bytes)>>,
    /// The trace context of the execution that produced the response, when it was traced: a
    /// replay's span links to it. Never sent to a client.
    pub trace: Option<TraceContext>,
}

impl StoredResponse {
    /// An empty response with `status`.
    pub fn new(status: u16) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: Bytes::new(),
            trailers: None,
            trace: None,
        }
    }

    /// Appends a header line.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    /// Sets the body.
    #[must_use]
    pub fn body(mut self, body: impl Into<Bytes>) -> Self {
        self.body = body.into();
        self
    }

    /// Appends a trailer line (and marks the response as having trailers).
    #[must_use]
    pub fn trailer(mut self, name: impl Into<String>, value: impl Into<Bytes>) -> Self {
        self.trailers
            .get_or_insert_with(Vec::new)
            .push((name.into(), value.into()));
        self
    }

    /// Sets the trace context of the execution that produced the response.
    #[must_use]
    pub fn trace(mut self, trace: TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }

    /// The values of the headers named `name` (ASCII case-insensitive), in order.
    pub fn header_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Bytes> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
}
