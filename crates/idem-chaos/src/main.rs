//! `idem-chaos`: runs real idem gateways under faults and checks what happened.

use std::{ffi::OsString, process::ExitCode};

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use idem_chaos::{GatewayProgram, RunArgs};

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
    /// `idem serve` with these arguments: the gateway processes of a run.
    #[command(hide = true, disable_help_flag = true)]
    Gateway {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
    {
        Ok(runtime) => runtime,
        Err(error) => return failure(&error),
    };
    match cli.command {
        Command::Run(args) => match runtime.block_on(run(&args)) {
            Ok(true) => ExitCode::SUCCESS,
            Ok(false) => ExitCode::FAILURE,
            Err(error) => failure(&error),
        },
        Command::Gateway { args } => {
            match runtime.block_on(idem_chaos::gateway_process::serve(args)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(error) => failure(&error.into()),
            }
        }
    }
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
