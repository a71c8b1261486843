//! What the relay and the consumer helper need from a broker: a [`Publisher`] that publishes
//! with the broker's confirmation, and an [`Incoming`] message that can be acknowledged.
//!
//! Each broker implements them in its own module, behind its own cargo feature: `amqp`
//! (RabbitMQ, `amqp::AmqpPublisher` and `lapin`'s `Delivery`), `nats` (NATS JetStream,
//! `nats::NatsPublisher` and `async_nats::jetstream::Message`), `kafka` (Kafka,
//! `kafka::KafkaPublisher` and `kafka::KafkaMessage`), `sqs` (Amazon SQS, `sqs::SqsPublisher`
//! and `sqs::SqsMessage`).
//!
//! # Examples
//!
//! A publisher that refuses messages to one destination, and hands the others to another
//! publisher (the kind of wrapper tests use to inject failures):
//!
//! ```
//! use idem_messaging::{Confirmations, Envelope, PublishError, Publisher};
//!
//! struct Refusing<P> {
//!     inner: P,
//!     refused: String,
//! }
//!
//! impl<P: Publisher> Publisher for Refusing<P> {
//!     async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
//!         let (refused, accepted): (Vec<_>, Vec<_>) = batch
//!             .iter()
//!             .cloned()
//!             .partition(|e| e.message().destination == self.refused);
//!         let mut confirmed = self.inner.publish_batch(&accepted).await.into_iter();
//!         batch
//!             .iter()
//!             .map(|e| {
//!                 if e.message().destination == self.refused {
//!                     Err(PublishError::Rejected { reason: "refused".into() })
//!                 } else {
//!                     confirmed.next().unwrap_or(Err(PublishError::Rejected {
//!                         reason: "no confirmation".into(),
//!                     }))
//!                 }
//!             })
//!             .collect()
//!     }
//! }
//! ```

mod dyn_publisher;
// SQS takes its CA file through the AWS SDK's own settings.
#[cfg(any(feature = "amqp", feature = "nats", feature = "kafka"))]
mod tls;
mod url;

use std::future::Future;

use crate::{BoxError, Envelope};

pub use dyn_publisher::{BoxPublisher, DynPublisher};
#[cfg(any(feature = "amqp", feature = "nats", feature = "kafka"))]
pub(crate) use tls::TlsFiles;
pub use url::InvalidBrokerUrl;
#[cfg(feature = "kafka")]
pub(crate) use url::Parameter;
#[cfg(any(feature = "amqp", feature = "nats", feature = "kafka"))]
pub(crate) use url::TlsParameters;
pub(crate) use url::redacted;
#[cfg(any(feature = "amqp", feature = "nats", feature = "kafka", feature = "sqs"))]
pub(crate) use url::split_query;

/// One outcome per message of a batch, in the batch's order.
pub type Confirmations = Vec<Result<(), PublishError>>;

/// Publishes messages and waits for the broker to take responsibility for each one: a publisher
/// confirm (AMQP), a `PubAck` (NATS JetStream), an acknowledged produce (Kafka, `acks=all`).
///
/// The relay deletes a message from the outbox only after `Ok(())` for it, so an `Ok` must
/// mean the broker has stored the message (or routed it to every queue bound for it), never
/// merely that it was written to a socket.
///
/// Each message carries its outbox id ([`Envelope::id`]), which the publisher must send as the
/// message id the consumers deduplicate on (AMQP's `message_id` property, NATS's `Nats-Msg-Id`
/// header, a Kafka header), and its headers.
pub trait Publisher: Send + Sync {
    /// Publishes `batch` and returns one outcome per message, in order (a missing outcome counts
    /// as [`PublishError::Unavailable`]). Messages of one batch may be in flight together; a
    /// batch never holds two messages of one ordering key when the relay's ordering is on.
    fn publish_batch(&self, batch: &[Envelope]) -> impl Future<Output = Confirmations> + Send;

