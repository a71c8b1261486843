//! NATS JetStream with `async-nats`, behind the `nats` feature: [`NatsPublisher`] for the relay,
//! [`Incoming`](crate::Incoming) for JetStream's [`Message`](async_nats::jetstream::Message) so
//! that [`Inbox::consume`](crate::Inbox::consume) takes messages as they come, and the
//! subscription of a `nats://` [`BrokerUrl`](crate::BrokerUrl).
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
//! [`BrokerUrl::subscribe`](crate::BrokerUrl::subscribe) does that wiring:
//!
//! - `from` is a subject, wildcards allowed, of exactly one stream: the server is asked which
//!   streams capture it; none, or several (a wildcard that spans streams), is an
//!   [`Error::Receive`](crate::Error::Receive) naming the subject, at subscribe time.
//! - The group names a durable pull consumer of that stream. Missing, it is created: filtering
//!   `from`, explicit acks, delivering all the stream holds, its `max_ack_pending` and
//!   `ack_wait` the subscription's [`max_in_flight`](crate::SubscribeOptions::max_in_flight)
//!   and [`ack_wait`](crate::SubscribeOptions::ack_wait). Existing, its `max_ack_pending` and
//!   `ack_wait` are set to those (the group's subscribers share them, the last one's win); one
//!   that filters another subject, pushes, or takes other acks is refused, never changed.
//!   The subscription has a connection of its own, made as the publisher's (TLS files), named
//!   after the group.
//! - Each message is a [`Received`](crate::Received): its `Nats-Msg-Id` header as its message
//!   id; `STREAM/SEQUENCE` (its stream sequence) as its broker id, the same on every
//!   redelivery; its subject as its source and its ordering key; its other headers, sorted by
//!   name (async-nats keeps no order between names), each name's values in order; the time
//!   the stream stored it; redelivered when delivered more than once.
//! - While a message is held, it is extended: every third of the consumer's `ack_wait` (or of
//!   a shorter `backoff` step), a task sends JetStream an in-progress acknowledgement (`+WPI`),
//!   until the message is settled or dropped. A dropped message comes back after `ack_wait`.
//! - Settled with `Ack`, `Nak` (redelivered at once) or `Term` (never again), each awaited until
//!   the server confirms it (a double ack): settled means the server has it.
//! - A failed pull (the connection lost, the server restarting) is an
//!   [`Error::Receive`](crate::Error::Receive), and the subscription goes on: the client
//!   reconnects and pulls again. A deleted consumer ends it (an error, then `None`).
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
//!
//! Reading the subjects through a URL, with
//! [`BrokerUrl::subscribe`](crate::BrokerUrl::subscribe):
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_messaging::{BrokerUrl, SubscribeOptions};
//!
//! let url: BrokerUrl = "nats://127.0.0.1:4222".parse()?;
//! let options = SubscribeOptions::new("payments.>").group("ledger").max_in_flight(32);
//! let mut subscription = url.subscribe(options).await?;
//! while let Some(received) = subscription.next().await {
//!     let Ok(received) = received else {
//!         continue; // a failed pull: the client reconnects, and pulls again
//!     };
//!     tracing::info!(id = ?received.message().message_id, "booked");
//!     received.ack().await?;
//! }
//! # Ok(())
//! # }
//! ```

mod connection;
mod message;
mod publisher;
mod subject;
mod subscription;
mod url;

pub use publisher::NatsPublisher;
pub(crate) use url::NatsUrl;
