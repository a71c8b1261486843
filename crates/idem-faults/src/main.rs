//! The relay process of the fault tests (`tests/faults`): `idem relay`'s [`RelayProcess`],
//! configured from the environment, that says on stdout what the broker confirmed and can be told
//! to stop dead right after a batch's confirmations, before it marks the messages sent, for the
//! test to SIGKILL it.
//!
//! | variable | meaning |
//! | --- | --- |
//! | `IDEM_STORE` | the PostgreSQL or MySQL URL (required) |
//! | `IDEM_BROKER` | the broker URL (required) |
//! | `IDEM_OUTBOX_SCHEMA` | the outbox's schema (default `public`) |
//! | `IDEM_RELAY_NAME` | the relay's name |
//! | `IDEM_RELAY_BATCH_SIZE`, `IDEM_RELAY_LEASE_MS`, `IDEM_RELAY_POLL_MS` | its settings |
//! | `IDEM_RELAY_ORDERING` | `1` for per-key ordering |
//! | `IDEM_FAULT_HALT_AFTER` | after this many confirmed batches, print `halted` and hang |
//!
//! Each batch with confirmations prints `confirmed <count>`. SIGTERM stops it gracefully.

use std::{
    io::Write,
    sync::atomic::{AtomicU32, Ordering},
    time::Duration,
};

use idem_gateway::{relay::RelayProcess, shutdown_signal};
use idem_messaging::{
    BoxPublisher, Confirmations, Envelope, OutboxDatabase, OutboxOptions, Publisher, Relay,
};

/// Reports confirmations on stdout; hangs after the `halt_after`th confirmed batch.
struct Reporting {
    inner: BoxPublisher,
    halt_after: Option<u32>,
    batches: AtomicU32,
}

impl Publisher for Reporting {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        let confirmations = self.inner.publish_batch(batch).await;
        let confirmed = confirmations.iter().filter(|c| c.is_ok()).count();
        if confirmed > 0 {
            say(&format!("confirmed {confirmed}"));
            let batches = self.batches.fetch_add(1, Ordering::SeqCst) + 1;
            if self.halt_after == Some(batches) {
                // Confirmed by the broker, not yet marked sent: the test kills us here.
                say("halted");
                std::future::pending::<()>().await;
            }
        }
        confirmations
    }
}

fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

type BoxError = Box<dyn std::error::Error>;

/// The relay's settings, from the environment.
#[derive(Clone)]
struct Settings {
    name: Option<String>,
    batch_size: Option<u32>,
    lease: Option<u64>,
    poll: Option<u64>,
    ordering: bool,
}

impl Settings {
    fn apply<DB: OutboxDatabase>(
        self,
        mut relay: Relay<BoxPublisher, DB>,
    ) -> Relay<BoxPublisher, DB> {
        if let Some(name) = self.name {
            relay = relay.name(name);
        }
        if let Some(size) = self.batch_size {
            relay = relay.batch_size(size);
        }
        if let Some(lease) = self.lease {
            relay = relay.lease(Duration::from_millis(lease));
        }
        if let Some(poll) = self.poll {
            relay = relay.poll_interval(Duration::from_millis(poll));
        }
        relay
            .ordering(self.ordering)
            .max_attempts(1000)
            .backoff(Duration::from_millis(50), Duration::from_secs(1))
            .publish_timeout(Duration::from_secs(5))
            .shutdown_grace(Duration::from_secs(2))
    }
}

fn number<T: std::str::FromStr>(name: &str) -> Result<Option<T>, BoxError> {
    var(name)
        .map(|value| {
            value
                .parse()
                .map_err(|_| format!("{name}: not a number: {value}").into())
        })
        .transpose()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    // Warnings (a publish that failed, a claim lost) on stdout, which the test forwards.
    let filter = var("IDEM_FAULT_LOG").unwrap_or_else(|| "warn".into());
    idem_gateway::serve::logging::init(idem_gateway::serve::logging::LogFormat::Text, &filter)?;
    let store = var("IDEM_STORE").ok_or("IDEM_STORE is not set")?;
    let broker: idem_messaging::BrokerUrl = var("IDEM_BROKER")
        .ok_or("IDEM_BROKER is not set")?
        .parse()?;
    let mut outbox = OutboxOptions::new();
    if let Some(schema) = var("IDEM_OUTBOX_SCHEMA") {
        outbox = outbox.schema(schema.parse()?);
    }
    let settings = Settings {
        name: var("IDEM_RELAY_NAME"),
        batch_size: number("IDEM_RELAY_BATCH_SIZE")?,
        lease: number("IDEM_RELAY_LEASE_MS")?,
        poll: number("IDEM_RELAY_POLL_MS")?,
        ordering: var("IDEM_RELAY_ORDERING").as_deref() == Some("1"),
    };
    let halt_after: Option<u32> = number("IDEM_FAULT_HALT_AFTER")?;

    // Installed first, so that a SIGTERM sent as soon as the relay starts is not lost.
    let shutdown = shutdown_signal();
    RelayProcess::new(store, broker)
        .outbox(outbox)
        .wrap_publisher(move |inner| {
            BoxPublisher::new(Reporting {
                inner,
                halt_after,
                batches: AtomicU32::new(0),
            })
        })
        .relay({
            let settings = settings.clone();
            move |relay| settings.apply(relay)
        })
        .mysql_relay(move |relay| settings.apply(relay))
        .run(shutdown)
        .await?;
    Ok(())
}
