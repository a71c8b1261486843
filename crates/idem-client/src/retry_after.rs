//! The `Retry-After` header, as idem's clients read it.

use std::time::Duration;

use http::HeaderValue;

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
    use super::*;
    use crate::cases::{seconds, shared_cases};

    #[test]
    fn the_shared_retry_after_values() {
        for case in shared_cases()["retry_after"].as_array().unwrap() {
            let value = case["value"].as_str().unwrap();
            assert_eq!(
                parse_retry_after(&HeaderValue::from_str(value).unwrap()),
                seconds(&case["seconds"]),
                "{value:?}"
            );
        }
        assert_eq!(
            parse_retry_after(&HeaderValue::from_bytes(b"\xff").unwrap()),
            None
        );
    }
}
