//! [`Report`]: a run's settings, figures and verdict, as the table `idem-chaos run` prints and
//! as JSON (`--json FILE`), with where the run comes from ([`Provenance`]).
//!
//! # Examples
//!
//! ```
//! use idem_chaos::{
//!     Ambiguous, InFlight, Report, StoreKind, Verdict,
//!     check::{FaultCounts, Figures},
//!     provenance::Provenance,
//! };
//!
//! let report = Report {
//!     store: StoreKind::Sqlite,
//!     ambiguous: Ambiguous::Reject,
//!     in_flight: InFlight::Wait,
//!     gateways: 2,
//!     callers: 32,
//!     duration_ms: 60_000,
//!     lease_ms: 2_000,
//!     ttl_ms: 60_000,
//!     seed: 7,
//!     statuses: [(201, 100)].into(),
//!     verdict: Verdict {
//!         figures: Figures { operations: 100, executions: 100, succeeded: 100, ..Figures::default() },
//!         faults: FaultCounts::default(),
//!         failures: vec![],
//!     },
//!     resources: Default::default(),
//!     options: None,
//!     provenance: Provenance::now(),
//! };
//! assert!(report.table().contains("PASS"));
//! let json = serde_json::to_string(&report)?;
//! assert_eq!(serde_json::from_str::<Report>(&json)?, report);
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::{collections::BTreeMap, fmt::Write as _, path::Path, time::Duration};

use serde::{Deserialize, Serialize};

use crate::{
    Ambiguous, Error, FaultKind, InFlight, RedisPersistence, RunArgs, StoreKind, Verdict,
    provenance::Provenance, resources::Resources,
};

/// What a run did and found. Reports written before a field was added still parse: the
/// field is `None` (or its documented default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The store.
    pub store: StoreKind,
    /// The gateways' `--ambiguous` mode.
    pub ambiguous: Ambiguous,
    /// The gateways' `--in-flight` mode.
    pub in_flight: InFlight,
    /// How many gateways shared the store.
    pub gateways: u8,
    /// How many callers sent operations at once.
    pub callers: u32,
    /// How long operations were started and faults injected, in milliseconds.
    pub duration_ms: u64,
    /// The gateways' lease, in milliseconds.
    pub lease_ms: u64,
    /// The gateways' TTL, in milliseconds.
    pub ttl_ms: u64,
    /// The seed of the run's random choices.
    pub seed: u64,
    /// How many operations got each definite status.
    pub statuses: BTreeMap<u16, u64>,
    /// The figures and what failed.
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The gateways' memory and descriptors and the store's size, sampled through the run.
    #[serde(default)]
    pub resources: Resources,
    /// The run's other options.
    #[serde(default)]
    pub options: Option<RunOptions>,
    /// When, from which source and where the run was made.
    #[serde(flatten)]
    pub provenance: Provenance,
}

/// The options of a run that [`Report`]'s own fields do not give, as `idem-chaos run` took
/// them (defaults included). An option added later needs `#[serde(default)]`, so that the
/// committed reports still parse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunOptions {
    /// `--faults`: the kinds injected.
    pub faults: Vec<FaultKind>,
    /// `--drop-rate`.
    pub drop_rate: f64,
    /// `--kill-every`, in milliseconds.
    pub kill_every_ms: u64,
    /// `--pause-every`, in milliseconds.
    pub pause_every_ms: u64,
    /// `--store-restart-every`, in milliseconds.
    pub store_restart_every_ms: u64,
    /// `--slow-every`, in milliseconds.
    pub slow_every_ms: u64,
    /// `--errors-every`, in milliseconds.
    pub errors_every_ms: u64,
    /// `--window`, in milliseconds.
    pub window_ms: u64,
    /// `--attempt-timeout`, in milliseconds.
    pub attempt_timeout_ms: u64,
    /// `--deadline`, in milliseconds.
    pub deadline_ms: u64,
    /// `--redis-persistence`.
    pub redis_persistence: RedisPersistence,
    /// `--clock-step-every`, in milliseconds.
    #[serde(default)]
    pub clock_step_every_ms: u64,
    /// `--sample-every`, in milliseconds.
    #[serde(default)]
    pub sample_every_ms: u64,
    /// `--soak`.
    #[serde(default)]
    pub soak: bool,
    /// `--streamed`: the upstream answered each operation as a stream.
    #[serde(default)]
    pub streamed: bool,
}

impl From<&RunArgs> for RunOptions {
    fn from(args: &RunArgs) -> Self {
        Self {
            faults: args.faults.clone(),
            drop_rate: args.drop_rate,
            kill_every_ms: millis(args.kill_every.0),
            pause_every_ms: millis(args.pause_every.0),
            store_restart_every_ms: millis(args.store_restart_every.0),
            slow_every_ms: millis(args.slow_every.0),
            errors_every_ms: millis(args.errors_every.0),
            window_ms: millis(args.window.0),
            attempt_timeout_ms: millis(args.attempt_timeout.0),
            deadline_ms: millis(args.deadline.0),
            redis_persistence: args.redis_persistence,
            clock_step_every_ms: millis(args.clock_step_every.0),
            sample_every_ms: millis(args.sample_every.0),
            soak: args.soak,
            streamed: args.streamed,
        }
    }
}

