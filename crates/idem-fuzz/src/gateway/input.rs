//! The fuzzer's bytes read as a session: layer settings and a short sequence of requests.

use arbitrary::Arbitrary;
use bytes::Bytes;
use http::{HeaderValue, Method, Request, header};
use http_body_util::Full;

/// The layer's `max_body`: small, so that bodies over it are common.
pub(super) const MAX_BODY: usize = 64;
/// The layer's `max_stored_response`: between the upstream's short and long bodies.
pub(super) const MAX_STORED_RESPONSE: usize = 32;
/// At most this many steps run per input, so each input stays fast.
pub(super) const MAX_STEPS: usize = 8;
/// Request bodies are cut to this length: a little over the layer's `max_body`.
const MAX_BODY_BYTES: usize = MAX_BODY + 16;

/// The header that tells the upstream which call a request is.
pub(super) const CALL_HEADER: &str = "x-fuzz-call";

/// One fuzz input.
#[derive(Debug, Arbitrary)]
pub(super) struct Session {
    pub(super) settings: Settings,
    pub(super) steps: Vec<Step>,
}

/// The layer's settings that change what a request gets.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub(super) struct Settings {
    pub(super) require_key: bool,
    /// `Ambiguous::Reject` rather than `Retry`.
    pub(super) reject_ambiguous: bool,
    /// `FingerprintMode::Raw` rather than `Json`.
    pub(super) raw_fingerprint: bool,
    /// Scope from `Authorization` rather than no scoping.
    pub(super) scoped: bool,
}

/// What the session does next.
#[derive(Debug, Arbitrary)]
pub(super) enum Step {
    /// One request, answered before the next step.
    One(Call),
    /// Two requests sent at once.
    Two(Call, Call),
    /// The same request sent twice at once.
    Race(RequestSpec, Behaviour, Behaviour),
    /// An earlier request sent again, byte for byte, with a new upstream behaviour.
    Again(u8, Behaviour),
}

/// A request and what the upstream does with it.
#[derive(Debug, Arbitrary)]
pub(super) struct Call {
    pub(super) request: RequestSpec,
    pub(super) behaviour: Behaviour,
}

/// What the upstream does with one request.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub(super) struct Behaviour {
    pub(super) status: UpstreamStatus,
    pub(super) length: Length,
    pub(super) failure: Failure,
    /// How many times the upstream yields before answering (modulo 4), so that a concurrent
    /// request can arrive while it runs.
    pub(super) yields: u8,
}

/// The upstream's status codes: final ones of each class, and the ambiguous ones.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub(super) enum UpstreamStatus {
    Ok,
    Created,
    MovedPermanently,
    BadRequest,
    Conflict,
    UnprocessableEntity,
    RequestTimeout,
    TooManyRequests,
    InternalServerError,
    ServiceUnavailable,
}

impl UpstreamStatus {
    pub(super) fn code(self) -> u16 {
        match self {
            Self::Ok => 200,
            Self::Created => 201,
            Self::MovedPermanently => 301,
            Self::BadRequest => 400,
            Self::Conflict => 409,
            Self::UnprocessableEntity => 422,
            Self::RequestTimeout => 408,
            Self::TooManyRequests => 429,
            Self::InternalServerError => 500,
            Self::ServiceUnavailable => 503,
        }
    }

    /// 5xx, 408 and 429 do not say whether the operation took effect (docs/http.md, What is
    /// stored).
    pub(super) fn is_ambiguous(self) -> bool {
        matches!(
            self,
            Self::RequestTimeout
                | Self::TooManyRequests
                | Self::InternalServerError
                | Self::ServiceUnavailable
        )
    }
}

/// The upstream's response body length, around the layer's `max_stored_response`.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub(super) enum Length {
    Empty,
    Short,
    /// Over `max_stored_response`: delivered whole, but not stored.
    Long,
}

impl Length {
    /// The body the upstream sends for `run`: its number, padded to this length.
    pub(super) fn body(self, run: u64) -> Bytes {
        let text = format!("run {run};");
        match self {
            Self::Empty => Bytes::new(),
            Self::Short => Bytes::from(text),
            Self::Long => Bytes::from(format!("{text:.<48}")),
        }
    }
}

/// How the upstream fails, if it does.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub(super) enum Failure {
    None,
    /// The service returns an error instead of a response.
    BeforeResponse,
    /// The response body fails after its first chunk.
    MidBody,
    /// The response body has no length (chunked): it comes in two chunks, and ends.
    Streamed,
}

