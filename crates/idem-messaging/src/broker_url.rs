//! [`BrokerUrl`]: a broker picked at run time from a URL (`idem relay --broker`).

use std::{fmt, path::PathBuf, str::FromStr};

use crate::{BoxPublisher, broker::TlsFiles};

/// The parameters of RabbitMQ URLs that lapin reads, passed on to it.
const AMQP_PARAMETERS: [&str; 5] = [
    "frame_max",
    "channel_max",
    "heartbeat",
    "connection_timeout",
    "auth_mechanism",
];

/// The librdkafka producer settings a Kafka URL may carry, passed on to it: how librdkafka
/// batches, how long it waits, and what the broker's logs call the client. What idem sets for its
/// guarantees (`acks`, `enable.idempotence`) is not among them.
const KAFKA_PARAMETERS: [&str; 10] = [
    "client.id",
    "linger.ms",
    "batch.num.messages",
    "batch.size",
    "message.timeout.ms",
    "message.max.bytes",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "request.timeout.ms",
    "socket.timeout.ms",
];

/// Why a string is not a [`BrokerUrl`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidBrokerUrl {
    /// The URL has no `scheme://`, or one that names no broker.
    #[error(
        "a broker URL starts with amqp://, amqps://, nats://, tls://, kafka:// or sqs://; got \
         {given:?}"
    )]
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
    /// A query parameter that neither idem nor the broker's client reads.
    #[error("unknown parameter `{name}` in the broker URL ({known})")]
    UnknownParameter {
        /// The parameter.
        name: String,
        /// The parameters this broker's URLs take.
        known: &'static str,
    },
    /// A known parameter that cannot be used as given.
    #[error("the broker URL's `{name}`: {reason}")]
    InvalidParameter {
        /// The parameter.
        name: &'static str,
        /// Why it cannot be used.
        reason: &'static str,
    },
}

/// A broker's URL: RabbitMQ (`amqp://user:password@host:port/vhost`, `amqps://…` over TLS),
/// NATS JetStream (`nats://host:port`, several comma-separated; `tls://…` over TLS) or Kafka
/// (`kafka://host:port[,host:port…]`, the bootstrap servers) or Amazon SQS
/// (`sqs://REGION[?endpoint=URL&profile=NAME]`). Each needs its cargo feature.
///
/// TLS connections (rustls) take three parameters, whose files are read when the publisher
/// connects:
///
/// - `cacert=PATH`: the CA certificates (PEM) the broker's certificate must chain to. For NATS,
///   they replace the system's trusted roots; for RabbitMQ, they are trusted besides the Mozilla
///   roots built into idem.
/// - `cert=PATH&key=PATH`: a client certificate and its key (PEM), for brokers that ask for one.
///
/// Any of them makes TLS required: with `nats://`, the connection is refused rather than made in
/// plain text; with `amqp://`, they are refused (use `amqps://`). A RabbitMQ URL may also carry
/// lapin's `frame_max`, `channel_max`, `heartbeat`, `connection_timeout` and `auth_mechanism`;
/// any other parameter is refused, so that a misspelt one is not silently ignored. Values are
/// taken as given (not percent-decoded).
///
/// A Kafka URL may carry librdkafka's producer settings `client.id`, `linger.ms`,
/// `batch.num.messages`, `batch.size`, `message.timeout.ms`, `message.max.bytes`,
/// `queue.buffering.max.messages`, `queue.buffering.max.kbytes`, `request.timeout.ms` and
/// `socket.timeout.ms` (`kafka://k1:9092,k2:9092?linger.ms=20`); what idem sets for its
/// guarantees (`acks`, `enable.idempotence`) is refused.
///
/// An SQS URL names the region; `endpoint=URL` sends the requests to another endpoint (an
/// SQS-compatible server, a VPC endpoint) and `profile=NAME` takes the credentials of a profile
/// of the AWS configuration files; otherwise the credentials come from the usual chain
/// (`AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, `AWS_PROFILE`, web identity, the
/// container's or the instance's role).
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
/// # #[cfg(feature = "nats")] {
/// let tls: BrokerUrl = "tls://nats.internal:4222?cacert=/etc/idem/nats-ca.pem".parse()?;
/// # drop(tls);
/// # }
/// assert!("http://example.com".parse::<BrokerUrl>().is_err());
/// # Ok::<(), idem_messaging::InvalidBrokerUrl>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    broker: Broker,
    url: String,
    /// What the broker's client is given: the URL without idem's TLS parameters.
    endpoint: String,
    tls: TlsFiles,
    /// An SQS URL's parts.
    sqs: Option<SqsTarget>,
}

