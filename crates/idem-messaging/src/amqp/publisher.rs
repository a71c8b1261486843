//! [`AmqpPublisher`]: publishes with publisher confirms on one channel, reconnecting when it is
//! lost.

use std::{
    collections::HashMap,
    fmt,
    path::PathBuf,
    time::{SystemTime, UNIX_EPOCH},
};

use lapin::{
    BasicProperties, Channel, Confirmation, Connection, PublisherConfirm,
    options::{BasicPublishOptions, ConfirmSelectOptions},
    types::{AMQPValue, FieldTable, LongString, ShortString, Timestamp},
};
use tokio::sync::Mutex;

use super::connection::connect;
use crate::{
    Confirmations, Envelope, PublishError, Publisher,
    broker::{TlsFiles, unreachable},
};

/// AMQP's delivery mode for messages the broker writes to disk (in durable queues).
const PERSISTENT: u8 = 2;

/// Publishes to RabbitMQ with publisher confirms: the [`Publisher`] of the `amqp` feature.
///
/// Each message goes to the publisher's exchange (the default exchange `""` unless set) with
/// the message's destination as its routing key, its outbox id as the `message_id` property,
/// its headers as long strings in the `headers` table, the time of its batch as the `timestamp`
/// property (seconds since the epoch), and (by default) as a persistent, mandatory message. A
/// batch is published on one channel in confirm mode, then all its confirmations are awaited
/// together.
///
/// The publisher connects on its first batch (or in [`connect`](Self::connect)) and keeps one
/// connection and one channel; when either is lost, the batch's messages are
/// [`PublishError::Unavailable`] and the next batch reconnects.
///
/// `amqps://` connects over TLS (rustls, with the *ring* provider): the broker's certificate
/// must name the host of the URI and chain to the Mozilla roots built in, or to a CA added with
/// [`tls_ca_file`](Self::tls_ca_file).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_messaging::{Envelope, OutboxMessage, Publisher, amqp::AmqpPublisher};
///
/// let publisher = AmqpPublisher::connect("amqp://guest:guest@127.0.0.1:5672/%2f")
///     .await?
///     .exchange("events");
/// let envelope = Envelope::new("order-42/paid".parse()?, OutboxMessage::new("orders.paid", "{}"), 1);
/// publisher.publish(&envelope).await?; // confirmed by the broker
/// # Ok(())
/// # }
/// ```
pub struct AmqpPublisher {
    uri: String,
    tls: TlsFiles,
    exchange: ShortString,
    mandatory: bool,
    persistent: bool,
    session: Mutex<Option<Session>>,
}

/// The connection and its confirm-mode channel.
struct Session {
    connection: Connection,
    channel: Channel,
}

impl AmqpPublisher {
    /// A publisher to the broker at `uri` (`amqp://user:password@host:port/vhost`, the vhost
    /// percent-encoded: `%2f` for `/`). Connects on the first batch.
    pub fn new(uri: impl Into<String>) -> Self {
        Self {
            uri: uri.into(),
            tls: TlsFiles::default(),
            exchange: ShortString::default(),
            mandatory: true,
            persistent: true,
            session: Mutex::new(None),
        }
    }

    /// A publisher to `uri`, connected now: fails fast on a wrong address or credentials.
    pub async fn connect(uri: impl Into<String>) -> Result<Self, PublishError> {
        let publisher = Self::new(uri);
        *publisher.session.lock().await = Some(publisher.open().await?);
        Ok(publisher)
    }

    /// Sets the exchange every message is published to; the destination is the routing key.
    /// The default exchange (`""`) routes to the queue named by the routing key.
    ///
    /// # Panics
    ///
    /// When `exchange` is longer than 255 bytes, AMQP's limit.
    #[must_use]
    pub fn exchange(mut self, exchange: impl Into<String>) -> Self {
        self.exchange = ShortString::try_new(exchange.into())
            .unwrap_or_else(|error| panic!("invalid AMQP exchange name: {error}"));
        self
    }

    /// Sets whether messages are mandatory (the default): a message no queue is bound to
    /// receive comes back from the broker, and is a [`PublishError::Rejected`] (retried, then
    /// dead-lettered) rather than silently dropped.
    #[must_use]
    pub fn mandatory(mut self, mandatory: bool) -> Self {
        self.mandatory = mandatory;
        self
    }

    /// Sets whether messages are persistent (delivery mode 2, the default), so that a durable
    /// queue keeps them across a broker restart.
    #[must_use]
    pub fn persistent(mut self, persistent: bool) -> Self {
        self.persistent = persistent;
        self
    }

