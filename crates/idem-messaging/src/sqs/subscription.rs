//! An SQS [`Subscription`]: a task that receives with [`SqsConsumer`] while fewer than the
//! in-flight limit are held, each message a [`Received`] settled as [`SqsMessage`] is.
//!
//! SQS has no prefetch limit either: a receive returns up to ten messages, each hidden from
//! other consumers from then on. So the task holds a semaphore of `max_in_flight` permits: it
//! takes at least one before each receive (waiting while every one is held), and as many more as
//! are free, up to ten; it asks SQS for as many messages as it holds permits, and each message
//! carries one away, given back when the message is settled or dropped. The messages received,
//! read or not, are therefore never more than the limit, and each has its visibility extended
//! from its receipt until it is settled.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use aws_sdk_sqs::{
    Client,
    error::{ProvideErrorMetadata, SdkError},
    types::{MessageSystemAttributeName, QueueAttributeName},
};
use bytes::Bytes;
use futures_util::future::BoxFuture;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::{
    MESSAGE_ID_ATTRIBUTE, SqsConsumer, SqsMessage, error::is_missing_queue, is_queue_url,
    url::SqsUrl,
};
use crate::{
    BoxError, Error, Incoming, Received, SubscribeOptions, Subscription,
    consume::{Message, Settle},
};

/// The most messages SQS returns for one receive.
const MAX_RECEIVE: usize = 10;
/// The wait after a failed receive, doubled after each other failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest wait between failed receives.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// A queue that does not exist (or that the credentials may not see): a subscription to it is
/// refused.
#[derive(Debug, thiserror::Error)]
#[error("the SQS queue `{queue}` does not exist")]
pub struct UnknownQueue {
    /// The queue, as the subscription named it: its name or its URL.
    pub queue: String,
    /// SQS's answer.
    #[source]
    pub source: BoxError,
}

impl SqsUrl {
    /// Subscribes to this broker: see [`BrokerUrl::subscribe`](crate::BrokerUrl::subscribe)
    /// and the [`sqs`](super) module.
    pub(crate) async fn subscribe(&self, options: SubscribeOptions) -> Result<Subscription, Error> {
        let client = self.client().await.map_err(receive)?;
        let (url, name) = find(&client, options.from()).await?;
        let consumer = SqsConsumer::new(client, url).visibility_timeout(options.ack_wait_time());
        let permits = Arc::new(Semaphore::new(usize::from(options.in_flight_limit())));
        // One at a time: what the task received waits in the task, each message holding its
        // permit and having its visibility extended.
        let (sender, mut messages) = mpsc::channel(1);
        tokio::spawn(run(consumer, Arc::from(name), permits, sender));
        Ok(Subscription::new(futures_util::stream::poll_fn(
            move |cx| messages.poll_recv(cx),
        )))
    }
}

/// The URL and the name of the queue `queue` names (by name or by URL), checking that it exists.
async fn find(client: &Client, queue: &str) -> Result<(String, String), Error> {
    if is_queue_url(queue) {
        client
            .get_queue_attributes()
            .queue_url(queue)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .map_err(|error| refused(queue, error))?;
        let name = queue
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or(queue);
        return Ok((queue.to_owned(), name.to_owned()));
    }
    let output = client
        .get_queue_url()
        .queue_name(queue)
        .send()
        .await
        .map_err(|error| refused(queue, error))?;
    let url = output
        .queue_url()
        .ok_or_else(|| receive("GetQueueUrl answered without a URL"))?;
    Ok((url.to_owned(), queue.to_owned()))
}

/// SQS's refusal to find `queue`: [`UnknownQueue`] if it says there is no such queue.
fn refused<E, R>(queue: &str, error: SdkError<E, R>) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    let missing = error
        .as_service_error()
        .and_then(ProvideErrorMetadata::code)
        .is_some_and(is_missing_queue);
    if missing {
        return receive(UnknownQueue {
            queue: queue.to_owned(),
            source: error.into(),
        });
    }
    receive(error)
}

