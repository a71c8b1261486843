//! RabbitMQ (AMQP 0-9-1) with `lapin`, behind the `amqp` feature: [`AmqpPublisher`] for the
//! relay, and [`Incoming`](crate::Incoming) for `lapin`'s [`Delivery`](lapin::message::Delivery)
//! so that [`Inbox::consume`](crate::Inbox::consume) takes deliveries as they come.
//!
//! - The outbox id travels in the AMQP `message_id` property, the outbox headers as long-string
//!   entries of the `headers` table; messages are persistent (delivery mode 2).
//! - The publisher puts its channel in confirm mode: a message counts as published when the
//!   broker acks it. A nack, or an unroutable message returned (`mandatory`, on by default), is
//!   a rejection; a lost connection or channel makes the broker unavailable, and the publisher
//!   reconnects on its next batch.
//! - A consumer acknowledges a delivery only after the inbox transaction committed; a
//!   redelivery of a committed message is a duplicate, acknowledged and skipped; a failure
//!   requeues it (`basic.nack` with requeue). Consume with manual acks (`no_ack: false`) and a
//!   prefetch (`basic_qos`) that bounds the messages in flight.
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

mod delivery;
mod publisher;
mod url;

pub use publisher::AmqpPublisher;
pub(crate) use url::AmqpUrl;
