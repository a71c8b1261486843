//! Exactly-once effects for message consumers, and reliable publishing: an inbox, a
//! transactional outbox and its relay.
//!
//! Brokers deliver at least once, and publishing from a transaction is never atomic with it.
//! This crate closes both gaps with the database the service already trusts:
//!
//! - [`Inbox`] (PostgreSQL, MySQL or MariaDB with the `mysql` feature, or SQLite): a consumer
//!   records `(consumer, message id)` in the same transaction as its effects, so a redelivered
//!   message is recognised and skipped, and a failed handler leaves no trace. [`Inbox::consume`] does it for a broker's delivery and
//!   acknowledges only after the commit.
//! - [`Outbox`] (PostgreSQL, MySQL or MariaDB, or SQLite): a producer enqueues its events in the
//!   business transaction; each gets a stable id (a UUIDv7).
//! - [`Relay`]: publishes the outbox with the broker's confirmation, marks what was confirmed,
//!   retries with backoff, dead-letters what keeps failing, keeps per-key order when asked.
//!   Several relays may share an outbox.
//! - [`Publisher`] and [`Incoming`]: what a broker provides. RabbitMQ is the `amqp` feature
//!   (`amqp::AmqpPublisher`, and `lapin`'s deliveries as [`Incoming`]); NATS JetStream the
//!   `nats` feature (`nats::NatsPublisher`, and JetStream messages as [`Incoming`]); Kafka the
//!   `kafka` feature (`kafka::KafkaPublisher`, and `kafka::KafkaMessage`); Amazon SQS the `sqs`
//!   feature (`sqs::SqsPublisher`, and `sqs::SqsConsumer`'s `sqs::SqsMessage`).
//! - [`BrokerUrl`]: a broker chosen by URL, its publisher built at run time. The `idem relay`
//!   command (the `idem-gateway` crate) runs a relay as a process of its own with it.
//! - Traces: the relay's `idem.publish` and the inbox's `idem.consume` spans; with the
//!   `opentelemetry` feature, the W3C trace context of the enqueuing span travels with each
//!   message through the outbox, the relay and the broker to the consumer's span.
//!
//! Together they give **effectively-once** effects for what a consumer writes in its inbox
//! transaction, and **at-least-once** for everything else it does. `docs/messaging.md` in the
//! repository states the guarantees and what happens in each failure.
//!
//! # Examples
//!
//! A producer enqueues an event with its business change; a relay publishes it; a consumer
//! applies it once:
//!
//! ```no_run
//! # #[cfg(feature = "amqp")]
//! # async fn demo(
//! #     delivery: lapin::message::Delivery, // from a `basic_consume` stream
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! use idem_messaging::{
//!     ConsumerName, Handled, InboxOptions, Outbox, OutboxMessage, OutboxOptions, PgInbox, Relay,
//!     amqp::AmqpPublisher,
//! };
//! use tokio_util::sync::CancellationToken;
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//! let outbox = Outbox::new(OutboxOptions::new());
//! outbox.migrate(&pool).await?;
//!
//! // Producer: the event commits with the order, or neither does.
//! let mut tx = pool.begin().await?;
//! sqlx::query("UPDATE orders SET state = 'paid' WHERE id = 42").execute(&mut *tx).await?;
//! outbox.enqueue(&mut tx, OutboxMessage::new("payments", r#"{"order":42}"#)).await?;
//! tx.commit().await?;
//!
//! // Relay: publishes to the queue `payments`, with confirms, until shut down.
//! let publisher = AmqpPublisher::new("amqp://guest:guest@127.0.0.1:5672/%2f");
//! let relay = Relay::new(pool.clone(), outbox, publisher);
//! let shutdown = CancellationToken::new();
//! tokio::spawn({
//!     let shutdown = shutdown.clone();
//!     async move { relay.run(shutdown).await }
//! });
//!
//! // Consumer (see the `amqp` module for the delivery loop): one ledger row per payment.
//! let inbox = PgInbox::new(InboxOptions::new());
//! inbox.migrate(&pool).await?;
//! let ledger: ConsumerName = "ledger".parse()?;
//! let handled = inbox
//!     .consume(&pool, &ledger, delivery, |tx, delivery| {
//!         Box::pin(async move {
//!             sqlx::query("INSERT INTO ledger (payment) VALUES ($1)")
//!                 .bind(delivery.data.as_slice())
//!                 .execute(&mut **tx)
//!                 .await?;
//!             Ok::<_, idem_messaging::Error>(())
//!         })
//!     })
//!     .await?;
//! assert!(matches!(handled, Handled::Processed(()) | Handled::Duplicate));
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "amqp")]
pub mod amqp;
mod broker;
mod broker_url;
pub mod consume;
mod error;
mod id;
mod inbox;
#[cfg(feature = "kafka")]
pub mod kafka;
#[cfg(feature = "nats")]
pub mod nats;
mod outbox;
mod relay;
mod sql;
#[cfg(feature = "sqs")]
pub mod sqs;
mod trace;

pub use broker::{
    BoxPublisher, Confirmations, DynPublisher, Incoming, InvalidBrokerUrl, PublishError, Publisher,
};
pub use broker_url::{BrokerKind, BrokerUrl};
pub use consume::{Received, SubscribeOptions, Subscription};
pub use error::{BoxError, Error};
pub use id::{ConsumerName, InvalidId, MessageId};
pub use idem_sql::{InvalidName, SchemaName, TableName};
#[cfg(feature = "mysql")]
pub use inbox::MysqlInbox;
pub use inbox::{
    Arrival, Handled, Inbox, InboxDatabase, InboxOptions, PgInbox, Purger, SqliteInbox,
};
#[cfg(feature = "mysql")]
pub use outbox::MysqlOutbox;
pub use outbox::{
    BatchReport, DeadLetter, Envelope, Outbox, OutboxCounts, OutboxDatabase, OutboxMessage,
    OutboxOptions, PgOutbox, SqliteOutbox,
};
pub use relay::{Relay, metrics};
