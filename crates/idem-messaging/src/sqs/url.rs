//! [`SqsUrl`]: an Amazon SQS URL (`sqs://REGION[?endpoint=URL&profile=NAME&cacert=PATH]`), as
//! [`BrokerUrl`](crate::BrokerUrl) takes it.

use std::path::PathBuf;

use aws_config::BehaviorVersion;
use aws_sdk_sqs::{Client, config::Region};

use crate::broker::{InvalidBrokerUrl, split_query};

/// The parameters an SQS URL takes, as an error says them.
const KNOWN: &str = "takes endpoint, profile and cacert";

/// Where an `sqs://` URL sends: a region, and maybe an endpoint (an SQS-compatible server, a VPC
/// endpoint), a profile of the AWS configuration files to take the credentials from, and the CA
/// certificates (PEM) to trust for the endpoint besides the system's roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SqsUrl {
    pub(super) region: String,
    pub(super) endpoint: Option<String>,
    pub(super) profile: Option<String>,
    pub(super) ca: Option<PathBuf>,
}

impl SqsUrl {
    /// Reads `rest`, what follows `sqs://`.
    pub(crate) fn parse(rest: &str) -> Result<Self, InvalidBrokerUrl> {
        let (region, parameters) = split_query(rest);
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
        let mut target = Self {
            region: region.to_owned(),
            endpoint: None,
            profile: None,
            ca: None,
        };
        let mut ca = None;
        for parameter in parameters {
            let value = parameter.value;
            let (name, slot): (&'static str, _) = match parameter.name {
                "endpoint" => ("endpoint", &mut target.endpoint),
                "profile" => ("profile", &mut target.profile),
                "cacert" => ("cacert", &mut ca),
                _ => {
                    return Err(InvalidBrokerUrl::UnknownParameter {
                        name: parameter.name.to_owned(),
                        known: KNOWN,
                    });
                }
            };
            if value.is_empty() {
                return Err(InvalidBrokerUrl::InvalidParameter {
                    name,
                    reason: "empty",
                });
            }
            if name == "endpoint"
                && !(value.starts_with("https://") || value.starts_with("http://"))
            {
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
        target.ca = ca.map(PathBuf::from);
        Ok(target)
    }

    /// A client of this region, through its endpoint when given (an SQS-compatible server), with
    /// the credentials of its profile or of the usual chain, trusting its CA file besides the
    /// system's roots: the publisher's and the subscription's. Reads the CA file and loads the
    /// configuration (credentials are resolved on the first request).
    pub(super) async fn client(&self) -> Result<Client, UnreadableCaFile> {
        let ca = match &self.ca {
            Some(path) => Some(
                tokio::fs::read(path)
                    .await
                    .map_err(|source| UnreadableCaFile {
                        path: path.clone(),
                        source,
                    })?,
            ),
            None => None,
        };
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(super::https_client(ca))
            .region(Region::new(self.region.clone()));
        if let Some(endpoint) = &self.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some(profile) = &self.profile {
            loader = loader.profile_name(profile);
        }
        Ok(Client::new(&loader.load().await))
    }
}

/// The CA file an SQS URL names cannot be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the CA file {}", path.display())]
pub(super) struct UnreadableCaFile {
    path: PathBuf,
    #[source]
    source: std::io::Error,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BrokerUrl;

    #[test]
    fn sqs_takes_a_region_an_endpoint_and_a_profile() {
        assert_eq!(
            SqsUrl::parse("eu-west-1"),
            Ok(SqsUrl {
                region: "eu-west-1".into(),
                endpoint: None,
                profile: None,
                ca: None
            })
        );
        let given =
            "sqs://us-east-1?endpoint=https://sqs.internal:9324&profile=relay&cacert=/etc/ca.pem";
        assert_eq!(
            SqsUrl::parse(given.strip_prefix("sqs://").unwrap()),
            Ok(SqsUrl {
                region: "us-east-1".into(),
                endpoint: Some("https://sqs.internal:9324".into()),
                profile: Some("relay".into()),
                ca: Some("/etc/ca.pem".into())
            })
        );
        assert_eq!(given.parse::<BrokerUrl>().unwrap().to_string(), given);
    }

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
            "unknown parameter `queue` in the broker URL (takes endpoint, profile and cacert)"
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
