//! Jepsen-style fault tests, one per broker: messages pushed from the outbox through the broker
//! into an inbox consumer whose handler books a ledger row, while a relay process (`idem relay`'s
//! code, as `idem-fault-relay`) is SIGKILLed between publish and mark-sent, two relay processes
//! then compete, the consumer crashes after its commit and before its ack, and the broker is
//! restarted once. Each broker's test runs twice: with the outbox and the consumer's inbox on
//! PostgreSQL (`IDEM_TEST_POSTGRES_URL`), and on MySQL (`…_on_mysql`, `IDEM_TEST_MYSQL_URL`),
//! each skipped without its variable. At the end each prints a table and asserts that nothing
//! was lost, duplicated or made up, and that per-key order held. A run that fails prints what every party said: the
//! relays' output, the consumer's failures and the broker's log.
//!
//! `IDEM_FAULT_MESSAGES` sets the number of messages (default 2,000, the CI form);
//! `scripts/faults` runs the full form, 10,000.
//!
//! The brokers are the tests' own, so that restarting them disturbs no other test: a
//! `nats-server -js` on a free port with its own store, a second RabbitMQ node on free ports
//! with its own data directory, a tansu broker on a free port (the `kafka` feature) and a FIFO
//! queue on moto's SQS server (the `sqs` feature). tansu's memory storage and moto do not keep
//! their data across a restart: those two are taken away for a while instead, through a TCP
//! proxy of the test's own.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod harness;
mod journal;
#[cfg(feature = "kafka")]
mod kafka;
mod ledger;
mod nats;
mod rabbitmq;
#[cfg(feature = "sqs")]
mod sqs;
