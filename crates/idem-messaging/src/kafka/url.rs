//! [`KafkaUrl`]: a Kafka URL (`kafka://host:port[,host:port…]`, the bootstrap servers;
//! `kafkas://…` over TLS), with idem's TLS and SASL parameters and librdkafka's producer and
//! consumer-group settings, as [`BrokerUrl`](crate::BrokerUrl) takes it.

use rdkafka::ClientConfig;

use crate::{
    BoxPublisher, Error, SubscribeOptions, Subscription,
    broker::{InvalidBrokerUrl, Parameter, TlsParameters, split_query},
};

use super::{
    KafkaPublisher, KafkaSecurity, SaslMechanism, SaslPassword, consumer_config, subscription,
};

/// The librdkafka settings a Kafka URL may carry, passed on to it: how a producer batches, how
/// long it waits, how soon a consumer group notices a member gone (`session.timeout.ms`,
/// `heartbeat.interval.ms`: a subscription's only), and what the broker's logs call the client.
/// What idem sets for its guarantees (`acks`, `enable.idempotence`, the consumer's offset
/// handling) is not among them.
const KAFKA_PARAMETERS: [&str; 12] = [
    "client.id",
    "session.timeout.ms",
    "heartbeat.interval.ms",
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

/// Those of [`KAFKA_PARAMETERS`] that librdkafka applies to a consumer too: the rest are the
/// producer's (librdkafka warns of them on a consumer), and `message.max.bytes` bounds requests,
/// of which only a producer's are large.
const CONSUMER_PARAMETERS: [&str; 4] = [
    "client.id",
    "socket.timeout.ms",
    "session.timeout.ms",
    "heartbeat.interval.ms",
];

/// Those of [`KAFKA_PARAMETERS`] that only a consumer takes (librdkafka warns of them on a
/// producer).
const GROUP_PARAMETERS: [&str; 2] = ["session.timeout.ms", "heartbeat.interval.ms"];

/// The parameters a Kafka URL takes, as an error says them.
const KNOWN: &str = "takes cacert, cert, key, sasl.mechanism, sasl.username, password-file, \
                     client.id, session.timeout.ms, heartbeat.interval.ms, linger.ms, \
                     batch.num.messages, batch.size, message.timeout.ms, message.max.bytes, \
                     queue.buffering.max.messages, queue.buffering.max.kbytes, \
                     request.timeout.ms and socket.timeout.ms";

/// A Kafka URL: the bootstrap servers, how they are reached (TLS, SASL), and the librdkafka
/// settings it carries, in order.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct KafkaUrl {
    /// What follows `kafka://`, up to the query.
    servers: String,
    settings: Vec<(&'static str, String)>,
    security: KafkaSecurity,
}

impl KafkaUrl {
    /// Reads `url`, whose scheme is `kafka` or `kafkas` (in any case).
    pub(crate) fn parse(url: &str) -> Result<Self, InvalidBrokerUrl> {
        let (base, parameters) = split_query(url);
        let (scheme, servers) = base.split_once("://").unwrap_or(("", base));
        let mut tls = TlsParameters::default();
        let mut sasl = SaslParameters::default();
        let mut settings = Vec::new();
        for parameter in parameters {
            if tls.take(parameter)? || sasl.take(parameter)? {
                continue;
            }
            let name = setting(parameter.name, parameter.value, &settings)?;
            settings.push((name, parameter.value.to_owned()));
        }
        // Any TLS parameter makes TLS required, as `kafkas://` does.
        let tls = tls.files()?;
        let tls = (scheme.eq_ignore_ascii_case("kafkas") || tls.any()).then_some(tls);
        let mut security = KafkaSecurity::with_tls(tls);
        if let Some((mechanism, username, password)) = sasl.into_parts()? {
            security = security.sasl(mechanism, username, password);
        }
        Ok(Self {
            servers: servers.to_owned(),
            settings,
            security,
        })
    }

    /// A publisher to this broker: the destination is the topic.
    pub(crate) fn publisher(&self) -> BoxPublisher {
        BoxPublisher::new(
            KafkaPublisher::with_config(self.producer_config()).security(self.security.clone()),
        )
    }

    /// Subscribes to this broker: see [`BrokerUrl::subscribe`](crate::BrokerUrl::subscribe)
    /// and the [`kafka`](super) module.
    pub(crate) async fn subscribe(&self, options: SubscribeOptions) -> Result<Subscription, Error> {
        let config = self.consumer_config(options.group_name());
        subscription::subscribe(config, &self.security, options).await
    }

    /// The producer's librdkafka settings: its bootstrap servers and the settings it carries.
    fn producer_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.servers);
        for (name, value) in &self.settings {
            if !GROUP_PARAMETERS.contains(name) {
                config.set(*name, value);
            }
        }
        config
    }

    /// The settings of a consumer in `group`: [`consumer_config`]'s, and those of the URL's
    /// settings that apply to a consumer.
    fn consumer_config(&self, group: &str) -> ClientConfig {
        let mut config = consumer_config(&self.servers, group);
        for (name, value) in &self.settings {
            if CONSUMER_PARAMETERS.contains(name) {
                config.set(*name, value);
            }
        }
        config
    }
}