impl Report {
    /// Reads a report written by `--json`.
    pub fn read(path: &Path) -> Result<Self, Error> {
        let json = std::fs::read(path).map_err(Error::io(format!("read {}", path.display())))?;
        serde_json::from_slice(&json).map_err(|source| Error::NotAReport {
            path: path.to_owned(),
            source,
        })
    }

    /// Whether every expectation was met.
    pub fn passed(&self) -> bool {
        self.verdict.passed()
    }

    /// The table printed at the end of a run, then `PASS` or `FAIL` with what failed.
    pub fn table(&self) -> String {
        let f = &self.verdict.figures;
        let faults = &self.verdict.faults;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "idem-chaos: {} store, --ambiguous {}, --in-flight {}, {} gateway(s), {} callers, \
             {:.0}s, lease {}ms, seed {}{}",
            self.store,
            self.ambiguous,
            self.in_flight,
            self.gateways,
            self.callers,
            self.duration_ms as f64 / 1000.0,
            self.lease_ms,
            self.seed,
            match self
                .options
                .as_ref()
                .is_some_and(|options| options.streamed)
            {
                true => ", streamed answers",
                false => "",
            },
        );
        let store_restarts = if self.store == StoreKind::RedisCluster {
            format!(
                "{} failovers (the longest {} ms until the replica took over)",
                faults.failovers, faults.longest_failover_ms
            )
        } else {
            format!(
                "{} store restarts (the longest {} ms)",
                faults.store_restarts, faults.longest_store_outage_ms
            )
        };
        let _ = writeln!(
            out,
            "faults: {} gateway kills, {} gateway pauses, {store_restarts}, {} partitions, \
             {} dropped answers, {} slow windows, {} 503 windows\n",
            faults.gateway_kills,
            faults.gateway_pauses,
            faults.partitions,
            faults.dropped_answers,
            faults.slow_windows,
            faults.error_windows,
        );
        if faults.clock_steps > 0 {
            let _ = writeln!(
                out,
                "clock steps: {} (the furthest {} ms from true time)\n",
                faults.clock_steps, faults.largest_clock_offset_ms,
            );
        }
        let rows = [
            ("logical operations", f.operations),
            ("attempts", f.attempts),
            ("upstream executions", f.executions),
            ("executions interrupted by a gateway kill", f.interrupted),
            (
                "executions interrupted by a gateway pause",
                f.interrupted_by_pause,
            ),
            (
                "executions interrupted by a partition",
                f.interrupted_by_partition,
            ),
            (
                "executions cut short by a clock step",
                f.interrupted_by_clock_step,
            ),
            (
                "executions interrupted by a failover",
                f.interrupted_by_failover,
            ),
            ("duplicates (executed more than once)", f.duplicates),
            (
                "  explained by a fault during the call",
                f.explained_duplicates - f.explained_by_failover,
            ),
            ("  explained by a failover", f.explained_by_failover),
            ("completed keys lost to failover", f.lost_to_failover),
            (
                "  missing or processing at the end",
                f.lost_to_failover_at_end,
            ),
            (
                "stale writes refused by the upstream",
                f.stale_writes_refused,
            ),
            ("stale writes applied", f.stale_writes_applied),
            ("answered 2xx", f.succeeded),
            ("answered with a stored 503", f.refused),
            ("outcome unknown", f.outcome_unknown),
            ("lost (no definite answer)", f.lost),
            ("stuck (processing after the end + a lease)", f.stuck),
            ("forgotten (answered, no record at the end)", f.forgotten),
            ("wrong answers", f.wrong_answers),
            ("unexpected answers", f.unexpected_answers),
        ];
        for (label, value) in rows {
            let _ = writeln!(out, "  {label:<46} {value:>9}");
        }
        out.push('\n');
        self.resources.describe(&mut out);
        if self.passed() {
            let expectation = match (self.ambiguous, self.store) {
                (Ambiguous::Reject, StoreKind::RedisCluster) => {
                    "no operation executed twice but after a failover lost its record"
                }
                (Ambiguous::Reject, _) => "no operation executed twice",
                (Ambiguous::Retry, StoreKind::RedisCluster) => {
                    "every duplicate follows a gateway kill, pause, partition or failover during \
                     the upstream call, or a failover that lost its record"
                }
                (Ambiguous::Retry, _) => {
                    "every duplicate follows a gateway kill, pause, partition or clock step \
                     during the upstream call"
                }
            };
            let _ = writeln!(
                out,
                "PASS: {expectation}; no stale write applied; nothing lost, stuck or forgotten"
            );
        } else {
            for failure in &self.verdict.failures {
                let _ = writeln!(out, "FAIL: {failure}");
            }
        }
        out
    }
}