/// Where an `sqs://` URL sends: a region, and maybe an endpoint and a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SqsTarget {
    region: String,
    endpoint: Option<String>,
    profile: Option<String>,
}

/// The brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Broker {
    Amqp,
    Nats,
    Kafka,
    Sqs,
}

impl Broker {
    /// The cargo feature that compiles it in.
    fn feature(self) -> &'static str {
        match self {
            Self::Amqp => "amqp",
            Self::Nats => "nats",
            Self::Kafka => "kafka",
            Self::Sqs => "sqs",
        }
    }

    /// The parameters its URLs take, as an error says them.
    fn known(self) -> &'static str {
        match self {
            Self::Amqp => {
                "takes cacert, cert and key with amqps://, and frame_max, channel_max, \
                 heartbeat, connection_timeout and auth_mechanism"
            }
            Self::Nats => "takes cacert, cert and key",
            Self::Kafka => {
                "takes client.id, linger.ms, batch.num.messages, batch.size, \
                 message.timeout.ms, message.max.bytes, queue.buffering.max.messages, \
                 queue.buffering.max.kbytes, request.timeout.ms and socket.timeout.ms"
            }
            Self::Sqs => "takes endpoint and profile",
        }
    }

    fn compiled(self) -> bool {
        match self {
            Self::Amqp => cfg!(feature = "amqp"),
            Self::Nats => cfg!(feature = "nats"),
            Self::Kafka => cfg!(feature = "kafka"),
            Self::Sqs => cfg!(feature = "sqs"),
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
            Broker::Amqp => BoxPublisher::new(
                crate::amqp::AmqpPublisher::new(self.endpoint.clone()).tls_files(self.tls.clone()),
            ),
            #[cfg(feature = "nats")]
            Broker::Nats => BoxPublisher::new(
                crate::nats::NatsPublisher::new(self.endpoint.clone()).tls_files(self.tls.clone()),
            ),
            #[cfg(feature = "kafka")]
            Broker::Kafka => BoxPublisher::new(crate::kafka::KafkaPublisher::with_config(
                self.kafka_config(),
            )),
            #[cfg(feature = "sqs")]
            Broker::Sqs => {
                let target = self.sqs.clone().expect("an sqs:// URL has its parts");
                BoxPublisher::new(crate::sqs::SqsPublisher::lazy(
                    target.region,
                    target.endpoint,
                    target.profile,
                ))
            }
            #[allow(unreachable_patterns)]
            other => unreachable!("`from_str` refuses {other:?}: its feature is not compiled in"),
        }
    }
}

impl BrokerUrl {
    /// A Kafka URL's librdkafka settings: its bootstrap servers and the settings it carries.
    #[cfg(feature = "kafka")]
    fn kafka_config(&self) -> rdkafka::ClientConfig {
        let rest = self.endpoint.split_once("://").map_or("", |(_, rest)| rest);
        let (servers, query) = rest.split_once('?').unwrap_or((rest, ""));
        let mut config = rdkafka::ClientConfig::new();
        config.set("bootstrap.servers", servers);
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            config.set(name, value);
        }
        config
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
        let scheme_lower = scheme.to_ascii_lowercase();
        let broker = match scheme_lower.as_str() {
            "amqp" | "amqps" => Broker::Amqp,
            // `tls://` is how NATS clients spell a server that must be reached over TLS.
            "nats" | "tls" => Broker::Nats,
            "kafka" => Broker::Kafka,
            "sqs" => Broker::Sqs,
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
        if broker == Broker::Sqs {
            return Ok(Self {
                broker,
                url: url.to_owned(),
                endpoint: url.to_owned(),
                tls: TlsFiles::default(),
                sqs: Some(sqs_target(rest)?),
            });
        }
        let (endpoint, tls) = parameters(url, broker)?;
        if scheme_lower == "amqp" && tls.any() {
            return Err(InvalidBrokerUrl::InvalidParameter {
                name: if tls.ca.is_some() { "cacert" } else { "cert" },
                reason: "a TLS setting: use amqps://",
            });
        }
        Ok(Self {
            broker,
            url: url.to_owned(),
            endpoint,
            tls,
            sqs: None,
        })
    }
}

