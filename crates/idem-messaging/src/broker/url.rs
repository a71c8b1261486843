//! What the brokers' URLs share: their error, [`InvalidBrokerUrl`]; a query's parameters; idem's
//! TLS parameters (`cacert`, `cert`, `key`); and the URL shown with its password hidden. Each
//! broker reads its own URL in its module (`amqp::url`, `nats::url`, `kafka::url`, `sqs::url`);
//! [`BrokerUrl`](crate::BrokerUrl) only picks the broker by the scheme.

/// Why a string is not a [`BrokerUrl`](crate::BrokerUrl).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidBrokerUrl {
    /// The URL has no `scheme://`, or one that names no broker.
    #[error(
        "a broker URL starts with amqp://, amqps://, nats://, tls://, kafka://, kafkas:// or sqs://; got \
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

/// One parameter of a URL's query, taken as given (not percent-decoded).
#[cfg(any(feature = "amqp", feature = "nats", feature = "kafka", feature = "sqs"))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parameter<'a> {
    /// The parameter as it is written: `name=value`, or `name` alone.
    pub(crate) text: &'a str,
    /// What comes before its `=`.
    pub(crate) name: &'a str,
    /// What comes after its `=`: empty if there is none.
    pub(crate) value: &'a str,
}

/// `url` split at its first `?`: what comes before, and the parameters after, in order (empty
/// ones, as in `a=1&&b=2`, left out). A URL without `?` has no parameters.
#[cfg(any(feature = "amqp", feature = "nats", feature = "kafka", feature = "sqs"))]
pub(crate) fn split_query(url: &str) -> (&str, impl Iterator<Item = Parameter<'_>>) {
    let (base, query) = url.split_once('?').unwrap_or((url, ""));
    let parameters = query
        .split('&')
        .filter(|text| !text.is_empty())
        .map(|text| {
            let (name, value) = text.split_once('=').unwrap_or((text, ""));
            Parameter { text, name, value }
        });
    (base, parameters)
}

/// idem's TLS parameters of a URL, taken one by one from its query: `cacert=PATH` (the CA
/// certificates), `cert=PATH&key=PATH` (a client certificate and its key).
#[cfg(any(feature = "amqp", feature = "nats", feature = "kafka"))]
#[derive(Debug, Default)]
pub(crate) struct TlsParameters {
    ca: Option<std::path::PathBuf>,
    cert: Option<std::path::PathBuf>,
    key: Option<std::path::PathBuf>,
}

#[cfg(any(feature = "amqp", feature = "nats", feature = "kafka"))]
impl TlsParameters {
    /// Takes `parameter` if it is one of the TLS parameters (`Ok(true)`), refusing an empty path
    /// and a parameter given twice; `Ok(false)` if it is another.
    pub(crate) fn take(&mut self, parameter: Parameter<'_>) -> Result<bool, InvalidBrokerUrl> {
        let (name, slot): (&'static str, _) = match parameter.name {
            "cacert" => ("cacert", &mut self.ca),
            "cert" => ("cert", &mut self.cert),
            "key" => ("key", &mut self.key),
            _ => return Ok(false),
        };
        if parameter.value.is_empty() {
            return Err(InvalidBrokerUrl::InvalidParameter {
                name,
                reason: "an empty path",
            });
        }
        if slot.replace(parameter.value.into()).is_some() {
            return Err(InvalidBrokerUrl::InvalidParameter {
                name,
                reason: "given twice",
            });
        }
        Ok(true)
    }

    /// The files taken: a client certificate goes with its key.
    pub(crate) fn files(self) -> Result<super::TlsFiles, InvalidBrokerUrl> {
        let client = match (self.cert, self.key) {
            (Some(cert), Some(key)) => Some((cert, key)),
            (None, None) => None,
            (cert, _) => {
                return Err(InvalidBrokerUrl::InvalidParameter {
                    name: if cert.is_some() { "cert" } else { "key" },
                    reason: "cert and key go together: give both or neither",
                });
            }
        };
        Ok(super::TlsFiles {
            ca: self.ca,
            client,
        })
    }
}

/// `url` as logs and messages show it: the password of its user information, a user
/// information without a password (NATS reads it as a token), and the value of every parameter
/// whose name has `password`, `passwd`, `secret` or `token` in it, replaced by `***`.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => format!("***@{host}"),
        },
        None => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, _)) if is_secret(name) => format!("{name}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", pairs.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// Whether a parameter named `name` holds a secret.
fn is_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "passwd", "secret", "token"]
        .iter()
        .any(|secret| name.contains(secret))
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
        assert_eq!(redacted("nats://s3cr3t@host:4222"), "nats://***@host:4222");
        assert_eq!(
            redacted("kafka://user:pw@b1:9092,b2:9092?sasl_password=pw&topic=t"),
            "kafka://user:***@b1:9092,b2:9092?sasl_password=***&topic=t"
        );
        assert_eq!(
            redacted("sqs://eu-west-1?endpoint=http://h&secret_access_key=k&session_token=t"),
            "sqs://eu-west-1?endpoint=http://h&secret_access_key=***&session_token=***"
        );
        assert_eq!(redacted("nats://host:4222"), "nats://host:4222");
        assert_eq!(redacted("a:b@c"), "a:b@c");
        assert_eq!(
            redacted("amqp://u:p@ss@host/vhost"),
            "amqp://u:***@host/vhost"
        );
    }
}