    /// Trusts the CA certificates (PEM) in `path` for the broker's certificate, besides the
    /// built-in roots (`amqps://` only). The file is read at each connection.
    #[must_use]
    pub fn tls_ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls.ca = Some(path.into());
        self
    }

    /// Presents a client certificate and its key (PEM files; the key PKCS#8, PKCS#1 or SEC1) to
    /// a broker that asks for one (`ssl_options.verify = verify_peer` with
    /// `fail_if_no_peer_cert`), for `amqps://` only. The files are read at each connection.
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

    /// Opens a connection and a channel in confirm mode.
    async fn open(&self) -> Result<Session, PublishError> {
        let connection = connect(&self.uri, &self.tls)
            .await
            .map_err(PublishError::Unavailable)?;
        let channel = connection
            .create_channel()
            .await
            .map_err(PublishError::unavailable)?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(PublishError::unavailable)?;
        Ok(Session {
            connection,
            channel,
        })
    }

    /// The channel, (re)connecting when it or its connection is gone.
    async fn channel(&self) -> Result<Channel, PublishError> {
        let mut session = self.session.lock().await;
        if let Some(open) = session.as_ref()
            && open.channel.status().connected()
        {
            return Ok(open.channel.clone());
        }
        if let Some(lost) = session.take() {
            // A channel closed by the broker (an unknown exchange, say) leaves the connection up.
            if lost.connection.status().connected() {
                let _ = lost.connection.close(200, "reconnecting".into()).await;
            }
        }
        let open = self.open().await?;
        let channel = open.channel.clone();
        *session = Some(open);
        Ok(channel)
    }

    fn properties(
        &self,
        envelope: &Envelope,
        timestamp: Timestamp,
    ) -> Result<BasicProperties, PublishError> {
        let mut headers = FieldTable::default();
        for (name, value) in &envelope.message().headers {
            let name =
                ShortString::try_new(name.clone()).map_err(|error| PublishError::Rejected {
                    reason: format!("header name: {error}"),
                })?;
            headers.insert(
                name,
                AMQPValue::LongString(LongString::from(value.as_str())),
            );
        }
        let id = ShortString::try_new(envelope.id().as_str()).map_err(|error| {
            PublishError::Rejected {
                reason: format!("message id: {error}"),
            }
        })?;
        let mut properties = BasicProperties::default()
            .with_message_id(id)
            .with_headers(headers)
            .with_timestamp(timestamp);
        if self.persistent {
            properties = properties.with_delivery_mode(PERSISTENT);
        }
        Ok(properties)
    }

    /// Sends one message, stamped `timestamp`; its confirmation comes later.
    async fn send(
        &self,
        channel: &Channel,
        envelope: &Envelope,
        timestamp: Timestamp,
    ) -> Result<PublisherConfirm, PublishError> {
        let routing_key =
            ShortString::try_new(envelope.message().destination.as_str()).map_err(|error| {
                PublishError::Rejected {
                    reason: format!("routing key: {error}"),
                }
            })?;
        let properties = self.properties(envelope, timestamp)?;
        let options = BasicPublishOptions {
            mandatory: self.mandatory,
            ..BasicPublishOptions::default()
        };
        channel
            .basic_publish(
                self.exchange.clone(),
                routing_key,
                options,
                &envelope.message().payload,
                properties,
            )
            .await
            .map_err(PublishError::unavailable)
    }
}

/// What the broker answered for each message of a batch, its confirmations awaited together.
///
/// The broker sends a mandatory message's `basic.return` just before its `basic.ack`, but lapin
/// hands each return to whichever confirmation it resolves next, and one `basic.ack` with
/// `multiple` resolves several: the return may come with another message's confirmation. Returns
/// are therefore matched to messages by their message id, never by the confirmation they came
/// with, so that an unroutable message is never taken for a delivered one.
async fn confirmed(
    batch: &[Envelope],
    sent: Vec<Result<PublisherConfirm, PublishError>>,
) -> Confirmations {
    let mut answers = Vec::with_capacity(sent.len());
    for sent in sent {
        answers.push(match sent {
            Ok(confirm) => confirm.await.map_err(PublishError::unavailable),
            Err(error) => Err(error),
        });
    }
    let returned: HashMap<String, String> = answers
        .iter()
        .filter_map(|answer| match answer {
            Ok(Confirmation::Ack(Some(returned)) | Confirmation::Nack(Some(returned))) => {
                let id = returned.delivery.properties.message_id().as_ref()?;
                let reason = format!("{} {}", returned.reply_code, returned.reply_text);
                Some((id.to_string(), reason))
            }
            _ => None,
        })
        .collect();
    batch
        .iter()
        .zip(answers)
        .map(|(envelope, answer)| {
            if let Some(reason) = returned.get(envelope.id().as_str()) {
                return Err(PublishError::Rejected {
                    reason: format!("returned by the broker: {reason}"),
                });
            }
            match answer? {
                Confirmation::Ack(_) => Ok(()),
                Confirmation::Nack(_) => Err(PublishError::Rejected {
                    reason: "negatively acknowledged by the broker".into(),
                }),
                Confirmation::NotRequested => Err(PublishError::unavailable(
                    "the channel is not in confirm mode",
                )),
            }
        })
        .collect()
}

impl Publisher for AmqpPublisher {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        let channel = match self.channel().await {
            Ok(channel) => channel,
            Err(error) => return unreachable(batch, "cannot connect to RabbitMQ", error),
        };
        // One clock read a batch: AMQP's timestamp is in whole seconds.
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let mut sent = Vec::with_capacity(batch.len());
        for envelope in batch {
            sent.push(self.send(&channel, envelope, timestamp).await);
        }
        confirmed(batch, sent).await
    }
}

impl fmt::Debug for AmqpPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URI may hold a password.
        f.debug_struct("AmqpPublisher")
            .field("tls", &self.tls)
            .field("exchange", &self.exchange)
            .field("mandatory", &self.mandatory)
            .field("persistent", &self.persistent)
            .finish_non_exhaustive()
    }
}
