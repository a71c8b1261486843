//! NATS JetStream with `async-nats`, behind the `nats` feature: [`NatsPublisher`] for the relay,
//! and [`Incoming`](crate::Incoming) for JetStream's
//! [`Message`](async_nats::jetstream::Message) so that [`Inbox::consume`](crate::Inbox::consume)
//! takes messages as they come.
//!
//! - The destination is the subject; a stream must capture it. The outbox id travels in the
//!   `Nats-Msg-Id` header, so that the stream's duplicate window drops a republished copy before
//!   any consumer sees it (a second line of defence: the inbox skips the copies the window lets
//!   through, those republished after it ended). The outbox headers are headers of the message.
//! - A message counts as published when JetStream's `PubAck` arrives: the stream has stored it.
//!   A refusal by the stream (no stream for the subject, a message too large, a stream limit) is
//!   a rejection; a lost connection, a missing `PubAck` or JetStream being temporarily
//!   unavailable makes the broker unavailable. The client reconnects by itself.
//! - A consumer acknowledges a message only after the inbox transaction committed; a
//!   redelivery of a committed message is a duplicate, acknowledged and skipped; a failure
//!   `Nak`s it (redelivered at once); a message without a `Nats-Msg-Id` is `Term`inated. Use a
//!   consumer with explicit acks (`AckPolicy::Explicit`) and an `ack_wait` longer than a
//!   handler's run, and bound the messages in flight with `max_ack_pending`.
//!
//! # Examples
//!
//! A consumer that books payments in a ledger, each once:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use async_nats::jetstream::{self, consumer::pull};
//! use futures_util::StreamExt;
//! use idem_messaging::{ConsumerName, Handled, Incoming, InboxOptions, PgInbox};
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//! let inbox = PgInbox::new(InboxOptions::new());
//! inbox.migrate(&pool).await?;
//! let consumer_name: ConsumerName = "ledger".parse()?;
//!
//! let client = async_nats::connect("nats://127.0.0.1:4222").await?;
//! let stream = jetstream::new(client).get_stream("PAYMENTS").await?;
//! let consumer = stream
//!     .get_or_create_consumer(
//!         "ledger",
//!         pull::Config {
//!             durable_name: Some("ledger".into()),
//!             ack_policy: jetstream::consumer::AckPolicy::Explicit,
//!             max_ack_pending: 64,
//!             ..pull::Config::default()
//!         },
//!     )
//!     .await?;
//! let mut messages = consumer.messages().await?;
//!
//! while let Some(message) = messages.next().await {
//!     let outcome = inbox
//!         .consume(&pool, &consumer_name, message?, |tx, message| {
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
//!         Err(error) => tracing::warn!(%error, "nakked"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod message;
mod publisher;
mod url;

pub use publisher::NatsPublisher;
pub(crate) use url::NatsUrl;
