//! [`markdown`]: many runs' reports as one markdown table, as `idem-chaos report FILE…` prints
//! it and `docs/reliability.md` shows it.
//!
//! One row per report, in the order of the store (as `--store` lists them), `--ambiguous`
//! (reject, then retry), `--in-flight` (reject, then wait) and date; then one line per machine
//! the runs were made on, and one per expectation a run did not meet.
//!
//! # Examples
//!
//! ```
//! use idem_chaos::{Report, summary};
//!
//! let report: Report = serde_json::from_str(
//!     r#"{"store": "redis", "ambiguous": "reject", "in_flight": "wait", "gateways": 2,
//!         "callers": 32, "duration_ms": 180000, "lease_ms": 2000, "ttl_ms": 60000,
//!         "seed": 7, "statuses": {}, "figures": {"operations": 40999}, "faults": {},
//!         "failures": []}"#,
//! )?;
//! let table = summary::markdown(&[report]);
//! assert!(table.contains("| Redis | reject | wait | 3m | — | 40,999 | 0 |"), "{table}");
//! # Ok::<(), serde_json::Error>(())
//! ```

use std::{fmt::Write as _, time::Duration};

use clap::ValueEnum as _;
use idem_gateway::HumanDuration;

use crate::{Ambiguous, FaultKind, Report, StoreKind};

/// A column of the table: its header, and its cell for a report.
type Column = (&'static str, fn(&Report) -> String);

/// The table's columns. A new figure or fault count is one line here.
const COLUMNS: &[Column] = &[
    ("store", |r| store(r.store).to_owned()),
    ("`--ambiguous`", |r| r.ambiguous.to_string()),
    ("`--in-flight`", |r| r.in_flight.to_string()),
    ("duration", |r| {
        HumanDuration(Duration::from_millis(r.duration_ms)).to_string()
    }),
    ("faults", faults),
    ("operations", |r| count(r.verdict.figures.operations)),
    ("attempts", |r| count(r.verdict.figures.attempts)),
    ("executions", |r| count(r.verdict.figures.executions)),
    ("interrupted by a kill", |r| {
        count(r.verdict.figures.interrupted)
    }),
    ("interrupted by a pause", |r| {
        count(r.verdict.figures.interrupted_by_pause)
    }),
    ("interrupted by a partition", |r| {
        count(r.verdict.figures.interrupted_by_partition)
    }),
    ("cut short by a clock step", |r| {
        count(r.verdict.figures.interrupted_by_clock_step)
    }),
    ("duplicates", |r| count(r.verdict.figures.duplicates)),
    ("explained by a fault", |r| {
        count(r.verdict.figures.explained_duplicates)
    }),
    ("stale writes refused", |r| {
        count(r.verdict.figures.stale_writes_refused)
    }),
    ("stale writes applied", |r| {
        count(r.verdict.figures.stale_writes_applied)
    }),
    ("outcome unknown", |r| {
        count(r.verdict.figures.outcome_unknown)
    }),
    ("stored 503", |r| count(r.verdict.figures.refused)),
    ("lost", |r| count(r.verdict.figures.lost)),
    ("stuck", |r| count(r.verdict.figures.stuck)),
    ("forgotten", |r| count(r.verdict.figures.forgotten)),
    ("lost to a failover", |r| {
        count(r.verdict.figures.lost_to_failover)
    }),
    ("kills", |r| count(r.verdict.faults.gateway_kills)),
    ("pauses", |r| count(r.verdict.faults.gateway_pauses)),
    ("store restarts (longest)", store_restarts),
    ("partitions", |r| count(r.verdict.faults.partitions)),
    ("clock steps", |r| count(r.verdict.faults.clock_steps)),
    ("dropped answers", |r| {
        count(r.verdict.faults.dropped_answers)
    }),
    ("seed", |r| r.seed.to_string()),
    ("date", |r| {
        r.provenance
            .date
            .map_or_else(|| UNKNOWN.to_owned(), |date| date.day())
    }),
    ("commit", |r| commit(&r.provenance.commit)),
    ("result", |r| {
        if r.passed() { "PASS" } else { "FAIL" }.to_owned()
    }),
];

/// What a report does not say.
const UNKNOWN: &str = "—";

/// The markdown of `reports`: the table, a line per machine, a line per unmet expectation. The
/// order of `reports` does not matter.
pub fn markdown(reports: &[Report]) -> String {
    let mut rows: Vec<&Report> = reports.iter().collect();
    rows.sort_by_key(|r| {
        (
            variant(r.store),
            r.ambiguous == Ambiguous::Retry, // the stricter mode first
            variant(r.in_flight),
            r.provenance.date,
        )
    });
    let mut out = String::new();
    let line = |cells: Vec<String>| format!("| {} |\n", cells.join(" | "));
    out.push_str(&line(
        COLUMNS.iter().map(|(h, _)| (*h).to_owned()).collect(),
    ));
    out.push_str(&line(COLUMNS.iter().map(|_| "---".to_owned()).collect()));
    for report in &rows {
        out.push_str(&line(
            COLUMNS.iter().map(|(_, cell)| cell(report)).collect(),
        ));
    }

    let mut machines: Vec<(Option<String>, usize)> = Vec::new();
    for report in &rows {
        let machine = report.provenance.machine.as_ref().map(ToString::to_string);
        match machines.iter_mut().find(|(m, _)| *m == machine) {
            Some((_, runs)) => *runs += 1,
            None => machines.push((machine, 1)),
        }
    }
    out.push('\n');
    for (machine, runs) in machines {
        let runs = match runs {
            1 => "1 run".to_owned(),
            runs => format!("{runs} runs"),
        };
        let machine = machine.unwrap_or_else(|| "a machine the reports do not name".to_owned());
        let _ = writeln!(out, "- {runs} on {machine}");
    }
    for report in &rows {
        let Some(trend) = &report.resources.watched else {
            continue;
        };
        let _ = writeln!(
            out,
            "- soak, {} `--ambiguous {}` seed {}: {} watched from {} to {} ({} samples): resident \
             memory {:.1} MiB on average, at most {:.1} MiB, slope {:+.2} MiB/h; open \
             descriptors at most {} in the window's first third, {} in its last; store at most \
             {:.1} MiB on disk",
            store(report.store),
            report.ambiguous,
            report.seed,
            trend.gateway,
            HumanDuration(Duration::from_secs(trend.from_ms / 1000)),
            HumanDuration(Duration::from_secs(trend.to_ms / 1000)),
            trend.samples,
            mib(trend.rss_mean_bytes),
            mib(trend.rss_max_bytes),
            trend.rss_slope_bytes_per_hour as f64 / MIB,
            trend.fds_first_max,
            trend.fds_last_max,
            mib(trend.store_max_bytes),
        );
    }
    for report in rows.iter().filter(|r| !r.passed()) {
        for failure in &report.verdict.failures {
            let _ = writeln!(
                out,
                "- FAIL, {} `--ambiguous {}` `--in-flight {}` seed {}: {failure}",
                store(report.store),
                report.ambiguous,
                report.in_flight,
                report.seed,
            );
        }
    }
    out
}

const MIB: f64 = (1 << 20) as f64;

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB
}