/// The region, endpoint and profile of an `sqs://` URL (`rest` is what follows `sqs://`).
fn sqs_target(rest: &str) -> Result<SqsTarget, InvalidBrokerUrl> {
    let (region, query) = rest.split_once('?').unwrap_or((rest, ""));
    let valid_region = !region.is_empty()
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !valid_region {
        return Err(InvalidBrokerUrl::InvalidParameter {
            name: "region",
            reason: "an AWS region such as us-east-1 follows sqs://",
        });
    }
    let mut target = SqsTarget {
        region: region.to_owned(),
        endpoint: None,
        profile: None,
    };
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let (name, slot): (&'static str, _) = match name {
            "endpoint" => ("endpoint", &mut target.endpoint),
            "profile" => ("profile", &mut target.profile),
            _ => {
                return Err(InvalidBrokerUrl::UnknownParameter {
                    name: name.to_owned(),
                    known: Broker::Sqs.known(),
                });
            }
        };
        if value.is_empty() {
            return Err(InvalidBrokerUrl::InvalidParameter {
                name,
                reason: "empty",
            });
        }
        if name == "endpoint" && !(value.starts_with("https://") || value.starts_with("http://")) {
            return Err(InvalidBrokerUrl::InvalidParameter {
                name,
                reason: "an http:// or https:// URL",
            });
        }
        if slot.replace(value.to_owned()).is_some() {
            return Err(InvalidBrokerUrl::InvalidParameter {
                name,
                reason: "given twice",
            });
        }
    }
    Ok(target)
}

/// Splits idem's TLS parameters (`cacert`, `cert`, `key`) from `url`: the URL for the broker's
/// client (with the parameters the client reads, if any), and the files.
fn parameters(url: &str, broker: Broker) -> Result<(String, TlsFiles), InvalidBrokerUrl> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), TlsFiles::default()));
    };
    let (mut ca, mut cert, mut key) = (None, None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|pair| !pair.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let (name, slot): (&'static str, _) = match name {
            "cacert" if broker != Broker::Kafka => ("cacert", &mut ca),
            "cert" if broker != Broker::Kafka => ("cert", &mut cert),
            "key" if broker != Broker::Kafka => ("key", &mut key),
            _ if broker == Broker::Amqp && AMQP_PARAMETERS.contains(&name) => {
                kept.push(pair);
                continue;
            }
            _ if broker == Broker::Kafka => {
                kafka_parameter(name, value, &kept)?;
                kept.push(pair);
                continue;
            }
            _ => {
                return Err(InvalidBrokerUrl::UnknownParameter {
                    name: name.to_owned(),
                    known: broker.known(),
                });
            }
        };
        if value.is_empty() {
            return Err(InvalidBrokerUrl::InvalidParameter {
                name,
                reason: "an empty path",
            });
        }
        if slot.replace(PathBuf::from(value)).is_some() {
            return Err(InvalidBrokerUrl::InvalidParameter {
                name,
                reason: "given twice",
            });
        }
    }
    let client = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert, key)),
        (None, None) => None,
        (cert, _) => {
            return Err(InvalidBrokerUrl::InvalidParameter {
                name: if cert.is_some() { "cert" } else { "key" },
                reason: "cert and key go together: give both or neither",
            });
        }
    };
    let endpoint = if kept.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    Ok((endpoint, TlsFiles { ca, client }))
}

/// Checks one of a Kafka URL's parameters, `kept` being those before it.
fn kafka_parameter(name: &str, value: &str, kept: &[&str]) -> Result<(), InvalidBrokerUrl> {
    let Some(name) = KAFKA_PARAMETERS.into_iter().find(|known| *known == name) else {
        return Err(InvalidBrokerUrl::UnknownParameter {
            name: name.to_owned(),
            known: Broker::Kafka.known(),
        });
    };
    let numeric = name != "client.id";
    let reason = if value.is_empty() && !numeric {
        "empty"
    } else if numeric && value.parse::<u64>().is_err() {
        "a whole number"
    } else if kept
        .iter()
        .any(|pair| pair.split_once('=').map_or(*pair, |(kept, _)| kept) == name)
    {
        "given twice"
    } else {
        return Ok(());
    };
    Err(InvalidBrokerUrl::InvalidParameter { name, reason })
}

