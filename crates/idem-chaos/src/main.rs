//! `idem-chaos`: runs real idem gateways under faults and checks what happened.

use std::{ffi::OsString, future::Future, path::PathBuf, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use idem_chaos::{GatewayProgram, Report, RunArgs};

/// Jepsen-style chaos runs of the idem gateway: many callers, injected faults, a checked
/// history.
#[derive(Debug, Parser)]
#[command(name = "idem-chaos", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run two gateways on one store under faults, with many callers, and check the history.
    #[command(
        after_help = "Exit code: 0 when every expectation holds, 1 when one does not, 2 \
                            when the run could not be carried out. docs/reliability.md explains \
                            the run and its report."
    )]
    Run(Box<RunArgs>),
    /// Print the reports of runs (`run --json FILE`) as one markdown table, as
    /// docs/reliability.md shows them.
    #[command(
        after_help = "Exit code: 0, or 2 when a file cannot be read or is not a report (the \
                      error names it)."
    )]
    Report {
        /// The reports.
        #[arg(required = true, value_name = "FILE")]
        files: Vec<PathBuf>,
    },
    /// `idem serve` with these arguments: the gateway processes of a run.
    #[command(hide = true, disable_help_flag = true)]
    Gateway {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => match block_on(run(&args)) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(error) => failure(&error),
        },
        Command::Report { files } => match report(&files) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => failure(&error),
        },
        Command::Gateway { args } => {
            match block_on(async { Ok(idem_chaos::gateway_process::serve(args).await?) }) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => failure(&error),
            }
        }
    }
}

/// Runs `future` to its end on a multi-threaded runtime.
fn block_on<T>(future: impl Future<Output = anyhow::Result<T>>) -> anyhow::Result<T> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?
        .block_on(future)
}

/// Reads every report, then prints their table.
fn report(files: &[PathBuf]) -> anyhow::Result<()> {
    let reports = files
        .iter()
        .map(|file| Report::read(file))
        .collect::<Result<Vec<_>, _>>()?;
    print!("{}", idem_chaos::summary::markdown(&reports));
    Ok(())
}

/// Runs, prints the table; whether the run passed.
async fn run(args: &RunArgs) -> anyhow::Result<bool> {
    let program = std::env::current_exe().context("cannot find the idem-chaos executable")?;
    let report = idem_chaos::run(args, &GatewayProgram(program)).await?;
    println!("{}", report.table());
    Ok(report.passed())
}

/// Prints `error: <msg>: <cause>…` on one line; exit code 2.
fn failure(error: &anyhow::Error) -> ExitCode {
    eprintln!("error: {error:#}");
    ExitCode::from(2)
}
