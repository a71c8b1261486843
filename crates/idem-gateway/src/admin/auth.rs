//! [`AdminToken`]: the bearer token that guards the admin listeners of `idem serve` and
//! `idem relay`, and the middleware that checks it.
//!
//! With a token, every admin route but `/healthz` and `/readyz` needs
//! `Authorization: Bearer <token>`; without one, the request is `401` problem+json with
//! `WWW-Authenticate: Bearer`, and counted in [`UNAUTHORIZED`]. Probes stay open so that a
//! load balancer or an orchestrator needs no secret. An admin listener on an address that is
//! not loopback needs a token, of at least [`MIN_TOKEN_LEN`] characters.
//!
//! Without a token (on loopback), the routes answer only a `Host` that is a loopback name or
//! address, or one of `--admin-allowed-hosts`; any other is `421` problem+json. A web page the
//! operator opens cannot then rebind its own name to 127.0.0.1 and read the admin API through
//! the browser (DNS rebinding).
//!
//! # Examples
//!
//! ```
//! use idem_gateway::AdminToken;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("admin-token");
//! std::fs::write(&path, "s3cret-admin-token\n")?;
//! let token = AdminToken::from_file(&path)?;
//! assert_eq!(format!("{token:?}"), "AdminToken(..)");
//!
//! // Anyone may listen on loopback; elsewhere only with a token.
//! let public = "0.0.0.0:9090".parse()?;
//! assert!(AdminToken::check_listen(public, Some(&token)).is_ok());
//! assert!(AdminToken::check_listen(public, None).is_err());
//! assert!(AdminToken::check_listen("127.0.0.1:9090".parse()?, None).is_ok());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::{
    fmt,
    net::{IpAddr, SocketAddr},
    path::Path,
    sync::Arc,
};

use axum::{
    Router,
    extract::{Request, State},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use http::{
    header::{AUTHORIZATION, HOST},
    uri::Authority,
};

use crate::{
    Error,
    error::{AdminTokenError, problem::AdminRejection},
};

/// The fewest characters an admin token may have: 16 random characters are beyond guessing
/// through the listener.
pub(crate) const MIN_TOKEN_LEN: usize = 16;

/// The counter of admin requests refused for a missing or wrong token.
pub(crate) const UNAUTHORIZED: &str = "idem_admin_unauthorized_total";

/// The bearer token of an admin listener.
///
/// Only its BLAKE3 hash is kept. A presented token is hashed too and the two hashes are compared
/// in constant time (`blake3::Hash`'s equality), so neither the token's bytes nor its length
/// show in response times.
#[derive(Clone)]
pub struct AdminToken(blake3::Hash);

impl AdminToken {
    /// The token in the file at `path`: its whole content, one trailing newline (`\n` or `\r\n`)
    /// ignored. It must be visible ASCII (no spaces), as a bearer token is sent, and at least
    /// 16 characters long.
    pub fn from_file(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read(path).map_err(|source| AdminTokenError::ReadAdminToken {
            path: path.to_owned(),
            source,
        })?;
        let token = text
            .strip_suffix(b"\n")
            .map_or(&text[..], |line| line.strip_suffix(b"\r").unwrap_or(line));
        let invalid = |reason| AdminTokenError::InvalidAdminToken {
            path: path.to_owned(),
            reason,
        };
        if token.is_empty() {
            return Err(invalid("it is empty").into());
        }
        if !token.iter().all(u8::is_ascii_graphic) {
            return Err(
                invalid("a bearer token is visible ASCII without spaces, on one line").into(),
            );
        }
        if token.len() < MIN_TOKEN_LEN {
            return Err(invalid("it is shorter than 16 characters").into());
        }
        Ok(Self(blake3::hash(token)))
    }

    /// Refuses an admin listener on `addr` without a token, unless `addr` is a loopback address
    /// (`0.0.0.0` and `::` are not: they listen on every interface).
    pub fn check_listen(addr: SocketAddr, token: Option<&AdminToken>) -> Result<(), Error> {
        if token.is_none() && !addr.ip().is_loopback() {
            return Err(AdminTokenError::UnprotectedAdmin { addr }.into());
        }
        Ok(())
    }

    fn matches(&self, presented: &[u8]) -> bool {
        blake3::hash(presented) == self.0
    }
}

impl fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

/// `router` with every route requiring `token` when there is one, and otherwise answering only
/// the loopback hosts and `allowed_hosts`. Routes merged into the result afterwards (the probes)
/// are left open.
pub(crate) fn protect<S>(
    router: Router<S>,
    token: Option<AdminToken>,
    allowed_hosts: &[String],
) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    match token {
        Some(token) => {
            router.route_layer(middleware::from_fn_with_state(Arc::new(token), authorize))
        }
        None => {
            let allowed: Arc<[String]> = allowed_hosts
                .iter()
                .map(|host| host.to_ascii_lowercase())
                .collect();
            router.route_layer(middleware::from_fn_with_state(allowed, only_allowed_hosts))
        }
    }
}

