//! The callers: each one makes logical operations one after the other, each under a key of its
//! own, through [`idem_client`], until told to stop; each operation's outcome goes to the
//! history.

use std::time::Duration;

use futures_util::future::try_join_all;
use idem_client::{Client, Error as ClientError};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{
    Error, Reply,
    history::{Operation, Recorder},
};

/// How the callers' client retries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallerSettings {
    pub(crate) callers: u32,
    pub(crate) attempt_timeout: Duration,
    pub(crate) deadline: Duration,
}

/// Runs the callers against `url` until `stop`; returns when every operation they started has
/// its outcome (at most the deadline after `stop`).
pub(crate) async fn run(
    url: String,
    settings: CallerSettings,
    recorder: Recorder,
    stop: CancellationToken,
) -> Result<(), Error> {
    let client = Client::builder()
        .attempt_timeout(settings.attempt_timeout)
        .deadline(settings.deadline)
        // The deadline ends an operation, not a count of attempts.
        .max_attempts(u32::MAX)
        .initial_backoff(Duration::from_millis(20))
        .max_backoff(Duration::from_millis(500))
        .build();
    let url = format!("{url}/ops");
    let callers = (0..settings.callers).map(|caller| {
        let (client, url, recorder, stop) = (&client, &url, &recorder, &stop);
        async move {
            let mut n = 0_u64;
            while !stop.is_cancelled() {
                let key = format!("op-{caller}-{n}");
                let started = recorder.now();
                let sent = client
                    .post(url.as_str())
                    .key(key.as_str())
                    .json(&json!({ "caller": caller, "n": n }))
                    .send()
                    .await;
                let outcome = match sent {
                    Ok(response) => Reply::Answered {
                        status: response.status().as_u16(),
                        replayed: response.replayed(),
                        execution: response
                            .json::<serde_json::Value>()
                            .ok()
                            .and_then(|body| body["execution"].as_u64()),
                    },
                    Err(ClientError::OutcomeUnknown { .. }) => Reply::OutcomeUnknown,
                    Err(error @ ClientError::GaveUp { .. }) => Reply::GaveUp {
                        // For people reading the history: the error and its last failure.
                        reason: error_chain(&error),
                    },
                    Err(error) => return Err(Error::Client(Box::new(error))),
                };
                recorder.operation(Operation {
                    key,
                    started,
                    ended: recorder.now(),
                    outcome,
                });
                n += 1;
            }
            Ok(())
        }
    });
    try_join_all(callers).await.map(drop)
}

fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
