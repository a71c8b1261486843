//! Amazon SQS with the AWS SDK for Rust, behind the `sqs` feature: [`SqsPublisher`] for the
//! relay, [`SqsConsumer`], whose [`SqsMessage`]s [`Inbox::consume`](crate::Inbox::consume)
//! takes as they come, and the subscription of an `sqs://` [`BrokerUrl`](crate::BrokerUrl).
//!
//! - The destination is the queue: its name (looked up once with `GetQueueUrl`) or its URL. A
//!   queue whose name ends in `.fifo` is a FIFO queue: the ordering key is the
//!   `MessageGroupId` (the message id when there is none) and the outbox id the
//!   `MessageDeduplicationId`, so that SQS drops a copy republished within its five-minute
//!   deduplication interval. The outbox id also travels in the `message-id` message attribute
//!   ([`MESSAGE_ID_ATTRIBUTE`]), the outbox headers as string attributes.
//! - Messages are sent with `SendMessageBatch`, ten at most and 256 KiB at most per request. A
//!   message counts as published when SQS answers that it stored it. An entry that SQS refuses
//!   for the message's own sake (a sender fault: an invalid attribute, a body too long) is a
//!   rejection; an entry that failed on SQS's side is sent again alone, once. A queue that does
//!   not exist and a payload that is not UTF-8 text are rejections; throttling, credentials
//!   that fail and a network failure make the broker unavailable.
//! - A consumer deletes a message only after the inbox transaction committed (or for a
//!   duplicate). While a handler runs, the message's visibility timeout is extended, so that a
//!   slow handler is not redelivered mid-run; a failure makes the message visible again at once
//!   (with a redrive policy, SQS moves a message that fails `maxReceiveCount` times to the
//!   dead-letter queue); a message without a `message-id` attribute is deleted, with a warning.
//!
//! # Subscribing by URL
//!
//! [`BrokerUrl::subscribe`](crate::BrokerUrl::subscribe) on an `sqs://` URL receives from the
//! queue `from` (the group is unused: every consumer of a queue shares its messages):
//!
//! - The client is the publisher's (the URL's region, endpoint, profile and CA file). A queue
//!   named is looked up with `GetQueueUrl`, a queue URL checked with `GetQueueAttributes`; one
//!   that does not exist is refused at once ([`UnknownQueue`]).
//! - Messages are received with [`SqsConsumer`]: long polls, the subscription's
//!   [`ack_wait`](crate::SubscribeOptions::ack_wait) as the visibility timeout, each message's
//!   visibility extended until it is settled (or dropped), and settled as [`SqsMessage`] is: ack
//!   and reject delete it, requeue makes it visible again at once.
//! - Each message is a [`Received`](crate::Received): its message id is the `message-id`
//!   attribute, its broker id SQS's `MessageId`, its ordering key the `MessageGroupId` of a FIFO
//!   queue (none on a standard queue), its headers the other string attributes by name (SQS keeps
//!   no order), its time `SentTimestamp`, and it counts as redelivered when its
//!   `ApproximateReceiveCount` is above 1.
//! - SQS has no prefetch limit: the subscription holds a permit for each message it received
//!   and that is not settled yet, [`max_in_flight`](crate::SubscribeOptions::max_in_flight) at
//!   most. It receives nothing while they are all held, and no more messages at once than
//!   permits are free (ten at most).
//! - A failed receive (SQS unreachable, credentials refused) is an
//!   [`Error::Receive`](crate::Error::Receive) on the stream, and the stream goes on after a
//!   pause that doubles with each failure in a row, from 1 s to 30 s.
//!
//! # Examples
//!
//! A consumer that books payments in a ledger, each once:
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use idem_messaging::{ConsumerName, Handled, Incoming, InboxOptions, PgInbox};
//! use idem_messaging::sqs::{SqsConsumer, config_loader};
//!
//! let pool = sqlx::PgPool::connect("postgres://postgres@127.0.0.1/app").await?;
//! let inbox = PgInbox::new(InboxOptions::new());
//! inbox.migrate(&pool).await?;
//! let ledger: ConsumerName = "ledger".parse()?;
//!
//! // Region and credentials from the environment and the profile files, as the AWS CLI's.
//! let client = aws_sdk_sqs::Client::new(&config_loader().load().await);
//! let queue = client.get_queue_url().queue_name("payments").send().await?;
//! let consumer = SqsConsumer::new(client, queue.queue_url().unwrap_or_default());
//! loop {
//!     for message in consumer.receive().await? {
//!         let outcome = inbox
//!             .consume(&pool, &ledger, message, |tx, message| {
//!                 Box::pin(async move {
//!                     sqlx::query("INSERT INTO ledger (entry) VALUES ($1)")
//!                         .bind(message.payload())
//!                         .execute(&mut **tx)
//!                         .await?;
//!                     Ok::<_, idem_messaging::Error>(())
//!                 })
//!             })
//!             .await;
//!         match outcome {
//!             Ok(Handled::Processed(())) => {}
//!             Ok(Handled::Duplicate) => tracing::debug!("deleted a redelivery"),
//!             Err(error) => tracing::warn!(%error, "made visible again"),
//!         }
//!     }
//! }
//! # }
//! ```

