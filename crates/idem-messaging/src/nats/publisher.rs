//! [`NatsPublisher`]: publishes to JetStream and waits for each message's `PubAck`.

use std::{fmt, path::PathBuf};

use async_nats::{
    HeaderMap, HeaderName, HeaderValue,
    header::NATS_MESSAGE_ID,
    jetstream::{
        self,
        context::{PublishAckFuture, PublishErrorKind},
        message::PublishMessage,
    },
};
use tokio::sync::OnceCell;

use super::{connection::connect, subject::invalid_subject};
use crate::{
    Confirmations, Envelope, PublishError, Publisher,
    broker::{TlsFiles, unreachable},
};

/// How the publisher's connection shows in the server's monitoring.
const CONNECTION_NAME: &str = "idem-relay";

/// JetStream's API error code for "temporarily unavailable" (no leader, a restarting server).
const JETSTREAM_UNAVAILABLE: usize = 503;

/// Publishes to NATS JetStream, each message confirmed by its `PubAck`: the [`Publisher`] of
/// the `nats` feature.
///
/// Each message is published to the subject named by its destination (a stream must capture
/// it), with its outbox id in the `Nats-Msg-Id` header and its headers as message headers (a
/// header of the outbox named `Nats-Msg-Id` is replaced by the id). Within the stream's
/// duplicate window, JetStream stores a republished copy once and answers its `PubAck` with
/// `duplicate: true`; the copy counts as published.
///
/// A batch is sent in one go, then its `PubAck`s are awaited together.
///
/// The publisher connects on its first batch (or in [`connect`](Self::connect)); once
/// connected, the client reconnects by itself after a lost connection, and messages published
/// meanwhile are [`PublishError::Unavailable`] when their `PubAck` does not come in time.
///
/// Over TLS (rustls): a `tls://` URL, or a CA file or client certificate set here, makes TLS
/// required; a server that asks for TLS gets it in any case. The server's certificate must name
/// the host of the URL.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_messaging::{Envelope, OutboxMessage, Publisher, nats::NatsPublisher};
///
/// let publisher = NatsPublisher::connect("nats://127.0.0.1:4222").await?;
/// let envelope = Envelope::new("order-42/paid".parse()?, OutboxMessage::new("orders.paid", "{}"), 1);
/// publisher.publish(&envelope).await?; // stored by the stream
/// # Ok(())
/// # }
/// ```
pub struct NatsPublisher {
    url: String,
    tls: TlsFiles,
    context: OnceCell<jetstream::Context>,
}

impl NatsPublisher {
    /// A publisher to the server at `url` (`nats://host:port`, or several, comma-separated).
    /// Connects on the first batch.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            tls: TlsFiles::default(),
            context: OnceCell::new(),
        }
    }

    /// Trusts only the CA certificates (PEM) in `path` for the server's certificate, instead of
    /// the system's, and makes TLS required. The file is read when the publisher connects.
    #[must_use]
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents a client certificate and its key (PEM files) to a server that asks for one
    /// (`verify: true` in its `tls` block), and makes TLS required. The files are read when the
    /// publisher connects.
    #[must_use]
    pub fn tls_client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls.client = Some((cert.into(), key.into()));
        self
    }

    /// Sets every TLS file at once (from a [`BrokerUrl`](crate::BrokerUrl)).
    pub(crate) fn tls_files(mut self, tls: TlsFiles) -> Self {
        self.tls = tls;
        self
    }

    /// A publisher to `url`, connected now: fails fast on a wrong address.
    pub async fn connect(url: impl Into<String>) -> Result<Self, PublishError> {
        let publisher = Self::new(url);
        publisher.context().await?;
        Ok(publisher)
    }

    /// A publisher on a JetStream context of the caller's (its own connection options, TLS,
    /// credentials, domain or API prefix, and `PubAck` timeout).
    pub fn with_context(context: jetstream::Context) -> Self {
        Self {
            url: String::new(),
            tls: TlsFiles::default(),
            context: OnceCell::new_with(Some(context)),
        }
    }

    async fn context(&self) -> Result<&jetstream::Context, PublishError> {
        self.context
            .get_or_try_init(|| async {
                let client = connect(&self.url, &self.tls, CONNECTION_NAME)
                    .await
                    .map_err(PublishError::Unavailable)?;
                Ok(jetstream::new(client))
            })
            .await
    }

    /// Sends one message; its `PubAck` comes later.
    async fn send(
        context: &jetstream::Context,
        envelope: &Envelope,
    ) -> Result<PublishAckFuture, PublishError> {
        let message = envelope.message();
        if let Some(reason) = invalid_subject(&message.destination) {
            return Err(PublishError::Rejected {
                reason: format!("subject {:?}: {reason}", message.destination),
            });
        }
        let publish = PublishMessage::build()
            .headers(headers(envelope)?)
            .payload(message.payload.clone());
        context
            .send_publish(message.destination.clone(), publish)
            .await
            .map_err(classify)
    }
}

