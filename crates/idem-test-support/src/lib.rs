//! What the tests of the workspace share: the test servers, named by `IDEM_TEST_POSTGRES_URL`,
//! `IDEM_TEST_MYSQL_URL`, `IDEM_TEST_REDIS_URL`, `IDEM_TEST_AMQP_URL`, `IDEM_TEST_NATS_URL` and `IDEM_TEST_KAFKA_URL`
//! ([`Server`]); the skip when one is not set (one line on stderr naming the variable and the
//! test); things of a test's own on them, so that tests run in parallel on one server: a
//! PostgreSQL schema, created and dropped ([`PgSchema`]), a MySQL database ([`MysqlDatabase`]), a Redis key prefix (`RedisPrefix`, the
//! `redis` feature), a JetStream stream (`NatsStream`, the `nats` feature), any other name
//! ([`unique_name`]); a free port for a server the test starts itself ([`free_port`]); and a TCP
//! proxy that takes a server away for a while ([`TcpProxy`]); and writes queued in a known order,
//! for the stores' batching tests ([`in_order`]).
//!
//! A dev-dependency only: no published crate depends on it.
//!
//! A plain `cargo test` without the variables runs the embedded suites and says what it skipped;
//! `scripts/test` and CI set them all, so nothing is skipped there.
//!
//! # Examples
//!
//! ```no_run
//! # async fn test() {
//! use idem_test_support::{PgSchema, require};
//!
//! let server = require!(Postgres); // returns from the test, saying so, without the variable
//! let schema = PgSchema::create(&server).await;
//! assert!(schema.name().starts_with("idem_test_"));
//! # }
//! ```

mod ledger;
mod mysql;
mod names;
#[cfg(feature = "nats")]
mod nats_stream;
mod port;
mod postgres;
mod proxy;
mod queued;
#[cfg(feature = "redis")]
mod redis_prefix;
mod server;

pub use ledger::Ledger;
pub use mysql::MysqlDatabase;
pub use names::unique_name;
#[cfg(feature = "nats")]
pub use nats_stream::NatsStream;
pub use port::free_port;
pub use postgres::PgSchema;
pub use proxy::TcpProxy;
pub use queued::in_order;
#[cfg(feature = "redis")]
pub use redis_prefix::RedisPrefix;
pub use server::Server;

/// The URL of a test server (`Postgres`, `Mysql`, `Redis`, `Amqp`, `Nats`, `Kafka` or `Sqs`), or returns
/// from the test after saying on stderr that it is skipped.
#[macro_export]
macro_rules! require {
    ($server:ident) => {
        match $crate::Server::$server.url() {
            Some(url) => url,
            None => return,
        }
    };
}
