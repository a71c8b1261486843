//! Kafka with `rdkafka` (librdkafka), behind the `kafka` feature: [`KafkaPublisher`] for the
//! relay, [`KafkaMessage`] so that [`Inbox::consume`](crate::Inbox::consume) takes consumed
//! messages as they come, and the subscription of a `kafka://` [`BrokerUrl`](crate::BrokerUrl).
//!
//! - The destination is the topic; the ordering key is the message key (so the messages of a
//!   key share a partition, where Kafka keeps their order). The outbox id travels in the
//!   `message-id` header ([`MESSAGE_ID_HEADER`]), the outbox headers as headers.
//! - A message counts as published when its delivery report arrives from an idempotent producer
//!   with `acks=all`: every in-sync replica has it. A message the cluster refuses (too large, an
//!   unknown topic, a policy) is a rejection; a delivery timeout or brokers down make the broker
//!   unavailable.
//! - A consumer stores a message's offset only after the inbox transaction committed (or for a
//!   duplicate); offsets are committed in the background, so after a crash or a rebalance the
//!   messages since the last commit come again, and the inbox skips them. A failure seeks the
//!   partition back to the message. Configure the consumer with [`consumer_config`]
//!   (`enable.auto.offset.store=false`) and process a partition's messages one at a time.
//! - A managed cluster's TLS (CA, client certificate) and SASL (`PLAIN`, `SCRAM-SHA-256`,
//!   `SCRAM-SHA-512`) are [`KafkaSecurity`]'s, for the publisher and for the consumer's settings.
//!
//! # Subscribing by URL
//!
//! [`BrokerUrl::subscribe`](crate::BrokerUrl::subscribe) on a `kafka://` or `kafkas://` URL
//! reads the topic `from` as the consumer group `group`:
//!
//! - Its consumer has [`consumer_config`]'s settings, the URL's TLS and SASL, and those of the
//!   URL's librdkafka settings that apply to a consumer (`client.id`, `socket.timeout.ms`); the
//!   producer's are left out. A topic the cluster does not have is refused at once
//!   ([`UnknownTopic`]), whether or not the cluster would create it on first use.
//! - Each message is a [`Received`](crate::Received): its message id is the last `message-id`
//!   header, its broker id `TOPIC/PARTITION/OFFSET`, its ordering key `TOPIC/PARTITION`, its
//!   headers the others whose values are text, its time the message's timestamp. Kafka does not
//!   say whether a message was delivered before: it never counts as redelivered.
//! - Settled as [`KafkaMessage`] is: ack and reject store the offset, requeue seeks back to the
//!   message (the messages after it come again too). A message dropped unsettled is sought back
//!   to as well. Offsets are stored in order: a message's offset is stored only once every
//!   message before it in its partition is settled, so that messages of one partition handled
//!   at once never commit one that failed or is still running.
//! - Kafka has no prefetch limit, and drops from its group a consumer that stops polling for
//!   `max.poll.interval.ms` (5 minutes). So a task owns the consumer and polls it all the time:
//!   each message handed over holds one of
//!   [`max_in_flight`](crate::SubscribeOptions::max_in_flight) permits until it is settled or
//!   dropped; with none left, the task pauses the assigned partitions (librdkafka drops what it
//!   prefetched of them) and keeps polling, which keeps the group membership and serves
//!   rebalances, and resumes them when a message is settled. A message that arrives anyway (from
//!   a partition assigned since the pause) is given back: its partition paused and sought back
//!   to it.
//! - A failure to consume (brokers down) is an [`Error::Receive`](crate::Error::Receive) on the
//!   stream, and the stream goes on: librdkafka reconnects by itself. While one failure is not
//!   read, the next are logged rather than queued. A rebalance redelivers from the last committed
//!   offset, and the settlement of a message whose partition was revoked fails (its new owner
//!   consumes it again).
//!
//! # Examples
//!
//! A consumer that books payments in a ledger, each once:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use idem_messaging::{ConsumerName, Handled, Incoming, InboxOptions, PgInbox};
//! use idem_messaging::kafka::{KafkaMessage, consumer_config};
//! use rdkafka::consumer::{Consumer, StreamConsumer};
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//! let inbox = PgInbox::new(InboxOptions::new());
//! inbox.migrate(&pool).await?;
//! let ledger: ConsumerName = "ledger".parse()?;
//!
//! let consumer: Arc<StreamConsumer> =
//!     Arc::new(consumer_config("127.0.0.1:9092", "ledger").create()?);
//! consumer.subscribe(&["payments"])?;
//! loop {
//!     let message = KafkaMessage::new(&consumer.recv().await?, Arc::clone(&consumer));
//!     let outcome = inbox
//!         .consume(&pool, &ledger, message, |tx, message| {
//!             Box::pin(async move {
//!                 sqlx::query("INSERT INTO ledger (entry) VALUES ($1)")
//!                     .bind(message.payload())
//!                     .execute(&mut **tx)
//!                     .await?;
//!                 Ok::<_, idem_messaging::Error>(())
//!             })
//!         })
//!         .await;
//!     match outcome {
//!         Ok(Handled::Processed(())) => {}
//!         Ok(Handled::Duplicate) => tracing::debug!("skipped a redelivery"),
//!         Err(error) => tracing::warn!(%error, "sought back"),
//!     }
//! }
//! # }
//! ```

mod consumer;
mod context;
mod offsets;
mod publisher;
mod security;
mod subscription;
mod url;

pub use consumer::{KafkaMessage, consumer_config};
pub use publisher::KafkaPublisher;
/// The rdkafka this module is built on, for the consumer and the settings it takes.
pub use rdkafka;
pub use security::{
    KafkaSecurity, PasswordError, SASL_PASSWORD_ENV, SaslMechanism, SaslPassword, UnknownMechanism,
};
pub use subscription::UnknownTopic;
pub(crate) use url::KafkaUrl;

/// The header that carries the outbox id. An outbox header of that name is not sent.
pub const MESSAGE_ID_HEADER: &str = "message-id";
