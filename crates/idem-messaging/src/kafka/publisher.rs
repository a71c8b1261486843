//! [`KafkaPublisher`]: produces with `acks=all` and waits for each message's delivery report.

use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use rdkafka::{
    ClientConfig,
    error::{KafkaError, RDKafkaErrorCode},
    message::{Header, OwnedHeaders},
    producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer as _},
};

use super::{
    KafkaSecurity, MESSAGE_ID_HEADER,
    context::{ProducerContext, Undelivered},
};
use crate::{Confirmations, Envelope, PublishError, Publisher, broker::unreachable};

/// Produces to Kafka, each message confirmed by its delivery report with `acks=all`: the
/// [`Publisher`] of the `kafka` feature.
///
/// Each message goes to the topic named by its destination, keyed by its ordering key (so that
/// the messages of one key share a partition and keep their order there), with its outbox id in
/// the `message-id` header and its headers as message headers. The producer is idempotent
/// (`enable.idempotence=true`, which implies `acks=all`): librdkafka's own retries neither
/// duplicate nor reorder within a partition.
///
/// A batch is handed to librdkafka at once, then its delivery reports are awaited together.
/// librdkafka gives up on a message after the delivery timeout (8 s by default: keep it under
/// the relay's publish timeout); the relay then gives it back and publishes it again later. Such
/// an error carries what librdkafka last reported about the cluster (a certificate it refused,
/// an authentication that failed), which is also logged at `warn` as it happens.
///
/// TLS and SASL are [`KafkaSecurity`]'s, set with [`security`](Self::security).
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_messaging::{Envelope, OutboxMessage, Publisher, kafka::KafkaPublisher};
///
/// let publisher = KafkaPublisher::new("127.0.0.1:9092");
/// let envelope = Envelope::new(
///     "order-42/paid".parse()?,
///     OutboxMessage::new("orders", "{}").ordering_key("order-42"),
///     1,
/// );
/// publisher.publish(&envelope).await?; // acknowledged by every in-sync replica
/// # Ok(())
/// # }
/// ```
pub struct KafkaPublisher {
    config: ClientConfig,
    /// Applied to a copy of `config` as each producer is made, so that the password is read
    /// then and kept nowhere else.
    security: KafkaSecurity,
    /// Created on the first batch; retired after a batch that showed it can no longer produce
    /// (librdkafka's fatal error, or [`ends_the_producer`]), and made again on the next.
    producer: Mutex<Option<(Arc<Producer>, ProducerContext)>>,
}

type Producer = FutureProducer<ProducerContext>;

impl KafkaPublisher {
    /// A publisher to the cluster whose bootstrap servers are `bootstrap_servers`
    /// (`host:port[,host:port…]`). Creates its producer on the first batch.
    pub fn new(bootstrap_servers: &str) -> Self {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", bootstrap_servers);
        Self::with_config(config)
    }

    /// A publisher with the caller's librdkafka settings (client id, linger, …); `acks=all` and
    /// `enable.idempotence=true` are set over them, and the delivery timeout
    /// (`message.timeout.ms`) unless they set it. [`security`](Self::security) sets TLS and SASL
    /// over them.
    pub fn with_config(mut config: ClientConfig) -> Self {
        config.set("acks", "all").set("enable.idempotence", "true");
        if config.get("message.timeout.ms").is_none() {
            config.set("message.timeout.ms", "8000");
        }
        Self {
            config,
            security: KafkaSecurity::default(),
            producer: Mutex::new(None),
        }
    }

    /// Sets how the producer secures its connections: TLS, SASL (plain text without
    /// authentication by default). The password is read when the producer is made, on the
    /// first batch.
    #[must_use]
    pub fn security(mut self, security: KafkaSecurity) -> Self {
        self.security = security;
        self
    }

    /// Sets how long librdkafka tries to deliver a message (`message.timeout.ms`, 8 s by
    /// default) before the message counts as unavailable.
    #[must_use]
    pub fn delivery_timeout(mut self, timeout: Duration) -> Self {
        self.config
            .set("message.timeout.ms", timeout.as_millis().max(1).to_string());
        self
    }

