//! `idem`: the command line. Parses, sets up logging and runs; errors are one line on stderr.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::error::ErrorKind;
use idem_gateway::{
    AdminToken, Cli, ConfigError, Error,
    cli::{Command, RelayArgs},
    demo, keys, logging, migrate, relay_admin,
};

/// glibc's allocator grows and trims its per-thread heaps with a system call every request or two
/// under load; mimalloc keeps them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = match Cli::parse_from_env_and_file(std::env::args_os()) {
        Ok(cli) => cli,
        Err(Error::Config(ConfigError::Cli(error))) => return clap_failure(&error),
        Err(error) => return failure(&anyhow::Error::new(error)),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
    {
        Ok(runtime) => runtime,
        Err(error) => return failure(&error),
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => failure(&error),
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Demo(args) => {
            let report = demo::run(args).await?;
            let tally = report.with_gateway;
            if tally.duplicates > 0 || tally.missing > 0 {
                anyhow::bail!(
                    "{} duplicate and {} missing charges through idem",
                    tally.duplicates,
                    tally.missing
                );
            }
            Ok(())
        }
        Command::Serve(args) => Ok(idem_gateway::serve(&args).await?),
        Command::Relay(args) => relay(*args).await,
        Command::Keys(command) => {
            println!("{}", keys::run(command).await?);
            Ok(())
        }
        Command::Migrate(args) => {
            println!("{}", migrate::run(&args.store.store).await?);
            Ok(())
        }
        _ => unreachable!("every subcommand is handled"),
    }
}

/// Runs a transactional outbox's relay until SIGTERM or SIGINT, with /healthz and /metrics.
async fn relay(args: RelayArgs) -> anyhow::Result<()> {
    use std::future::IntoFuture as _;

    use idem_messaging::{OutboxOptions, RelayProcess};
    use tokio_util::sync::CancellationToken;

    // Refused before anything starts, as `serve` does.
    let token = args
        .admin_token_file
        .as_deref()
        .map(AdminToken::from_file)
        .transpose()?;
    AdminToken::check_listen(args.admin_listen, token.as_ref())?;
    logging::init(args.log_format, &args.log_level)?;
    // Installed first, so that a signal sent as soon as the relay starts is not lost.
    let signal = idem_gateway::shutdown_signal();
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            signal.await;
            shutdown.cancel();
        }
    });

    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .context("cannot install the metrics recorder")?;
    let admin = relay_admin::router(metrics, token);
    let listener = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("cannot listen on {}", args.admin_listen))?;
    tracing::info!(admin = %args.admin_listen, "the admin endpoints are listening");
    let admin = tokio::spawn(
        axum::serve(listener, admin)
            .with_graceful_shutdown(shutdown.clone().cancelled_owned())
            .into_future(),
    );

    let outbox = OutboxOptions::new()
        .schema(args.outbox_schema.clone())
        .table(args.outbox_table.clone());
    RelayProcess::new(args.store.clone(), args.broker.clone())
        .outbox(outbox)
        .migrate(args.migrate)
        .progress_interval(args.progress_interval.0)
        .relay(move |relay| {
            let relay = relay
                .batch_size(args.batch_size)
                .lease(args.lease.0)
                .publish_timeout(args.publish_timeout.0)
                .poll_interval(args.poll_interval.0)
                .max_attempts(args.max_attempts)
                .backoff(args.backoff.0, args.max_backoff.0)
                .ordering(args.ordering)
                .shutdown_grace(args.shutdown_timeout.0);
            match args.relay_name {
                Some(name) => relay.name(name),
                None => relay,
            }
        })
        .run(shutdown.clone())
        .await?;
    shutdown.cancel();
    admin.await.context("the admin listener panicked")??;
    Ok(())
}

/// Prints `error: <msg>: <cause>…` on one line; exits 2 for a refused setting, else 1.
fn failure(error: &anyhow::Error) -> ExitCode {
    eprintln!("error: {}", one_line(&causes(error)));
    ExitCode::from(error.downcast_ref::<Error>().map_or(1, Error::exit_code))
}

/// The error and its causes, joined by `: `. Drivers often put their cause in their own message
/// too (sqlx's "error communicating with database: Connection refused"): a cause the message
/// before it already ends with is said once.
fn causes(error: &anyhow::Error) -> String {
    let mut message = String::new();
    for cause in error.chain() {
        let text = cause.to_string();
        if message.ends_with(&text) {
            continue;
        }
        if !message.is_empty() {
            message.push_str(": ");
        }
        message.push_str(&text);
    }
    message
}

/// Help and version go to stdout with success; a refused command line is one line on stderr.
fn clap_failure(error: &clap::Error) -> ExitCode {
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    // Clap's own rendering is a paragraph, then usage and tips: keep the paragraph.
    let rendered = error.render().to_string();
    let paragraph = rendered.split("\n\n").next().unwrap_or_default();
    let message = paragraph.strip_prefix("error: ").unwrap_or(paragraph);
    eprintln!("error: {}", one_line(message));
    ExitCode::from(2)
}

fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}
