//! Consuming from a broker chosen by URL: [`BrokerUrl::subscribe`](crate::BrokerUrl::subscribe)
//! gives a [`Subscription`], whose messages are [`Received`], the same type on every broker.
//!
//! A [`Received`] carries what a consumer that does not know the broker needs: the producer's
//! message id (the outbox id the relay sent), the broker's own identity of the message, where it
//! came from, the key the broker orders it by, its headers, payload and time; and the three ways
//! to settle it. It is also an [`Incoming`], so that
//! [`Inbox::consume`](crate::Inbox::consume) takes it as it comes.
//!
//! What each broker gives (see [`Received`]'s accessors):
//!
//! | broker | `from` | `group` | broker id | ordering key |
//! | --- | --- | --- | --- | --- |
//! | RabbitMQ | a queue (which must exist) | the consumer tag's prefix | none (RabbitMQ assigns none) | the queue |
//! | NATS JetStream | a subject (wildcards allowed) of a stream | the durable consumer, created if missing | `STREAM/SEQUENCE` | the subject |
//! | Kafka | a topic | the consumer group | `TOPIC/PARTITION/OFFSET` | `TOPIC/PARTITION` |
//! | Amazon SQS | a queue's name or URL | unused | SQS's `MessageId` | the FIFO queue's `MessageGroupId` |
//!
//! Every subscription bounds the messages it holds unsettled to
//! [`SubscribeOptions::max_in_flight`]: the broker's prefetch (RabbitMQ's `basic.qos`, JetStream's
//! `max_ack_pending`), or, where the broker has none (Kafka, SQS), by reading no further until
//! messages are settled. A message held longer than the broker's redelivery timeout is kept
//! (JetStream's `ack_wait` is extended with in-progress acknowledgements, SQS's visibility
//! timeout with `ChangeMessageVisibility`), so a message that is being retried is not given to
//! another consumer meanwhile.

mod key_from;

use std::{fmt, pin::Pin, time::Duration, time::SystemTime};

use bytes::Bytes;
use futures_util::{Stream, StreamExt, future::BoxFuture};

use crate::{BoxError, Error, Incoming};

pub use key_from::KeyFrom;

/// What a [`Subscription`] reads, and how much it may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscribeOptions {
    from: String,
    group: String,
    max_in_flight: u16,
    ack_wait: Duration,
}

impl SubscribeOptions {
    /// Reads from `from` (a queue, a subject, a topic or an SQS queue: see the
    /// [module](self)), as the group `idem-deliver`, holding at most 64 messages unsettled,
    /// each redelivered by the broker 30 s after it was last extended.
    pub fn new(from: impl Into<String>) -> Self {
        Self {
            from: from.into(),
            group: "idem-deliver".to_owned(),
            max_in_flight: 64,
            ack_wait: Duration::from_secs(30),
        }
    }

    /// Sets the group: Kafka's consumer group, JetStream's durable consumer, RabbitMQ's consumer
    /// tag prefix (`idem-deliver` by default). Consumers of one group share the messages.
    #[must_use]
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// Sets how many messages the subscription holds unsettled at most (64 by default, at
    /// least 1).
    #[must_use]
    pub fn max_in_flight(mut self, max: u16) -> Self {
        self.max_in_flight = max.max(1);
        self
    }

    /// Sets how long the broker waits, after a message was received or last extended, before
    /// it gives it to another consumer (30 s by default, at least 3 s): JetStream's `ack_wait`,
    /// SQS's visibility timeout. A held message is extended every third of it. RabbitMQ and
    /// Kafka redeliver on a lost connection or a rebalance instead, and ignore it.
    #[must_use]
    pub fn ack_wait(mut self, wait: Duration) -> Self {
        self.ack_wait = wait.max(Duration::from_secs(3));
        self
    }

    /// The queue, subject or topic.
    pub fn from(&self) -> &str {
        &self.from
    }

    /// The group.
    pub fn group_name(&self) -> &str {
        &self.group
    }

    /// The most messages held unsettled.
    pub fn in_flight_limit(&self) -> u16 {
        self.max_in_flight
    }

    /// The broker's redelivery timeout.
    pub fn ack_wait_time(&self) -> Duration {
        self.ack_wait
    }
}

