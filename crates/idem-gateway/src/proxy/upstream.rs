//! [`Upstream`]: the service the gateway forwards to.

use std::{fmt, str::FromStr};

use http::{Uri, uri::Authority};

use crate::error::UpstreamError;

/// The upstream's address: `http://HOST[:PORT]`. The request's path and query are kept as the
/// client sent them.
///
/// # Examples
///
/// ```
/// use idem_gateway::Upstream;
///
/// let upstream: Upstream = "http://127.0.0.1:3000".parse()?;
/// assert_eq!(upstream.authority().as_str(), "127.0.0.1:3000");
/// assert!("https://api.example.com".parse::<Upstream>().is_err());
/// # Ok::<(), idem_gateway::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    authority: Authority,
}

impl Upstream {
    /// The upstream at `http://ADDR`, for a service started in-process.
    pub fn http(addr: std::net::SocketAddr) -> Self {
        let authority = addr
            .to_string()
            .parse()
            .expect("a socket address is a valid authority");
        Self { authority }
    }

    /// The host and port that requests go to, and the `Host` they carry.
    pub fn authority(&self) -> &Authority {
        &self.authority
    }

    /// The upstream URI for a request's path and query (`/` when it has none).
    pub fn uri_for(&self, path_and_query: Option<&http::uri::PathAndQuery>) -> Uri {
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(http::uri::Scheme::HTTP);
        parts.authority = Some(self.authority.clone());
        parts.path_and_query = Some(
            path_and_query
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
        );
        Uri::from_parts(parts).expect("scheme, authority and path make a valid URI")
    }
}

impl Upstream {
    /// The origin-form URI of a request's path and query (`/` when it has none), as HTTP/1.1
    /// sends it with the authority in `Host`.
    pub(crate) fn origin_form(&self, path_and_query: Option<&http::uri::PathAndQuery>) -> Uri {
        let mut parts = http::uri::Parts::default();
        parts.path_and_query = Some(
            path_and_query
                .cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
        );
        Uri::from_parts(parts).expect("a path alone makes a valid URI")
    }

    /// The host (an IPv6 address without its brackets) and port to connect to; port 80 when
    /// the URL names none.
    pub(crate) fn host_and_port(&self) -> (&str, u16) {
        let host = self.authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        (host, self.authority.port_u16().unwrap_or(80))
    }
}

impl FromStr for Upstream {
    type Err = UpstreamError;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let invalid = |reason| UpstreamError::InvalidUpstream {
            url: url.to_owned(),
            reason,
        };
        let uri: Uri = url
            .parse()
            .map_err(|_| invalid("expected http://HOST[:PORT]"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some("https") => {
                return Err(invalid(
                    "https upstreams are not supported; the gateway speaks plain HTTP/1.1 or h2c to its upstream",
                ));
            }
            _ => return Err(invalid("expected http://HOST[:PORT]")),
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(invalid(
                "the upstream URL takes no path or query; requests keep their own",
            ));
        }
        let authority = uri
            .authority()
            .cloned()
            .ok_or_else(|| invalid("expected http://HOST[:PORT]"))?;
        if authority.as_str().contains('@') {
            return Err(invalid("the upstream URL takes no user information"));
        }
        Ok(Self { authority })
    }
}

impl fmt::Display for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}", self.authority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_request_path_and_query() {
        let upstream: Upstream = "http://localhost:3000/".parse().unwrap();
        let pq = "/v1/charges?expand=customer".parse().unwrap();
        assert_eq!(
            upstream.uri_for(Some(&pq)).to_string(),
            "http://localhost:3000/v1/charges?expand=customer"
        );
        assert_eq!(upstream.uri_for(None).to_string(), "http://localhost:3000/");
        assert_eq!(upstream.to_string(), "http://localhost:3000");
        let local = Upstream::http("127.0.0.1:8081".parse().unwrap());
        assert_eq!(local.to_string(), "http://127.0.0.1:8081");
        let v6 = Upstream::http("[::1]:8081".parse().unwrap());
        assert_eq!(v6.authority().as_str(), "[::1]:8081");
        assert_eq!(v6.host_and_port(), ("::1", 8081));
        assert_eq!(upstream.host_and_port(), ("localhost", 3000));
        let default_port: Upstream = "http://api.internal".parse().unwrap();
        assert_eq!(default_port.host_and_port(), ("api.internal", 80));
        assert_eq!(
            upstream.origin_form(Some(&pq)).to_string(),
            "/v1/charges?expand=customer"
        );
        assert_eq!(upstream.origin_form(None).to_string(), "/");
    }

    #[test]
    fn refuses_what_it_cannot_forward_to() {
        for bad in [
            "localhost:3000",
            "https://a",
            "http://a/prefix",
            "http://u:p@a",
            "ftp://a",
            "",
        ] {
            assert!(bad.parse::<Upstream>().is_err(), "{bad:?}");
        }
    }
}
