//! [`BrokerUrl`]: a broker picked at run time from a URL (`idem relay --broker`).
//!
//! Only the scheme is read here: each broker's module reads the rest of its own URL
//! (`amqp::url`, `nats::url`, `kafka::url`, `sqs::url`), with what they share in `broker::url`.

use std::{fmt, str::FromStr};

use crate::{
    BoxPublisher, Error, SubscribeOptions, Subscription,
    broker::{InvalidBrokerUrl, redacted},
};

/// A broker's URL: RabbitMQ (`amqp://user:password@host:port/vhost`, `amqps://…` over TLS),
/// NATS JetStream (`nats://host:port`, several comma-separated; `tls://…` over TLS) or Kafka
/// (`kafka://host:port[,host:port…]`, the bootstrap servers; `kafkas://…` over TLS) or Amazon SQS
/// (`sqs://REGION[?endpoint=URL&profile=NAME]`). Each needs its cargo feature.
///
/// TLS connections (rustls; OpenSSL through librdkafka for Kafka) take three parameters, whose
/// files are read when the publisher connects:
///
/// - `cacert=PATH`: the CA certificates (PEM) the broker's certificate must chain to. For NATS
///   and Kafka, they replace the system's trusted roots; for RabbitMQ, they are trusted besides
///   the Mozilla roots built into idem.
/// - `cert=PATH&key=PATH`: a client certificate and its key (PEM), for brokers that ask for one.
///
/// Any of them makes TLS required: with `nats://` and `kafka://`, the connection is refused rather
/// than made in plain text; with `amqp://`, they are refused (use `amqps://`). A Kafka URL also
/// takes SASL: `sasl.mechanism` (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`), `sasl.username`,
/// and `password-file=PATH`, without which the password is read from the environment variable
/// `IDEM_KAFKA_SASL_PASSWORD`; a password in the URL is refused. A RabbitMQ URL may also carry
/// lapin's `frame_max`, `channel_max`, `heartbeat`, `connection_timeout` and `auth_mechanism`;
/// any other parameter is refused, so that a misspelt one is not silently ignored. Values are
/// taken as given (not percent-decoded).
///
/// A Kafka URL may carry librdkafka's producer settings `client.id`, `linger.ms`,
/// `batch.num.messages`, `batch.size`, `message.timeout.ms`, `message.max.bytes`,
/// `queue.buffering.max.messages`, `queue.buffering.max.kbytes`, `request.timeout.ms` and
/// `socket.timeout.ms` (`kafka://k1:9092,k2:9092?linger.ms=20`), and, for a subscription's
/// consumer group, `session.timeout.ms` and `heartbeat.interval.ms`; what idem sets for its
/// guarantees (`acks`, `enable.idempotence`) is refused.
///
/// An SQS URL names the region; `endpoint=URL` sends the requests to another endpoint (an
/// SQS-compatible server, a VPC endpoint) and `profile=NAME` takes the credentials of a profile
/// of the AWS configuration files; otherwise the credentials come from the usual chain
/// (`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE`, web identity, the
/// container's or the instance's role).
///
/// Its [`publisher`](Self::publisher) publishes with the broker's confirmation; it connects on
/// its first batch. Displayed with the password hidden (and the value of every parameter whose
/// name says `password`, `secret` or `token`).
///
/// # Examples
///
/// ```
/// use idem_messaging::BrokerUrl;
///
/// # #[cfg(feature = "amqp")] {
/// let url: BrokerUrl = "amqp://guest:secret@127.0.0.1:5672/%2f".parse()?;
/// assert_eq!(url.to_string(), "amqp://guest:***@127.0.0.1:5672/%2f");
/// let publisher = url.publisher(); // connects on its first batch
/// # drop(publisher);
/// # }
/// # #[cfg(feature = "nats")] {
/// let tls: BrokerUrl = "tls://nats.internal:4222?cacert=/etc/idem/nats-ca.pem".parse()?;
/// # drop(tls);
/// # }
/// assert!("http://example.com".parse::<BrokerUrl>().is_err());
/// # Ok::<(), idem_messaging::InvalidBrokerUrl>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    url: String,
    target: Target,
}

/// The broker a URL names, as its module read the URL. A broker whose feature is off has no
/// variant: its URLs are refused.
#[derive(Clone, PartialEq, Eq)]
enum Target {
    #[cfg(feature = "amqp")]
    Amqp(crate::amqp::AmqpUrl),
    #[cfg(feature = "nats")]
    Nats(crate::nats::NatsUrl),
    #[cfg(feature = "kafka")]
    Kafka(crate::kafka::KafkaUrl),
    #[cfg(feature = "sqs")]
    Sqs(crate::sqs::SqsUrl),
}

