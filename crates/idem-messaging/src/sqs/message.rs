//! [`SqsMessage`]: a received message as [`Incoming`], its visibility extended until it is
//! settled.

use std::{fmt, sync::Arc, time::Duration};

use aws_sdk_sqs::{Client, types::Message};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::MESSAGE_ID_ATTRIBUTE;
use crate::{BoxError, Incoming};

/// A message received by an [`SqsConsumer`](super::SqsConsumer), as
/// [`Inbox::consume`](crate::Inbox::consume) needs it.
///
/// From its receipt until it is settled (or dropped), a task extends its visibility timeout to
/// the consumer's every third of it, so that SQS does not hand it to another consumer while its
/// handler runs, however long that takes (up to the 12 hours SQS allows from the receipt).
///
/// - The message id is the `message-id` string attribute.
/// - `ack` deletes the message.
/// - `requeue` makes it visible again at once: it is received again, and its receive count
///   grows (with a redrive policy, SQS moves it to the dead-letter queue past
///   `maxReceiveCount`).
/// - `reject` (a message without an id) deletes it: SQS has no refusal that dead-letters.
///
/// Dropped without being settled, it stops being extended and comes back when its visibility
/// timeout ends.
pub struct SqsMessage {
    client: Client,
    queue_url: Arc<str>,
    message: Message,
    heartbeat: Option<Heartbeat>,
}

/// The task that extends a message's visibility, stopped when dropped.
struct Heartbeat {
    stop: DropGuard,
    task: JoinHandle<()>,
}

impl SqsMessage {
    /// `message`, received from `queue_url` with `visibility` as its visibility timeout; its
    /// visibility extended until it is settled.
    pub(super) fn new(
        client: Client,
        queue_url: Arc<str>,
        message: Message,
        visibility: Duration,
    ) -> Self {
        let heartbeat = message.receipt_handle().map(|receipt| {
            let stop = CancellationToken::new();
            let task = tokio::spawn(extend(
                client.clone(),
                Arc::clone(&queue_url),
                receipt.to_owned(),
                visibility,
                stop.clone(),
            ));
            Heartbeat {
                stop: stop.drop_guard(),
                task,
            }
        });
        Self {
            client,
            queue_url,
            message,
            heartbeat,
        }
    }

    /// The message as SQS gave it: its SQS message id, attributes and receipt handle.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// The message as SQS gave it, for a subscription to take its body and attributes out of:
    /// the receipt handle settles it.
    pub(super) fn message_mut(&mut self) -> &mut Message {
        &mut self.message
    }

    /// Stops extending the visibility, once an extension in flight has landed (so that it
    /// cannot undo a `requeue`); the receipt handle to settle the message with.
    async fn settle(mut self) -> Result<(Client, Arc<str>, String), BoxError> {
        if let Some(Heartbeat { stop, task }) = self.heartbeat.take() {
            drop(stop);
            let _ = task.await;
        }
        let receipt = self
            .message
            .receipt_handle()
            .ok_or("SQS gave the message no receipt handle")?
            .to_owned();
        Ok((self.client, self.queue_url, receipt))
    }

    async fn delete(self) -> Result<(), BoxError> {
        let (client, queue_url, receipt) = self.settle().await?;
        client
            .delete_message()
            .queue_url(&*queue_url)
            .receipt_handle(receipt)
            .send()
            .await?;
        Ok(())
    }
}

/// Every third of `visibility`, sets the message's visibility timeout to `visibility` again,
/// until `stop`.
async fn extend(
    client: Client,
    queue_url: Arc<str>,
    receipt: String,
    visibility: Duration,
    stop: CancellationToken,
) {
    let every = visibility / 3;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let extended = client
            .change_message_visibility()
            .queue_url(&*queue_url)
            .receipt_handle(&receipt)
            .visibility_timeout(seconds(visibility))
            .send()
            .await;
        if let Err(error) = extended {
            tracing::warn!(
                error = &error as &dyn std::error::Error,
                "cannot extend an SQS message's visibility timeout: it may be received again"
            );
        }
    }
}

/// `duration` in whole seconds, as SQS takes it.
pub(super) fn seconds(duration: Duration) -> i32 {
    i32::try_from(duration.as_secs()).unwrap_or(i32::MAX)
}

impl Incoming for SqsMessage {
    fn message_id(&self) -> Option<&str> {
        self.message
            .message_attributes()?
            .get(MESSAGE_ID_ATTRIBUTE)?
            .string_value()
    }

    fn payload(&self) -> &[u8] {
        self.message.body().unwrap_or_default().as_bytes()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.message.message_attributes()?.get(name)?.string_value()
    }

    async fn ack(self) -> Result<(), BoxError> {
        self.delete().await
    }

    async fn requeue(self) -> Result<(), BoxError> {
        let (client, queue_url, receipt) = self.settle().await?;
        client
            .change_message_visibility()
            .queue_url(&*queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(0)
            .send()
            .await?;
        Ok(())
    }

    async fn reject(self) -> Result<(), BoxError> {
        tracing::warn!(
            sqs_message_id = self.message.message_id(),
            "deleting an SQS message that cannot be deduplicated"
        );
        self.delete().await
    }
}

impl fmt::Debug for SqsMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsMessage")
            .field("queue_url", &self.queue_url)
            .field("sqs_message_id", &self.message.message_id())
            .field("message_id", &self.message_id())
            .finish_non_exhaustive()
    }
}
