//! A warning for a database connection that an attacker on the network could strip of TLS.
//!
//! The drivers' defaults, PostgreSQL's `sslmode=prefer` and MySQL's `ssl-mode=PREFERRED`, and
//! the modes below them fall back to (or stay on) plain TCP: an active attacker between the
//! gateway and a database on another host can then read and rewrite the records. The defaults
//! stay the drivers'; the gateway and the relay say so at start.

use std::net::IpAddr;

use sqlx::{
    mysql::{MySqlConnectOptions, MySqlSslMode},
    postgres::{PgConnectOptions, PgSslMode},
};

/// Logs a warning when `connect` reaches a PostgreSQL database on another host without requiring
/// TLS. `what` names the connection in the warning (`the store`, `the outbox's database`).
pub(crate) fn warn_if_downgradable(connect: &PgConnectOptions, what: &str) {
    if downgradable(connect) {
        tracing::warn!(
            host = connect.get_host(),
            sslmode = ?connect.get_ssl_mode(),
            "{what} is on another host and TLS is not required: an attacker on the network can \
             strip it (set sslmode=verify-full and sslrootcert)"
        );
    }
}

/// [`warn_if_downgradable`] for a MySQL or MariaDB database.
pub(crate) fn warn_if_mysql_downgradable(connect: &MySqlConnectOptions, what: &str) {
    if mysql_downgradable(connect) {
        tracing::warn!(
            host = connect.get_host(),
            ssl_mode = ?connect.get_ssl_mode(),
            "{what} is on another host and TLS is not required: an attacker on the network can \
             strip it (set ssl-mode=VERIFY_IDENTITY and ssl-ca)"
        );
    }
}

/// Whether `connect` may end up on plain TCP to a host that is not this one.
fn downgradable(connect: &PgConnectOptions) -> bool {
    let weak = matches!(
        connect.get_ssl_mode(),
        PgSslMode::Prefer | PgSslMode::Allow | PgSslMode::Disable
    );
    weak && !is_local(connect.get_host())
}

/// [`downgradable`] for MySQL: a Unix socket is local whatever the host says.
fn mysql_downgradable(connect: &MySqlConnectOptions) -> bool {
    let weak = matches!(
        connect.get_ssl_mode(),
        MySqlSslMode::Preferred | MySqlSslMode::Disabled
    );
    weak && connect.get_socket().is_none() && !is_local(connect.get_host())
}

/// A Unix socket (a path), `localhost`, or a loopback address.
fn is_local(host: &str) -> bool {
    host.starts_with('/')
        || host.eq_ignore_ascii_case("localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use super::*;

    fn downgradable_url(url: &str) -> bool {
        downgradable(&PgConnectOptions::from_str(url).unwrap())
    }

    #[test]
    fn a_remote_database_without_required_tls_is_downgradable() {
        for url in [
            "postgres://db.internal/pay",
            "postgres://db.internal/pay?sslmode=prefer",
            "postgres://10.0.0.5/pay?sslmode=allow",
            "postgres://db.internal/pay?sslmode=disable",
        ] {
            assert!(downgradable_url(url), "{url}");
        }
        for url in [
            "postgres://db.internal/pay?sslmode=require",
            "postgres://db.internal/pay?sslmode=verify-ca",
            "postgres://db.internal/pay?sslmode=verify-full",
            "postgres://localhost/pay",
            "postgres://127.0.0.1/pay?sslmode=disable",
            "postgres://[::1]/pay",
            "postgres:///pay?host=/var/run/postgresql",
        ] {
            assert!(!downgradable_url(url), "{url}");
        }
    }

    #[test]
    fn a_remote_mysql_database_without_required_tls_is_downgradable() {
        let downgradable =
            |url: &str| mysql_downgradable(&MySqlConnectOptions::from_str(url).unwrap());
        for url in [
            "mysql://db.internal/pay",
            "mysql://db.internal/pay?ssl-mode=PREFERRED",
            "mysql://10.0.0.5/pay?ssl-mode=DISABLED",
        ] {
            assert!(downgradable(url), "{url}");
        }
        for url in [
            "mysql://db.internal/pay?ssl-mode=REQUIRED",
            "mysql://db.internal/pay?ssl-mode=VERIFY_CA",
            "mysql://db.internal/pay?ssl-mode=VERIFY_IDENTITY",
            "mysql://localhost/pay",
            "mysql://127.0.0.1/pay?ssl-mode=DISABLED",
            "mysql://[::1]/pay",
            "mysql://db.internal/pay?socket=/run/mysqld/mysqld.sock",
        ] {
            assert!(!downgradable(url), "{url}");
        }
    }
}