/// `url` with the password of its user information, if any, replaced by `***`.
fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
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
            ("tls://h", "nats", cfg!(feature = "nats")),
            ("kafka://h:9092", "kafka", cfg!(feature = "kafka")),
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

    #[cfg(any(feature = "amqp", feature = "nats"))]
    fn files(ca: Option<&str>, client: Option<(&str, &str)>) -> TlsFiles {
        TlsFiles {
            ca: ca.map(PathBuf::from),
            client: client.map(|(cert, key)| (cert.into(), key.into())),
        }
    }

    #[cfg(feature = "nats")]
    #[test]
    fn nats_takes_the_tls_files_out_of_the_url() {
        let url: BrokerUrl = "tls://app:pw@nats.internal:4222?cacert=/etc/ca.pem"
            .parse()
            .unwrap();
        assert_eq!(url.broker, Broker::Nats);
        assert_eq!(url.endpoint, "tls://app:pw@nats.internal:4222");
        assert_eq!(url.tls, files(Some("/etc/ca.pem"), None));
        assert_eq!(
            url.to_string(),
            "tls://app:***@nats.internal:4222?cacert=/etc/ca.pem"
        );

        let url: BrokerUrl = "nats://a:4222,b:4222?cert=/c.pem&key=/k.pem&cacert=/ca.pem"
            .parse()
            .unwrap();
        assert_eq!(url.endpoint, "nats://a:4222,b:4222");
        assert_eq!(url.tls, files(Some("/ca.pem"), Some(("/c.pem", "/k.pem"))));
        assert_eq!(
            url.as_str(),
            "nats://a:4222,b:4222?cert=/c.pem&key=/k.pem&cacert=/ca.pem"
        );

        let plain: BrokerUrl = "nats://h:4222".parse().unwrap();
        assert_eq!(plain.endpoint, "nats://h:4222");
        assert_eq!(plain.tls, TlsFiles::default());
    }

    #[cfg(feature = "amqp")]
    #[test]
    fn amqps_keeps_lapins_parameters_and_takes_the_tls_files() {
        let url: BrokerUrl =
            "amqps://u:pw@rabbit:5671/%2f?heartbeat=10&cacert=/ca.pem&auth_mechanism=plain"
                .parse()
                .unwrap();
        assert_eq!(url.broker, Broker::Amqp);
        assert_eq!(
            url.endpoint,
            "amqps://u:pw@rabbit:5671/%2f?heartbeat=10&auth_mechanism=plain"
        );
        assert_eq!(url.tls, files(Some("/ca.pem"), None));
        assert_eq!(
            url.to_string(),
            "amqps://u:***@rabbit:5671/%2f?heartbeat=10&cacert=/ca.pem&auth_mechanism=plain"
        );
        let url: BrokerUrl = "amqps://rabbit/%2f?cert=/c.pem&key=/k.pem".parse().unwrap();
        assert_eq!(url.endpoint, "amqps://rabbit/%2f");
        assert_eq!(url.tls, files(None, Some(("/c.pem", "/k.pem"))));
        let url: BrokerUrl = "amqp://rabbit/%2f?connection_timeout=500".parse().unwrap();
        assert_eq!(url.endpoint, "amqp://rabbit/%2f?connection_timeout=500");
    }

    #[cfg(all(feature = "amqp", feature = "nats"))]
    #[test]
    fn bad_parameters_are_refused_with_what_is_known() {
        let error = |url: &str| url.parse::<BrokerUrl>().unwrap_err();
        assert_eq!(
            error("amqp://u:p@rabbit/%2f?cacert=/ca.pem"),
            InvalidBrokerUrl::InvalidParameter {
                name: "cacert",
                reason: "a TLS setting: use amqps://"
            }
        );
        assert_eq!(
            error("amqp://rabbit?cert=/c.pem&key=/k.pem").to_string(),
            "the broker URL's `cert`: a TLS setting: use amqps://"
        );
        assert_eq!(
            error("nats://h?cacrt=/ca.pem").to_string(),
            "unknown parameter `cacrt` in the broker URL (takes cacert, cert and key)"
        );
        assert_eq!(
            error("nats://h?heartbeat=10"),
            InvalidBrokerUrl::UnknownParameter {
                name: "heartbeat".into(),
                known: "takes cacert, cert and key"
            }
        );
        assert_eq!(
            error("amqps://h?verify=none").to_string(),
            "unknown parameter `verify` in the broker URL (takes cacert, cert and key with \
             amqps://, and frame_max, channel_max, heartbeat, connection_timeout and \
             auth_mechanism)"
        );
        assert_eq!(
            error("tls://h?cert=/c.pem").to_string(),
            "the broker URL's `cert`: cert and key go together: give both or neither"
        );
        assert_eq!(
            error("amqps://h?key=/k.pem"),
            InvalidBrokerUrl::InvalidParameter {
                name: "key",
                reason: "cert and key go together: give both or neither"
            }
        );
        assert_eq!(
            error("tls://h?cacert="),
            InvalidBrokerUrl::InvalidParameter {
                name: "cacert",
                reason: "an empty path"
            }
        );
        assert_eq!(
            error("tls://h?cacert=/a.pem&cacert=/b.pem"),
            InvalidBrokerUrl::InvalidParameter {
                name: "cacert",
                reason: "given twice"
            }
        );
    }

    #[cfg(feature = "kafka")]
    #[test]
    fn kafka_takes_librdkafka_producer_settings_and_no_other() {
        let url: BrokerUrl =
            "kafka://a:9092,b:9092?linger.ms=0&batch.num.messages=1&client.id=relay"
                .parse()
                .unwrap();
        let config = url.kafka_config();
        assert_eq!(config.get("bootstrap.servers"), Some("a:9092,b:9092"));
        assert_eq!(config.get("linger.ms"), Some("0"));
        assert_eq!(config.get("batch.num.messages"), Some("1"));
        assert_eq!(config.get("client.id"), Some("relay"));
        let plain: BrokerUrl = "kafka://a:9092".parse().unwrap();
        assert_eq!(
            plain.kafka_config().get("bootstrap.servers"),
            Some("a:9092")
        );
        assert_eq!(plain.kafka_config().get("linger.ms"), None);

        let known = Broker::Kafka.known();
        // idem's own settings, TLS files (not compiled in) and misspellings are refused.
        for (url, name) in [
            ("kafka://a:9092?acks=1", "acks"),
            (
                "kafka://a:9092?enable.idempotence=false",
                "enable.idempotence",
            ),
            ("kafka://a:9092?cacert=/ca.pem", "cacert"),
            ("kafka://a:9092?linger_ms=5", "linger_ms"),
        ] {
            assert_eq!(
                url.parse::<BrokerUrl>(),
                Err(InvalidBrokerUrl::UnknownParameter {
                    name: name.into(),
                    known
                }),
                "{url}"
            );
        }
        assert_eq!(
            "kafka://a:9092?linger.ms=soon".parse::<BrokerUrl>(),
            Err(InvalidBrokerUrl::InvalidParameter {
                name: "linger.ms",
                reason: "a whole number"
            })
        );
        assert_eq!(
            "kafka://a:9092?linger.ms=0&linger.ms=5".parse::<BrokerUrl>(),
            Err(InvalidBrokerUrl::InvalidParameter {
                name: "linger.ms",
                reason: "given twice"
            })
        );
        assert_eq!(
            "kafka://a:9092?client.id=".parse::<BrokerUrl>(),
            Err(InvalidBrokerUrl::InvalidParameter {
                name: "client.id",
                reason: "empty"
            })
        );
    }

    #[cfg(feature = "sqs")]
    #[test]
    fn sqs_takes_a_region_an_endpoint_and_a_profile() {
        let url: BrokerUrl = "sqs://eu-west-1".parse().unwrap();
        assert_eq!(url.broker, Broker::Sqs);
        assert_eq!(
            url.sqs,
            Some(SqsTarget {
                region: "eu-west-1".into(),
                endpoint: None,
                profile: None
            })
        );
        let url: BrokerUrl = "sqs://us-east-1?endpoint=http://127.0.0.1:9324&profile=relay"
            .parse()
            .unwrap();
        assert_eq!(
            url.sqs,
            Some(SqsTarget {
                region: "us-east-1".into(),
                endpoint: Some("http://127.0.0.1:9324".into()),
                profile: Some("relay".into())
            })
        );
        assert_eq!(
            url.to_string(),
            "sqs://us-east-1?endpoint=http://127.0.0.1:9324&profile=relay"
        );
    }

    #[cfg(feature = "sqs")]
    #[test]
    fn bad_sqs_urls_are_refused_with_what_is_known() {
        let error = |url: &str| url.parse::<BrokerUrl>().unwrap_err().to_string();
        assert_eq!(
            error("sqs://?endpoint=http://h"),
            "the broker URL's `region`: an AWS region such as us-east-1 follows sqs://"
        );
        assert_eq!(
            error("sqs://EU_WEST"),
            "the broker URL's `region`: an AWS region such as us-east-1 follows sqs://"
        );
        assert_eq!(
            error("sqs://us-east-1?queue=q"),
            "unknown parameter `queue` in the broker URL (takes endpoint and profile)"
        );
        assert_eq!(
            error("sqs://us-east-1?endpoint=127.0.0.1:9324"),
            "the broker URL's `endpoint`: an http:// or https:// URL"
        );
        assert_eq!(
            error("sqs://us-east-1?profile="),
            "the broker URL's `profile`: empty"
        );
        assert_eq!(
            error("sqs://us-east-1?profile=a&profile=b"),
            "the broker URL's `profile`: given twice"
        );
    }
}
