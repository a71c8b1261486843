//! [`SqsConsumer`]: receives messages with long polling, each an [`SqsMessage`].

use std::{fmt, sync::Arc, time::Duration};

use aws_sdk_sqs::{Client, types::MessageSystemAttributeName};

use super::{SqsMessage, message::seconds};
use crate::Error;

/// Receives messages from one SQS queue, for [`Inbox::consume`](crate::Inbox::consume).
///
/// Each [`receive`](Self::receive) long-polls (`WaitTimeSeconds`) for up to
/// [`max_messages`](Self::max_messages) messages, with all their message attributes and the
/// system attributes `MessageGroupId`, `SentTimestamp` and `ApproximateReceiveCount`, and with
/// the consumer's [`visibility_timeout`](Self::visibility_timeout); each message's visibility is
/// extended while it is held, so the timeout only bounds how soon a message comes back after its
/// consumer died. Process the messages of a receive one at a time, or concurrently: each is
/// extended until settled.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(client: aws_sdk_sqs::Client) -> Result<(), idem_messaging::Error> {
/// use std::time::Duration;
/// use idem_messaging::sqs::SqsConsumer;
///
/// let consumer = SqsConsumer::new(client, "https://sqs.eu-west-1.amazonaws.com/123456789012/payments")
///     .visibility_timeout(Duration::from_secs(60))
///     .max_messages(5);
/// let messages = consumer.receive().await?; // none after 20 s without a message
/// # drop(messages);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct SqsConsumer {
    client: Client,
    queue_url: Arc<str>,
    visibility_timeout: Duration,
    wait_time: Duration,
    max_messages: u8,
}

impl SqsConsumer {
    /// A consumer of the queue at `queue_url`: 30 s visibility timeout, 20 s long polls, up to
    /// 10 messages a receive.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: Arc::from(queue_url.into()),
            visibility_timeout: Duration::from_secs(30),
            wait_time: Duration::from_secs(20),
            max_messages: 10,
        }
    }

    /// Sets how long a received message stays hidden from other consumers without being
    /// extended: how soon it comes back after its consumer died (30 s by default; whole seconds,
    /// between 3 s and SQS's 12 hours). A held message is extended every third of it.
    #[must_use]
    pub fn visibility_timeout(mut self, timeout: Duration) -> Self {
        self.visibility_timeout =
            timeout.clamp(Duration::from_secs(3), Duration::from_secs(43_200));
        self
    }

    /// Sets how long a receive waits for a message to arrive (20 s by default, SQS's longest;
    /// zero makes short polls).
    #[must_use]
    pub fn wait_time(mut self, wait: Duration) -> Self {
        self.wait_time = wait.min(Duration::from_secs(20));
        self
    }

    /// Sets how many messages a receive returns at most (10 by default, SQS's most; at least 1).
    #[must_use]
    pub fn max_messages(mut self, max: u8) -> Self {
        self.max_messages = max.clamp(1, 10);
        self
    }

    /// The queue's URL.
    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// Waits up to the [`wait_time`](Self::wait_time) for messages; an empty list when none
    /// came. [`Error::Receive`] when SQS cannot be reached or refuses the request.
    pub async fn receive(&self) -> Result<Vec<SqsMessage>, Error> {
        self.receive_at_most(self.max_messages).await
    }

    /// [`receive`](Self::receive), of `max` messages at most (between 1 and 10).
    pub(super) async fn receive_at_most(&self, max: u8) -> Result<Vec<SqsMessage>, Error> {
        let visibility = Duration::from_secs(self.visibility_timeout.as_secs());
        let output = self
            .client
            .receive_message()
            .queue_url(&*self.queue_url)
            .max_number_of_messages(i32::from(max.clamp(1, 10)))
            .wait_time_seconds(seconds(self.wait_time))
            .visibility_timeout(seconds(visibility))
            .message_attribute_names("All")
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
            .send()
            .await
            .map_err(|error| Error::Receive(error.into()))?;
        Ok(output
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|message| {
                SqsMessage::new(
                    self.client.clone(),
                    Arc::clone(&self.queue_url),
                    message,
                    visibility,
                )
            })
            .collect())
    }
}

impl fmt::Debug for SqsConsumer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsConsumer")
            .field("queue_url", &self.queue_url)
            .field("visibility_timeout", &self.visibility_timeout)
            .field("wait_time", &self.wait_time)
            .field("max_messages", &self.max_messages)
            .finish_non_exhaustive()
    }
}
