//! Which answers are definite, and which are worth another attempt with the same key.

use std::time::Duration;

use http::header::RETRY_AFTER;
use idem_core::OUTCOME_UNKNOWN_TYPE;

/// The problem type of a key reused for a different request.
const MISMATCH_TYPE: &str = "urn:idem:problem:fingerprint-mismatch";

use crate::{Problem, Response, retry_after::parse_retry_after};

/// What to do with an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Return it to the caller.
    Definite,
    /// Send the request again, after at least `retry_after` when the server named a wait.
    Retry { retry_after: Option<Duration> },
    /// The server recorded the outcome as unknown: final, yet no answer.
    OutcomeUnknown(Problem),
    /// The key was used for a different request: the caller's mistake, final.
    Mismatch(Problem),
}

/// Classifies an answer, in this order:
///
/// 1. the outcome-unknown problem (a `500`) and the fingerprint-mismatch problem (a `422`) are
///    final, and raised as errors of their own;
/// 2. a replay is definite whatever its status: the server stored that answer for this key and
///    gives it to every retry, so asking again cannot change it;
/// 3. what may be transient is retried — `409` (the same key is still running), `429` and
///    `503` after their `Retry-After`, `408`, `502` and `504` — since the key makes a second
///    delivery harmless;
/// 4. everything else is the answer: `2xx`, `3xx`, the other `4xx`, and the other `5xx` (a
///    `500` is the API's own answer, which a retry would not change; idem's gateway answers its
///    own transient failures with `502`, `503` and `504`).
pub(crate) fn classify(response: &Response) -> Verdict {
    let status = response.status();
    // Recognized by their problem type, whatever the Content-Type says.
    let problem_of_type = |kind: &str| {
        Problem::of_body(response.headers(), response.body()).filter(|problem| problem.kind == kind)
    };
    match status.as_u16() {
        500 => {
            if let Some(problem) = problem_of_type(OUTCOME_UNKNOWN_TYPE) {
                return Verdict::OutcomeUnknown(problem);
            }
        }
        422 => {
            if let Some(problem) = problem_of_type(MISMATCH_TYPE) {
                return Verdict::Mismatch(problem);
            }
        }
        _ => {}
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
        408 | 502 | 504 => Verdict::Retry { retry_after: None },
        _ => Verdict::Definite,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};
    use serde_json::Value;

    use super::*;
    use crate::cases::{seconds, shared_cases};

    fn response(status: u16, headers: &[(&str, &str)], body: &str) -> Response {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
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

    fn problem(expected: &Value) -> Option<Problem> {
        let text = |name: &str| expected[name].as_str().map(str::to_owned);
        expected.as_object().map(|_| Problem {
            kind: text("type").unwrap(),
            title: text("title"),
            status: expected["status"]
                .as_u64()
                .map(|s| u16::try_from(s).unwrap()),
            detail: text("detail"),
            retry_after: None,
        })
    }

    #[test]
    fn the_shared_answers() {
        let cases = shared_cases();
        let answers = cases["answers"].as_array().unwrap();
        assert!(answers.len() >= 30, "{} cases", answers.len());
        for case in answers {
            let name = case["name"].as_str().unwrap();
            let headers: Vec<(&str, &str)> = case["headers"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(name, value)| (name.as_str(), value.as_str().unwrap()))
                .collect();
            let answer = response(
                u16::try_from(case["status"].as_u64().unwrap()).unwrap(),
                &headers,
                case["body"].as_str().unwrap(),
            );
            let expect = &case["expect"];
            let verdict = match (expect["action"].as_str().unwrap(), expect["error"].as_str()) {
                ("return", None) => Verdict::Definite,
                ("retry", None) => Verdict::Retry {
                    retry_after: seconds(&expect["retry_after"]),
                },
                // The table's final answers carry no Retry-After.
                ("raise", Some("mismatch")) => {
                    Verdict::Mismatch(problem(&expect["problem"]).unwrap())
                }
                ("raise", Some("outcome_unknown")) => {
                    Verdict::OutcomeUnknown(problem(&expect["problem"]).unwrap())
                }
                other => panic!("{name}: unknown expectation {other:?}"),
            };
            assert_eq!(classify(&answer), verdict, "{name}");
            if let Some(expected) = expect.get("problem") {
                let mut got = answer.problem();
                // The table's problems leave Retry-After to the verdict.
                if let Some(got) = &mut got {
                    got.retry_after = None;
                }
                assert_eq!(got, problem(expected), "{name}");
            }
        }
    }

    #[test]
    fn every_status_is_retried_exactly_when_it_is_408_409_429_502_503_or_504() {
        for status in 100..=999 {
            let expected = match status {
                408 | 409 | 429 | 502..=504 => Verdict::Retry { retry_after: None },
                _ => Verdict::Definite,
            };
            assert_eq!(
                classify(&response(status, &[], "")),
                expected,
                "status {status}"
            );
        }
    }

    #[test]
    fn a_replay_is_definite_whatever_its_status() {
        for status in 100..=999 {
            let replay = response(status, &[("idempotent-replayed", "TRUE")], "");
            assert_eq!(classify(&replay), Verdict::Definite, "status {status}");
        }
    }

    #[test]
    fn retry_after_is_read_on_409_429_and_503_only() {
        for status in 100..=999 {
            let expected = match status {
                409 | 429 | 503 => Verdict::Retry {
                    retry_after: Some(Duration::from_secs(3)),
                },
                408 | 502 | 504 => Verdict::Retry { retry_after: None },
                _ => Verdict::Definite,
            };
            let answer = response(status, &[("retry-after", "3")], "");
            assert_eq!(classify(&answer), expected, "status {status}");
        }
    }

    #[test]
    fn a_problem_is_read_only_from_a_problem_body() {
        let body =
            r#"{"type":"urn:idem:problem:in-flight","title":"Request in flight","status":409}"#;
        let typed = |content_type: &str| {
            response(
                409,
                &[("content-type", content_type), ("retry-after", "4")],
                body,
            )
            .problem()
        };
        let expected = Problem {
            kind: "urn:idem:problem:in-flight".to_owned(),
            title: Some("Request in flight".to_owned()),
            status: Some(409),
            detail: None,
            retry_after: Some(Duration::from_secs(4)),
        };
        assert_eq!(typed("application/problem+json"), Some(expected.clone()));
        assert_eq!(
            typed("Application/Problem+JSON; charset=utf-8"),
            Some(expected)
        );
        assert_eq!(typed("application/json"), None);
        assert_eq!(response(409, &[], body).problem(), None);
        // Members of other types are ignored; a missing type is about:blank.
        let odd = response(
            400,
            &[("content-type", "application/problem+json")],
            r#"{"title":7,"status":"400","detail":"no"}"#,
        );
        assert_eq!(
            odd.problem(),
            Some(Problem {
                kind: "about:blank".to_owned(),
                title: None,
                status: None,
                detail: Some("no".to_owned()),
                retry_after: None,
            })
        );
    }
}