/// A request, from small alphabets so that requests repeat and collide.
#[derive(Debug, Clone, Arbitrary)]
pub(super) struct RequestSpec {
    pub(super) method: MethodChoice,
    pub(super) target: Target,
    pub(super) key: KeyHeader,
    pub(super) tenant: Tenant,
    pub(super) content_type: ContentType,
    pub(super) body: BodySpec,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub(super) enum MethodChoice {
    Post,
    Patch,
    Put,
    Get,
    Delete,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub(super) enum Target {
    Charges,
    ChargesWithQuery,
    ChargesWithEmptyQuery,
    Refunds,
}

#[derive(Debug, Clone, Arbitrary)]
pub(super) enum KeyHeader {
    Absent,
    One(KeyValue),
    Twice(KeyValue, KeyValue),
}

#[derive(Debug, Clone, Arbitrary)]
pub(super) enum KeyValue {
    /// One of [`KEYS`].
    Known(u8),
    /// `k` repeated up to the longest key allowed, or one more.
    Long { too_long: bool },
    /// Any bytes a header value can hold.
    Bytes(Vec<u8>),
}

/// Valid keys that collide (`k1` and `"k1"` are one key), and invalid ones of every kind.
const KEYS: [&[u8]; 14] = [
    b"k1",
    b"k2",
    b"\"k1\"",
    b" k2\t",
    b"\"k 1\"",
    b"\"a\\\"b\"",
    b"k 1",
    b"",
    b"\"\"",
    b"a,b",
    b"k;p=1",
    b"\xffk",
    b"\"k1",
    b"\"k1\"x",
];

#[derive(Debug, Clone, Copy, Arbitrary)]
pub(super) enum Tenant {
    Anonymous,
    Alice,
    Bob,
}

#[derive(Debug, Clone, Copy, Arbitrary)]
pub(super) enum ContentType {
    None,
    Json,
    VendorJson,
    Text,
}

#[derive(Debug, Clone, Arbitrary)]
pub(super) enum BodySpec {
    Empty,
    Bytes(Vec<u8>),
    /// Up to 16 bytes over the layer's `max_body`.
    Oversized {
        extra: u8,
    },
    /// One payment, with its members in either order and any white space: the same JSON.
    Payment {
        amount: u16,
        reversed: bool,
        spaced: bool,
    },
}

/// A request as it was sent, enough to send it again and to predict its answer.
#[derive(Debug, Clone)]
pub(super) struct Sent {
    pub(super) method: Method,
    /// Path and query, as sent.
    pub(super) target: &'static str,
    pub(super) key_values: Vec<HeaderValue>,
    pub(super) authorization: Option<HeaderValue>,
    pub(super) content_type: Option<HeaderValue>,
    pub(super) body: Bytes,
}

impl RequestSpec {
    pub(super) fn sent(&self) -> Sent {
        let method = match self.method {
            MethodChoice::Post => Method::POST,
            MethodChoice::Patch => Method::PATCH,
            MethodChoice::Put => Method::PUT,
            MethodChoice::Get => Method::GET,
            MethodChoice::Delete => Method::DELETE,
        };
        let target = match self.target {
            Target::Charges => "/charges",
            Target::ChargesWithQuery => "/charges?expand=customer",
            Target::ChargesWithEmptyQuery => "/charges?",
            Target::Refunds => "/refunds",
        };
        let key_values = match &self.key {
            KeyHeader::Absent => Vec::new(),
            KeyHeader::One(value) => value.header().into_iter().collect(),
            KeyHeader::Twice(first, second) => {
                first.header().into_iter().chain(second.header()).collect()
            }
        };
        let authorization = match self.tenant {
            Tenant::Anonymous => None,
            Tenant::Alice => Some(HeaderValue::from_static("Bearer sk_test_alice")),
            Tenant::Bob => Some(HeaderValue::from_static("Bearer sk_test_bob")),
        };
        let content_type = match self.content_type {
            ContentType::None => None,
            ContentType::Json => Some("application/json"),
            ContentType::VendorJson => Some("application/vnd.idem+json; charset=utf-8"),
            ContentType::Text => Some("text/plain"),
        };
        Sent {
            method,
            target,
            key_values,
            authorization,
            content_type: content_type.map(HeaderValue::from_static),
            body: self.body.bytes(),
        }
    }
}

impl KeyValue {
    /// The header value, or `None` for bytes that `http` refuses in a header (control
    /// characters): such a value cannot reach the layer.
    fn header(&self) -> Option<HeaderValue> {
        match self {
            Self::Known(i) => HeaderValue::from_bytes(KEYS[usize::from(*i) % KEYS.len()]).ok(),
            Self::Long { too_long } => {
                let len = idem_core::MAX_KEY_LEN + usize::from(*too_long);
                HeaderValue::from_bytes(&vec![b'k'; len]).ok()
            }
            Self::Bytes(bytes) => HeaderValue::from_bytes(bytes).ok(),
        }
    }
}

impl BodySpec {
    fn bytes(&self) -> Bytes {
        match self {
            Self::Empty => Bytes::new(),
            Self::Bytes(bytes) => Bytes::copy_from_slice(&bytes[..bytes.len().min(MAX_BODY_BYTES)]),
            Self::Oversized { extra } => {
                Bytes::from(vec![b'x'; MAX_BODY + 1 + usize::from(extra % 16)])
            }
            Self::Payment {
                amount,
                reversed,
                spaced,
            } => {
                let gap = if *spaced { " \n " } else { "" };
                let amount = format!(r#""amount":{gap}{amount}"#);
                let currency = format!(r#""currency":{gap}"EUR""#);
                let (first, second) = if *reversed {
                    (currency, amount)
                } else {
                    (amount, currency)
                };
                Bytes::from(format!("{{{gap}{first},{gap}{second}{gap}}}"))
            }
        }
    }
}

impl Sent {
    /// The request, labelled with its call number for the upstream.
    pub(super) fn request(&self, call: u64) -> Request<Full<Bytes>> {
        let mut request = Request::builder()
            .method(self.method.clone())
            .uri(self.target)
            .header(CALL_HEADER, call);
        for value in &self.key_values {
            request = request.header("idempotency-key", value);
        }
        if let Some(value) = &self.authorization {
            request = request.header(header::AUTHORIZATION, value);
        }
        if let Some(value) = &self.content_type {
            request = request.header(header::CONTENT_TYPE, value);
        }
        request
            .body(Full::new(self.body.clone()))
            .expect("the request parts are valid")
    }
}