/// A Kafka URL's SASL parameters, taken one by one: `sasl.mechanism`, `sasl.username` and
/// `password-file` (without which the password comes from [`SaslPassword::default`]'s
/// variable). A password in the URL is refused.
#[derive(Default)]
struct SaslParameters {
    mechanism: Option<SaslMechanism>,
    username: Option<String>,
    password_file: Option<String>,
}

impl SaslParameters {
    /// Takes `parameter` if it is one of SASL's (`Ok(true)`), refusing an empty value and a
    /// parameter given twice; `Ok(false)` if it is another.
    fn take(&mut self, parameter: Parameter<'_>) -> Result<bool, InvalidBrokerUrl> {
        let invalid = |name, reason| Err(InvalidBrokerUrl::InvalidParameter { name, reason });
        let (name, taken) = match parameter.name {
            "sasl.mechanism" => ("sasl.mechanism", self.mechanism.is_some()),
            "sasl.username" => ("sasl.username", self.username.is_some()),
            "password-file" => ("password-file", self.password_file.is_some()),
            "sasl.password" => {
                return invalid(
                    "sasl.password",
                    "a password in the URL would show in the process list: use \
                     password-file=PATH or the environment variable IDEM_KAFKA_SASL_PASSWORD",
                );
            }
            _ => return Ok(false),
        };
        if parameter.value.is_empty() {
            return invalid(name, "empty");
        }
        if taken {
            return invalid(name, "given twice");
        }
        let value = parameter.value.to_owned();
        match name {
            "sasl.mechanism" => {
                let Ok(mechanism) = value.parse() else {
                    return invalid(name, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512");
                };
                self.mechanism = Some(mechanism);
            }
            "sasl.username" => self.username = Some(value),
            _ => self.password_file = Some(value),
        }
        Ok(true)
    }

    /// The mechanism, the user name and where the password is, if SASL was asked for: the
    /// mechanism and the user name go together, and a password file with them.
    fn into_parts(self) -> Result<Option<(SaslMechanism, String, SaslPassword)>, InvalidBrokerUrl> {
        match (self.mechanism, self.username, self.password_file) {
            (Some(mechanism), Some(username), file) => {
                let password = file.map_or_else(SaslPassword::default, SaslPassword::file);
                Ok(Some((mechanism, username, password)))
            }
            (None, None, None) => Ok(None),
            (None, None, Some(_)) => Err(InvalidBrokerUrl::InvalidParameter {
                name: "password-file",
                reason: "a password for SASL: give sasl.mechanism and sasl.username too",
            }),
            (mechanism, _, _) => Err(InvalidBrokerUrl::InvalidParameter {
                name: if mechanism.is_some() {
                    "sasl.mechanism"
                } else {
                    "sasl.username"
                },
                reason: "sasl.mechanism and sasl.username go together: give both or neither",
            }),
        }
    }
}

/// Checks one of a Kafka URL's settings, `taken` being those before it: its name as known.
fn setting(
    name: &str,
    value: &str,
    taken: &[(&'static str, String)],
) -> Result<&'static str, InvalidBrokerUrl> {
    let Some(name) = KAFKA_PARAMETERS.into_iter().find(|known| *known == name) else {
        return Err(InvalidBrokerUrl::UnknownParameter {
            name: name.to_owned(),
            known: KNOWN,
        });
    };
    let numeric = name != "client.id";
    let reason = if value.is_empty() && !numeric {
        "empty"
    } else if numeric && value.parse::<u64>().is_err() {
        "a whole number"
    } else if taken.iter().any(|(taken, _)| *taken == name) {
        "given twice"
    } else {
        return Ok(name);
    };
    Err(InvalidBrokerUrl::InvalidParameter { name, reason })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BrokerUrl, kafka::security::tests::pairs};

    /// The librdkafka settings a URL makes, security applied, sorted.
    fn settings(url: &str) -> Vec<(String, String)> {
        let url = KafkaUrl::parse(url).unwrap();
        let mut config = url.producer_config();
        url.security.apply(&mut config).unwrap();
        crate::kafka::security::tests::settings(&config)
    }

    #[test]
    fn kafka_takes_librdkafka_producer_settings_and_no_other() {
        let url = KafkaUrl::parse(
            "kafka://a:9092,b:9092?linger.ms=0&batch.num.messages=1&client.id=relay",
        )
        .unwrap();
        let config = url.producer_config();
        assert_eq!(config.get("bootstrap.servers"), Some("a:9092,b:9092"));
        assert_eq!(config.get("linger.ms"), Some("0"));
        assert_eq!(config.get("batch.num.messages"), Some("1"));
        assert_eq!(config.get("client.id"), Some("relay"));
        assert_eq!(url.security, KafkaSecurity::new());
        let plain = KafkaUrl::parse("kafka://a:9092").unwrap();
        assert_eq!(
            plain.producer_config().get("bootstrap.servers"),
            Some("a:9092")
        );
        assert_eq!(plain.producer_config().get("linger.ms"), None);

        let known = KNOWN;
        // idem's own settings, librdkafka's security settings (idem's parameters say them) and
        // misspellings are refused.
        for (url, name) in [
            ("kafka://a:9092?acks=1", "acks"),
            (
                "kafka://a:9092?enable.idempotence=false",
                "enable.idempotence",
            ),
            ("kafka://a:9092?security.protocol=ssl", "security.protocol"),
            ("kafka://a:9092?ssl.ca.location=/ca.pem", "ssl.ca.location"),
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

    #[test]
    fn a_consumer_takes_the_settings_that_apply_to_consumers_and_its_guarantees() {
        let url = KafkaUrl::parse(
            "kafkas://a:9093?client.id=ledger&linger.ms=5&message.max.bytes=2000&\
             socket.timeout.ms=1000&request.timeout.ms=100&cacert=/ca.pem&\
             session.timeout.ms=6000&heartbeat.interval.ms=500",
        )
        .unwrap();
        // The group's settings are the consumer's only.
        let producer = url.producer_config();
        assert_eq!(producer.get("session.timeout.ms"), None);
        assert_eq!(producer.get("heartbeat.interval.ms"), None);
        assert_eq!(producer.get("linger.ms"), Some("5"));
        let mut config = url.consumer_config("ledger-group");
        url.security.apply(&mut config).unwrap();
        assert_eq!(
            crate::kafka::security::tests::settings(&config),
            pairs(&[
                ("auto.offset.reset", "earliest"),
                ("bootstrap.servers", "a:9093"),
                ("client.id", "ledger"),
                ("enable.auto.commit", "true"),
                ("enable.auto.offset.store", "false"),
                ("group.id", "ledger-group"),
                ("heartbeat.interval.ms", "500"),
                ("security.protocol", "ssl"),
                ("session.timeout.ms", "6000"),
                ("socket.timeout.ms", "1000"),
                ("ssl.ca.location", "/ca.pem"),
            ])
        );
    }

    #[test]
    fn kafkas_or_any_tls_parameter_makes_tls_required() {
        assert_eq!(
            settings("kafka://a:9092"),
            pairs(&[
                ("bootstrap.servers", "a:9092"),
                ("security.protocol", "plaintext")
            ])
        );
        assert_eq!(
            settings("KAFKAS://a:9093,b:9093"),
            pairs(&[
                ("bootstrap.servers", "a:9093,b:9093"),
                ("security.protocol", "ssl")
            ])
        );
        assert_eq!(
            settings("kafka://a:9093?cacert=/etc/ca.pem&linger.ms=5"),
            pairs(&[
                ("bootstrap.servers", "a:9093"),
                ("linger.ms", "5"),
                ("security.protocol", "ssl"),
                ("ssl.ca.location", "/etc/ca.pem"),
            ])
        );
        assert_eq!(
            settings("kafkas://a:9093?cert=/c.pem&key=/k.pem"),
            pairs(&[
                ("bootstrap.servers", "a:9093"),
                ("security.protocol", "ssl"),
                ("ssl.certificate.location", "/c.pem"),
                ("ssl.key.location", "/k.pem"),
            ])
        );
        assert_eq!(
            "kafkas://a:9093?cert=/c.pem".parse::<BrokerUrl>(),
            Err(InvalidBrokerUrl::InvalidParameter {
                name: "cert",
                reason: "cert and key go together: give both or neither"
            })
        );
        assert_eq!(
            "kafka://a:9093?cacert=".parse::<BrokerUrl>(),
            Err(InvalidBrokerUrl::InvalidParameter {
                name: "cacert",
                reason: "an empty path"
            })
        );
    }

    #[test]
    fn sasl_takes_a_mechanism_a_user_and_a_password_from_a_file_or_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kafka-password");
        std::fs::write(&file, "hunter2-of-the-test\n").unwrap();
        let given = format!(
            "kafkas://b-1.msk:9096,b-2.msk:9096?sasl.mechanism=SCRAM-SHA-512&sasl.username=relay\
             &password-file={}&cacert=/etc/ca.pem",
            file.display()
        );
        assert_eq!(
            settings(&given),
            pairs(&[
                ("bootstrap.servers", "b-1.msk:9096,b-2.msk:9096"),
                ("sasl.mechanism", "SCRAM-SHA-512"),
                ("sasl.password", "hunter2-of-the-test"),
                ("sasl.username", "relay"),
                ("security.protocol", "sasl_ssl"),
                ("ssl.ca.location", "/etc/ca.pem"),
            ])
        );
        // Neither the URL nor the publisher shows the password, nor where it is.
        let url: BrokerUrl = given.parse().unwrap();
        let shown = "kafkas://b-1.msk:9096,b-2.msk:9096?sasl.mechanism=SCRAM-SHA-512\
                     &sasl.username=relay&password-file=***&cacert=/etc/ca.pem";
        assert_eq!(url.to_string(), shown);
        assert_eq!(format!("{url:?}"), format!("BrokerUrl({shown:?})"));
        let publisher = KafkaUrl::parse(&given).unwrap().publisher();
        assert!(
            !format!("{publisher:?}").contains("hunter2"),
            "{publisher:?}"
        );

        let parsed = KafkaUrl::parse(
            "kafka://pkc-1.confluent.cloud:9092?sasl.mechanism=plain&sasl.username=API_KEY",
        )
        .unwrap();
        assert_eq!(
            parsed.security,
            KafkaSecurity::new().sasl(
                SaslMechanism::Plain,
                "API_KEY",
                SaslPassword::env("IDEM_KAFKA_SASL_PASSWORD")
            )
        );

        let refused = |url: &str| url.parse::<BrokerUrl>().unwrap_err().to_string();
        assert_eq!(
            refused("kafkas://h:9093?sasl.mechanism=PLAIN&sasl.username=u&sasl.password=pw"),
            "the broker URL's `sasl.password`: a password in the URL would show in the process \
             list: use password-file=PATH or the environment variable IDEM_KAFKA_SASL_PASSWORD"
        );
        assert_eq!(
            refused("kafkas://h:9093?sasl.mechanism=GSSAPI&sasl.username=u"),
            "the broker URL's `sasl.mechanism`: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
        );
        assert_eq!(
            refused("kafkas://h:9093?sasl.mechanism=PLAIN"),
            "the broker URL's `sasl.mechanism`: sasl.mechanism and sasl.username go together: \
             give both or neither"
        );
        assert_eq!(
            refused("kafkas://h:9093?sasl.username=u"),
            "the broker URL's `sasl.username`: sasl.mechanism and sasl.username go together: \
             give both or neither"
        );
        assert_eq!(
            refused("kafkas://h:9093?password-file=/p"),
            "the broker URL's `password-file`: a password for SASL: give sasl.mechanism and \
             sasl.username too"
        );
        assert_eq!(
            refused("kafkas://h:9093?sasl.username=u&sasl.username=v"),
            "the broker URL's `sasl.username`: given twice"
        );
        assert_eq!(
            refused("kafkas://h:9093?sasl.username="),
            "the broker URL's `sasl.username`: empty"
        );
    }
}
