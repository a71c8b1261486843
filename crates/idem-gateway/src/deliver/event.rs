//! A received message as an HTTP request: its idempotency key ([`key_of`]), the CloudEvent in
//! HTTP binary mode that carries it ([`Event`]), and what an answer means ([`Answer`]).

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use idem_core::IdempotencyKey;
use idem_messaging::consume::{KeyFrom, Message};

/// The idempotency key `message` is delivered under, taken from where `from` says, or why it
/// has none.
pub fn key_of(from: &KeyFrom, message: &Message) -> Result<IdempotencyKey, NoKey> {
    let value = from
        .identity(message)
        .ok_or_else(|| NoKey::Missing(from.clone()))?;
    // As a quoted sf-string, any printable key is taken whole (`,` and `;` included).
    sf_string(value)
        .parse()
        .map_err(|error: idem_core::KeyError| NoKey::Invalid {
            value: value.chars().take(64).collect(),
            reason: error.to_string(),
        })
}

/// Why a message has no idempotency key: it cannot be delivered safely, and is dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoKey {
    /// The message has nothing to take the key from.
    #[error("the message has no key to deliver it under (--key-from {0})")]
    Missing(KeyFrom),
    /// What the key would be is not a valid idempotency key.
    #[error("the message's key {value:?} is not a valid idempotency key: {reason}")]
    Invalid {
        /// The value, cut to 64 characters.
        value: String,
        /// Why.
        reason: String,
    },
}

/// The headers a message may not set on its request: those of the connection and the framing,
/// which the client sets, and the key.
const NOT_CARRIED: [&str; 12] = [
    "connection",
    "content-length",
    "host",
    "idempotency-key",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The CloudEvents attributes idem sets itself, whatever the message's headers say.
const OWN_ATTRIBUTES: [&str; 2] = ["ce-id", "ce-specversion"];

/// A message as a CloudEvent in HTTP binary mode: the body as it is, the attributes as `ce-`
/// headers, and the message's own headers carried over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The request's headers, `Idempotency-Key` included.
    pub headers: HeaderMap,
    /// The body.
    pub body: Bytes,
}

/// The attributes that do not come from the message (`--source`, `--type`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `ce-source`; the message's source (its queue, subject or topic) when unset.
    pub source: Option<String>,
    /// `ce-type`; the message's source when unset.
    pub event_type: Option<String>,
}

impl Event {
    /// The event of `message`, under `key`. A message header named like a CloudEvents
    /// attribute (`ce-type`, `ce-source`, `ce-subject`, an extension) is kept as the producer's
    /// own, except `ce-id` and `ce-specversion`; a header that is not a valid HTTP header, or
    /// that HTTP's framing owns, is left out.
    pub fn new(
        message: &Message,
        key: &IdempotencyKey,
        attributes: &Attributes,
        now: SystemTime,
    ) -> Self {
        let mut headers = HeaderMap::new();
        for (name, value) in &message.headers {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) else {
                continue;
            };
            if NOT_CARRIED.contains(&name.as_str()) || OWN_ATTRIBUTES.contains(&name.as_str()) {
                continue;
            }
            headers.append(name, value);
        }
        let text = |value: &str| {
            HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static("unknown"))
        };
        let key_value = HeaderValue::from_str(key.as_str())
            .unwrap_or_else(|_| HeaderValue::from_static("invalid"));
        headers.insert(HeaderName::from_static("ce-id"), key_value.clone());
        headers.insert(
            HeaderName::from_static("ce-specversion"),
            HeaderValue::from_static("1.0"),
        );
        let source = attributes.source.as_deref().unwrap_or(&message.source);
        let event_type = attributes.event_type.as_deref().unwrap_or(&message.source);
        for (name, value) in [("ce-source", source), ("ce-type", event_type)] {
            let name = HeaderName::from_static(name);
            if !headers.contains_key(&name) {
                headers.insert(name, text(value));
            }
        }
        let time = humantime::format_rfc3339_millis(message.time.unwrap_or(now)).to_string();
        headers
            .entry(HeaderName::from_static("ce-time"))
            .or_insert_with(|| text(&time));
        headers
            .entry(header::CONTENT_TYPE)
            .or_insert_with(|| HeaderValue::from_static("application/octet-stream"));
        headers.insert(HeaderName::from_static("idempotency-key"), quoted(key));
        Self {
            headers,
            body: message.payload.clone(),
        }
    }
}

