//! [`NatsUrl`]: a NATS URL (`nats://host:port`, several comma-separated; `tls://…` over TLS), as
//! [`BrokerUrl`](crate::BrokerUrl) takes it.

use crate::{
    BoxPublisher, Error, SubscribeOptions, Subscription,
    broker::{InvalidBrokerUrl, TlsFiles, TlsParameters, split_query},
};

use super::{NatsPublisher, subscription};

/// The parameters a NATS URL takes, as an error says them.
const KNOWN: &str = "takes cacert, cert and key";

/// A NATS URL: what async-nats is given (the URL without its query), and the TLS files. Any of
/// them makes TLS required; any other parameter is refused.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct NatsUrl {
    /// What async-nats is given: the URL without idem's TLS parameters.
    endpoint: String,
    tls: TlsFiles,
}

impl NatsUrl {
    /// Reads `url`, whose scheme is `nats` or `tls` (in any case).
    pub(crate) fn parse(url: &str) -> Result<Self, InvalidBrokerUrl> {
        let (base, parameters) = split_query(url);
        let mut tls = TlsParameters::default();
        for parameter in parameters {
            if !tls.take(parameter)? {
                return Err(InvalidBrokerUrl::UnknownParameter {
                    name: parameter.name.to_owned(),
                    known: KNOWN,
                });
            }
        }
        Ok(Self {
            endpoint: base.to_owned(),
            tls: tls.files()?,
        })
    }

    /// A publisher to this broker: the destination is the subject.
    pub(crate) fn publisher(&self) -> BoxPublisher {
        BoxPublisher::new(NatsPublisher::new(self.endpoint.clone()).tls_files(self.tls.clone()))
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
    fn nats_takes_the_tls_files_out_of_the_url() {
        let given = "tls://app:pw@nats.internal:4222?cacert=/etc/ca.pem";
        let url = NatsUrl::parse(given).unwrap();
        assert_eq!(url.endpoint, "tls://app:pw@nats.internal:4222");
        assert_eq!(url.tls, TlsFiles::named(Some("/etc/ca.pem"), None));
        assert_eq!(
            given.parse::<BrokerUrl>().unwrap().to_string(),
            "tls://app:***@nats.internal:4222?cacert=/etc/ca.pem"
        );

        let given = "nats://a:4222,b:4222?cert=/c.pem&key=/k.pem&cacert=/ca.pem";
        let url = NatsUrl::parse(given).unwrap();
        assert_eq!(url.endpoint, "nats://a:4222,b:4222");
        assert_eq!(
            url.tls,
            TlsFiles::named(Some("/ca.pem"), Some(("/c.pem", "/k.pem")))
        );
        assert_eq!(
            given.parse::<BrokerUrl>().unwrap().as_str(),
            "nats://a:4222,b:4222?cert=/c.pem&key=/k.pem&cacert=/ca.pem"
        );

        let plain = NatsUrl::parse("nats://h:4222").unwrap();
        assert_eq!(plain.endpoint, "nats://h:4222");
        assert_eq!(plain.tls, TlsFiles::default());
    }

    #[test]
    fn bad_parameters_are_refused_with_what_is_known() {
        let error = |url: &str| url.parse::<BrokerUrl>().unwrap_err();
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
            error("tls://h?cert=/c.pem").to_string(),
            "the broker URL's `cert`: cert and key go together: give both or neither"
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
}
