//! RabbitMQ (AMQP 0-9-1) with `lapin`, behind the `amqp` feature: [`AmqpPublisher`] for the
//! relay, [`Incoming`](crate::Incoming) for `lapin`'s [`Delivery`](lapin::message::Delivery)
//! so that [`Inbox::consume`](crate::Inbox::consume) takes deliveries as they come, and the
//! subscription of an `amqp://` [`BrokerUrl`](crate::BrokerUrl).
//!
//! - The outbox id travels in the AMQP `message_id` property, the outbox headers as long-string
//!   entries of the `headers` table, the publish time as the `timestamp` property (whole
//!   seconds); messages are persistent (delivery mode 2).
//! - The publisher puts its channel in confirm mode: a message counts as published when the
//!   broker acks it. A nack, or an unroutable message returned (`mandatory`, on by default), is
//!   a rejection; a lost connection or channel makes the broker unavailable, and the publisher
//!   reconnects on its next batch.
//! - A consumer acknowledges a delivery only after the inbox transaction committed; a
//!   redelivery of a committed message is a duplicate, acknowledged and skipped; a failure
//!   requeues it (`basic.nack` with requeue). Consume with manual acks (`no_ack: false`) and a
//!   prefetch (`basic_qos`) that bounds the messages in flight.
//!
//! [`BrokerUrl::subscribe`](crate::BrokerUrl::subscribe) does that wiring:
//!
//! - `from` names a queue that must exist: it is declared passively, so that a missing queue
//!   (or one the user may not use) is an [`Error::Receive`](crate::Error::Receive) naming it,
//!   at subscribe time. Nothing is declared or bound.
//! - It consumes with manual acks, a prefetch (`basic.qos`) of
//!   [`max_in_flight`](crate::SubscribeOptions::max_in_flight), and the consumer tag
//!   `{group}-{a UUID}`, on a connection of its own, made as the publisher's (TLS files, and
//!   lapin's URL parameters such as `connection_timeout` and `heartbeat`).
//! - Each delivery is a [`Received`](crate::Received): its `message_id` property; no broker id
//!   (RabbitMQ assigns none); the queue as its source and its ordering key; the entries of its
//!   `headers` table that read as text (UTF-8 strings, integers in decimal, booleans as `true`
//!   or `false`; not floats, decimals, timestamps, byte arrays, arrays nor tables), sorted by
//!   name as lapin keeps them; its `timestamp` property as its time; its redelivered flag.
//! - Settled with `basic.ack`, `basic.nack` with requeue, or `basic.reject` without requeue
//!   (the queue's dead-letter exchange takes it, if it has one). A message held when its
//!   subscription is dropped can still be settled: the channel closes with the last one, and
//!   RabbitMQ then requeues what was prefetched but never taken.
//! - RabbitMQ redelivers on a lost connection, not after a time: `ack_wait` is ignored. A lost
//!   channel or connection, or a consumer cancelled by RabbitMQ (its queue deleted), ends the
//!   subscription: one [`Error::Receive`](crate::Error::Receive), then `None`; subscribe again.
//!   The deliveries it held unsettled come back from RabbitMQ, flagged redelivered, to this
//!   consumer's next subscription or another consumer; settling them fails with
//!   [`Error::Settle`](crate::Error::Settle).
//!
//! # Examples
//!
//! A consumer that books payments in a ledger, each once:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use futures_util::StreamExt;
//! use idem_messaging::{ConsumerName, Handled, InboxOptions, PgInbox};
//! use lapin::{Connection, ConnectionProperties, options::*, types::FieldTable};
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//! let inbox = PgInbox::new(InboxOptions::new());
//! inbox.migrate(&pool).await?;
//! let consumer_name: ConsumerName = "ledger".parse()?;
//!
//! let connection =
//!     Connection::connect("amqp://guest:guest@127.0.0.1:5672/%2f", ConnectionProperties::default())
//!         .await?;
//! let channel = connection.create_channel().await?;
//! channel.basic_qos(32, BasicQosOptions::default()).await?;
//! let mut deliveries = channel
//!     .basic_consume("payments".into(), "ledger".into(), BasicConsumeOptions::default(), FieldTable::default())
//!     .await?;
//!
//! while let Some(delivery) = deliveries.next().await {
//!     let outcome = inbox
//!         .consume(&pool, &consumer_name, delivery?, |tx, delivery| {
//!             Box::pin(async move {
//!                 sqlx::query("INSERT INTO ledger (entry) VALUES ($1)")
//!                     .bind(delivery.data.as_slice())
//!                     .execute(&mut **tx)
//!                     .await?;
//!                 Ok::<_, idem_messaging::Error>(())
//!             })
//!         })
//!         .await;
//!     match outcome {
//!         Ok(Handled::Processed(())) => {}
//!         Ok(Handled::Duplicate) => tracing::debug!("skipped a redelivery"),
//!         Err(error) => tracing::warn!(%error, "requeued"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Reading the queue through a URL, with [`BrokerUrl::subscribe`](crate::BrokerUrl::subscribe):
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_messaging::{BrokerUrl, SubscribeOptions};
//!
//! let url: BrokerUrl = "amqp://guest:guest@127.0.0.1:5672/%2f".parse()?;
//! let options = SubscribeOptions::new("payments").group("ledger").max_in_flight(32);
//! let mut subscription = url.subscribe(options).await?;
//! while let Some(received) = subscription.next().await {
//!     let received = received?; // the connection was lost: subscribe again
//!     tracing::info!(id = ?received.message().message_id, "booked");
//!     received.ack().await?;
//! }
//! # Ok(())
//! # }
//! ```

mod connection;
mod delivery;
mod publisher;
mod subscription;
mod url;

pub use publisher::AmqpPublisher;
pub(crate) use url::AmqpUrl;