mod consumer;
mod error;
mod message;
mod publisher;
mod subscription;
mod url;

use aws_config::{BehaviorVersion, ConfigLoader};
use aws_smithy_http_client::tls;

/// The AWS SDK's SQS client this module is built on, so that its users name the same version.
pub use aws_sdk_sqs;
pub use consumer::SqsConsumer;
pub use message::SqsMessage;
pub use publisher::SqsPublisher;
pub use subscription::UnknownQueue;
pub(crate) use url::SqsUrl;

/// The message attribute that carries the outbox id. An outbox header of that name is not sent.
pub const MESSAGE_ID_ATTRIBUTE: &str = "message-id";

/// The AWS SDK's configuration loader as idem uses it: the usual region and credentials chain
/// (environment variables, the profile files, web identity, the container and instance
/// metadata), with HTTPS through rustls on the *ring* provider (so that nothing links OpenSSL or
/// builds aws-lc). Set the region, an endpoint or a profile on it, then `load()` it.
///
/// Profiles that use SSO are not supported (the SDK's `sso` feature is not compiled in).
pub fn config_loader() -> ConfigLoader {
    aws_config::defaults(BehaviorVersion::latest()).http_client(http_client())
}

/// The HTTP client of [`config_loader`]: HTTPS through rustls on the *ring* provider, trusting
/// the system's roots. Give it to an `aws_sdk_sqs::Config` built by hand.
pub fn http_client() -> aws_sdk_sqs::config::SharedHttpClient {
    https_client(None)
}

/// [`http_client`], trusting the CA certificates of `ca` (PEM) besides the system's roots.
fn https_client(ca: Option<Vec<u8>>) -> aws_sdk_sqs::config::SharedHttpClient {
    let builder = aws_smithy_http_client::Builder::new().tls_provider(tls::Provider::Rustls(
        tls::rustls_provider::CryptoMode::Ring,
    ));
    match ca {
        Some(pem) => {
            let trust = tls::TrustStore::default().with_pem_certificate(pem);
            let context = tls::TlsContext::builder()
                .with_trust_store(trust)
                .build()
                .expect("a TLS context over a trust store builds");
            builder.tls_context(context).build_https()
        }
        None => builder.build_https(),
    }
}

/// Whether `queue` is a queue's URL rather than its name.
fn is_queue_url(queue: &str) -> bool {
    queue.starts_with("https://") || queue.starts_with("http://")
}

/// Whether `queue` (a name or a URL) names a FIFO queue: its name ends in `.fifo`.
fn is_fifo(queue: &str) -> bool {
    queue.trim_end_matches('/').ends_with(".fifo")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifo_queues_are_known_by_their_suffix() {
        assert!(is_fifo("payments.fifo"));
        assert!(is_fifo(
            "https://sqs.eu-west-1.amazonaws.com/123456789012/payments.fifo"
        ));
        assert!(!is_fifo("payments"));
        assert!(!is_fifo("fifo"));
        assert!(!is_fifo("http://127.0.0.1:9324/123456789012/payments"));
    }
}
