//! `idem-chaos run`: what to run, for how long, and which faults to inject.
//!
//! # Examples
//!
//! ```
//! use clap::Parser;
//! use idem_chaos::{Ambiguous, InFlight, RunArgs, StoreKind};
//!
//! #[derive(Parser)]
//! struct Cli {
//!     #[command(flatten)]
//!     run: RunArgs,
//! }
//!
//! let cli = Cli::parse_from(["idem-chaos", "--store", "redis", "--ambiguous", "reject"]);
//! assert_eq!(cli.run.store, StoreKind::Redis);
//! assert_eq!(cli.run.ambiguous, Ambiguous::Reject);
//! assert_eq!(cli.run.in_flight, InFlight::Reject);
//! assert_eq!(cli.run.duration.0, std::time::Duration::from_secs(60));
//! ```

use std::{fmt, path::PathBuf};

use clap::{Args, ValueEnum};
use idem_gateway::HumanDuration;
use serde::{Deserialize, Serialize};

use crate::{FaultKind, GatewayId, faults::Plan};

/// The store the gateways share.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// One SQLite file; a store restart kills every gateway and starts them again on it.
    Sqlite,
    /// A PostgreSQL server of the run's own (initdb in a temporary directory), crashed with an
    /// immediate shutdown and started again.
    Postgres,
    /// A MariaDB server of the run's own (mariadb-install-db in a temporary directory),
    /// SIGKILLed and started again: InnoDB recovers from its redo log.
    Mysql,
    /// A `redis-server` of the run's own with an append-only file fsynced on every write,
    /// SIGKILLed and started again.
    Redis,
    /// A Redis Cluster of the run's own, 3 masters and 3 replicas, each with its append-only
    /// file; a store restart SIGKILLs a master, waits for its replica to take over, and starts
    /// it again as a replica.
    RedisCluster,
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Mysql => "mysql",
            Self::Redis => "redis",
            Self::RedisCluster => "redis-cluster",
        })
    }
}

/// What the run's own `redis-server` keeps across a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedisPersistence {
    /// An append-only file fsynced before every answer (`--appendonly yes --appendfsync
    /// always`): what Redis acknowledged survives a crash.
    Aof,
    /// Nothing: a restart forgets every key, completed ones included, and the run fails. Shows
    /// why the gateway's Redis needs the append-only file.
    None,
}

/// When a run keeps its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Keep {
    /// Always.
    Always,
    /// When the run fails, to look into it.
    OnFailure,
    /// Never (a run that is meant to fail).
    Never,
}

/// The gateways' `--ambiguous` mode, and so what the run expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ambiguous {
    /// Release the key on an ambiguous outcome: an operation may execute again, but only when a
    /// gateway died, was paused, or was cut from its store or upstream, while its upstream call
    /// ran.
    Retry,
    /// Record "outcome unknown": no operation ever executes twice.
    Reject,
}

impl fmt::Display for Ambiguous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Retry => "retry",
            Self::Reject => "reject",
        })
    }
}

/// The gateways' `--in-flight` mode: what a request gets while its key runs elsewhere. The
/// expectations are the same in both.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InFlight {
    /// 409 at once; the caller retries after `Retry-After`.
    Reject,
    /// Wait for the running request's result (up to half the callers' attempt timeout), then
    /// 409.
    Wait,
}

impl fmt::Display for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Reject => "reject",
            Self::Wait => "wait",
        })
    }
}

