//! [`KafkaUrl`]: a Kafka URL (`kafka://host:port[,host:port…]`, the bootstrap servers, with
//! librdkafka's producer settings), as [`BrokerUrl`](crate::BrokerUrl) takes it.

use rdkafka::ClientConfig;

use crate::{
    BoxPublisher,
    broker::{InvalidBrokerUrl, split_query},
};

use super::KafkaPublisher;

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

/// The parameters a Kafka URL takes, as an error says them.
const KNOWN: &str = "takes client.id, linger.ms, batch.num.messages, batch.size, \
                     message.timeout.ms, message.max.bytes, queue.buffering.max.messages, \
                     queue.buffering.max.kbytes, request.timeout.ms and socket.timeout.ms";

/// A Kafka URL: the bootstrap servers, and the librdkafka settings it carries, in order. Kafka's
/// TLS is not compiled in: `cacert`, `cert` and `key` are refused like any unknown parameter.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct KafkaUrl {
    /// What follows `kafka://`, up to the query.
    servers: String,
    settings: Vec<(&'static str, String)>,
}

impl KafkaUrl {
    /// Reads `url`, whose scheme is `kafka` (in any case).
    pub(crate) fn parse(url: &str) -> Result<Self, InvalidBrokerUrl> {
        let (base, parameters) = split_query(url);
        let mut settings = Vec::new();
        for parameter in parameters {
            let name = setting(parameter.name, parameter.value, &settings)?;
            settings.push((name, parameter.value.to_owned()));
        }
        Ok(Self {
            servers: base
                .split_once("://")
                .map_or("", |(_, servers)| servers)
                .to_owned(),
            settings,
        })
    }

    /// A publisher to this broker: the destination is the topic.
    pub(crate) fn publisher(&self) -> BoxPublisher {
        BoxPublisher::new(KafkaPublisher::with_config(self.config()))
    }

    /// The librdkafka settings: its bootstrap servers and the settings it carries.
    fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.servers);
        for (name, value) in &self.settings {
            config.set(*name, value);
        }
        config
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
    use crate::BrokerUrl;

    #[test]
    fn kafka_takes_librdkafka_producer_settings_and_no_other() {
        let url = KafkaUrl::parse(
            "kafka://a:9092,b:9092?linger.ms=0&batch.num.messages=1&client.id=relay",
        )
        .unwrap();
        let config = url.config();
        assert_eq!(config.get("bootstrap.servers"), Some("a:9092,b:9092"));
        assert_eq!(config.get("linger.ms"), Some("0"));
        assert_eq!(config.get("batch.num.messages"), Some("1"));
        assert_eq!(config.get("client.id"), Some("relay"));
        let plain = KafkaUrl::parse("kafka://a:9092").unwrap();
        assert_eq!(plain.config().get("bootstrap.servers"), Some("a:9092"));
        assert_eq!(plain.config().get("linger.ms"), None);

        let known = KNOWN;
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
}
