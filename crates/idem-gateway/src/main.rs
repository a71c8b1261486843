//! `idem`: the command line. Parses, sets up logging and runs; errors are one line on stderr.

use std::{io::IsTerminal, process::ExitCode};

use anyhow::Context as _;
use clap::error::ErrorKind;
use idem_gateway::{
    Cli, ConfigError, Error,
    cli::{self, Command},
    deliver, demo, keys, relay,
    store::migrate,
};

/// glibc's allocator grows and trims its per-thread heaps with a system call every request or two
/// under load; mimalloc keeps them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // What is said while the command line is read (a store URL parameter given in an old
    // spelling) goes to stderr: the logs are set up only once the command line says how.
    let reading = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_max_level(tracing::Level::WARN)
        .without_time()
        .with_target(false)
        .finish();
    let parsed = tracing::subscriber::with_default(reading, || {
        Cli::parse_from_env_and_file(std::env::args_os())
    });
    let cli = match parsed {
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
        Command::Serve(args) => Ok(cli::serve(&args).await?),
        Command::Relay(args) => Ok(relay::run(*args).await?),
        Command::Deliver(args) => Ok(deliver::run(*args).await?),
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
