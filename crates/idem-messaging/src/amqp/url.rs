//! [`AmqpUrl`]: a RabbitMQ URL (`amqp://user:password@host:port/vhost`, `amqps://…` over TLS),
//! as [`BrokerUrl`](crate::BrokerUrl) takes it.

use crate::{
    BoxPublisher, Error, SubscribeOptions, Subscription,
    broker::{InvalidBrokerUrl, TlsFiles, TlsParameters, split_query},
};

use super::{AmqpPublisher, subscription};

/// The parameters of RabbitMQ URLs that lapin reads, passed on to it.
const AMQP_PARAMETERS: [&str; 5] = [
    "frame_max",
    "channel_max",
    "heartbeat",
    "connection_timeout",
    "auth_mechanism",
];

/// The parameters a RabbitMQ URL takes, as an error says them.
const KNOWN: &str = "takes cacert, cert and key with amqps://, and frame_max, channel_max, \
                     heartbeat, connection_timeout and auth_mechanism";

/// A RabbitMQ URL: what lapin is given (the URL with lapin's parameters, without idem's TLS
/// ones), and the TLS files. The TLS parameters need `amqps://`; any parameter that neither idem
/// nor lapin reads is refused.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct AmqpUrl {
    /// What lapin is given: the URL without idem's TLS parameters.
    endpoint: String,
    tls: TlsFiles,
}

impl AmqpUrl {
    /// Reads `url`, whose scheme is `amqp` or `amqps` (in any case).
    pub(crate) fn parse(url: &str) -> Result<Self, InvalidBrokerUrl> {
        let (base, parameters) = split_query(url);
        let mut tls = TlsParameters::default();
        let mut kept = Vec::new();
        for parameter in parameters {
            if tls.take(parameter)? {
                continue;
            }
            if !AMQP_PARAMETERS.contains(&parameter.name) {
                return Err(InvalidBrokerUrl::UnknownParameter {
                    name: parameter.name.to_owned(),
                    known: KNOWN,
                });
            }
            kept.push(parameter.text);
        }
        let tls = tls.files()?;
        let plain = url
            .split_once("://")
            .is_some_and(|(scheme, _)| scheme.eq_ignore_ascii_case("amqp"));
        if plain && tls.any() {
            return Err(InvalidBrokerUrl::InvalidParameter {
                name: if tls.ca.is_some() { "cacert" } else { "cert" },
                reason: "a TLS setting: use amqps://",
            });
        }
        let endpoint = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        Ok(Self { endpoint, tls })
    }

    /// A publisher to this broker, to the default exchange (the destination is the queue).
    pub(crate) fn publisher(&self) -> BoxPublisher {
        BoxPublisher::new(AmqpPublisher::new(self.endpoint.clone()).tls_files(self.tls.clone()))
    }

    /// Subscribes to this broker: see [`BrokerUrl::subscribe`](crate::BrokerUrl::subscribe)
    /// and the [module](super)'s docs.
    pub(crate) async fn subscribe(&self, options: SubscribeOptions) -> Result<Subscription, Error> {
        subscription::subscribe(&self.endpoint, &self.tls, &options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BrokerUrl;

    #[test]
    fn amqps_keeps_lapins_parameters_and_takes_the_tls_files() {
        let given = "amqps://u:pw@rabbit:5671/%2f?heartbeat=10&cacert=/ca.pem&auth_mechanism=plain";
        let url = AmqpUrl::parse(given).unwrap();
        assert_eq!(
            url.endpoint,
            "amqps://u:pw@rabbit:5671/%2f?heartbeat=10&auth_mechanism=plain"
        );
        assert_eq!(url.tls, TlsFiles::named(Some("/ca.pem"), None));
        assert_eq!(
            given.parse::<BrokerUrl>().unwrap().to_string(),
            "amqps://u:***@rabbit:5671/%2f?heartbeat=10&cacert=/ca.pem&auth_mechanism=plain"
        );
        let url = AmqpUrl::parse("amqps://rabbit/%2f?cert=/c.pem&key=/k.pem").unwrap();
        assert_eq!(url.endpoint, "amqps://rabbit/%2f");
        assert_eq!(url.tls, TlsFiles::named(None, Some(("/c.pem", "/k.pem"))));
        let url = AmqpUrl::parse("amqp://rabbit/%2f?connection_timeout=500").unwrap();
        assert_eq!(url.endpoint, "amqp://rabbit/%2f?connection_timeout=500");
    }

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
            error("amqps://h?verify=none").to_string(),
            "unknown parameter `verify` in the broker URL (takes cacert, cert and key with \
             amqps://, and frame_max, channel_max, heartbeat, connection_timeout and \
             auth_mechanism)"
        );
        assert_eq!(
            error("amqps://h?key=/k.pem"),
            InvalidBrokerUrl::InvalidParameter {
                name: "key",
                reason: "cert and key go together: give both or neither"
            }
        );
    }
}
