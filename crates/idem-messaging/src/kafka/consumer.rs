//! The consumer side: [`KafkaMessage`], a consumed message as [`Incoming`], and
//! [`consumer_config`], the settings that make "commit after the inbox commit" hold.

use std::{fmt, sync::Arc, time::Duration};

use rdkafka::{
    ClientConfig, Message, Offset,
    consumer::{Consumer, ConsumerContext, StreamConsumer},
    message::{BorrowedMessage, Headers, OwnedMessage},
};

use super::MESSAGE_ID_HEADER;
use crate::{BoxError, Incoming};

/// How long a requeue may take to seek back.
pub(super) const SEEK_TIMEOUT: Duration = Duration::from_secs(10);

/// The settings of a consumer whose offsets advance only past what the inbox committed: a
/// consumer group `group_id` on the cluster at `bootstrap_servers`, that reads a new partition
/// from its beginning (`auto.offset.reset=earliest`), commits in the background
/// (`enable.auto.commit=true`) only the offsets stored by [`KafkaMessage`]'s ack
/// (`enable.auto.offset.store=false`).
///
/// Without `enable.auto.offset.store=false`, librdkafka stores each offset as it hands the
/// message over, before the handler ran: a consumer that crashes then has the message
/// committed without its effects.
///
/// # Examples
///
/// ```no_run
/// use idem_messaging::kafka::consumer_config;
/// use rdkafka::consumer::StreamConsumer;
///
/// let consumer: StreamConsumer = consumer_config("127.0.0.1:9092", "ledger").create()?;
/// # Ok::<(), rdkafka::error::KafkaError>(())
/// ```
pub fn consumer_config(bootstrap_servers: &str, group_id: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", bootstrap_servers)
        .set("group.id", group_id)
        .set("enable.auto.commit", "true")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest");
    config
}

/// A message consumed from Kafka, with the consumer that settles it: the [`Incoming`] of the
/// `kafka` feature.
///
/// - The message id is the last `message-id` header.
/// - `ack` stores the message's offset, which the consumer commits in the background (configure
///   it with [`consumer_config`]): after a crash, what was not committed yet is consumed again,
///   and the inbox skips what it had processed.
/// - `requeue` seeks the partition back to the message, so that it is consumed again next
///   (with the messages after it, which the inbox skips if processed). Process the messages of
///   a partition one at a time: an offset stored past a message that failed would commit it.
/// - `reject` stores its offset too: Kafka has no per-message refusal; the message is skipped
///   for good (a consumer that must keep such messages copies them to a dead-letter topic
///   first).
pub struct KafkaMessage<C = StreamConsumer> {
    message: OwnedMessage,
    consumer: Arc<C>,
}

impl<C: Consumer> KafkaMessage<C> {
    /// The message `consumer` handed over, detached from it.
    pub fn new(message: &BorrowedMessage<'_>, consumer: Arc<C>) -> Self {
        Self {
            message: message.detach(),
            consumer,
        }
    }

    /// The message: its topic, partition, offset, key, headers and timestamp.
    pub fn message(&self) -> &OwnedMessage {
        &self.message
    }

    fn store_offset(&self) -> Result<(), BoxError> {
        let message = &self.message;
        store_offset(
            &*self.consumer,
            message.topic(),
            message.partition(),
            message.offset(),
        )
    }
}

/// Stores the offset of the message at `offset` of `topic`'s `partition` as done with: librdkafka
/// stores `offset + 1`, the next message to read, and commits it in the background.
pub(super) fn store_offset<X: ConsumerContext>(
    consumer: &impl Consumer<X>,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<(), BoxError> {
    consumer
        .store_offset(topic, partition, offset)
        .map_err(Into::into)
}

/// Seeks `topic`'s `partition` back to `offset`, so that the message there is consumed again
/// next, waiting up to `timeout` for librdkafka to take the seek (not at all for zero, when
/// nothing can be reported).
pub(super) fn seek_back<X: ConsumerContext>(
    consumer: &impl Consumer<X>,
    topic: &str,
    partition: i32,
    offset: i64,
    timeout: Duration,
) -> Result<(), BoxError> {
    consumer
        .seek(topic, partition, Offset::Offset(offset), timeout)
        .map_err(Into::into)
}

/// The producer's id among `headers`: the value of the last `message-id` header, if it is text.
pub(super) fn message_id<H: Headers>(headers: &H) -> Option<&str> {
    header(headers, MESSAGE_ID_HEADER)
}

/// The value of the last header `name` among `headers`, if it is text.
fn header<'h, H: Headers>(headers: &'h H, name: &str) -> Option<&'h str> {
    headers
        .iter()
        .filter(|header| header.key == name)
        .last()
        .and_then(|header| std::str::from_utf8(header.value?).ok())
}

impl<C: Consumer + Send + Sync> Incoming for KafkaMessage<C> {
    fn message_id(&self) -> Option<&str> {
        message_id(self.message.headers()?)
    }

    fn payload(&self) -> &[u8] {
        self.message.payload().unwrap_or_default()
    }

    fn header(&self, name: &str) -> Option<&str> {
        header(self.message.headers()?, name)
    }

    async fn ack(self) -> Result<(), BoxError> {
        self.store_offset()
    }

    async fn requeue(self) -> Result<(), BoxError> {
        let message = &self.message;
        seek_back(
            &*self.consumer,
            message.topic(),
            message.partition(),
            message.offset(),
            SEEK_TIMEOUT,
        )
    }

    async fn reject(self) -> Result<(), BoxError> {
        self.store_offset()
    }
}

impl<C> fmt::Debug for KafkaMessage<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KafkaMessage")
            .field("topic", &self.message.topic())
            .field("partition", &self.message.partition())
            .field("offset", &self.message.offset())
            .finish_non_exhaustive()
    }
}