/// Receives from `consumer` until the subscription is dropped, a message for each permit.
async fn run(
    consumer: SqsConsumer,
    queue: Arc<str>,
    permits: Arc<Semaphore>,
    sender: mpsc::Sender<Result<Received, Error>>,
) {
    let mut backoff = FIRST_BACKOFF;
    loop {
        let held = tokio::select! {
            () = sender.closed() => return,
            held = take(&permits) => held,
        };
        let Some(held) = held else { return };
        let count = u8::try_from(held.len()).unwrap_or(u8::MAX);
        let received = tokio::select! {
            () = sender.closed() => return,
            received = consumer.receive_at_most(count) => received,
        };
        match received {
            Ok(messages) => {
                backoff = FIRST_BACKOFF;
                // As many permits as messages asked for: those left over go back.
                for (message, permit) in messages.into_iter().zip(held) {
                    let message = into_received(message, &queue, permit);
                    if sender.send(Ok(message)).await.is_err() {
                        return;
                    }
                }
            }
            Err(error) => {
                drop(held);
                if sender.send(Err(error)).await.is_err() {
                    return;
                }
                tokio::select! {
                    () = sender.closed() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// At least one permit, waiting for it, and as many more as are free, up to [`MAX_RECEIVE`];
/// `None` if the semaphore was closed (it never is).
async fn take(permits: &Arc<Semaphore>) -> Option<Vec<OwnedSemaphorePermit>> {
    let first = Arc::clone(permits).acquire_owned().await.ok()?;
    let mut held = vec![first];
    while held.len() < MAX_RECEIVE {
        match Arc::clone(permits).try_acquire_owned() {
            Ok(permit) => held.push(permit),
            Err(_) => break,
        }
    }
    Some(held)
}

/// `sqs` from `queue` as a [`Received`] that holds `permit` until it is settled; the body and
/// the attributes move to it, and `sqs` keeps what settles it.
fn into_received(mut sqs: SqsMessage, queue: &str, permit: OwnedSemaphorePermit) -> Received {
    let raw = sqs.message_mut();
    let mut attributes = raw.message_attributes.take().unwrap_or_default();
    let message_id = attributes
        .remove(MESSAGE_ID_ATTRIBUTE)
        .and_then(|value| value.string_value);
    // SQS keeps no order: by name.
    let mut headers: Vec<(String, String)> = attributes
        .into_iter()
        .filter(|(_, value)| is_text(&value.data_type))
        .filter_map(|(name, value)| Some((name, value.string_value?)))
        .collect();
    headers.sort();
    let system = raw.attributes.take().unwrap_or_default();
    let number = |name| {
        system
            .get(&name)
            .and_then(|value| value.parse::<u64>().ok())
    };
    let message = Message {
        message_id,
        broker_id: raw.message_id.clone(),
        source: queue.to_owned(),
        ordering_key: system
            .get(&MessageSystemAttributeName::MessageGroupId)
            .cloned(),
        headers,
        payload: Bytes::from(raw.body.take().unwrap_or_default()),
        time: number(MessageSystemAttributeName::SentTimestamp)
            .map(|millis| SystemTime::UNIX_EPOCH + Duration::from_millis(millis)),
        redelivered: number(MessageSystemAttributeName::ApproximateReceiveCount)
            .is_some_and(|count| count > 1),
    };
    Received::new(
        message,
        Held {
            message: sqs,
            _permit: permit,
        },
    )
}

/// Whether an attribute of `data_type` is text: `String`, or a custom type of it
/// (`String.json`). Numbers and binaries are not.
fn is_text(data_type: &str) -> bool {
    data_type == "String" || data_type.starts_with("String.")
}

/// A received message and its permit, given back once it is settled or dropped.
struct Held {
    message: SqsMessage,
    _permit: OwnedSemaphorePermit,
}

impl Settle for Held {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        // `held` lives to the end: its permit is given back once SQS answered.
        Box::pin(async move {
            let held = *self;
            held.message.ack().await
        })
    }

    fn requeue(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move {
            let held = *self;
            held.message.requeue().await
        })
    }

    fn reject(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move {
            let held = *self;
            held.message.reject().await
        })
    }
}

/// A failure to receive.
fn receive(error: impl Into<BoxError>) -> Error {
    Error::Receive(error.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_attributes_are_strings_and_their_custom_types() {
        assert!(is_text("String"));
        assert!(is_text("String.json"));
        assert!(!is_text("Number"));
        assert!(!is_text("Binary"));
        assert!(!is_text("Stringly"));
    }
}
