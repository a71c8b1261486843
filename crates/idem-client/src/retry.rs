//! The attempts of one operation: the same request under the same key, until a definite
//! answer, the last attempt or the deadline.

use std::time::Duration;

use fastrand::Rng;
use idem_core::IdempotencyKey;
use tokio::time::Instant;

use crate::{
    Error, GiveUpReason, LastFailure, Response,
    classify::{Verdict, classify},
    policy::RetryPolicy,
};

/// Sends `request` (which carries `key`) until a definite answer or a limit of the client's
/// policy.
pub(crate) async fn send(
    http: &reqwest::Client,
    policy: RetryPolicy,
    request: reqwest::Request,
    key: IdempotencyKey,
) -> Result<Response, Error> {
    // `None`: a deadline too far to represent, so none.
    let deadline = Instant::now().checked_add(policy.deadline);
    let mut rng = Rng::new();
    // Keys are never logged in clear.
    let digest = key.digest();
    let mut attempts = 0;
    loop {
        attempts += 1;
        let remaining = deadline.map_or(Duration::MAX, |deadline| {
            deadline.saturating_duration_since(Instant::now())
        });
        let mut attempt = request
            .try_clone()
            .expect("the body is bytes, never a stream");
        *attempt.timeout_mut() = Some(policy.attempt_timeout.min(remaining));

        let (last, retry_after) = match execute(http, attempt, attempts, &key).await {
            Ok(response) => {
                let verdict = classify(&response);
                tracing::debug!(
                    key = %digest,
                    attempt = attempts,
                    status = response.status().as_u16(),
                    replayed = response.replayed(),
                    ?verdict,
                    "attempt answered"
                );
                match verdict {
                    Verdict::Definite => return Ok(response),
                    Verdict::OutcomeUnknown(problem) => {
                        return Err(Error::OutcomeUnknown {
                            key,
                            attempts,
                            problem,
                            response,
                        });
                    }
                    Verdict::Mismatch(problem) => {
                        return Err(Error::Mismatch {
                            key,
                            attempts,
                            problem,
                            response,
                        });
                    }
                    Verdict::Retry { retry_after } => (LastFailure::Status(response), retry_after),
                }
            }
            Err(error) if error.is_builder() => return Err(Error::Build(error)),
            Err(error) => {
                tracing::debug!(
                    key = %digest,
                    attempt = attempts,
                    error = &error as &(dyn std::error::Error + 'static),
                    "attempt got no answer"
                );
                (LastFailure::Transport(error), None)
            }
        };

        let reason = if attempts >= policy.max_attempts {
            GiveUpReason::MaxAttempts
        } else {
            let backoff = policy.backoff(attempts, &mut rng);
            let wait = retry_after.map_or(backoff, |after| after.max(backoff));
            if !reaches(deadline, wait) {
                tracing::debug!(key = %digest, attempt = attempts, ?wait, "retrying");
                tokio::time::sleep(wait).await;
                continue;
            }
            GiveUpReason::Deadline
        };
        tracing::debug!(key = %digest, attempts, %reason, "giving up");
        return Err(Error::GaveUp {
            key,
            attempts,
            reason,
            last,
        });
    }
}

/// Whether waiting `wait` from now reaches the deadline: then waiting is pointless.
fn reaches(deadline: Option<Instant>, wait: Duration) -> bool {
    match Instant::now().checked_add(wait) {
        Some(until) => deadline.is_some_and(|deadline| until >= deadline),
        None => true,
    }
}

/// One attempt, its response read whole.
async fn execute(
    http: &reqwest::Client,
    request: reqwest::Request,
    attempts: u32,
    key: &IdempotencyKey,
) -> Result<Response, reqwest::Error> {
    let mut response = http.execute(request).await?;
    let status = response.status();
    let version = response.version();
    let headers = std::mem::take(response.headers_mut());
    let body = response.bytes().await?;
    Ok(Response {
        status,
        version,
        headers,
        body,
        attempts,
        key: key.clone(),
    })
}