    /// The producer, created on first use and again after one was retired.
    fn producer(&self) -> Result<(Arc<Producer>, ProducerContext), PublishError> {
        let mut slot = self.producer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((producer, context)) = slot.as_ref() {
            return Ok((Arc::clone(producer), context.clone()));
        }
        let mut config = self.config.clone();
        self.security
            .apply(&mut config)
            .map_err(PublishError::unavailable)?;
        let context = ProducerContext::default();
        let producer = config
            .create_with_context(context.clone())
            .map_err(PublishError::unavailable)?;
        let producer = Arc::new(producer);
        *slot = Some((Arc::clone(&producer), context.clone()));
        Ok((producer, context))
    }

    /// Retires `producer`, which can no longer produce: the next batch makes a new one.
    fn retire(&self, producer: Arc<Producer>, reason: &str) {
        let mut slot = self.producer.lock().unwrap_or_else(PoisonError::into_inner);
        if slot
            .as_ref()
            .is_some_and(|(current, _)| Arc::ptr_eq(current, &producer))
        {
            *slot = None;
            tracing::warn!(
                reason,
                "the Kafka producer can no longer produce; a new one takes its place"
            );
        }
        drop(slot);
        // Destroying a client joins its threads: off the runtime's.
        tokio::task::spawn_blocking(move || drop(producer));
    }

    /// Hands one message to librdkafka; its delivery report comes later.
    fn send(producer: &Producer, envelope: &Envelope) -> Result<DeliveryFuture, PublishError> {
        let message = envelope.message();
        let mut headers = OwnedHeaders::new_with_capacity(message.headers.len() + 1);
        for (name, value) in message
            .headers
            .iter()
            .filter(|(name, _)| name != MESSAGE_ID_HEADER)
        {
            headers = headers.insert(Header {
                key: name,
                value: Some(value.as_bytes()),
            });
        }
        headers = headers.insert(Header {
            key: MESSAGE_ID_HEADER,
            value: Some(envelope.id().as_str().as_bytes()),
        });
        let mut record = FutureRecord::<str, [u8]>::to(&message.destination)
            .payload(&message.payload)
            .headers(headers);
        if let Some(key) = &message.ordering_key {
            record = record.key(key.as_str());
        }
        producer
            .send_result(record)
            .map_err(|(error, _)| classify(error))
    }
}

/// librdkafka retries what can succeed later by itself, until the delivery timeout: what it
/// reports about the message itself (too large, an unknown or invalid topic, refused by a
/// policy or an ACL) is a rejection; a timeout, a full queue or brokers down say nothing about
/// the message.
fn classify(error: KafkaError) -> PublishError {
    use RDKafkaErrorCode as Code;
    let rejected = matches!(
        error.rdkafka_error_code(),
        Some(
            Code::MessageSizeTooLarge
                | Code::InvalidMessageSize
                | Code::InvalidMessage
                | Code::UnknownTopic
                | Code::UnknownTopicOrPartition
                | Code::InvalidTopic
                | Code::TopicAuthorizationFailed
                | Code::UnsupportedForMessageFormat
                | Code::PolicyViolation
                | Code::InvalidRecord
                | Code::InvalidArgument
        )
    );
    if rejected {
        PublishError::Rejected {
            reason: error.to_string(),
        }
    } else {
        PublishError::unavailable(error)
    }
}

/// A delivery that timed out, with what librdkafka last reported about the cluster, if it
/// reported anything: a timeout alone does not say that a certificate or a password was refused.
fn explain(error: KafkaError, context: &ProducerContext) -> PublishError {
    match context.last_error() {
        Some(cluster) if error.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageTimedOut) => {
            PublishError::unavailable(Undelivered { cluster, error })
        }
        _ => classify(error),
    }
}

/// Whether a delivery error says the producer itself is done: librdkafka's fatal error (an
/// idempotent producer that cannot keep its guarantees, as after a sequence gap when messages
/// timed out while the broker was away), or the broker no longer accepting its producer id or
/// epoch. Every later message of that producer would fail the same way.
fn ends_the_producer(error: &KafkaError) -> bool {
    use RDKafkaErrorCode as Code;
    matches!(
        error.rdkafka_error_code(),
        Some(
            Code::Fatal
                | Code::ProducerFenced
                | Code::InvalidProducerEpoch
                | Code::UnknownProducerId
                | Code::InvalidProducerIdMapping
        )
    )
}