/// `key` as an `Idempotency-Key` value: bare when it can be, else an sf-string.
fn quoted(key: &IdempotencyKey) -> HeaderValue {
    let key = key.as_str();
    let bare = key
        .bytes()
        .all(|b| (0x21..=0x7e).contains(&b) && !matches!(b, b'"' | b',' | b';'));
    let value = if bare { key.to_owned() } else { sf_string(key) };
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

/// `value` as an RFC 8941 sf-string: quoted, with `\` and `"` escaped.
fn sf_string(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

/// What an answer (or its absence) means for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A `2xx`: the endpoint applied the message, or had (a replay): acknowledge it.
    Delivered,
    /// No answer, a timeout, `408`, `409` (the key is still running), `429` or a `5xx`: try
    /// again, after at least `retry_after` when the endpoint said so.
    Retry {
        /// The `Retry-After` the endpoint sent, if any.
        retry_after: Option<Duration>,
    },
    /// Any other status (a `4xx`, a `3xx`): the endpoint refused it; tried again up to
    /// `--max-attempts`, then dead-lettered.
    Refused,
}

impl Answer {
    /// What `status`, with `headers`, means.
    pub fn of(status: StatusCode, headers: &HeaderMap, now: SystemTime) -> Self {
        if status.is_success() {
            return Self::Delivered;
        }
        let retried = status.is_server_error()
            || matches!(
                status,
                StatusCode::REQUEST_TIMEOUT | StatusCode::CONFLICT | StatusCode::TOO_MANY_REQUESTS
            );
        if retried {
            let retry_after = headers
                .get(header::RETRY_AFTER)
                .and_then(|value| retry_after(value, now));
            Self::Retry { retry_after }
        } else {
            Self::Refused
        }
    }
}

/// A `Retry-After`: delta-seconds, or an HTTP-date (from now; a date past is no wait).
fn retry_after(value: &HeaderValue, now: SystemTime) -> Option<Duration> {
    let text = value.to_str().ok()?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Some(text.parse().map_or(Duration::MAX, Duration::from_secs));
    }
    let date = httpdate::parse_http_date(text).ok()?;
    Some(date.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> Message {
        let mut message = Message::new("orders", r#"{"order":42}"#);
        message.message_id = Some("0190a3c4-6f1e-7000-8000-000000000001".into());
        message.broker_id = Some("ORDERS/17".into());
        message.headers = vec![
            ("content-type".into(), "application/json".into()),
            (
                "traceparent".into(),
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            ),
            ("Content-Length".into(), "999".into()),
            ("ce-id".into(), "forged".into()),
            ("ce-subject".into(), "order-42".into()),
            ("bad name".into(), "x".into()),
            ("x-tenant".into(), "a".into()),
            ("x-tenant".into(), "b".into()),
        ];
        message.time = Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_780_000_000_123));
        message
    }

    #[test]
    fn the_key_comes_from_the_outbox_id_the_broker_id_or_a_header() {
        let mut message = message();
        let key = |from: &str, message: &Message| {
            key_of(&from.parse::<KeyFrom>().unwrap(), message).map(|k| k.as_str().to_owned())
        };
        assert_eq!(
            key("outbox-id", &message).unwrap(),
            "0190a3c4-6f1e-7000-8000-000000000001"
        );
        assert_eq!(key("message-id", &message).unwrap(), "ORDERS/17");
        assert_eq!(key("header:X-Tenant", &message).unwrap(), "b");
        assert_eq!(
            key("header:x-missing", &message),
            Err(NoKey::Missing(KeyFrom::Header("x-missing".into())))
        );
        message.message_id = None;
        assert_eq!(key("outbox-id", &message).unwrap(), "ORDERS/17");
        message.broker_id = None;
        assert_eq!(
            key("outbox-id", &message),
            Err(NoKey::Missing(KeyFrom::OutboxId))
        );
        message.message_id = Some("a, \"b\"; c".into());
        assert_eq!(key("message-id", &message).unwrap(), "a, \"b\"; c");
        message.message_id = Some("k".repeat(256));
        assert!(matches!(
            key("outbox-id", &message),
            Err(NoKey::Invalid { .. })
        ));
    }

    #[test]
    fn a_message_becomes_a_binary_mode_cloudevent_with_its_headers() {
        let message = message();
        let key = key_of(&KeyFrom::OutboxId, &message).unwrap();
        let event = Event::new(
            &message,
            &key,
            &Attributes::default(),
            SystemTime::UNIX_EPOCH,
        );
        let headers: Vec<(String, String)> = event
            .headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_owned()))
            .collect();
        let id = "0190a3c4-6f1e-7000-8000-000000000001";
        assert_eq!(
            headers,
            [
                ("content-type", "application/json"),
                (
                    "traceparent",
                    "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
                ),
                ("ce-subject", "order-42"),
                ("x-tenant", "a"),
                ("x-tenant", "b"),
                ("ce-id", id),
                ("ce-specversion", "1.0"),
                ("ce-source", "orders"),
                ("ce-type", "orders"),
                ("ce-time", "2026-05-28T20:26:40.123Z"),
                ("idempotency-key", id),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        assert_eq!(event.body, r#"{"order":42}"#);
    }

    #[test]
    fn the_flags_and_the_producer_set_source_and_type_and_a_key_that_is_not_bare_is_quoted() {
        let mut message = Message::new("payments", "x");
        message.message_id = Some("a b".into());
        message.headers = vec![("ce-type".into(), "com.example.paid".into())];
        let key = key_of(&KeyFrom::OutboxId, &message).unwrap();
        let attributes = Attributes {
            source: Some("/shop/payments".into()),
            event_type: Some("com.example.payment".into()),
        };
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1);
        let event = Event::new(&message, &key, &attributes, now);
        let get = |name: &str| event.headers.get(name).unwrap().to_str().unwrap();
        assert_eq!(get("ce-type"), "com.example.paid");
        assert_eq!(get("ce-source"), "/shop/payments");
        assert_eq!(get("ce-time"), "1970-01-01T00:00:01.000Z");
        assert_eq!(get("content-type"), "application/octet-stream");
        assert_eq!(get("idempotency-key"), "\"a b\"");
        assert_eq!(get("ce-id"), "a b");
    }

    #[test]
    fn answers_are_delivered_retried_or_refused() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::RETRY_AFTER, HeaderValue::from_str(value).unwrap());
            headers
        };
        let none = HeaderMap::new();
        let answer = |status: u16, headers: &HeaderMap| {
            Answer::of(StatusCode::from_u16(status).unwrap(), headers, now)
        };
        assert_eq!(answer(200, &none), Answer::Delivered);
        assert_eq!(answer(201, &none), Answer::Delivered);
        for status in [408, 409, 429, 500, 502, 503, 504] {
            assert_eq!(
                answer(status, &none),
                Answer::Retry { retry_after: None },
                "{status}"
            );
        }
        for status in [301, 400, 401, 404, 413, 422] {
            assert_eq!(answer(status, &none), Answer::Refused, "{status}");
        }
        let seconds = |s| Answer::Retry {
            retry_after: Some(Duration::from_secs(s)),
        };
        assert_eq!(answer(429, &with("7")), seconds(7));
        let date = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(answer(503, &with(&date)), seconds(30));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(answer(503, &with(&past)), seconds(0));
        assert_eq!(
            answer(409, &with("soon")),
            Answer::Retry { retry_after: None }
        );
        assert_eq!(answer(422, &with("7")), Answer::Refused);
    }
}
