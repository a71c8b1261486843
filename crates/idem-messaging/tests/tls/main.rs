//! The relay's brokers over TLS, each a server of the test's own on free loopback ports with
//! certificates made for the test: a wrong CA is refused with the certificate's problem, the
//! right one carries a message from the outbox to the broker.
//!
//! Like the other broker tests, each needs `IDEM_TEST_POSTGRES_URL` (the outbox) and its
//! broker's variable (`IDEM_TEST_NATS_URL`, `IDEM_TEST_AMQP_URL`), and is skipped without them:
//! the variables say the machine has the servers' programs.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod certificates;
#[path = "../common/mod.rs"]
mod common;
mod nats;
mod rabbitmq;

use std::time::Duration;

use idem_messaging::{BrokerUrl, Outbox, OutboxMessage, Publisher, Relay};

use common::{TestSchema, chain};

/// Why publishing one message through `url`'s publisher fails: the error chain.
async fn refusal(url: &str) -> String {
    let url: BrokerUrl = url.parse().unwrap();
    let envelope = idem_messaging::Envelope::new(
        "refused-1".parse().unwrap(),
        OutboxMessage::new("idem_tls.refused", "x"),
        1,
    );
    let outcome = tokio::time::timeout(Duration::from_secs(30), url.publisher().publish(&envelope))
        .await
        .expect("the publisher answers");
    chain(&outcome.expect_err("the connection is refused"))
}

/// Asserts that a server that asks for a client certificate refused a client without one: the
/// client reads the server's TLS `alert`, or, when the server's close overtakes the alert, sees
/// the connection reset.
fn assert_refused_without_a_client_certificate(refused: &str, alert: &str) {
    let expected = [
        format!("the broker is unavailable: IO error: received fatal alert: {alert}"),
        "the broker is unavailable: IO error: Connection reset by peer (os error 104)".to_owned(),
    ];
    assert!(expected.iter().any(|e| e == refused), "{refused}");
}

/// Enqueues one message to `destination` in a fresh outbox, and relays one batch through
/// `url`: the message's id, once the broker confirmed it.
async fn relay_one(schema: &TestSchema, url: &str, destination: &str) -> String {
    let outbox: Outbox = schema.outbox().await;
    let mut tx = schema.pool.begin().await.unwrap();
    let id = outbox
        .enqueue(&mut tx, OutboxMessage::new(destination, "over TLS"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let url: BrokerUrl = url.parse().unwrap();
    let relay = Relay::new(schema.pool.clone(), outbox.clone(), url.publisher());
    let report = relay.run_once().await.unwrap();
    assert_eq!((report.claimed, report.published), (1, 1), "{report:?}");
    assert_eq!(outbox.pending(&schema.pool).await.unwrap(), 0);
    id.as_str().to_owned()
}