/// How a [`Received`] is settled with its broker: the object-safe half of a broker's message.
/// Each broker module implements it; a test may too, with [`Received::new`].
pub trait Settle: Send + Sync + 'static {
    /// Tells the broker the message is done with (see [`Received::ack`]).
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>>;
    /// Gives the message back to be delivered again (see [`Received::requeue`]).
    fn requeue(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>>;
    /// Refuses the message for good (see [`Received::reject`]).
    fn reject(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>>;
}

/// A message received from any broker: its identities, its ordering key, its headers, payload
/// and time, and its settlement.
pub struct Received {
    message: Message,
    settle: Box<dyn Settle>,
}

/// What a broker module fills in to make a [`Received`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Message {
    /// The producer's id of the message: the outbox id the relay sent (RabbitMQ's `message_id`
    /// property, NATS's `Nats-Msg-Id` header, Kafka's `message-id` header, SQS's `message-id`
    /// attribute).
    pub message_id: Option<String>,
    /// The broker's own identity of the message, the same on every redelivery: see the
    /// [module](self)'s table.
    pub broker_id: Option<String>,
    /// Where it came from: the queue, the subject, the topic.
    pub source: String,
    /// The key the broker keeps this message in order by, among the messages of the
    /// subscription: see the [module](self)'s table. `None` where the broker orders nothing.
    pub ordering_key: Option<String>,
    /// Its headers (RabbitMQ's header table, NATS's headers, Kafka's headers, SQS's string
    /// attributes), in order, without the one that carries the message id. Values that are not
    /// text are left out.
    pub headers: Vec<(String, String)>,
    /// The payload.
    pub payload: Bytes,
    /// When the broker took it (or the producer stamped it), if the broker says.
    pub time: Option<SystemTime>,
    /// Whether the broker says it delivered this message before (to this consumer or another).
    pub redelivered: bool,
}

impl Message {
    /// A message from `source` with `payload`, the rest empty.
    pub fn new(source: impl Into<String>, payload: impl Into<Bytes>) -> Self {
        Self {
            source: source.into(),
            payload: payload.into(),
            ..Self::default()
        }
    }
}

impl Received {
    /// `message`, settled by `settle`.
    pub fn new(message: Message, settle: impl Settle) -> Self {
        Self {
            message,
            settle: Box::new(settle),
        }
    }

    /// The message.
    pub fn message(&self) -> &Message {
        &self.message
    }

    /// Tells the broker the message is done with: it is not delivered again (RabbitMQ's
    /// `basic.ack`, JetStream's `Ack`, Kafka's stored offset, SQS's `DeleteMessage`).
    pub async fn ack(self) -> Result<(), Error> {
        self.settle.ack().await.map_err(Error::Settle)
    }

    /// Gives the message back to be delivered again, soon (RabbitMQ's `basic.nack` with requeue,
    /// JetStream's `Nak`, Kafka's seek back to it, SQS's visibility set to 0).
    pub async fn requeue(self) -> Result<(), Error> {
        self.settle.requeue().await.map_err(Error::Settle)
    }

    /// Refuses the message for good: RabbitMQ's `basic.reject` without requeue (the queue's
    /// dead-letter exchange takes it, if it has one), JetStream's `Term`. Kafka and SQS have no
    /// refusal: there the message is skipped (its offset stored, or deleted).
    pub async fn reject(self) -> Result<(), Error> {
        self.settle.reject().await.map_err(Error::Settle)
    }
}

impl Incoming for Received {
    fn message_id(&self) -> Option<&str> {
        self.message.message_id.as_deref()
    }

    fn payload(&self) -> &[u8] {
        &self.message.payload
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.message
            .headers
            .iter()
            .rev()
            .find(|(header, _)| header == name)
            .map(|(_, value)| value.as_str())
    }

    async fn ack(self) -> Result<(), BoxError> {
        self.settle.ack().await
    }

    async fn requeue(self) -> Result<(), BoxError> {
        self.settle.requeue().await
    }

    async fn reject(self) -> Result<(), BoxError> {
        self.settle.reject().await
    }
}