/// Which broker a [`BrokerUrl`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BrokerKind {
    /// RabbitMQ (`amqp://`, `amqps://`).
    RabbitMq,
    /// NATS JetStream (`nats://`, `tls://`).
    Nats,
    /// Kafka (`kafka://`, `kafkas://`).
    Kafka,
    /// Amazon SQS (`sqs://`).
    Sqs,
}

impl BrokerKind {
    /// Whether the broker can set a refused message aside by itself: RabbitMQ (a queue's
    /// dead-letter exchange takes what is rejected) and NATS (a terminated message is reported as
    /// an advisory, `$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED`) can, as can SQS (a queue's redrive
    /// policy moves a message received too many times); Kafka cannot.
    pub fn dead_letters(self) -> bool {
        !matches!(self, Self::Kafka)
    }
}

impl fmt::Display for BrokerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::RabbitMq => "RabbitMQ",
            Self::Nats => "NATS JetStream",
            Self::Kafka => "Kafka",
            Self::Sqs => "Amazon SQS",
        })
    }
}

impl BrokerUrl {
    /// Which broker this is.
    pub fn kind(&self) -> BrokerKind {
        // By place, not by reference: without any broker's feature, `Target` has no variant.
        match self.target {
            #[cfg(feature = "amqp")]
            Target::Amqp(_) => BrokerKind::RabbitMq,
            #[cfg(feature = "nats")]
            Target::Nats(_) => BrokerKind::Nats,
            #[cfg(feature = "kafka")]
            Target::Kafka(_) => BrokerKind::Kafka,
            #[cfg(feature = "sqs")]
            Target::Sqs(_) => BrokerKind::Sqs,
        }
    }

    /// The URL as given (with its password, if any).
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// A publisher to this broker, with the broker module's defaults: the default exchange for
    /// RabbitMQ (the destination is the queue), the destination as the subject for NATS, as the
    /// topic for Kafka. Connects on its first batch.
    pub fn publisher(&self) -> BoxPublisher {
        // By place, not by reference: without any broker's feature, `Target` has no variant.
        match self.target {
            #[cfg(feature = "amqp")]
            Target::Amqp(ref url) => url.publisher(),
            #[cfg(feature = "nats")]
            Target::Nats(ref url) => url.publisher(),
            #[cfg(feature = "kafka")]
            Target::Kafka(ref url) => url.publisher(),
            #[cfg(feature = "sqs")]
            Target::Sqs(ref url) => url.publisher(),
        }
    }

    /// Subscribes to this broker: connects, finds (or, for a JetStream durable consumer, creates)
    /// what `options` reads from, and returns its messages as they come. See
    /// [`consume`](crate::consume) for what each broker reads and gives.
    ///
    /// Fails when the broker cannot be reached or refuses (credentials, TLS), or what `options`
    /// names does not exist (a RabbitMQ queue, a JetStream stream for the subject, an SQS queue).
    #[cfg_attr(
        not(any(feature = "amqp", feature = "nats", feature = "kafka", feature = "sqs")),
        allow(unused_variables)
    )]
    pub async fn subscribe(&self, options: SubscribeOptions) -> Result<Subscription, Error> {
        // By place, not by reference: without any broker's feature, `Target` has no variant.
        match self.target {
            #[cfg(feature = "amqp")]
            Target::Amqp(ref url) => url.subscribe(options).await,
            #[cfg(feature = "nats")]
            Target::Nats(ref url) => url.subscribe(options).await,
            #[cfg(feature = "kafka")]
            Target::Kafka(ref url) => url.subscribe(options).await,
            #[cfg(feature = "sqs")]
            Target::Sqs(ref url) => url.subscribe(options).await,
        }
    }
}

impl FromStr for BrokerUrl {
    type Err = InvalidBrokerUrl;