/// The position of `value` among its `ValueEnum`'s variants.
fn variant<T: clap::ValueEnum + PartialEq>(value: T) -> usize {
    T::value_variants()
        .iter()
        .position(|v| *v == value)
        .unwrap_or(usize::MAX)
}

fn store(store: StoreKind) -> &'static str {
    match store {
        StoreKind::Sqlite => "SQLite",
        StoreKind::Postgres => "PostgreSQL",
        StoreKind::Mysql => "MariaDB",
        StoreKind::Redis => "Redis",
        StoreKind::RedisCluster => "Redis Cluster",
    }
}

/// `all`, or the kinds of faults injected; unknown in reports that do not say.
/// The faults injected, and whether they landed in streamed answers (`--streamed`).
fn faults(report: &Report) -> String {
    let Some(options) = &report.options else {
        return UNKNOWN.to_owned();
    };
    let faults = if FaultKind::value_variants()
        .iter()
        .all(|kind| options.faults.contains(kind))
    {
        "all".to_owned()
    } else {
        let names: Vec<String> = options
            .faults
            .iter()
            .filter_map(|kind| Some(kind.to_possible_value()?.get_name().to_owned()))
            .collect();
        names.join(", ")
    };
    match options.streamed {
        true => format!("{faults}, in streamed answers"),
        false => faults,
    }
}