/// The options of `idem-chaos run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The store the gateways share.
    #[arg(long, value_enum, default_value_t = StoreKind::Sqlite)]
    pub store: StoreKind,

    /// The gateways' --ambiguous mode: reject expects no duplicate at all, retry expects
    /// duplicates only where a gateway was killed, paused or partitioned during the upstream
    /// call.
    #[arg(long, value_enum, default_value_t = Ambiguous::Retry)]
    pub ambiguous: Ambiguous,

    /// The gateways' --in-flight mode: a request whose key is running gets 409 at once, or
    /// waits for the running request's result.
    #[arg(long, value_enum, default_value_t = InFlight::Reject)]
    pub in_flight: InFlight,

    /// How long callers start new operations and faults are injected.
    #[arg(long, value_name = "DURATION", default_value = "60s")]
    pub duration: HumanDuration,

    /// How many callers send operations at once, each one after the other.
    #[arg(long, value_name = "N", default_value_t = 32,
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub callers: u32,

    /// The seed of every random choice (fault times, drops, routing), to replay a run's
    /// schedule [default: random, printed].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,

    /// The faults to inject, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        value_name = "LIST",
        default_value = "drops,kills,pauses,store-restarts,slow,errors,two-gateways,partitions,clock-steps"
    )]
    pub faults: Vec<FaultKind>,

    /// The share of gateway answers the proxy drops, from 0 to 0.9.
    #[arg(long, value_name = "SHARE", default_value_t = 0.1, value_parser = share)]
    pub drop_rate: f64,

    /// The mean time between two gateway kills (each gap is drawn from half to one and a half
    /// times it).
    #[arg(long, value_name = "DURATION", default_value = "3s")]
    pub kill_every: HumanDuration,

    /// The mean time between two gateway pauses, from the end of one to the start of the next
    /// (each pause lasts from 1.5 to 3 leases).
    #[arg(long, value_name = "DURATION", default_value = "5s")]
    pub pause_every: HumanDuration,

    /// The mean time between two store restarts (failovers, on a Redis Cluster).
    #[arg(long, value_name = "DURATION", default_value = "7s")]
    pub store_restart_every: HumanDuration,

    /// The mean time between two windows of a slow upstream.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub slow_every: HumanDuration,

    /// The mean time between two windows of an upstream answering 503.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub errors_every: HumanDuration,

    /// How long a slow or 503 window lasts, on average.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub window: HumanDuration,

    /// The mean time between two partitions, from the end of one to the start of the next
    /// (each cuts one gateway from its store or its upstream for 0.3 to 3 leases).
    #[arg(long, value_name = "DURATION", default_value = "5s")]
    pub partition_every: HumanDuration,

    /// The mean time between two clock steps (on SQLite, the only store that reads the
    /// gateways' clocks).
    #[arg(long, value_name = "DURATION", default_value = "6s")]
    pub clock_step_every: HumanDuration,

    /// How often the gateways' resident memory and open file descriptors, and the store's size
    /// on disk, are sampled.
    #[arg(long, value_name = "DURATION", default_value = "10s")]
    pub sample_every: HumanDuration,

    /// A soak: the first gateway is never killed (kills, and SQLite's store restarts, spare it),
    /// and the run also fails if its memory or its open file descriptors grew over the last two
    /// thirds of the run. For runs of an hour; needs two-gateways.
    #[arg(long)]
    pub soak: bool,

    /// The gateways' --lease: how soon a killed gateway's keys are free again.
    #[arg(long, value_name = "DURATION", default_value = "2s")]
    pub lease: HumanDuration,

    /// The gateways' --ttl: how long a completed key is kept. Short, so that the store's data
    /// (and the time a restarted Redis takes to load it) stays bounded; it must be at least
    /// twice the deadline, so that every retry of an operation finds its record.
    #[arg(long, value_name = "DURATION", default_value = "1m")]
    pub ttl: HumanDuration,

    /// The upstream answers each operation as a stream (its body in chunks of unknown length,
    /// over its execution's time), which the gateways pass on and record as it comes: the
    /// faults land mid-stream.
    #[arg(long)]
    pub streamed: bool,

    /// How long a caller waits for one attempt's answer; a slow upstream takes twice as long.
    #[arg(long, value_name = "DURATION", default_value = "1s")]
    pub attempt_timeout: HumanDuration,

    /// How long a caller tries to get a definite answer for one operation; without one by
    /// then, the operation is lost.
    #[arg(long, value_name = "DURATION", default_value = "30s")]
    pub deadline: HumanDuration,

    /// With --store redis or redis-cluster: what each server keeps across a restart.
    #[arg(long, value_enum, default_value_t = RedisPersistence::Aof)]
    pub redis_persistence: RedisPersistence,

    /// Write the report as JSON to this file.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,

    /// Write the whole history (operations, attempts, executions, faults, records) as JSON to
    /// this file.
    #[arg(long, value_name = "PATH")]
    pub history: Option<PathBuf>,

    /// When to keep the run's directory (gateway and server logs, the store's files) and print
    /// where it is.
    #[arg(long, value_enum, value_name = "WHEN", default_value_t = Keep::OnFailure)]
    pub keep: Keep,
}

impl RunArgs {
    /// Whether `fault` is to be injected.
    pub fn injects(&self, fault: FaultKind) -> bool {
        self.faults.contains(&fault)
    }

    /// What the fault schedule is drawn from.
    pub fn plan(&self) -> Plan {
        Plan {
            duration: self.duration.0,
            // Only SQLite reads the gateways' clocks: elsewhere a step would change nothing.
            faults: self
                .faults
                .iter()
                .copied()
                .filter(|&f| f != FaultKind::ClockSteps || self.store == StoreKind::Sqlite)
                .collect(),
            gateways: self.gateways(),
            kill_every: self.kill_every.0,
            pause_every: self.pause_every.0,
            lease: self.lease.0,
            store_restart_every: self.store_restart_every.0,
            slow_every: self.slow_every.0,
            errors_every: self.errors_every.0,
            window: self.window.0,
            clock_step_every: self.clock_step_every.0,
            spared: self.soak.then_some(GatewayId(0)),
            partition_every: self.partition_every.0,
            store_link: !matches!(self.store, StoreKind::Sqlite | StoreKind::RedisCluster),
        }
    }

    /// How many gateways share the store: 2, or 1 without `two-gateways`.
    pub fn gateways(&self) -> u8 {
        if self.injects(FaultKind::TwoGateways) {
            2
        } else {
            1
        }
    }
}

fn share(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if (0.0..=0.9).contains(&v) => Ok(v),
        _ => Err("expected a number from 0 to 0.9".to_owned()),
    }
}
