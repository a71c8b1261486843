//! Which SQS failures are the message's fault (a rejection) and which are SQS's or the
//! network's (the broker is unavailable).

use std::fmt;

use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};

use crate::PublishError;

/// The error codes that say something about the message or its queue, retried with backoff then
/// dead-lettered by the relay. Everything else (throttling, an internal error, credentials that
/// are refused, a timeout) says nothing about the message.
const REJECTIONS: [&str; 13] = [
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
    "InvalidMessageContents",
    "InvalidParameterValue",
    "InvalidParameterValueException",
    "MissingParameter",
    "InvalidAttributeName",
    "InvalidAttributeValue",
    "BatchRequestTooLong",
    "BatchEntryIdsNotDistinct",
    "MessageTooLong",
    "UnsupportedOperation",
    "AWS.SimpleQueueService.UnsupportedOperation",
];

/// The error codes of a queue that does not exist (the second is the older protocol's).
const MISSING_QUEUE: [&str; 2] = [
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
];

/// Whether an error `code` of SQS says the queue does not exist.
pub(super) fn is_missing_queue(code: &str) -> bool {
    MISSING_QUEUE.contains(&code)
}

/// Whether an error `code` of SQS is the message's fault.
pub(super) fn is_rejection(code: &str) -> bool {
    REJECTIONS.contains(&code)
}

/// A failed request, as the relay's error for each message it carried.
pub(super) fn classify<E, R>(error: SdkError<E, R>) -> PublishError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: fmt::Debug + Send + Sync + 'static,
{
    match error.as_service_error().and_then(|service| service.code()) {
        Some(code) if is_rejection(code) => PublishError::Rejected {
            reason: reason(code, error.as_service_error().and_then(|e| e.message())),
        },
        _ => PublishError::unavailable(error),
    }
}

/// `code: message`, as SQS gave them.
pub(super) fn reason(code: &str, message: Option<&str>) -> String {
    match message {
        Some(message) if !message.is_empty() => format!("{code}: {message}"),
        _ => code.to_owned(),
    }
}

/// The same outcome for `n` messages: a rejection's reason is repeated, an unavailability's
/// source goes with the first.
pub(super) fn spread(error: PublishError, n: usize) -> Vec<PublishError> {
    let mut errors = Vec::with_capacity(n);
    match error {
        PublishError::Rejected { reason } => {
            errors.resize_with(n, || PublishError::Rejected {
                reason: reason.clone(),
            });
        }
        unavailable => {
            errors.push(unavailable);
            errors.resize_with(n, || {
                PublishError::unavailable("the request that carried the message failed")
            });
        }
    }
    errors.truncate(n);
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_faults_are_rejections_and_the_rest_unavailability() {
        assert!(is_rejection("AWS.SimpleQueueService.NonExistentQueue"));
        assert!(is_rejection("QueueDoesNotExist"));
        assert!(is_rejection("InvalidMessageContents"));
        assert!(!is_rejection("ThrottlingException"));
        assert!(!is_rejection("RequestThrottled"));
        assert!(!is_rejection("InternalError"));
        assert!(!is_rejection("InvalidClientTokenId"));
        assert!(!is_rejection("AccessDenied"));
        assert!(is_missing_queue("QueueDoesNotExist"));
        assert!(is_missing_queue("AWS.SimpleQueueService.NonExistentQueue"));
        assert!(!is_missing_queue("AccessDenied"));
    }

    #[test]
    fn an_outcome_is_spread_over_every_message() {
        let rejected = spread(
            PublishError::Rejected {
                reason: "QueueDoesNotExist".into(),
            },
            2,
        );
        assert_eq!(rejected.len(), 2);
        for error in &rejected {
            assert_eq!(
                error.to_string(),
                "the broker rejected the message: QueueDoesNotExist"
            );
        }
        let unavailable = spread(PublishError::unavailable("down"), 3);
        assert_eq!(unavailable.len(), 3);
        assert!(
            unavailable
                .iter()
                .all(|e| matches!(e, PublishError::Unavailable(_)))
        );
        assert!(spread(PublishError::unavailable("down"), 0).is_empty());
        assert_eq!(
            reason("InvalidParameterValue", Some("too long")),
            "InvalidParameterValue: too long"
        );
        assert_eq!(reason("InternalError", Some("")), "InternalError");
    }
}