    /// Publishes one message: a batch of one.
    fn publish(
        &self,
        envelope: &Envelope,
    ) -> impl Future<Output = Result<(), PublishError>> + Send {
        async move {
            self.publish_batch(std::slice::from_ref(envelope))
                .await
                .into_iter()
                .next()
                .unwrap_or_else(|| {
                    Err(PublishError::unavailable("the publisher confirmed nothing"))
                })
        }
    }
}

/// Why a message was not confirmed. The relay treats the two kinds differently: a rejection
/// counts as a failed attempt of the message (retried with backoff, then dead-lettered), while
/// an unavailable broker says nothing about the message (its claim is released without counting
/// an attempt, and the relay backs off).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PublishError {
    /// The broker refused this message: a negative confirmation, an unroutable message returned,
    /// a message too large, a destination that does not exist.
    #[error("the broker rejected the message: {reason}")]
    Rejected {
        /// The broker's reason, as it gave it.
        reason: String,
    },
    /// The broker could not be reached, the connection or channel failed, or the confirmation
    /// did not arrive in time. The message may or may not have been published.
    #[error("the broker is unavailable")]
    Unavailable(#[source] BoxError),
}

impl PublishError {
    /// [`PublishError::Unavailable`] with `error` as its source.
    pub fn unavailable(error: impl Into<BoxError>) -> Self {
        Self::Unavailable(error.into())
    }
}

/// The confirmations of a batch of which nothing was sent because the broker could not be
/// reached (or its client made), which `failure` says ("cannot connect to NATS"): `error` for the
/// first message, `failure` for the others. Said once in the log, at `warn`.
// The publishers that connect before a batch use it (RabbitMQ's, NATS's and Kafka's), and SQS's
// when its client cannot be set up.
#[cfg(any(feature = "amqp", feature = "nats", feature = "kafka", feature = "sqs"))]
pub(crate) fn unreachable(batch: &[Envelope], failure: &str, error: PublishError) -> Confirmations {
    tracing::warn!(error = &error as &dyn std::error::Error, "{failure}");
    let mut first = Some(error);
    batch
        .iter()
        .map(|_| {
            Err(first
                .take()
                .unwrap_or_else(|| PublishError::unavailable(failure.to_owned())))
        })
        .collect()
}

/// A message received from a broker, as [`Inbox::consume`](crate::Inbox::consume) needs it:
/// the producer's message id, the payload, and the three ways to settle it.
///
/// Implemented by `lapin::message::Delivery` with the `amqp` feature and by
/// `async_nats::jetstream::Message` with the `nats` feature and by `kafka::KafkaMessage` with the
/// `kafka` feature.
pub trait Incoming: Send + Sync + Sized {
    /// The producer's id of the message (AMQP's `message_id` property, NATS's `Nats-Msg-Id`
    /// header, a Kafka header), if it has one. Never a delivery tag or an offset: those differ
    /// between copies.
    fn message_id(&self) -> Option<&str>;

    /// The payload.
    fn payload(&self) -> &[u8];

    /// The value of the header `name`, if the message has it as text (of a name given more than
    /// once, the last): RabbitMQ's header table, NATS's and Kafka's headers, SQS's message
    /// attributes, a [`Received`](crate::Received)'s headers; names compared exactly. With the
    /// `opentelemetry` feature, [`Inbox::consume`](crate::Inbox::consume) reads the W3C trace
    /// context (`traceparent`, `tracestate`) through it. `None` unless implemented.
    fn header(&self, name: &str) -> Option<&str> {
        let _ = name;
        None
    }

    /// Tells the broker the message is done with: it is not delivered again.
    fn ack(self) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// Gives the message back to be delivered again (AMQP `basic.nack` with requeue, NATS
    /// `Nak`).
    fn requeue(self) -> impl Future<Output = Result<(), BoxError>> + Send;

    /// Refuses the message for good: the broker drops it, or dead-letters it if so configured
    /// (AMQP `basic.reject` without requeue, NATS `Term`).
    fn reject(self) -> impl Future<Output = Result<(), BoxError>> + Send;
}
