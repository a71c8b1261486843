//! `idem demo`: the newcomer's first command. With no setup, it shows what the gateway is for.
//!
//! It starts an in-process sample payments API that counts charges, the gateway in front of it on
//! a temporary SQLite store, and a fleet of clients that make N logical payments through the
//! gateway while a share of responses is lost on the way back (the client gives up and retries
//! with the same key) and some payments are sent as concurrent duplicates. Then it runs the same
//! fleet against the API directly, for contrast, and prints both tallies.

mod api;
mod fleet;

use std::{fmt::Write as _, time::Duration};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tokio::{net::TcpListener, sync::oneshot};

use self::{api::PaymentsApi, fleet::Fleet};
use crate::{Config, Error, Gateway, StoreUrl, Upstream};

/// `idem demo`: options.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// How many logical payments to make.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub payments: u64,
    /// How many clients send them at once.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=512))]
    pub clients: u64,
    /// The share of responses lost on the way back, from 0 to 0.9.
    #[arg(long, default_value_t = 0.2, value_parser = share(0.9))]
    pub loss: f64,
    /// The share of payments sent as two or three concurrent copies, from 0 to 1.
    #[arg(long, default_value_t = 0.1, value_parser = share(1.0))]
    pub duplicates: f64,
    /// Seed of the random choices (losses, duplicates), to replay a run.
    #[arg(long)]
    pub seed: Option<u64>,
}

fn share(max: f64) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s| match s.parse::<f64>() {
        Ok(v) if (0.0..=max).contains(&v) => Ok(v),
        _ => Err(format!("expected a number from 0 to {max}")),
    }
}

/// What one run of the fleet saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Logical payments made (each with its own key).
    pub payments: u64,
    /// HTTP requests sent, retries and duplicates included.
    pub attempts: u64,
    /// Charges the API executed.
    pub charges: u64,
    /// Responses the clients received marked `Idempotent-Replayed: true`.
    pub replays: u64,
    /// `409` answers received (the same key was still being processed).
    pub conflicts: u64,
    /// Extra charges: payments charged more than once count once per extra charge.
    pub duplicates: u64,
    /// Payments never charged (must be 0: clients retry until they get an answer).
    pub missing: u64,
}

/// Both runs.
#[derive(Debug, Clone, Copy)]
pub struct DemoReport {
    /// Through the gateway.
    pub with_gateway: Tally,
    /// Straight to the API.
    pub without_gateway: Tally,
}

impl DemoReport {
    /// The table printed at the end.
    pub fn table(&self) -> String {
        type Row = (&'static str, fn(&Tally) -> u64);
        let rows: [Row; 7] = [
            ("logical payments", |t| t.payments),
            ("attempts", |t| t.attempts),
            ("charges executed", |t| t.charges),
            ("replays", |t| t.replays),
            ("conflicts (409)", |t| t.conflicts),
            ("never charged", |t| t.missing),
            ("duplicate charges", |t| t.duplicates),
        ];
        let mut out = String::new();
        let _ = writeln!(out, "{:<20} {:>14} {:>17}", "", "with idem", "without idem");
        for (label, value) in rows {
            let _ = writeln!(
                out,
                "{label:<20} {:>14} {:>17}",
                value(&self.with_gateway),
                value(&self.without_gateway)
            );
        }
        out
    }
}

/// Runs the demo and prints its progress and table. Errors only when something could not start.
pub async fn run(args: DemoArgs) -> Result<DemoReport, Error> {
    let seed = args.seed.unwrap_or_else(|| fastrand::u64(..));
    eprintln!(
        "idem demo: {} payments from {} clients, {:.0}% of responses lost, {:.0}% sent as \
         concurrent duplicates (seed {seed})",
        args.payments,
        args.clients,
        args.loss * 100.0,
        args.duplicates * 100.0,
    );

    let api = PaymentsApi::start().await?;
    let dir = tempfile::tempdir().map_err(|source| Error::Demo {
        what: "create a temporary directory",
        source,
    })?;
    let mut config = Config::new(Upstream::http(api.addr()));
    config.listen = "127.0.0.1:0".parse().expect("valid address");
    config.admin_listen = "127.0.0.1:0".parse().expect("valid address");
    config.store = StoreUrl::sqlite(dir.path().join("demo.db"));
    let gateway = Gateway::bind(config).await?;
    let gateway_addr = gateway.addr();
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(gateway.run(async {
        let _ = stopped.await;
    }));

    let fleet = Fleet::new(&args, seed);
    let with_gateway = {
        let bar = progress("through idem", args.payments);
        let tally = fleet.run(gateway_addr, &bar).await;
        bar.finish();
        api.settle(tally)
    };
    let _ = stop.send(());
    serving.await.map_err(|e| Error::Demo {
        what: "run the gateway",
        source: std::io::Error::other(e),
    })??;

    api.reset();
    let without_gateway = {
        let bar = progress("straight to the API", args.payments);
        let tally = fleet.run(api.addr(), &bar).await;
        bar.finish();
        api.settle(tally)
    };
    let report = DemoReport {
        with_gateway,
        without_gateway,
    };
    println!("\n{}", report.table());
    if report.with_gateway.duplicates == 0 && report.with_gateway.missing == 0 {
        println!(
            "Every payment was charged exactly once through idem; without it, the same clients \
             caused {} duplicate charges.",
            report.without_gateway.duplicates
        );
    } else {
        println!("DUPLICATES OR MISSING CHARGES THROUGH IDEM: this is a bug, please report it.");
    }
    Ok(report)
}

fn progress(label: &'static str, len: u64) -> ProgressBar {
    let bar = ProgressBar::new(len).with_prefix(label);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>20} [{bar:40}] {pos}/{len} payments {elapsed}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// Binds an ephemeral loopback port.
async fn bind_loopback() -> Result<TcpListener, Error> {
    TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|source| Error::Demo {
            what: "bind a loopback port",
            source,
        })
}
