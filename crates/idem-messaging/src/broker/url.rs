//! [`BrokerUrl`]: a broker picked at run time from a URL (`idem relay --broker`).

use std::{fmt, str::FromStr};

use crate::BoxPublisher;

/// Why a string is not a [`BrokerUrl`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidBrokerUrl {
    /// The URL has no `scheme://`, or one that names no broker.
    #[error("a broker URL starts with amqp://, amqps://, nats:// or kafka://; got {given:?}")]
    UnknownScheme {
        /// What was given, its password hidden.
        given: String,
    },
    /// The broker's cargo feature was not compiled in.
    #[error("{scheme}:// needs idem-messaging's `{feature}` feature, which this build lacks")]
    FeatureDisabled {
        /// The URL's scheme.
        scheme: String,
        /// The missing feature.
        feature: &'static str,
    },
    /// Nothing after `scheme://`.
    #[error("the broker URL names no host")]
    MissingHost,
}

/// A broker's URL: RabbitMQ (`amqp://user:password@host:port/vhost`, `amqps://…`), NATS
/// JetStream (`nats://host:port`, several comma-separated) or Kafka
/// (`kafka://host:port[,host:port…]`, the bootstrap servers). Each needs its cargo feature.
///
/// Its [`publisher`](Self::publisher) publishes with the broker's confirmation; it connects on
/// its first batch. Displayed with the password hidden.
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
/// assert!("http://example.com".parse::<BrokerUrl>().is_err());
/// # Ok::<(), idem_messaging::InvalidBrokerUrl>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    broker: Broker,
    url: String,
}

/// The brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Broker {
    Amqp,
    Nats,
    Kafka,
}

impl Broker {
    /// The cargo feature that compiles it in.
    fn feature(self) -> &'static str {
        match self {
            Self::Amqp => "amqp",
            Self::Nats => "nats",
            Self::Kafka => "kafka",
        }
    }

    fn compiled(self) -> bool {
        match self {
            Self::Amqp => cfg!(feature = "amqp"),
            Self::Nats => cfg!(feature = "nats"),
            Self::Kafka => cfg!(feature = "kafka"),
        }
    }
}

impl BrokerUrl {
    /// The URL as given (with its password, if any).
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// A publisher to this broker, with the broker module's defaults: the default exchange for
    /// RabbitMQ (the destination is the queue), the destination as the subject for NATS, as the
    /// topic for Kafka. Connects on its first batch.
    pub fn publisher(&self) -> BoxPublisher {
        match self.broker {
            #[cfg(feature = "amqp")]
            Broker::Amqp => BoxPublisher::new(crate::amqp::AmqpPublisher::new(self.url.clone())),
            #[cfg(feature = "nats")]
            Broker::Nats => BoxPublisher::new(crate::nats::NatsPublisher::new(self.url.clone())),
            #[cfg(feature = "kafka")]
            Broker::Kafka => {
                let servers = self
                    .url
                    .split_once("://")
                    .map_or("", |(_, servers)| servers);
                BoxPublisher::new(crate::kafka::KafkaPublisher::new(servers))
            }
            #[allow(unreachable_patterns)]
            other => unreachable!("`from_str` refuses {other:?}: its feature is not compiled in"),
        }
    }
}

impl FromStr for BrokerUrl {
    type Err = InvalidBrokerUrl;

    fn from_str(url: &str) -> Result<Self, InvalidBrokerUrl> {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Err(InvalidBrokerUrl::UnknownScheme {
                given: redacted(url),
            });
        };
        if rest.is_empty() {
            return Err(InvalidBrokerUrl::MissingHost);
        }
        let broker = match scheme.to_ascii_lowercase().as_str() {
            "amqp" | "amqps" => Broker::Amqp,
            "nats" => Broker::Nats,
            "kafka" => Broker::Kafka,
            _ => {
                return Err(InvalidBrokerUrl::UnknownScheme {
                    given: redacted(url),
                });
            }
        };
        if !broker.compiled() {
            return Err(InvalidBrokerUrl::FeatureDisabled {
                scheme: scheme.to_owned(),
                feature: broker.feature(),
            });
        }
        Ok(Self {
            broker,
            url: url.to_owned(),
        })
    }
}

/// `url` with the password of its user information, if any, replaced by `***`.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
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
    fn passwords_are_hidden() {
        assert_eq!(
            redacted("amqp://guest:secret@host:5672/%2f"),
            "amqp://guest:***@host:5672/%2f"
        );
        assert_eq!(redacted("nats://token@host:4222"), "nats://token@host:4222");
        assert_eq!(redacted("nats://host:4222"), "nats://host:4222");
        assert_eq!(redacted("a:b@c"), "a:b@c");
        assert_eq!(
            redacted("amqp://u:p@ss@host/vhost"),
            "amqp://u:***@host/vhost"
        );
    }

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
            ("kafka://h:9092", "kafka", cfg!(feature = "kafka")),
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
}
