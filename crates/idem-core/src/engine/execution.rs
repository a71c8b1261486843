//! What a piece of work reports, and what the engine records for it.

use std::{fmt, future::Future, pin::Pin};

use crate::{Ambiguous, Outcome, StoredResponse};

/// The result of running an operation, as the work reports it to the [`Engine`](crate::Engine).
///
/// `value` is handed back to the caller in every case; the variant decides what is recorded
/// under the key.
#[derive(Debug)]
pub enum Execution<T> {
    /// A final outcome (HTTP: 2xx, 3xx, 4xx but 408 and 429): stored and replayed to retries.
    Final {
        /// What is stored.
        response: StoredResponse,
        /// What the caller gets.
        value: T,
    },
    /// An outcome that does not say whether the operation took effect (HTTP: 5xx, 408, 429).
    /// Released under [`Ambiguous::Retry`], stored and replayed under [`Ambiguous::Reject`].
    Ambiguous {
        /// What is stored under [`Ambiguous::Reject`].
        response: StoredResponse,
        /// What the caller gets.
        value: T,
    },
    /// The request was sent but its result was lost (the connection dropped). Released under
    /// [`Ambiguous::Retry`]; recorded as [`Outcome::Unknown`] under [`Ambiguous::Reject`].
    Lost {
        /// What the caller gets.
        value: T,
    },
    /// The request never reached the other side (connection refused, DNS, connect timeout): it
    /// cannot have taken effect, so the key is released.
    NotSent {
        /// What the caller gets.
        value: T,
    },
    /// The caller's value is ready before the outcome is: a response streamed to its client
    /// while it is recorded. The engine hands `value` to the caller at once and runs `rest` in a
    /// task of its own (tracked, so that [`Engine::shutdown`](crate::Engine::shutdown) waits
    /// for it), renewing the lease meanwhile; then it records the execution `rest` ends with,
    /// like any other, and calls [the function](OnSettled) that execution carries.
    Streaming {
        /// What the caller gets now.
        value: T,
        /// The rest of the work.
        rest: Rest,
    },
}

/// What a [streamed](Execution::Streaming) execution does once its outcome is recorded or its
/// key released, told whether that was done: an HTTP front end lets its client see the end of
/// the response only then, so that a client that read a whole response and retries gets it
/// replayed; and the duplicates that joined the stream see a clean end only if the record holds
/// it.
pub type OnSettled = Box<dyn FnOnce(Settled) + Send>;

/// Whether the engine did with a streamed execution's key what the execution asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The outcome was recorded, or the key released.
    Done,
    /// Neither: the lease was lost (taken over, forgotten, expired), or the store failed for a
    /// whole lease. The record does not hold this execution's outcome.
    NotDone,
}

/// The rest of a [streamed](Execution::Streaming) execution: a future of the execution to
/// record, whose value is [called](OnSettled) once it is.
pub struct Rest(pub(crate) Pin<Box<dyn Future<Output = Execution<OnSettled>> + Send>>);

impl Rest {
    /// The rest of an execution: `future`.
    pub fn new(future: impl Future<Output = Execution<OnSettled>> + Send + 'static) -> Self {
        Self(Box::pin(future))
    }
}

impl fmt::Debug for Rest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Rest(..)")
    }
}

/// What the engine does with the key once the work has finished.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Settlement {
    Complete(Outcome),
    Release,
}

impl<T> Execution<T> {
    /// The same execution, its value changed by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Execution<U> {
        match self {
            Execution::Final { response, value } => Execution::Final {
                response,
                value: f(value),
            },
            Execution::Ambiguous { response, value } => Execution::Ambiguous {
                response,
                value: f(value),
            },
            Execution::Lost { value } => Execution::Lost { value: f(value) },
            Execution::NotSent { value } => Execution::NotSent { value: f(value) },
            Execution::Streaming { value, rest } => Execution::Streaming {
                value: f(value),
                rest,
            },
        }
    }

    /// Splits the execution into the caller's value and what to record, under `ambiguous`; a
    /// [streamed](Execution::Streaming) one comes back as it is.
    pub(crate) fn settle(self, ambiguous: Ambiguous) -> Result<(T, Settlement), (T, Rest)> {
        Ok(match (self, ambiguous) {
            (Execution::Streaming { value, rest }, _) => return Err((value, rest)),
            (Execution::Final { response, value }, _)
            | (Execution::Ambiguous { response, value }, Ambiguous::Reject) => {
                (value, Settlement::Complete(Outcome::Response(response)))
            }
            (Execution::Lost { value }, Ambiguous::Reject) => {
                (value, Settlement::Complete(Outcome::Unknown))
            }
            (Execution::Ambiguous { value, .. }, Ambiguous::Retry)
            | (Execution::Lost { value }, Ambiguous::Retry)
            | (Execution::NotSent { value }, _) => (value, Settlement::Release),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> StoredResponse {
        StoredResponse::new(200)
    }

    #[test]
    fn final_outcomes_are_stored_under_both_policies() {
        for policy in [Ambiguous::Retry, Ambiguous::Reject] {
            let (value, settlement) = Execution::Final {
                response: ok(),
                value: 1,
            }
            .settle(policy)
            .unwrap();
            assert_eq!((value, settlement), (1, Settlement::Complete(ok().into())));
        }
    }

    #[test]
    fn ambiguous_outcomes_follow_the_policy() {
        let failed = StoredResponse::new(503);
        let ambiguous = || Execution::Ambiguous {
            response: failed.clone(),
            value: 2,
        };
        assert_eq!(
            ambiguous().settle(Ambiguous::Retry).unwrap(),
            (2, Settlement::Release)
        );
        assert_eq!(
            ambiguous().settle(Ambiguous::Reject).unwrap(),
            (2, Settlement::Complete(failed.clone().into()))
        );
        assert_eq!(
            Execution::Lost { value: 3 }
                .settle(Ambiguous::Retry)
                .unwrap(),
            (3, Settlement::Release)
        );
        assert_eq!(
            Execution::Lost { value: 3 }
                .settle(Ambiguous::Reject)
                .unwrap(),
            (3, Settlement::Complete(Outcome::Unknown))
        );
    }

    #[test]
    fn unsent_requests_are_always_released() {
        for policy in [Ambiguous::Retry, Ambiguous::Reject] {
            assert_eq!(
                Execution::NotSent { value: 4 }.settle(policy).unwrap(),
                (4, Settlement::Release)
            );
        }
    }
}
