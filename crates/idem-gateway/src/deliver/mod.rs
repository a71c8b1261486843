//! `idem deliver`: consumes a broker's messages (RabbitMQ, NATS JetStream, Kafka or Amazon SQS)
//! and delivers each to an HTTP endpoint as a CloudEvent, under an `Idempotency-Key` derived
//! from the message's identity, until SIGTERM or SIGINT; with an admin listener for `/healthz`,
//! `/metrics` and a dashboard.
//!
//! [`Deliverer`] is the delivery loop (what is acknowledged when, the retries, the order, the
//! dead letters, the shutdown); [`run`] is the command, which adds the signals, the logs and
//! the admin listener. docs/messaging.md, "Delivering to HTTP: `idem deliver`", says what it
//! guarantees.
//!
//! # Examples
//!
//! ```no_run
//! # async fn demo() -> Result<(), idem_gateway::Error> {
//! use idem_gateway::{Cli, cli::Command, deliver};
//!
//! let cli = Cli::parse_from_env_and_file([
//!     "idem", "deliver", "--broker", "amqp://guest:guest@127.0.0.1:5672/%2f",
//!     "--from", "orders", "--to", "http://127.0.0.1:8080/events",
//! ])?;
//! let Command::Deliver(args) = cli.command else { unreachable!() };
//! deliver::run(*args).await // until SIGTERM or SIGINT
//! # }
//! ```

mod engine;
mod event;

use axum::{Router, routing::get};
use idem_messaging::SubscribeOptions;
use metrics_exporter_prometheus::PrometheusHandle;

pub use engine::Deliverer;
pub use event::{Answer, Attributes, Event, NoKey, key_of};

use crate::{
    AdminToken, Error,
    admin::{dashboard, protect},
    cli::DeliverArgs,
    serve::{
        admin_server::{self, AdminBounds},
        command::{self, Started},
    },
};

/// The [`Deliverer`] that `args` describe.
pub fn deliverer(args: &DeliverArgs) -> Result<Deliverer, Error> {
    let subscribe = SubscribeOptions::new(args.from.clone())
        .group(args.group.clone())
        .max_in_flight(args.max_in_flight)
        .ack_wait(args.ack_wait.0);
    let mut deliverer = Deliverer::new(args.broker.clone(), subscribe, args.to.clone())
        .key_from(args.key_from.clone())
        .attributes(Attributes {
            source: args.source.clone(),
            event_type: args.event_type.clone(),
        })
        .concurrency(usize::from(args.concurrency))
        .ordered(!args.unordered)
        .max_attempts(args.max_attempts)
        .backoff(args.backoff.0, args.max_backoff.0)
        .request_timeout(args.request_timeout.0)
        .shutdown_grace(args.shutdown_timeout.0)
        .progress_interval(args.progress_interval.0);
    if let Some(destination) = &args.dead_letter {
        deliverer = deliverer.dead_letter(destination.clone());
    }
    deliverer.check()?;
    Ok(deliverer)
}

/// Runs `idem deliver` until SIGTERM or SIGINT, then finishes the requests in flight (within
/// `--shutdown-timeout`), gives every undelivered message back to the broker, and returns.
///
/// Refuses a configuration that cannot run (Kafka without `--dead-letter`), and an admin
/// listener beyond loopback without a token, before anything starts; fails when the admin
/// listener cannot be bound. A broker that cannot be reached is tried again until it answers.
pub async fn run(args: DeliverArgs) -> Result<(), Error> {
    let deliverer = deliverer(&args)?;
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
        "idem-deliver",
    )
    .await?;
    let admin = admin_server::spawn(
        listener,
        router(metrics, token, &args.admin_allowed_hosts),
        AdminBounds::default(),
        shutdown.clone().cancelled_owned(),
    );
    tracing::info!(deliverer = ?deliverer, "idem deliver is starting");
    deliverer.run(shutdown.clone().cancelled_owned()).await;
    shutdown.cancel();
    if let Err(error) = admin.await {
        tracing::warn!(%error, "the admin listener failed");
    }
    if let Some(tracing) = tracing {
        tracing.shutdown().await;
    }
    Ok(())
}

/// The deliverer's admin routes: `/healthz` and the dashboard, open; `/metrics`, behind the
/// token when there is one.
fn router(
    metrics: PrometheusHandle,
    token: Option<AdminToken>,
    allowed_hosts: &[String],
) -> Router {
    let protected = Router::new().route(
        "/metrics",
        get(move || std::future::ready(metrics.render())),
    );
    protect(protected, token, allowed_hosts)
        .route("/healthz", get(|| async { "ok\n" }))
        .merge(dashboard::deliver())
}