/// The message's headers, then its id.
fn headers(envelope: &Envelope) -> Result<HeaderMap, PublishError> {
    let mut headers = HeaderMap::new();
    for (name, value) in &envelope.message().headers {
        let name: HeaderName = name.parse().map_err(|error| PublishError::Rejected {
            reason: format!("header name {name:?}: {error}"),
        })?;
        let value: HeaderValue = value.parse().map_err(|error| PublishError::Rejected {
            reason: format!("header value of {name}: {error}"),
        })?;
        headers.append(name, value);
    }
    let id: HeaderValue =
        envelope
            .id()
            .as_str()
            .parse()
            .map_err(|error| PublishError::Rejected {
                reason: format!("message id: {error}"),
            })?;
    headers.insert(NATS_MESSAGE_ID, id);
    Ok(headers)
}

/// A refusal of the message by the stream is a rejection; anything that says nothing about the
/// message (a lost connection, a `PubAck` that did not come, JetStream temporarily unavailable,
/// a garbled answer) makes the broker unavailable.
fn classify(error: jetstream::context::PublishError) -> PublishError {
    let rejected = match error.kind() {
        PublishErrorKind::StreamNotFound
        | PublishErrorKind::WrongLastMessageId
        | PublishErrorKind::WrongLastSequence
        | PublishErrorKind::MaxPayloadExceeded => true,
        PublishErrorKind::Other => std::error::Error::source(&error)
            .and_then(|source| source.downcast_ref::<jetstream::Error>())
            .is_some_and(|api| api.code() != JETSTREAM_UNAVAILABLE),
        _ => false,
    };
    if rejected {
        PublishError::Rejected {
            reason: error.to_string(),
        }
    } else {
        PublishError::unavailable(error)
    }
}

impl Publisher for NatsPublisher {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        let context = match self.context().await {
            Ok(context) => context,
            Err(error) => return unreachable(batch, "cannot connect to NATS", error),
        };
        let mut pending = Vec::with_capacity(batch.len());
        for envelope in batch {
            pending.push(Self::send(context, envelope).await);
        }
        let mut confirmations = Vec::with_capacity(batch.len());
        for sent in pending {
            confirmations.push(match sent {
                Ok(ack) => ack.await.map(drop).map_err(classify),
                Err(error) => Err(error),
            });
        }
        confirmations
    }
}

impl fmt::Debug for NatsPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL may hold credentials.
        f.debug_struct("NatsPublisher")
            .field("tls", &self.tls)
            .field("connected", &self.context.initialized())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_header_is_set_last_and_wins() {
        let message = crate::OutboxMessage::new("orders", "x")
            .header("Nats-Msg-Id", "forged")
            .header("trace", "a")
            .header("trace", "b");
        let envelope = Envelope::new("the-id".parse().unwrap(), message, 1);
        let headers = headers(&envelope).unwrap();
        let ids: Vec<&str> = headers
            .get_all(NATS_MESSAGE_ID)
            .map(HeaderValue::as_str)
            .collect();
        assert_eq!(ids, ["the-id"]);
        let traces: Vec<&str> = headers.get_all("trace").map(HeaderValue::as_str).collect();
        assert_eq!(traces, ["a", "b"]);
    }

    #[test]
    fn refusals_are_rejections_and_transport_failures_unavailability() {
        use jetstream::context::PublishError as Nats;
        let rejected = |error: Nats| matches!(classify(error), PublishError::Rejected { .. });
        assert!(rejected(Nats::new(PublishErrorKind::StreamNotFound)));
        assert!(rejected(Nats::new(PublishErrorKind::MaxPayloadExceeded)));
        assert!(!rejected(Nats::new(PublishErrorKind::TimedOut)));
        assert!(!rejected(Nats::new(PublishErrorKind::BrokenPipe)));
        assert!(!rejected(Nats::new(PublishErrorKind::MaxAckPending)));
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(!rejected(Nats::with_source(PublishErrorKind::Other, io)));
    }
}
