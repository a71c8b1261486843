//! What makes a NATS subject valid: to publish to ([`invalid_subject`]), and to subscribe to
//! ([`invalid_filter`], wildcards allowed).

/// Why `subject` cannot be published to, if it cannot: it is not a valid filter, or has a
/// wildcard token.
pub(super) fn invalid_subject(subject: &str) -> Option<&'static str> {
    invalid_filter(subject).or_else(|| {
        subject
            .split('.')
            .any(|token| token == "*" || token == ">")
            .then_some("has a wildcard token")
    })
}

/// Why `filter` cannot be subscribed to, if it cannot: it is empty, holds white space, has an
/// empty token, or a `>` before its last token.
pub(super) fn invalid_filter(filter: &str) -> Option<&'static str> {
    if filter.is_empty() {
        Some("empty")
    } else if filter.chars().any(char::is_whitespace) {
        Some("holds white space")
    } else if filter.split('.').any(str::is_empty) {
        Some("has an empty token")
    } else if filter.split('.').rev().skip(1).any(|token| token == ">") {
        Some("has a `>` before its last token")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_are_checked_before_publishing() {
        assert_eq!(invalid_subject("orders.paid"), None);
        assert_eq!(invalid_subject("orders"), None);
        assert_eq!(invalid_subject(""), Some("empty"));
        assert_eq!(invalid_subject("orders paid"), Some("holds white space"));
        assert_eq!(invalid_subject("orders..paid"), Some("has an empty token"));
        assert_eq!(invalid_subject(".orders"), Some("has an empty token"));
        assert_eq!(invalid_subject("orders.*"), Some("has a wildcard token"));
        assert_eq!(invalid_subject("orders.>"), Some("has a wildcard token"));
    }

    #[test]
    fn filters_take_wildcards_as_whole_tokens_and_a_tail_last() {
        for valid in [
            "orders",
            "orders.paid",
            "orders.*",
            "*.paid",
            "orders.>",
            ">",
            "*.*.>",
        ] {
            assert_eq!(invalid_filter(valid), None, "{valid}");
        }
        assert_eq!(invalid_filter(""), Some("empty"));
        assert_eq!(invalid_filter("orders .>"), Some("holds white space"));
        assert_eq!(invalid_filter("orders..>"), Some("has an empty token"));
        assert_eq!(invalid_filter("orders."), Some("has an empty token"));
        assert_eq!(
            invalid_filter("orders.>.paid"),
            Some("has a `>` before its last token")
        );
        assert_eq!(
            invalid_filter(">.>"),
            Some("has a `>` before its last token")
        );
    }
}