    fn from_str(url: &str) -> Result<Self, InvalidBrokerUrl> {
        let unknown = || InvalidBrokerUrl::UnknownScheme {
            given: redacted(url),
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(unknown());
        };
        if rest.is_empty() {
            return Err(InvalidBrokerUrl::MissingHost);
        }
        let disabled = |feature| InvalidBrokerUrl::FeatureDisabled {
            scheme: scheme.to_owned(),
            feature,
        };
        let target = match scheme.to_ascii_lowercase().as_str() {
            #[cfg(feature = "amqp")]
            "amqp" | "amqps" => crate::amqp::AmqpUrl::parse(url).map(Target::Amqp),
            // `tls://` is how NATS clients spell a server that must be reached over TLS.
            #[cfg(feature = "nats")]
            "nats" | "tls" => crate::nats::NatsUrl::parse(url).map(Target::Nats),
            #[cfg(feature = "kafka")]
            "kafka" | "kafkas" => crate::kafka::KafkaUrl::parse(url).map(Target::Kafka),
            #[cfg(feature = "sqs")]
            "sqs" => crate::sqs::SqsUrl::parse(rest).map(Target::Sqs),
            // A broker whose feature is off: the arms above take the others.
            #[allow(unreachable_patterns)]
            "amqp" | "amqps" => Err(disabled("amqp")),
            #[allow(unreachable_patterns)]
            "nats" | "tls" => Err(disabled("nats")),
            #[allow(unreachable_patterns)]
            "kafka" | "kafkas" => Err(disabled("kafka")),
            #[allow(unreachable_patterns)]
            "sqs" => Err(disabled("sqs")),
            _ => Err(unknown()),
        }?;
        Ok(Self {
            url: url.to_owned(),
            target,
        })
    }
}

impl fmt::Display for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redacted(&self.url))
    }
}

impl fmt::Debug for BrokerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BrokerUrl({:?})", redacted(&self.url))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_schemes_and_empty_hosts_are_refused() {
        assert_eq!(
            "http://u:p@host".parse::<BrokerUrl>(),
            Err(InvalidBrokerUrl::UnknownScheme {
                given: "http://u:***@host".into()
            })
        );
        assert_eq!(
            "localhost:5672".parse::<BrokerUrl>(),
            Err(InvalidBrokerUrl::UnknownScheme {
                given: "localhost:5672".into()
            })
        );
        assert_eq!(
            "nats://".parse::<BrokerUrl>(),
            Err(InvalidBrokerUrl::MissingHost)
        );
    }

    #[test]
    fn each_scheme_needs_its_feature() {
        for (url, feature, compiled) in [
            ("amqp://h", "amqp", cfg!(feature = "amqp")),
            ("AMQPS://h", "amqp", cfg!(feature = "amqp")),
            ("nats://h", "nats", cfg!(feature = "nats")),
            ("tls://h", "nats", cfg!(feature = "nats")),
            ("kafka://h:9092", "kafka", cfg!(feature = "kafka")),
            ("kafkas://h:9093", "kafka", cfg!(feature = "kafka")),
            ("sqs://us-east-1", "sqs", cfg!(feature = "sqs")),
        ] {
            match url.parse::<BrokerUrl>() {
                Ok(parsed) => {
                    assert!(compiled, "{url}");
                    assert_eq!(parsed.as_str(), url);
                }
                Err(InvalidBrokerUrl::FeatureDisabled {
                    feature: missing, ..
                }) => {
                    assert!(!compiled, "{url}");
                    assert_eq!(missing, feature);
                }
                Err(other) => panic!("{url}: {other}"),
            }
        }
    }

    #[test]
    fn each_scheme_is_read_by_its_broker() {
        let target = |url: &str| url.parse::<BrokerUrl>().unwrap().target;
        #[cfg(feature = "amqp")]
        for url in ["amqp://h", "AMQPS://u:pw@h/%2f?heartbeat=10"] {
            assert!(matches!(target(url), Target::Amqp(_)), "{url}");
        }
        #[cfg(feature = "nats")]
        for url in ["nats://h:4222", "tls://h:4222?cacert=/ca.pem"] {
            assert!(matches!(target(url), Target::Nats(_)), "{url}");
        }
        #[cfg(feature = "kafka")]
        for url in ["kafka://h:9092", "KAFKAS://h:9093?cacert=/ca.pem"] {
            assert!(matches!(target(url), Target::Kafka(_)), "{url}");
        }
        #[cfg(feature = "sqs")]
        assert!(matches!(target("sqs://us-east-1"), Target::Sqs(_)));
        let _ = target;
    }

    #[cfg(not(feature = "kafka"))]
    #[test]
    fn kafka_is_known_but_refused_without_its_feature() {
        let refused = "kafka://a:9092,b:9092".parse::<BrokerUrl>().unwrap_err();
        assert_eq!(
            refused,
            InvalidBrokerUrl::FeatureDisabled {
                scheme: "kafka".into(),
                feature: "kafka"
            }
        );
        assert_eq!(
            refused.to_string(),
            "kafka:// needs idem-messaging's `kafka` feature, which this build lacks"
        );
    }
}