/// `24 (390 ms)`: how many, and the longest.
/// On a Redis Cluster, the failovers, and the longest time until the replica took over.
fn store_restarts(report: &Report) -> String {
    let faults = &report.verdict.faults;
    if report.store == StoreKind::RedisCluster {
        return format!(
            "{} failovers ({} ms)",
            count(faults.failovers),
            count(faults.longest_failover_ms)
        );
    }
    match faults.store_restarts {
        0 => "0".to_owned(),
        restarts => format!(
            "{} ({} ms)",
            count(restarts),
            count(faults.longest_store_outage_ms)
        ),
    }
}

/// The commit's first 10 digits, with `-dirty` when the tree had changes.
fn commit(commit: &str) -> String {
    let (hash, dirty) = match commit.strip_suffix("-dirty") {
        Some(hash) => (hash, "-dirty"),
        None => (commit, ""),
    };
    if hash.len() == 40 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
        format!("{}{dirty}", &hash[..10])
    } else {
        UNKNOWN.to_owned()
    }
}

/// `40,999`.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Failure, InFlight, RedisPersistence, Verdict,
        check::{FaultCounts, Figures},
        provenance::{Build, Date, Machine, Provenance},
        report::RunOptions,
        resources::Resources,
    };

    const COMMIT: &str = "cc5a88c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7";

    fn machine(cores: u32) -> Machine {
        Machine {
            cpu: Some("AMD EPYC 7B13".to_owned()),
            cores: Some(cores),
            memory_bytes: Some(8 << 30),
            kernel: Some("6.8.0".to_owned()),
        }
    }

    fn report(store: StoreKind, ambiguous: Ambiguous, ended: u64) -> Report {
        Report {
            store,
            ambiguous,
            in_flight: InFlight::Reject,
            gateways: 2,
            callers: 32,
            duration_ms: 180_000,
            lease_ms: 2_000,
            ttl_ms: 60_000,
            seed: 13_394_291_223_333_250_591,
            statuses: [(201, 35_986)].into(),
            verdict: Verdict {
                figures: Figures {
                    operations: 35_986,
                    attempts: 42_781,
                    executions: 35_197,
                    interrupted: 489,
                    interrupted_by_pause: 12,
                    outcome_unknown: 494,
                    refused: 784,
                    succeeded: 34_708,
                    ..Figures::default()
                },
                faults: FaultCounts {
                    gateway_kills: 107,
                    gateway_pauses: 30,
                    store_restarts: 24,
                    longest_store_outage_ms: 1_390,
                    dropped_answers: 4_148,
                    slow_windows: 18,
                    error_windows: 17,
                    ..FaultCounts::default()
                },
                failures: vec![],
            },
            options: Some(RunOptions {
                faults: FaultKind::value_variants().to_vec(),
                drop_rate: 0.1,
                kill_every_ms: 3_000,
                pause_every_ms: 5_000,
                store_restart_every_ms: 7_000,
                slow_every_ms: 10_000,
                errors_every_ms: 10_000,
                window_ms: 2_000,
                attempt_timeout_ms: 1_000,
                deadline_ms: 30_000,
                redis_persistence: RedisPersistence::Aof,
                clock_step_every_ms: 6_000,
                sample_every_ms: 10_000,
                soak: false,
                streamed: false,
            }),
            provenance: Provenance {
                date: Some(Date::from_unix_seconds(ended)),
                commit: COMMIT.to_owned(),
                machine: Some(machine(2)),
                harness_version: Some("0.1.0".to_owned()),
                build: Some(Build::Release),
            },
            resources: Resources::default(),
        }
    }

    #[test]
    fn the_table_of_one_run_is_exact() {
        let markdown = markdown(&[report(StoreKind::Sqlite, Ambiguous::Reject, 1_796_247_605)]);
        assert_eq!(
            markdown,
            "| store | `--ambiguous` | `--in-flight` | duration | faults | operations | attempts \
             | executions | interrupted by a kill | interrupted by a pause \
             | interrupted by a partition | cut short by a clock step | duplicates \
             | explained by a fault | stale writes refused | stale writes applied \
             | outcome unknown | stored 503 | lost | stuck | forgotten | lost to a failover | kills \
             | pauses | store restarts (longest) | partitions | clock steps | dropped answers | seed \
             | date | commit | result |\n\
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- \
             | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- \
             | --- | --- | --- | --- |\n\
             | SQLite | reject | reject | 3m | all | 35,986 | 42,781 | 35,197 | 489 | 12 | 0 | 0 \
             | 0 | 0 | 0 | 0 | 494 | 784 | 0 | 0 | 0 | 0 | 107 | 30 | 24 (1,390 ms) | 0 | 0 | 4,148 \
             | 13394291223333250591 | 2026-12-02 | cc5a88c1d2 | PASS |\n\
             \n\
             - 1 run on AMD EPYC 7B13, 2 logical cores, 8.0 GiB of memory, Linux 6.8.0\n"
        );
    }

    #[test]
    fn rows_go_by_store_mode_in_flight_and_date() {
        let run = |store, ambiguous, in_flight, ended, seed| Report {
            in_flight,
            seed,
            ..report(store, ambiguous, ended)
        };
        let (sqlite, postgres, redis) = (StoreKind::Sqlite, StoreKind::Postgres, StoreKind::Redis);
        let (reject, retry) = (Ambiguous::Reject, Ambiguous::Retry);
        let mut other_machine = run(redis, reject, InFlight::Reject, 10, 6);
        other_machine.provenance.machine = Some(machine(4));
        let reports = [
            other_machine,
            run(sqlite, retry, InFlight::Wait, 10, 4),
            run(sqlite, retry, InFlight::Reject, 20, 3),
            run(postgres, reject, InFlight::Reject, 10, 5),
            run(sqlite, reject, InFlight::Reject, 86_400, 2),
            run(sqlite, reject, InFlight::Reject, 10, 1),
        ];
        let markdown = markdown(&reports);
        let seeds: Vec<&str> = markdown
            .lines()
            .skip(2)
            .take(reports.len())
            .map(|line| line.split(" | ").nth(28).unwrap())
            .collect();
        assert_eq!(seeds, ["1", "2", "3", "4", "5", "6"], "{markdown}");
        assert!(
            markdown.ends_with(
                "|\n\n\
                 - 5 runs on AMD EPYC 7B13, 2 logical cores, 8.0 GiB of memory, Linux 6.8.0\n\
                 - 1 run on AMD EPYC 7B13, 4 logical cores, 8.0 GiB of memory, Linux 6.8.0\n"
            ),
            "{markdown}"
        );
    }

    #[test]
    fn a_failed_run_says_why_and_what_a_report_lacks_is_a_dash() {
        let mut failed = report(StoreKind::Redis, Ambiguous::Retry, 10);
        failed.verdict.failures = vec![Failure::Lost { count: 2 }];
        failed.options = None;
        failed.provenance = Provenance {
            date: None,
            commit: format!("{COMMIT}-dirty"),
            machine: None,
            harness_version: None,
            build: None,
        };
        let markdown = markdown(&[failed]);
        let row = markdown.lines().nth(2).unwrap();
        assert!(
            row.starts_with("| Redis | retry | reject | 3m | — | 35,986 |"),
            "{row}"
        );
        assert!(row.ends_with("| — | cc5a88c1d2-dirty | FAIL |"), "{row}");
        assert!(
            markdown.ends_with(&format!(
                "\n- 1 run on a machine the reports do not name\n\
                 - FAIL, Redis `--ambiguous retry` `--in-flight reject` seed \
                 13394291223333250591: {}\n",
                Failure::Lost { count: 2 }
            )),
            "{markdown}"
        );
    }

    #[test]
    fn faults_show_the_kinds_when_not_all() {
        let mut some = report(StoreKind::Sqlite, Ambiguous::Retry, 10);
        if let Some(options) = &mut some.options {
            options.faults = vec![FaultKind::Pauses, FaultKind::Kills, FaultKind::Drops];
        }
        assert_eq!(faults(&some), "pauses, kills, drops");
    }

    #[test]
    fn counts_have_thousands_separators() {
        let cases = [
            (0, "0"),
            (999, "999"),
            (1_000, "1,000"),
            (117_000, "117,000"),
        ];
        for (n, text) in cases {
            assert_eq!(count(n), text);
        }
        assert_eq!(count(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn a_commit_is_shortened_and_anything_else_is_unknown() {
        assert_eq!(commit(COMMIT), "cc5a88c1d2");
        assert_eq!(commit("unknown"), "—");
    }
}
