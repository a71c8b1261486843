//! The failures of the Redis store, and how Redis errors map to [`StoreError`].

use idem_core::StoreError;
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// The error code the idem scripts raise when a record holds something they cannot read.
const CORRUPT_CODE: &str = "IDEMCORRUPT";

/// A failure of the Redis store: opening it, or a record or reply it cannot read.
///
/// [`Store`](idem_core::Store) methods report [`StoreError`]; the record variants here are the
/// sources of its [`StoreError::Corrupted`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL or the node addresses are not valid Redis connection settings.
    #[error("invalid Redis connection settings")]
    Settings(#[source] RedisError),
    /// A certificate or key file of the TLS settings could not be read.
    #[error("cannot read the TLS file {}", path.display())]
    ReadCertificate {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Redis could not be reached, or refused the connection (credentials, a node that is not
    /// part of a cluster).
    #[error("cannot connect to Redis")]
    Connect(#[source] RedisError),
    /// Redis refused the idem scripts (scripting disabled, or denied by an ACL).
    #[error("cannot load the idem scripts into Redis")]
    LoadScripts(#[source] RedisError),
    /// A record's state field holds a code this build does not know.
    #[error("a record has the unknown state {0:?}")]
    UnknownState(String),
    /// A record lacks a field its state requires.
    #[error("a {state} record has no field {field:?}")]
    MissingField {
        /// The record's state.
        state: &'static str,
        /// The missing field of the record's hash.
        field: &'static str,
    },
    /// A record field does not hold what it should (a number, a 32-byte fingerprint).
    #[error("the record field {0:?} is invalid")]
    InvalidField(&'static str),
    /// The task that sends the store's operations has stopped: the Tokio runtime the store was
    /// opened in has shut down.
    #[error("the Redis store's task has stopped: its runtime shut down")]
    Stopped,
    /// A script answered in a shape this build does not expect.
    #[error("an idem script answered with an unexpected reply")]
    UnexpectedReply,
}

impl Error {
    /// Whether Redis could not be reached at all (the connection refused or timed out), rather
    /// than reached and refusing (credentials, scripts): a failure worth trying again unchanged.
    pub fn is_unreachable(&self) -> bool {
        match self {
            Error::Connect(error) => error.is_connection_refusal() || error.is_timeout(),
            _ => false,
        }
    }
}

/// How a Redis error is reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Unavailable,
    Corrupted,
    Misconfigured,
}

/// Classifies a Redis error by its kind and server error code: a reply or record idem cannot
/// read is corruption; credentials, permissions and commands Redis refuses are configuration;
/// anything else (I/O, timeouts, a node loading, failing over or out of memory) makes the store
/// unavailable.
pub(crate) fn store_error(error: RedisError) -> StoreError {
    match classify(&error) {
        Class::Unavailable => StoreError::unavailable(error),
        Class::Corrupted => StoreError::corrupted(error),
        Class::Misconfigured => {
            let message = format!(
                "Redis refused an idem command with {} {}",
                error.code().unwrap_or("an error"),
                error.detail().unwrap_or_default()
            );
            StoreError::misconfigured(message, error)
        }
    }
}

fn classify(error: &RedisError) -> Class {
    match error.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Class::Corrupted,
        ErrorKind::AuthenticationFailed
        | ErrorKind::InvalidClientConfig
        | ErrorKind::RESP3NotSupported => Class::Misconfigured,
        ErrorKind::Server(
            ServerErrorKind::ResponseError
            | ServerErrorKind::ExecAbort
            | ServerErrorKind::NoScript
            | ServerErrorKind::CrossSlot
            | ServerErrorKind::NoPerm,
        ) => Class::Misconfigured,
        ErrorKind::Extension => match error.code() {
            Some(CORRUPT_CODE | "WRONGTYPE") => Class::Corrupted,
            Some("NOAUTH" | "WRONGPASS" | "NOPERM" | "NOSCRIPT") => Class::Misconfigured,
            _ => Class::Unavailable,
        },
        _ => Class::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(code: &str) -> RedisError {
        redis::make_extension_error(code.into(), Some("detail".into()))
    }

    #[test]
    fn errors_are_classified_by_kind_and_code() {
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(classify(&io), Class::Unavailable);
        assert_eq!(classify(&server(CORRUPT_CODE)), Class::Corrupted);
        assert_eq!(classify(&server("WRONGTYPE")), Class::Corrupted);
        assert_eq!(classify(&server("NOAUTH")), Class::Misconfigured);
        assert_eq!(classify(&server("OOM")), Class::Unavailable);
        assert_eq!(classify(&server("MISCONF")), Class::Unavailable);
        let auth = RedisError::from((ErrorKind::AuthenticationFailed, "denied"));
        assert_eq!(classify(&auth), Class::Misconfigured);
    }

    #[test]
    fn misconfiguration_keeps_the_code() {
        let StoreError::Misconfigured { message, source } = store_error(server("NOPERM")) else {
            panic!("expected Misconfigured");
        };
        assert_eq!(message, "Redis refused an idem command with NOPERM detail");
        let source = source.expect("Redis's error is the source").to_string();
        assert!(source.contains("NOPERM"), "{source}");
    }
}
