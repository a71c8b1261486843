//! [`AdminToken`]: the bearer token that guards the admin listeners of `idem serve` and
//! `idem relay`, and the middleware that checks it.
//!
//! With a token, every admin route but `/healthz` and `/readyz` needs
//! `Authorization: Bearer <token>`; without one, the request is `401` problem+json with
//! `WWW-Authenticate: Bearer`. Probes stay open so that a load balancer or an orchestrator
//! needs no secret. An admin listener on an address that is not loopback needs a token.
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

use std::{fmt, net::SocketAddr, path::Path, sync::Arc};

use axum::{
    Router,
    extract::{Request, State},
    middleware::{self, Next},
    response::{IntoResponse, Response},
};
use http::header::AUTHORIZATION;

use crate::{
    Error,
    error::{AdminTokenError, problem::AdminRejection},
};

/// The bearer token of an admin listener.
///
/// Only its BLAKE3 hash is kept. A presented token is hashed too and the two hashes are compared
/// in constant time (`blake3::Hash`'s equality), so neither the token's bytes nor its length
/// show in response times.
#[derive(Clone)]
pub struct AdminToken(blake3::Hash);

impl AdminToken {
    /// The token in the file at `path`: its whole content, one trailing newline (`\n` or `\r\n`)
    /// ignored. It must be non-empty visible ASCII (no spaces), as a bearer token is sent.
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

/// `router` with every route requiring `token`, when there is one. Routes merged into the result
/// afterwards (the probes) are left open.
pub(crate) fn protect<S>(router: Router<S>, token: Option<AdminToken>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    match token {
        Some(token) => {
            router.route_layer(middleware::from_fn_with_state(Arc::new(token), authorize))
        }
        None => router,
    }
}

async fn authorize(State(token): State<Arc<AdminToken>>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|value| bearer(value.as_bytes()));
    match presented {
        Some(presented) if token.matches(presented) => next.run(request).await,
        _ => AdminRejection::Unauthorized.into_response(),
    }
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

    #[test]
    fn one_trailing_newline_is_ignored_and_nothing_else() {
        let token = token_in(b"abc\n").unwrap();
        assert!(token.matches(b"abc"));
        assert!(!token.matches(b"abc\n"));
        assert!(token_in(b"abc\r\n").unwrap().matches(b"abc"));
        assert!(!token_in(b"abc").unwrap().matches(b"abcd"));
        assert!(matches!(
            token_in(b"abc\n\n"),
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
            token_in(b"a b"),
            Err(Error::AdminToken(AdminTokenError::InvalidAdminToken { .. }))
        ));
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