async fn authorize(State(token): State<Arc<AdminToken>>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| bearer(value.as_bytes()));
    match presented {
        Some(presented) if token.matches(presented) => next.run(request).await,
        _ => {
            metrics::counter!(UNAUTHORIZED).increment(1);
            AdminRejection::Unauthorized.into_response()
        }
    }
}

async fn only_allowed_hosts(
    State(allowed): State<Arc<[String]>>,
    request: Request,
    next: Next,
) -> Response {
    // HTTP/1.1 names the host in `Host`, HTTP/2 in the URI's authority.
    let host = match request.headers().get(HOST) {
        Some(host) => host.to_str().ok(),
        None => request
            .uri()
            .authority()
            .map(|authority| authority.as_str()),
    };
    if host.is_some_and(|host| host_allowed(host, &allowed)) {
        next.run(request).await
    } else {
        AdminRejection::HostNotAllowed.into_response()
    }
}

/// Whether `host` (a `Host` value: a name or an address, with or without a port) is a loopback
/// name (`localhost`, or a name under `.localhost`), a loopback address, or one of `allowed`
/// (lowercase names, with or without a port).
fn host_allowed(host: &str, allowed: &[String]) -> bool {
    let Ok(authority) = host.parse::<Authority>() else {
        return false;
    };
    let name = authority.host().to_ascii_lowercase();
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    let loopback = bare == "localhost"
        || bare.ends_with(".localhost")
        || bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
    let full = authority.as_str().to_ascii_lowercase();
    loopback || allowed.iter().any(|a| *a == name || *a == full)
}

/// The token of an `Authorization: Bearer <token>` value (the scheme is case-insensitive).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| token.trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_in(content: &[u8]) -> Result<AdminToken, Error> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, content).unwrap();
        AdminToken::from_file(&path)
    }

    const TOKEN: &[u8] = b"0123456789abcdef";

    #[test]
    fn one_trailing_newline_is_ignored_and_nothing_else() {
        let token = token_in(b"0123456789abcdef\n").unwrap();
        assert!(token.matches(TOKEN));
        assert!(!token.matches(b"0123456789abcdef\n"));
        assert!(token_in(b"0123456789abcdef\r\n").unwrap().matches(TOKEN));
        assert!(!token_in(TOKEN).unwrap().matches(b"0123456789abcdefg"));
        assert!(matches!(
            token_in(b"0123456789abcdef\n\n"),
            Err(Error::AdminToken(AdminTokenError::InvalidAdminToken { .. }))
        ));
        assert!(matches!(
            token_in(b"\n"),
            Err(Error::AdminToken(AdminTokenError::InvalidAdminToken {
                reason: "it is empty",
                ..
            }))
        ));
        assert!(matches!(
            token_in(b"01234567 89abcdef"),
            Err(Error::AdminToken(AdminTokenError::InvalidAdminToken { .. }))
        ));
    }

    #[test]
    fn a_token_shorter_than_16_characters_is_refused() {
        assert!(matches!(
            token_in(b"0123456789abcde\n"),
            Err(Error::AdminToken(AdminTokenError::InvalidAdminToken {
                reason: "it is shorter than 16 characters",
                ..
            }))
        ));
        // Exactly 16 is enough, and it is that token.
        assert!(token_in(TOKEN).unwrap().matches(TOKEN));
    }

    #[test]
    fn without_a_token_only_loopback_and_allowed_hosts_are_answered() {
        let allowed = ["admin.internal".to_owned(), "10.0.0.7:9090".to_owned()];
        for host in [
            "localhost",
            "localhost:9090",
            "LocalHost:9090",
            "dash.localhost:9090",
            "127.0.0.1:9090",
            "127.1.2.3",
            "[::1]:9090",
            "admin.internal:9090",
            "10.0.0.7:9090",
        ] {
            assert!(host_allowed(host, &allowed), "{host}");
        }
        for host in [
            "evil.example",
            "evil.example:9090",
            "localhost.evil.example",
            "10.0.0.7:9091",
            "127.0.0.1.nip.io",
            "",
            "a b",
        ] {
            assert!(!host_allowed(host, &allowed), "{host}");
        }
    }

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer(b"Bearer abc"), Some(&b"abc"[..]));
        assert_eq!(bearer(b"bearer abc "), Some(&b"abc"[..]));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer"), None);
    }

    #[test]
    fn only_loopback_addresses_listen_without_a_token() {
        for addr in ["127.0.0.1:9090", "127.0.0.2:1", "[::1]:9090"] {
            assert!(AdminToken::check_listen(addr.parse().unwrap(), None).is_ok());
        }
        for addr in ["0.0.0.0:9090", "[::]:9090", "10.0.0.1:9090"] {
            assert!(matches!(
                AdminToken::check_listen(addr.parse().unwrap(), None),
                Err(Error::AdminToken(AdminTokenError::UnprotectedAdmin { .. }))
            ));
        }
    }
}
