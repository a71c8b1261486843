//! Which answers are definite, and which are worth another attempt with the same key.

use std::time::Duration;

use http::{HeaderValue, StatusCode, header::RETRY_AFTER};
use idem_core::OUTCOME_UNKNOWN_TYPE;

use crate::Response;

/// What to do with an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Return it to the caller.
    Definite,
    /// Send the request again, after at least `retry_after` when the server named a wait.
    Retry { retry_after: Option<Duration> },
    /// The server recorded the outcome as unknown: final, yet no answer.
    OutcomeUnknown,
}

/// Classifies an answer.
///
/// A key makes a retry harmless, so everything that may be transient is retried: `408`, `409`
/// (the same key is still running), `429` and every `5xx`. Two exceptions are final: the
/// outcome-unknown problem, and any replay — the server stored that answer for this key and
/// gives it to every retry, so asking again cannot change it.
pub(crate) fn classify(response: &Response) -> Verdict {
    let status = response.status();
    if status == StatusCode::INTERNAL_SERVER_ERROR && is_outcome_unknown(response.body()) {
        return Verdict::OutcomeUnknown;
    }
    if response.replayed() {
        return Verdict::Definite;
    }
    match status.as_u16() {
        409 | 429 | 503 => Verdict::Retry {
            retry_after: response
                .headers()
                .get(RETRY_AFTER)
                .and_then(parse_retry_after),
        },
        408 | 500..=599 => Verdict::Retry { retry_after: None },
        _ => Verdict::Definite,
    }
}

/// Whether `body` is a problem of type outcome-unknown.
fn is_outcome_unknown(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Problem {
        #[serde(rename = "type")]
        kind: Option<String>,
    }
    serde_json::from_slice::<Problem>(body)
        .is_ok_and(|problem| problem.kind.as_deref() == Some(OUTCOME_UNKNOWN_TYPE))
}

/// A `Retry-After` in delta-seconds (`120`). An HTTP-date is not read — idem servers never send
/// one, and it would make the wait depend on two clocks agreeing — so it, like anything
/// malformed, leaves the wait to the backoff. A number too large to hold is "longer than any
/// deadline".
pub(crate) fn parse_retry_after(value: &HeaderValue) -> Option<Duration> {
    let text = value.to_str().ok()?.trim_matches([' ', '\t']);
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some(text.parse().map_or(Duration::MAX, Duration::from_secs))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{HeaderMap, Version};

    use super::*;

    fn response(status: u16, headers: &[(&'static str, &'static str)], body: &str) -> Response {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(*name, HeaderValue::from_static(value));
        }
        Response {
            status: StatusCode::from_u16(status).unwrap(),
            version: Version::HTTP_11,
            headers: map,
            body: Bytes::copy_from_slice(body.as_bytes()),
            attempts: 1,
            key: "k".parse().unwrap(),
        }
    }

    fn verdict(status: u16) -> Verdict {
        classify(&response(status, &[], ""))
    }

    const RETRY: Verdict = Verdict::Retry { retry_after: None };

    #[test]
    fn the_classification_table() {
        let table = [
            (200, Verdict::Definite),
            (201, Verdict::Definite),
            (202, Verdict::Definite),
            (204, Verdict::Definite),
            (301, Verdict::Definite),
            (303, Verdict::Definite),
            (304, Verdict::Definite),
            (307, Verdict::Definite),
            (400, Verdict::Definite),
            (401, Verdict::Definite),
            (403, Verdict::Definite),
            (404, Verdict::Definite),
            (405, Verdict::Definite),
            (408, RETRY),
            (409, RETRY),
            (410, Verdict::Definite),
            (412, Verdict::Definite),
            (413, Verdict::Definite),
            (415, Verdict::Definite),
            (422, Verdict::Definite),
            (425, Verdict::Definite),
            (428, Verdict::Definite),
            (429, RETRY),
            (451, Verdict::Definite),
            (499, Verdict::Definite),
            (500, RETRY),
            (501, RETRY),
            (502, RETRY),
            (503, RETRY),
            (504, RETRY),
            (507, RETRY),
            (599, RETRY),
        ];
        for (status, expected) in table {
            assert_eq!(verdict(status), expected, "status {status}");
        }
    }

    #[test]
    fn every_status_is_retried_exactly_when_it_is_408_409_429_or_5xx() {
        for status in 100..=999 {
            let expected = match status {
                408 | 409 | 429 | 500..=599 => RETRY,
                _ => Verdict::Definite,
            };
            assert_eq!(verdict(status), expected, "status {status}");
        }
    }

    #[test]
    fn a_replay_is_definite_whatever_its_status() {
        for status in [200, 409, 429, 500, 502, 503, 504] {
            let replay = response(status, &[("idempotent-replayed", "true")], "");
            assert_eq!(classify(&replay), Verdict::Definite, "status {status}");
        }
    }

    #[test]
    fn the_outcome_unknown_problem_is_final_first_time_and_replayed() {
        let body =
            r#"{"type":"urn:idem:problem:outcome-unknown","title":"Outcome unknown","status":500}"#;
        let first = response(500, &[("content-type", "application/problem+json")], body);
        assert_eq!(classify(&first), Verdict::OutcomeUnknown);
        let replay = response(500, &[("idempotent-replayed", "true")], body);
        assert_eq!(classify(&replay), Verdict::OutcomeUnknown);
    }

    #[test]
    fn other_500_problems_are_retried() {
        let failed = r#"{"type":"urn:idem:problem:upstream-failed","status":500}"#;
        assert_eq!(classify(&response(500, &[], failed)), RETRY);
        assert_eq!(classify(&response(500, &[], "<html>oops</html>")), RETRY);
        let unknown = r#"{"type":"urn:idem:problem:outcome-unknown"}"#;
        assert_eq!(classify(&response(502, &[], unknown)), RETRY);
    }

    #[test]
    fn retry_after_is_read_on_409_429_and_503_only() {
        for status in [409, 429, 503] {
            let answer = response(status, &[("retry-after", "3")], "");
            assert_eq!(
                classify(&answer),
                Verdict::Retry {
                    retry_after: Some(Duration::from_secs(3))
                },
                "status {status}"
            );
        }
        for status in [408, 500, 502, 504] {
            let answer = response(status, &[("retry-after", "3")], "");
            assert_eq!(classify(&answer), RETRY, "status {status}");
        }
    }

    #[test]
    fn retry_after_parses_delta_seconds() {
        let parse = |text: &'static str| parse_retry_after(&HeaderValue::from_static(text));
        assert_eq!(parse("0"), Some(Duration::ZERO));
        assert_eq!(parse("1"), Some(Duration::from_secs(1)));
        assert_eq!(parse("120"), Some(Duration::from_secs(120)));
        assert_eq!(parse(" 7\t"), Some(Duration::from_secs(7)));
        assert_eq!(parse("007"), Some(Duration::from_secs(7)));
        assert_eq!(parse("99999999999999999999999"), Some(Duration::MAX));
    }

    #[test]
    fn retry_after_ignores_dates_and_garbage() {
        let parse = |text: &'static str| parse_retry_after(&HeaderValue::from_static(text));
        assert_eq!(parse("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse(""), None);
        assert_eq!(parse("   "), None);
        assert_eq!(parse("-1"), None);
        assert_eq!(parse("+1"), None);
        assert_eq!(parse("1.5"), None);
        assert_eq!(parse("1 2"), None);
        assert_eq!(parse("soon"), None);
        assert_eq!(
            parse_retry_after(&HeaderValue::from_bytes(b"\xff").unwrap()),
            None
        );
    }
}