impl fmt::Debug for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let message = &self.message;
        f.debug_struct("Received")
            .field("message_id", &message.message_id)
            .field("broker_id", &message.broker_id)
            .field("source", &message.source)
            .field("ordering_key", &message.ordering_key)
            .field("bytes", &message.payload.len())
            .finish_non_exhaustive()
    }
}

/// Makes `span` a child of the W3C trace context that `message`'s headers carry (its
/// `traceparent`), as [`Inbox::consume`](crate::Inbox::consume) does for its own span: for a
/// process of one's own that handles received messages. Call it before `span` is first entered.
/// With the `opentelemetry` feature, through the application's global propagator; without it, or
/// for a disabled span, or without a valid context in the headers, it does nothing.
pub fn continue_trace(span: &tracing::Span, message: &impl Incoming) {
    crate::trace::continue_from(span, |name| message.header(name));
}

/// The messages of one subscription, as they arrive: a stream of [`Received`], or of the
/// failure to receive (the broker unreachable, the queue missing). A subscription reconnects by
/// itself where its broker's client does; after an error, [`next`](Self::next) may be called
/// again.
pub struct Subscription {
    messages: Pin<Box<dyn Stream<Item = Result<Received, Error>> + Send>>,
}

impl Subscription {
    /// A subscription over `messages`: a broker module's, or a test's.
    pub fn new(messages: impl Stream<Item = Result<Received, Error>> + Send + 'static) -> Self {
        Self {
            messages: Box::pin(messages),
        }
    }

    /// The next message, or the failure to receive one; `None` once the subscription ended (the
    /// broker closed it for good).
    pub async fn next(&mut self) -> Option<Result<Received, Error>> {
        self.messages.next().await
    }
}

impl fmt::Debug for Subscription {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscription").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    struct Recorded(Arc<Mutex<Vec<&'static str>>>);

    impl Settle for Recorded {
        fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
            self.0.lock().unwrap().push("ack");
            Box::pin(async { Ok(()) })
        }
        fn requeue(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
            self.0.lock().unwrap().push("requeue");
            Box::pin(async { Ok(()) })
        }
        fn reject(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
            self.0.lock().unwrap().push("reject");
            Box::pin(async { Err("the channel is closed".into()) })
        }
    }

    #[tokio::test]
    async fn a_received_message_is_settled_through_its_broker_and_is_incoming() {
        let settled = Arc::new(Mutex::new(Vec::new()));
        let mut message = Message::new("orders", "{}");
        message.message_id = Some("0190-a".into());
        let received =
            |message: &Message| Received::new(message.clone(), Recorded(Arc::clone(&settled)));
        let first = received(&message);
        assert_eq!(Incoming::message_id(&first), Some("0190-a"));
        assert_eq!(Incoming::payload(&first), b"{}");
        first.ack().await.unwrap();
        received(&message).requeue().await.unwrap();
        let refused = received(&message).reject().await.unwrap_err();
        assert!(matches!(refused, Error::Settle(_)), "{refused:?}");
        assert_eq!(*settled.lock().unwrap(), ["ack", "requeue", "reject"]);
    }

    #[test]
    fn a_received_message_reads_the_last_header_of_a_name_as_it_was_spelled() {
        let mut message = Message::new("orders", "{}");
        message.headers = [
            ("traceparent", "old"),
            ("Trace", "x"),
            ("traceparent", "new"),
        ]
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .to_vec();
        let received = Received::new(message, Recorded(Arc::default()));
        assert_eq!(received.header("traceparent"), Some("new"));
        assert_eq!(received.header("Trace"), Some("x"));
        assert_eq!(received.header("trace"), None);
    }

    #[tokio::test]
    async fn a_subscription_yields_its_stream_then_ends() {
        let settled = Arc::new(Mutex::new(Vec::new()));
        let messages = ["a", "b"].map(|source| {
            Ok(Received::new(
                Message::new(source, ""),
                Recorded(Arc::clone(&settled)),
            ))
        });
        let mut subscription = Subscription::new(futures_util::stream::iter(messages));
        let mut sources = Vec::new();
        while let Some(received) = subscription.next().await {
            sources.push(received.unwrap().message().source.clone());
        }
        assert_eq!(sources, ["a", "b"]);
    }
}