impl Publisher for KafkaPublisher {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        let (producer, context) = match self.producer() {
            Ok(made) => made,
            Err(error) => return unreachable(batch, "cannot create the Kafka producer", error),
        };
        let pending: Vec<_> = batch
            .iter()
            .map(|envelope| Self::send(&producer, envelope))
            .collect();
        let mut confirmations = Vec::with_capacity(batch.len());
        let mut retire = None;
        for sent in pending {
            confirmations.push(match sent {
                Ok(delivery) => match delivery.await {
                    Ok(Ok(_)) => {
                        context.delivered();
                        Ok(())
                    }
                    Ok(Err((error, _))) => {
                        if retire.is_none() && ends_the_producer(&error) {
                            retire = Some(error.to_string());
                        }
                        Err(explain(error, &context))
                    }
                    Err(canceled) => Err(PublishError::unavailable(canceled)),
                },
                Err(error) => Err(error),
            });
        }
        let fatal = producer
            .client()
            .fatal_error()
            .map(|(code, reason)| format!("{code}: {reason}"));
        if let Some(reason) = fatal.or(retire) {
            self.retire(producer, &reason);
        }
        confirmations
    }
}

impl fmt::Debug for KafkaPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The configuration may hold credentials.
        f.debug_struct("KafkaPublisher")
            .field("bootstrap_servers", &self.config.get("bootstrap.servers"))
            .field("security", &self.security)
            .field(
                "created",
                &self
                    .producer
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .is_some(),
            )
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_are_rejections_and_timeouts_unavailability() {
        let produced = |code| classify(KafkaError::MessageProduction(code));
        assert!(matches!(
            produced(RDKafkaErrorCode::MessageSizeTooLarge),
            PublishError::Rejected { .. }
        ));
        assert!(matches!(
            produced(RDKafkaErrorCode::UnknownTopicOrPartition),
            PublishError::Rejected { .. }
        ));
        assert!(matches!(
            produced(RDKafkaErrorCode::MessageTimedOut),
            PublishError::Unavailable(_)
        ));
        assert!(matches!(
            produced(RDKafkaErrorCode::QueueFull),
            PublishError::Unavailable(_)
        ));
        assert!(matches!(
            produced(RDKafkaErrorCode::AllBrokersDown),
            PublishError::Unavailable(_)
        ));
    }

    #[test]
    fn a_fenced_or_failed_producer_is_done_and_a_timeout_says_nothing_about_it() {
        let delivered = |code| ends_the_producer(&KafkaError::MessageProduction(code));
        for code in [
            RDKafkaErrorCode::Fatal,
            RDKafkaErrorCode::ProducerFenced,
            RDKafkaErrorCode::InvalidProducerEpoch,
            RDKafkaErrorCode::UnknownProducerId,
            RDKafkaErrorCode::InvalidProducerIdMapping,
        ] {
            assert!(delivered(code), "{code:?}");
        }
        for code in [
            RDKafkaErrorCode::MessageTimedOut,
            RDKafkaErrorCode::QueueFull,
            RDKafkaErrorCode::AllBrokersDown,
            RDKafkaErrorCode::MessageSizeTooLarge,
            RDKafkaErrorCode::OutOfOrderSequenceNumber,
        ] {
            assert!(!delivered(code), "{code:?}");
        }
    }

    #[test]
    fn acks_all_and_idempotence_are_enforced() {
        let mut config = ClientConfig::new();
        config.set("acks", "1").set("message.timeout.ms", "2000");
        let publisher = KafkaPublisher::with_config(config);
        assert_eq!(publisher.config.get("acks"), Some("all"));
        assert_eq!(publisher.config.get("enable.idempotence"), Some("true"));
        assert_eq!(publisher.config.get("message.timeout.ms"), Some("2000"));
        let publisher = KafkaPublisher::new("h:9092").delivery_timeout(Duration::from_secs(3));
        assert_eq!(publisher.config.get("message.timeout.ms"), Some("3000"));
        assert_eq!(publisher.config.get("bootstrap.servers"), Some("h:9092"));
    }
}
