//! `idem relay`: publishes the messages of an outbox (PostgreSQL, MySQL or MariaDB, or SQLite) to
//! a broker, each confirmed by the broker before it is marked sent, until SIGTERM or SIGINT; with
//! an admin listener for `/healthz`, `/metrics` and the outbox's counts, `/v1/outbox`.
//!
//! [`RelayProcess`] is the relay as a process (a pool, the migration, the publisher chosen by a
//! [`BrokerUrl`](idem_messaging::BrokerUrl), progress in the logs and the metrics); [`run`] is
//! the command, which adds the signals, the logs and the admin listener. The relay itself, and
//! what it guarantees, are `idem_messaging`'s (see docs/messaging.md).
//!
//! # Examples
//!
//! ```no_run
//! # async fn demo() -> Result<(), idem_gateway::Error> {
//! use idem_gateway::{Cli, cli::Command, relay};
//!
//! let cli = Cli::parse_from_env_and_file([
//!     "idem", "relay", "--store", "postgres://app@db/app", "--broker", "nats://127.0.0.1:4222",
//! ])?;
//! let Command::Relay(args) = cli.command else { unreachable!() };
//! relay::run(*args).await // until SIGTERM or SIGINT
//! # }
//! ```

mod admin;
mod process;

use idem_messaging::{BoxPublisher, OutboxDatabase, OutboxOptions, Relay};

pub use process::RelayProcess;

use crate::{
    Error,
    cli::RelayArgs,
    error::StartupError,
    serve::{
        admin_server::{self, AdminBounds},
        command::{self, Started},
    },
};

/// Runs `idem relay` until SIGTERM or SIGINT, then finishes the batch in flight and returns.
///
/// Refuses an admin listener beyond loopback without a token before anything starts, as
/// `idem serve` does; fails when the admin listener cannot be bound, the database cannot be
/// reached at start, or the migration fails.
pub async fn run(args: RelayArgs) -> Result<(), Error> {
    let Started {
        token,
        shutdown,
        metrics,
        listener,
        tracing,
    } = command::start(
        args.admin_listen,
        args.admin_token_file.as_deref(),
        args.log.log_format,
        &args.log.log_level,
        args.log.otlp_endpoint.as_ref(),
        "idem-relay",
    )
    .await?;
    let outbox_probe = admin::OutboxProbe::new();
    let admin = admin_server::spawn(
        listener,
        admin::router(
            metrics,
            outbox_probe.clone(),
            token,
            &args.admin_allowed_hosts,
        ),
        AdminBounds::default(),
        shutdown.clone().cancelled_owned(),
    );

    let mut outbox = OutboxOptions::new().table(args.outbox_table.clone());
    if let Some(schema) = args.outbox_schema.clone() {
        outbox = outbox.schema(schema);
    }
    let store = args.store.clone();
    let broker = args.broker.clone();
    let (migrate, progress_interval) = (args.migrate, args.progress_interval.0);
    let args = std::sync::Arc::new(args);
    let relayed = RelayProcess::new(store, broker)
        .outbox(outbox)
        .migrate(migrate)
        .progress_interval(progress_interval)
        .relay({
            let (args, probe) = (std::sync::Arc::clone(&args), outbox_probe.clone());
            move |relay| configure(relay, &args, &probe)
        })
        .mysql_relay({
            let (args, probe) = (std::sync::Arc::clone(&args), outbox_probe.clone());
            move |relay| configure(relay, &args, &probe)
        })
        .sqlite_relay(move |relay| configure(relay, &args, &outbox_probe))
        .run(shutdown.clone().cancelled_owned())
        .await;
    shutdown.cancel();
    if let Err(error) = admin.await {
        tracing::warn!(%error, "the admin listener failed");
    }
    if let Some(tracing) = tracing {
        tracing.shutdown().await;
    }
    Ok(relayed.map_err(StartupError::Relay)?)
}

/// The relay's settings from the command line, on any database; and, now that the relay
/// has its pool, the outbox `/v1/outbox` counts.
fn configure<DB: OutboxDatabase>(
    relay: Relay<BoxPublisher, DB>,
    args: &RelayArgs,
    outbox: &admin::OutboxProbe,
) -> Relay<BoxPublisher, DB> {
    outbox.set(relay.pool().clone(), relay.outbox().clone());
    let relay = relay
        .batch_size(args.batch_size)
        .lease(args.lease.0)
        .publish_timeout(args.publish_timeout.0)
        .poll_interval(args.poll_interval.0)
        .max_attempts(args.max_attempts)
        .backoff(args.backoff.0, args.max_backoff.0)
        .ordering(args.ordering)
        .shutdown_grace(args.shutdown_timeout.0);
    match &args.relay_name {
        Some(name) => relay.name(name.clone()),
        None => relay,
    }
}
