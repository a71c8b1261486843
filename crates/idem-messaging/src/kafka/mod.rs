//! Kafka with `rdkafka` (librdkafka), behind the `kafka` feature: [`KafkaPublisher`] for the
//! relay, and [`KafkaMessage`] so that [`Inbox::consume`](crate::Inbox::consume) takes consumed
//! messages as they come.
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
mod publisher;
mod security;
mod url;

pub use consumer::{KafkaMessage, consumer_config};
pub use publisher::KafkaPublisher;
/// The rdkafka this module is built on, for the consumer and the settings it takes.
pub use rdkafka;
pub use security::{
    KafkaSecurity, PasswordError, SASL_PASSWORD_ENV, SaslMechanism, SaslPassword, UnknownMechanism,
};
pub(crate) use url::KafkaUrl;

/// The header that carries the outbox id. An outbox header of that name is not sent.
pub const MESSAGE_ID_HEADER: &str = "message-id";