/// A duration in whole milliseconds, as reports write it (saturating).
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Failure,
        check::{FaultCounts, Figures},
    };

    fn report(figures: Figures, failures: Vec<Failure>) -> Report {
        Report {
            store: StoreKind::Postgres,
            ambiguous: Ambiguous::Retry,
            in_flight: InFlight::Wait,
            gateways: 2,
            callers: 32,
            duration_ms: 60_000,
            lease_ms: 2_000,
            ttl_ms: 60_000,
            seed: 7,
            statuses: [(201, 100)].into(),
            verdict: Verdict {
                figures,
                faults: FaultCounts {
                    gateway_kills: 3,
                    gateway_pauses: 4,
                    partitions: 6,
                    ..FaultCounts::default()
                },
                failures,
            },
            resources: Resources::default(),
            options: None,
            provenance: Provenance::now(),
        }
    }

    fn row<'a>(table: &'a str, label: &str) -> Option<&'a str> {
        table
            .lines()
            .find_map(|line| line.trim_start().strip_prefix(label))
            .map(str::trim)
    }

    #[test]
    fn the_table_shows_pauses_partitions_and_stale_writes() {
        let table = report(
            Figures {
                operations: 100,
                executions: 102,
                interrupted: 1,
                interrupted_by_pause: 2,
                interrupted_by_partition: 3,
                duplicates: 5,
                explained_duplicates: 5,
                stale_writes_refused: 5,
                succeeded: 100,
                ..Figures::default()
            },
            vec![],
        )
        .table();
        assert!(
            table.contains("--ambiguous retry, --in-flight wait,"),
            "{table}"
        );
        assert!(
            table.contains("3 gateway kills, 4 gateway pauses,"),
            "{table}"
        );
        assert_eq!(
            row(&table, "executions interrupted by a gateway kill"),
            Some("1")
        );
        assert_eq!(
            row(&table, "executions interrupted by a gateway pause"),
            Some("2")
        );
        assert!(
            table.contains("(the longest 0 ms), 6 partitions,"),
            "{table}"
        );
        assert_eq!(
            row(&table, "executions interrupted by a partition"),
            Some("3")
        );
        assert_eq!(
            row(&table, "explained by a fault during the call"),
            Some("5")
        );
        assert_eq!(
            row(&table, "stale writes refused by the upstream"),
            Some("5")
        );
        assert_eq!(row(&table, "stale writes applied"), Some("0"));
        assert!(
            table.contains(
                "PASS: every duplicate follows a gateway kill, pause, partition or clock step during the \
                 upstream call; no stale write applied"
            ),
            "{table}"
        );
    }

    #[test]
    fn a_stale_write_applied_fails_the_run() {
        let figures = Figures {
            operations: 1,
            executions: 2,
            stale_writes_applied: 1,
            ..Figures::default()
        };
        let report = report(figures, vec![Failure::StaleWritesApplied { count: 1 }]);
        assert!(!report.passed());
        assert!(
            report.table().contains(
                "FAIL: 1 execution(s) applied with a lower fencing token than one already \
                 applied for their operation"
            ),
            "{}",
            report.table()
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["in_flight"], "wait");
        assert_eq!(json["figures"]["stale_writes_applied"], 1);
        assert_eq!(json["figures"]["stale_writes_refused"], 0);
        assert_eq!(json["figures"]["interrupted_by_pause"], 0);
        assert_eq!(json["figures"]["interrupted_by_partition"], 0);
        assert_eq!(json["faults"]["gateway_pauses"], 4);
        assert_eq!(json["faults"]["partitions"], 6);
        assert_eq!(
            json["failures"],
            serde_json::json!([{ "kind": "stale_writes_applied", "count": 1 }])
        );
        assert_eq!(serde_json::from_value::<Report>(json).unwrap(), report);
    }

    #[test]
    fn a_cluster_run_shows_its_failovers_and_what_they_lost() {
        let mut report = report(
            Figures {
                operations: 100,
                executions: 103,
                duplicates: 3,
                explained_duplicates: 3,
                explained_by_failover: 2,
                lost_to_failover: 3,
                lost_to_failover_at_end: 1,
                succeeded: 100,
                ..Figures::default()
            },
            vec![],
        );
        report.store = StoreKind::RedisCluster;
        report.verdict.faults.failovers = 4;
        report.verdict.faults.longest_failover_ms = 3_100;
        let table = report.table();
        assert!(
            table.contains("4 failovers (the longest 3100 ms until the replica took over),"),
            "{table}"
        );
        assert!(!table.contains("store restarts"), "{table}");
        assert_eq!(
            row(&table, "explained by a fault during the call"),
            Some("1")
        );
        assert_eq!(row(&table, "explained by a failover"), Some("2"));
        assert_eq!(row(&table, "completed keys lost to failover"), Some("3"));
        assert_eq!(row(&table, "missing or processing at the end"), Some("1"));
        assert!(
            table.contains("or a failover that lost its record"),
            "{table}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["store"], "redis_cluster");
        assert_eq!(json["figures"]["lost_to_failover"], 3);
        assert_eq!(json["faults"]["failovers"], 4);
        assert_eq!(serde_json::from_value::<Report>(json).unwrap(), report);
    }
}
