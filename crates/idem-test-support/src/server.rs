//! [`Server`]: a server the tests run against, and the variable that names it.

use std::io::Write;

/// A test server, given by its variable's URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Server {
    /// PostgreSQL: `IDEM_TEST_POSTGRES_URL`.
    Postgres,
    /// MySQL or MariaDB: `IDEM_TEST_MYSQL_URL`.
    Mysql,
    /// Redis: `IDEM_TEST_REDIS_URL`.
    Redis,
    /// RabbitMQ: `IDEM_TEST_AMQP_URL`.
    Amqp,
    /// NATS with JetStream: `IDEM_TEST_NATS_URL`.
    Nats,
    /// A Kafka-protocol broker: `IDEM_TEST_KAFKA_URL`, its bootstrap servers (`host:port`).
    Kafka,
    /// An SQS-compatible server's endpoint (moto's): `IDEM_TEST_SQS_URL`.
    Sqs,
}

impl Server {
    /// The variable that holds the server's URL.
    pub const fn variable(self) -> &'static str {
        match self {
            Self::Postgres => "IDEM_TEST_POSTGRES_URL",
            Self::Mysql => "IDEM_TEST_MYSQL_URL",
            Self::Redis => "IDEM_TEST_REDIS_URL",
            Self::Amqp => "IDEM_TEST_AMQP_URL",
            Self::Nats => "IDEM_TEST_NATS_URL",
            Self::Kafka => "IDEM_TEST_KAFKA_URL",
            Self::Sqs => "IDEM_TEST_SQS_URL",
        }
    }

    /// The server's URL, or `None` after saying on stderr that the running test is skipped:
    /// `skipped: IDEM_TEST_POSTGRES_URL is not set (store::a_lease_expires)`.
    pub fn url(self) -> Option<String> {
        let url = self.configured();
        if url.is_none() {
            // Straight to the process's stderr: the test harness captures `eprintln!`.
            let line = match running_test() {
                Some(test) => format!("skipped: {} is not set ({test})\n", self.variable()),
                None => format!("skipped: {} is not set\n", self.variable()),
            };
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
        url
    }

    /// The server's URL, or `None` when its variable is not set or empty; says nothing.
    pub fn configured(self) -> Option<String> {
        std::env::var(self.variable())
            .ok()
            .filter(|url| !url.is_empty())
    }
}

/// `suite::module::test`: the test binary's name and the test's (the harness names each test's
/// thread after it); the binary's alone outside a test thread (a benchmark, a custom harness).
fn running_test() -> Option<String> {
    let binary = std::env::args_os().next().and_then(|path| {
        let stem = std::path::Path::new(&path)
            .file_stem()?
            .to_str()?
            .to_owned();
        // Cargo names a test binary `NAME-HASH`.
        Some(match stem.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => stem,
        })
    });
    let thread = std::thread::current();
    let test = thread.name().filter(|name| *name != "main");
    match (binary, test) {
        (Some(binary), Some(test)) => Some(format!("{binary}::{test}")),
        (Some(binary), None) => Some(binary),
        (None, test) => test.map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_server_has_its_variable() {
        assert_eq!(Server::Postgres.variable(), "IDEM_TEST_POSTGRES_URL");
        assert_eq!(Server::Mysql.variable(), "IDEM_TEST_MYSQL_URL");
        assert_eq!(Server::Redis.variable(), "IDEM_TEST_REDIS_URL");
        assert_eq!(Server::Amqp.variable(), "IDEM_TEST_AMQP_URL");
        assert_eq!(Server::Nats.variable(), "IDEM_TEST_NATS_URL");
        assert_eq!(Server::Kafka.variable(), "IDEM_TEST_KAFKA_URL");
        assert_eq!(Server::Sqs.variable(), "IDEM_TEST_SQS_URL");
    }

    #[test]
    fn the_running_test_is_named_with_its_binary() {
        let test = running_test().unwrap();
        assert!(test.starts_with("idem_test_support::"), "{test}");
        assert!(
            test.ends_with("::tests::the_running_test_is_named_with_its_binary"),
            "{test}"
        );
    }
}
