//! [`ProducerContext`]: what the publisher's producer last heard from librdkafka about the
//! cluster, so that a message that times out says why (a certificate refused, a password
//! refused), not only that it timed out.

use std::sync::{Arc, Mutex, PoisonError};

use rdkafka::{ClientContext, error::KafkaError, types::RDKafkaErrorCode};

/// The publisher's producer context: librdkafka's errors about the cluster (a TLS handshake or a
/// SASL authentication that failed, a broker that cannot be reached) are logged at `warn` and
/// the last one kept. A clone shares it: rdkafka keeps the producer's context to itself.
#[derive(Debug, Default, Clone)]
pub(super) struct ProducerContext {
    last_error: Arc<Mutex<Option<String>>>,
}

impl ProducerContext {
    /// What librdkafka last reported about the cluster, since the last delivery.
    pub(super) fn last_error(&self) -> Option<String> {
        self.slot().clone()
    }

    /// A message was delivered: what came before is over.
    pub(super) fn delivered(&self) {
        self.slot().take();
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl ClientContext for ProducerContext {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "the Kafka cluster cannot be used");
        // "1/1 brokers are down" follows each broker's own reason: it would hide it.
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::AllBrokersDown) {
            *self.slot() = Some(reason.to_owned());
        }
    }
}

/// A message librdkafka could not deliver in time, with what it last reported about the
/// cluster.
#[derive(Debug, thiserror::Error)]
#[error("the Kafka cluster last reported: {cluster}")]
pub(super) struct Undelivered {
    pub(super) cluster: String,
    #[source]
    pub(super) error: KafkaError,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_reason_is_kept_but_not_all_brokers_down() {
        let context = ProducerContext::default();
        assert_eq!(context.last_error(), None);
        context.error(
            KafkaError::Global(RDKafkaErrorCode::SSL),
            "ssl://h:9093/bootstrap: SSL handshake failed",
        );
        context.error(
            KafkaError::Global(RDKafkaErrorCode::AllBrokersDown),
            "1/1 brokers are down",
        );
        assert_eq!(
            context.last_error().as_deref(),
            Some("ssl://h:9093/bootstrap: SSL handshake failed")
        );
        context.delivered();
        assert_eq!(context.last_error(), None);
    }
}
