//! [`check()`]: reads a run's [`History`] and says what went wrong.
//!
//! - A **duplicate** is an operation the upstream executed more than once.
//! - An execution is **interrupted** when its gateway was SIGKILLed or stopped (SIGSTOP) while
//!   the execution was in its hands — from its start (minus [`SEND_SLACK`]: a request the
//!   gateway wrote just before dying, or held when it was stopped, still reaches the upstream)
//!   to its end plus one lease (the gateway records the result after the upstream answered; a
//!   busy store delays that, and the gateway keeps trying for a lease while the store is down)
//!   — and no caller got its result. On SQLite the store is in the gateways: a gateway stopped
//!   inside a write transaction holds the file's lock, and no gateway records anything until it
//!   continues, so a pause interrupts the executions of every gateway. A **partition** of the
//!   gateway's link to its store or its upstream interrupts its executions the same way, from
//!   the cut to the heal: cut from the store, the gateway can neither renew its lease nor record
//!   the result; cut from the upstream, its request arrives late or its answer does not come
//!   back. A partition stops no process, so it never holds up another gateway, on SQLite
//!   either.
//! - On a Redis Cluster, a failover interrupts every execution in its gateway's hands from the
//!   master's kill until its replica took over: the store cannot record results meanwhile.
//! - A duplicate is **explained** when each of its extra executions follows an interrupted
//!   execution of the same operation; each interrupted execution explains one extra execution.
//! - A **stale write** is a request whose fencing token is lower than one the upstream already
//!   applied for its operation. The upstream refuses those (counted from its refusals); an
//!   execution in the history with a lower token than an earlier execution of its operation is
//!   one **applied** (counted from the executions, in the order the upstream applied them).
//! - An operation is **lost** when its caller never got a definite answer.
//! - A key is **stuck** when its record is still `processing` after the load stopped, every
//!   fault was repaired and one more lease went by.
//! - A key is **forgotten** when its caller got an answer the gateway stores (a response, or
//!   "outcome unknown") and the store has no record of it at the end, although its operation
//!   started less than the TTL before the last record was read (with a second's margin: the
//!   record expires a TTL after its completion).
//! - An answer is **wrong** when a 2xx body names an execution that is not one of its
//!   operation's.
//! - On a Redis Cluster, a failover **loses** an execution's record when the master was killed
//!   from the execution's start (its record was written just before) to [`FAILOVER_BOUND`] after
//!   a gateway first answered 2xx naming it (its completion was acknowledged before that
//!   answer), whether a caller got the answer or the proxy dropped it: replication is
//!   asynchronous, and the promoted replica may lack the record. An operation is **lost to
//!   failover** when such a failover came and then the operation executed again, or its record
//!   is missing or `processing` at the end although within the TTL. A duplicate is **explained
//!   by a failover** when an extra execution follows, after the failover, an execution whose
//!   record it lost; each such execution explains one extra execution.
//!
//! # Expectations
//!
//! In both modes: no operation lost, no key stuck or forgotten, no stale write applied, no wrong
//! or unexpected answer. `--ambiguous reject`: no duplicate at all. `--ambiguous retry`: every
//! duplicate explained, and no "outcome unknown" (that answer exists only in reject mode).
//!
//! On a Redis Cluster, what replication cannot promise is measured rather than failed: a
//! duplicate explained by a failover is accepted in both modes, and a key lost to failover is
//! neither stuck nor forgotten. Everything else is expected as on the other stores.
//!
//! # Examples
//!
//! See the crate documentation.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    fmt,
    time::Duration,
};

use serde::{Deserialize, Serialize};

use crate::{
    Ambiguous, GatewayId, History, Reply, Stamp, StoreKind,
    history::{AttemptResult, Execution, FaultEvent, RecordState},
    store::CLUSTER_NODE_TIMEOUT,
};

/// How long after a gateway was known dead, or was continued, an execution it forwarded may
/// still start: its request was already written to the socket, or on its way when the gateway
/// was stopped.
pub const SEND_SLACK: Duration = Duration::from_millis(250);

/// How long after a gateway's 2xx answer a failover may still lose the completion it
/// acknowledged. On loopback a replica receives a write within a millisecond; but a replica
/// whose link stalls is only found out after the cluster's node timeout, and meanwhile its
/// master goes on acknowledging writes it does not have; a few seconds more cover a busy
/// 2-core machine. Longer than this, the replica had the record, and a failover explains
/// nothing.
pub const FAILOVER_BOUND: Duration = CLUSTER_NODE_TIMEOUT.saturating_add(Duration::from_secs(3));

/// The margin of the forgotten check against the TTL: the store's clock and the harness's may
/// differ by a little, and reading every record takes a while.
const TTL_MARGIN: Duration = Duration::from_secs(1);

/// The gateways' settings the checks depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The store: on SQLite, a pause of one gateway holds up every gateway.
    pub store: StoreKind,
    /// `--ambiguous`: what to expect of duplicates.
    pub ambiguous: Ambiguous,
    /// `--lease`: how long a key stays in a dead gateway's hands.
    pub lease: Duration,
    /// `--ttl`: how long a completed key is kept.
    pub ttl: Duration,
}

/// The figures of a run. A figure a report does not have (written before it was counted) is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Figures {
    /// Logical operations (keys).
    pub operations: u64,
    /// HTTP requests the callers sent (as the proxy in front of the gateways saw them).
    pub attempts: u64,
    /// Executions by the upstream.
    pub executions: u64,
    /// Executions that a kill of their gateway interrupted, whose result no caller got (see
    /// [the module](self)).
    pub interrupted: u64,
    /// Executions that a pause interrupted and no kill did, whose result no caller got.
    pub interrupted_by_pause: u64,
    /// Executions that a clock step may have cut short (SQLite only), and no kill or pause
    /// did, whose result no caller got.
    #[serde(default)]
    pub interrupted_by_clock_step: u64,
    /// Executions that a partition of their gateway interrupted and no kill or pause did,
    /// whose result no caller got.
    #[serde(default)]
    pub interrupted_by_partition: u64,
    /// Executions that a Redis Cluster failover interrupted and no kill or pause did, whose
    /// result no caller got: the store was unavailable while their gateway held them.
    #[serde(default)]
    pub interrupted_by_failover: u64,
    /// Operations executed more than once.
    pub duplicates: u64,
    /// Duplicates whose every extra execution is explained: by a kill, a pause, a partition or
    /// a clock step (`--ambiguous retry`), or by a failover (Redis Cluster).
    pub explained_duplicates: u64,
    /// Duplicates explained, at least one extra execution by a failover.
    #[serde(default)]
    pub explained_by_failover: u64,
    /// Operations a gateway had answered 2xx whose record a failover lost: executed again
    /// after it, or missing or `processing` at the end.
    #[serde(default)]
    pub lost_to_failover: u64,
    /// Of those, the ones not executed again: missing or `processing` at the end (not counted
    /// as forgotten or stuck).
    #[serde(default)]
    pub lost_to_failover_at_end: u64,
    /// Requests the upstream refused because a higher fencing token had been applied for their
    /// operation: late writes of a gateway that lost its key.
    pub stale_writes_refused: u64,
    /// Executions applied with a lower fencing token than an earlier execution of their
    /// operation.
    pub stale_writes_applied: u64,
    /// Operations answered 2xx.
    pub succeeded: u64,
    /// Operations answered with a stored 503 (the upstream refused them; `--ambiguous reject`
    /// stores and replays that answer).
    pub refused: u64,
    /// Operations answered "outcome unknown".
    pub outcome_unknown: u64,
    /// Operations without a definite answer.
    pub lost: u64,
    /// Keys still `processing` at the end.
    pub stuck: u64,
    /// Keys answered with a stored response whose record is gone at the end.
    pub forgotten: u64,
    /// 2xx answers whose body names no execution of their operation.
    pub wrong_answers: u64,
    /// Definite answers of another kind (a 4xx, a 5xx that is not a replay).
    pub unexpected_answers: u64,
}

/// How many faults of each kind the run injected. A kind a report does not have (written before
/// it existed) is 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct FaultCounts {
    /// Gateways SIGKILLed (SQLite store restarts included: they kill every gateway).
    pub gateway_kills: u64,
    /// Gateways stopped and continued.
    pub gateway_pauses: u64,
    /// Store restarts (a Redis Cluster's are failovers, counted below).
    pub store_restarts: u64,
    /// Redis Cluster failovers: a master SIGKILLed, its replica promoted.
    #[serde(default)]
    pub failovers: u64,
    /// The longest failover, from the kill until the replica was master and the cluster `ok`,
    /// in milliseconds.
    #[serde(default)]
    pub longest_failover_ms: u64,
    /// Gateway answers the proxy dropped.
    pub dropped_answers: u64,
    /// Windows of a slow upstream.
    pub slow_windows: u64,
    /// Windows of an upstream answering 503.
    pub error_windows: u64,
    /// Steps of a gateway's clock (injected on SQLite only).
    #[serde(default)]
    pub clock_steps: u64,
    /// The furthest a gateway's clock was from true time, in milliseconds.
    #[serde(default)]
    pub largest_clock_offset_ms: u64,
    /// Gateways cut from their store or their upstream for a while.
    #[serde(default)]
    pub partitions: u64,
    /// The longest store restart, from going down to answering again, in milliseconds: keys
    /// whose result could not be recorded for a lease free up, and with `--ambiguous retry`
    /// execute again (the gateway's cases 4 and 5), so it must stay well under the lease.
    pub longest_store_outage_ms: u64,
}

/// An expectation the run did not meet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Failure {
    /// `--ambiguous reject` executed operations more than once (and no failover explains it).
    Duplicates {
        /// How many operations.
        count: u64,
    },
    /// `--ambiguous retry` executed operations more than once without a kill, a pause or a
    /// partition to explain it.
    UnexplainedDuplicates {
        /// How many operations.
        count: u64,
    },
    /// `--ambiguous retry` answered "outcome unknown".
    OutcomeUnknownInRetryMode {
        /// How many operations.
        count: u64,
    },
    /// Executions applied with a stale fencing token.
    StaleWritesApplied {
        /// How many executions.
        count: u64,
    },
    /// Operations without a definite answer.
    Lost {
        /// How many.
        count: u64,
    },
    /// Keys still processing at the end.
    Stuck {
        /// How many.
        count: u64,
    },
    /// Answered keys without a record at the end.
    Forgotten {
        /// How many.
        count: u64,
    },
    /// Answers that name no execution of their operation.
    WrongAnswers {
        /// How many.
        count: u64,
    },
    /// Definite answers the run cannot produce when everything works.
    UnexpectedAnswers {
        /// How many.
        count: u64,
    },
    /// A soak's watched gateway grew its resident memory across the window
    /// ([`resources`](crate::resources) says by how much it may).
    MemoryGrew {
        /// By how many bytes, along the least-squares line.
        bytes: i64,
    },
    /// A soak's watched gateway held more and more file descriptors open.
    DescriptorsGrew {
        /// The most open in the window's first third.
        from: u64,
        /// The most open in its last third.
        to: u64,
    },
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Duplicates { count } => {
                write!(
                    f,
                    "{count} operation(s) executed more than once with --ambiguous reject"
                )
            }
            Self::UnexplainedDuplicates { count } => write!(
                f,
                "{count} operation(s) executed more than once without a gateway kill, pause, \
                 partition or clock step during the upstream call"
            ),
            Self::StaleWritesApplied { count } => write!(
                f,
                "{count} execution(s) applied with a lower fencing token than one already \
                 applied for their operation"
            ),
            Self::OutcomeUnknownInRetryMode { count } => write!(
                f,
                "{count} operation(s) answered \"outcome unknown\" with --ambiguous retry"
            ),
            Self::Lost { count } => {
                write!(f, "{count} operation(s) without a definite answer")
            }
            Self::Stuck { count } => {
                write!(f, "{count} key(s) still processing one lease after the end")
            }
            Self::Forgotten { count } => {
                write!(f, "{count} answered key(s) without a record at the end")
            }
            Self::WrongAnswers { count } => write!(
                f,
                "{count} answer(s) naming an execution of another operation, or none"
            ),
            Self::UnexpectedAnswers { count } => {
                write!(
                    f,
                    "{count} unexpected definite answer(s) (a 4xx, or a 5xx not replayed)"
                )
            }
            Self::MemoryGrew { bytes } => write!(
                f,
                "the watched gateway's resident memory grew by {} KiB over the soak's window",
                bytes / 1024
            ),
            Self::DescriptorsGrew { from, to } => write!(
                f,
                "the watched gateway's open file descriptors grew from at most {from} to {to}"
            ),
        }
    }
}

/// The figures of a run and the expectations it did not meet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// What the history shows.
    pub figures: Figures,
    /// What was injected.
    pub faults: FaultCounts,
    /// Unmet expectations; empty when the run passed.
    pub failures: Vec<Failure>,
}

impl Verdict {
    /// Whether every expectation was met.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Checks `history`, from gateways run with `settings`.
pub fn check(history: &History, settings: Settings) -> Verdict {
    let Settings {
        store,
        ambiguous,
        lease,
        ttl,
    } = settings;
    let mut kills: Vec<(GatewayId, Stamp)> = Vec::new();
    let mut pauses: Vec<(GatewayId, Stamp, Stamp)> = Vec::new();
    // Each failover's kill, and when its replica took over.
    let mut failovers: Vec<(Stamp, Stamp)> = Vec::new();
    let mut clocks = Clocks::default();
    let mut partitions: Vec<(GatewayId, Stamp, Stamp)> = Vec::new();
    for fault in &history.faults {
        match *fault {
            FaultEvent::Failover { down, promoted, .. } if store == StoreKind::RedisCluster => {
                failovers.push((down, promoted));
            }
            FaultEvent::GatewayKilled { gateway, at } => kills.push((gateway, at)),
            FaultEvent::GatewayPaused {
                gateway,
                from,
                until,
            } => pauses.push((gateway, from, until)),
            FaultEvent::ClockStepped {
                gateway,
                at,
                offset_ms,
            } => clocks.steps.push((gateway, at, offset_ms)),
            FaultEvent::Partitioned {
                gateway,
                from,
                until,
                ..
            } => partitions.push((gateway, from, until)),
            _ => {}
        }
    }
    // The execution each operation's answer names: its result was recorded.
    let answered: HashMap<&str, u64> = history
        .operations
        .iter()
        .filter_map(|operation| match operation.outcome {
            Reply::Answered {
                execution: Some(id),
                ..
            } => Some((operation.key.as_str(), id)),
            _ => None,
        })
        .collect();
    // Whether a fault from `from` to `until` came while `execution` was in its gateway's hands.
    let in_hands = |execution: &Execution, from: Stamp, until: Stamp| {
        execution.start <= until.saturating_add(SEND_SLACK)
            && execution
                .end
                .is_none_or(|end| from <= end.saturating_add(lease))
    };
    let unanswered =
        |execution: &Execution| answered.get(execution.key.as_str()) != Some(&execution.id);
    let killed = |execution: &Execution| {
        unanswered(execution)
            && kills
                .iter()
                .any(|&(gateway, at)| gateway == execution.gateway && in_hands(execution, at, at))
    };
    let paused = |execution: &Execution| {
        unanswered(execution)
            && pauses.iter().any(|&(gateway, from, until)| {
                (gateway == execution.gateway || store == StoreKind::Sqlite)
                    && in_hands(execution, from, until)
            })
    };
    clocks
        .gateways
        .extend(history.executions.iter().map(|e| e.gateway));
    clocks
        .gateways
        .extend(clocks.steps.iter().map(|&(gateway, ..)| gateway));
    // On SQLite, where the store reads the gateways' clocks: a step while the execution was in
    // its gateway's hands, or gateways whose clocks disagreed when it started, can make its key
    // look free to a gateway (itself included) before its lease ran out. Whether or not the
    // execution was answered: its gateway still answers its own client (and the duplicates that
    // joined its stream) after the takeover, while its completion is refused.
    let skew_exposed = |execution: &Execution| {
        store == StoreKind::Sqlite
            && (clocks
                .steps
                .iter()
                .any(|&(_, at, _)| in_hands(execution, at, at))
                || clocks.disagree_at(execution.start))
    };
    let skewed = |execution: &Execution| unanswered(execution) && skew_exposed(execution);
    let partitioned = |execution: &Execution| {
        unanswered(execution)
            && partitions.iter().any(|&(gateway, from, until)| {
                gateway == execution.gateway && in_hands(execution, from, until)
            })
    };
    // A failover leaves the master's slots unavailable for longer than a lease: a gateway that
    // cannot record a result meanwhile leaves the key to the next attempt (the gateway's case
    // 4), as if it had been stopped. Which keys the master held is not known: any execution
    // counts.
    let failed_over = |execution: &Execution| {
        unanswered(execution)
            && failovers
                .iter()
                .any(|&(down, promoted)| in_hands(execution, down, promoted))
    };
    let interrupted = |execution: &Execution| {
        killed(execution)
            || paused(execution)
            || partitioned(execution)
            || skew_exposed(execution)
            || failed_over(execution)
    };
    // When a gateway first answered 2xx naming each execution.
    let mut acknowledged: HashMap<u64, Stamp> = HashMap::new();
    for answer in history.attempts.iter().filter_map(|a| a.answer) {
        acknowledged
            .entry(answer.execution)
            .and_modify(|at| *at = (*at).min(answer.at))
            .or_insert(answer.at);
    }
    // The first failover that may have lost the record of an acknowledged execution.
    let lost_in_failover = |execution: &Execution| {
        let until = acknowledged
            .get(&execution.id)?
            .saturating_add(FAILOVER_BOUND);
        failovers
            .iter()
            .copied()
            .map(|(down, _)| down)
            .filter(|down| (execution.start..=until).contains(down))
            .min()
    };
    let kills_explain = ambiguous == Ambiguous::Retry;

    let mut by_key: HashMap<&str, Vec<&Execution>> = HashMap::new();
    for execution in &history.executions {
        by_key.entry(&execution.key).or_default().push(execution);
    }
    let mut figures = Figures {
        operations: count(history.operations.len()),
        attempts: count(history.attempts.len()),
        executions: count(history.executions.len()),
        interrupted: count(history.executions.iter().filter(|e| killed(e)).count()),
        interrupted_by_pause: count(
            history
                .executions
                .iter()
                .filter(|e| paused(e) && !killed(e))
                .count(),
        ),
        interrupted_by_partition: count(
            history
                .executions
                .iter()
                .filter(|e| partitioned(e) && !killed(e) && !paused(e))
                .count(),
        ),
        interrupted_by_clock_step: count(
            history
                .executions
                .iter()
                .filter(|e| skewed(e) && !partitioned(e) && !paused(e) && !killed(e))
                .count(),
        ),
        interrupted_by_failover: count(
            history
                .executions
                .iter()
                .filter(|e| failed_over(e) && !killed(e) && !paused(e))
                .count(),
        ),
        stale_writes_refused: count(history.stale_writes.len()),
        ..Figures::default()
    };
    for executions in by_key.values_mut() {
        // Ids follow the order in which the upstream applied the executions.
        executions.sort_by_key(|e| e.id);
        let mut highest = 0;
        for execution in executions.iter() {
            figures.stale_writes_applied += u64::from(execution.token < highest);
            highest = highest.max(execution.token);
        }
        if executions.len() < 2 {
            continue;
        }
        figures.duplicates += 1;
        executions.sort_by_key(|e| (e.start, e.id));
        // Interrupted executions not yet matched with a later execution they explain, and the
        // failovers that lost records of executions not yet matched.
        let mut unmatched = 0_usize;
        let mut losses: Vec<Stamp> = Vec::new();
        let mut explained = true;
        let mut by_failover = false;
        for (i, execution) in executions.iter().enumerate() {
            if i > 0 {
                if unmatched > 0 {
                    unmatched -= 1;
                } else if let Some(loss) = losses.iter().position(|d| *d < execution.start) {
                    losses.swap_remove(loss);
                    by_failover = true;
                } else {
                    explained = false;
                }
            }
            // A record a failover lost is the more precise cause: the result was recorded.
            if let Some(down) = lost_in_failover(execution) {
                losses.push(down);
            } else if kills_explain && interrupted(execution) {
                unmatched += 1;
            }
        }
        figures.explained_duplicates += u64::from(explained);
        figures.explained_by_failover += u64::from(explained && by_failover);
    }
    // Keys whose completed record a failover lost, and that no retry executed again.
    let mut lost_at_end: HashSet<&str> = HashSet::new();
    for operation in &history.operations {
        let key = operation.key.as_str();
        let executions = by_key.get(key).map_or(&[][..], Vec::as_slice);
        let losses: Vec<Stamp> = executions
            .iter()
            .filter_map(|e| lost_in_failover(e))
            .collect();
        let Some(&first) = losses.iter().min() else {
            continue;
        };
        let executed_again = executions.iter().any(|e| e.start > first);
        let kept =
            operation.started.saturating_add(ttl) > history.records_read.saturating_add(TTL_MARGIN);
        let missing = kept
            && matches!(
                history.records.get(key),
                Some(RecordState::Absent | RecordState::Processing)
            );
        if executed_again || missing {
            figures.lost_to_failover += 1;
        }
        if !executed_again && missing {
            lost_at_end.insert(key);
        }
    }
    figures.lost_to_failover_at_end = count(lost_at_end.len());

    for operation in &history.operations {
        let stored = match operation.outcome {
            Reply::Answered {
                status,
                replayed,
                execution,
            } => {
                if (200..300).contains(&status) {
                    figures.succeeded += 1;
                    let executed = by_key
                        .get(operation.key.as_str())
                        .is_some_and(|list| list.iter().any(|e| Some(e.id) == execution));
                    figures.wrong_answers += u64::from(!executed);
                } else if status == 503 && replayed && ambiguous == Ambiguous::Reject {
                    figures.refused += 1;
                } else {
                    figures.unexpected_answers += 1;
                }
                (200..300).contains(&status) || replayed
            }
            Reply::OutcomeUnknown => {
                figures.outcome_unknown += 1;
                true
            }
            Reply::GaveUp { .. } => {
                figures.lost += 1;
                false
            }
        };
        // A clock behind true time writes records that expire that much sooner; one ahead
        // purges them that much sooner.
        let kept = operation.started.saturating_add(ttl)
            > history
                .records_read
                .saturating_add(TTL_MARGIN + clocks.furthest());
        if stored
            && kept
            && history.records.get(&operation.key) == Some(&RecordState::Absent)
            && !lost_at_end.contains(operation.key.as_str())
        {
            figures.forgotten += 1;
        }
    }
    figures.stuck = count(
        history
            .records
            .iter()
            .filter(|(key, state)| {
                **state == RecordState::Processing && !lost_at_end.contains(key.as_str())
            })
            .count(),
    );

    Verdict {
        figures,
        faults: fault_counts(history),
        failures: failures(&figures, ambiguous),
    }
}

/// The clock steps of a run, in time order, and the gateways whose clocks they set.
#[derive(Default)]
struct Clocks {
    steps: Vec<(GatewayId, Stamp, i64)>,
    gateways: BTreeSet<GatewayId>,
}

impl Clocks {
    /// Whether two gateways' clocks were set apart at `at`.
    fn disagree_at(&self, at: Stamp) -> bool {
        // A gateway without a step yet is on true time.
        let mut offsets: HashMap<GatewayId, i64> =
            self.gateways.iter().map(|&gateway| (gateway, 0)).collect();
        for &(gateway, _, offset) in self.steps.iter().filter(|step| step.1 <= at) {
            offsets.insert(gateway, offset);
        }
        let low = offsets.values().min();
        low != offsets.values().max()
    }

    /// The furthest any clock was set from true time.
    fn furthest(&self) -> Duration {
        let furthest = self
            .steps
            .iter()
            .map(|&(_, _, offset)| offset.unsigned_abs())
            .max()
            .unwrap_or(0);
        Duration::from_millis(furthest)
    }
}

fn failures(figures: &Figures, ambiguous: Ambiguous) -> Vec<Failure> {
    let mut failures = Vec::new();
    let mut unless_zero = |count: u64, failure: fn(u64) -> Failure| {
        if count > 0 {
            failures.push(failure(count));
        }
    };
    match ambiguous {
        Ambiguous::Reject => {
            unless_zero(figures.duplicates - figures.explained_duplicates, |count| {
                Failure::Duplicates { count }
            });
        }
        Ambiguous::Retry => {
            unless_zero(figures.duplicates - figures.explained_duplicates, |count| {
                Failure::UnexplainedDuplicates { count }
            });
            unless_zero(figures.outcome_unknown, |count| {
                Failure::OutcomeUnknownInRetryMode { count }
            });
        }
    }
    unless_zero(figures.stale_writes_applied, |count| {
        Failure::StaleWritesApplied { count }
    });
    unless_zero(figures.lost, |count| Failure::Lost { count });
    unless_zero(figures.stuck, |count| Failure::Stuck { count });
    unless_zero(figures.forgotten, |count| Failure::Forgotten { count });
    unless_zero(figures.wrong_answers, |count| Failure::WrongAnswers {
        count,
    });
    unless_zero(figures.unexpected_answers, |count| {
        Failure::UnexpectedAnswers { count }
    });
    failures
}

fn fault_counts(history: &History) -> FaultCounts {
    let mut counts = FaultCounts {
        dropped_answers: count(
            history
                .attempts
                .iter()
                .filter(|a| matches!(a.result, AttemptResult::Dropped { .. }))
                .count(),
        ),
        ..FaultCounts::default()
    };
    for fault in &history.faults {
        match fault {
            FaultEvent::GatewayKilled { .. } => counts.gateway_kills += 1,
            FaultEvent::GatewayPaused { .. } => counts.gateway_pauses += 1,
            FaultEvent::StoreRestarted { down, up } => {
                counts.store_restarts += 1;
                let outage = up.as_duration().saturating_sub(down.as_duration());
                counts.longest_store_outage_ms = counts
                    .longest_store_outage_ms
                    .max(u64::try_from(outage.as_millis()).unwrap_or(u64::MAX));
            }
            FaultEvent::UpstreamSlow { .. } => counts.slow_windows += 1,
            FaultEvent::UpstreamFailing { .. } => counts.error_windows += 1,
            FaultEvent::Failover { down, promoted, .. } => {
                counts.failovers += 1;
                let election = promoted.as_duration().saturating_sub(down.as_duration());
                counts.longest_failover_ms = counts
                    .longest_failover_ms
                    .max(u64::try_from(election.as_millis()).unwrap_or(u64::MAX));
            }
            FaultEvent::ClockStepped { offset_ms, .. } => {
                counts.clock_steps += 1;
                counts.largest_clock_offset_ms =
                    counts.largest_clock_offset_ms.max(offset_ms.unsigned_abs());
            }
            FaultEvent::Partitioned { .. } => counts.partitions += 1,
            FaultEvent::GatewayRestarted { .. } => {}
        }
    }
    counts
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// How many operations got each definite status, for the report.
pub(crate) fn statuses(history: &History) -> BTreeMap<u16, u64> {
    let mut statuses = BTreeMap::new();
    for operation in &history.operations {
        if let Reply::Answered { status, .. } = operation.outcome {
            *statuses.entry(status).or_default() += 1;
        }
    }
    statuses
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Answer, Attempt, Link, Operation, PartitionMode, StaleWrite};

    fn settings(ambiguous: Ambiguous) -> Settings {
        Settings {
            store: StoreKind::Postgres,
            ambiguous,
            lease: Duration::from_secs(2),
            ttl: Duration::from_secs(60),
        }
    }

    fn at(ms: u64) -> Stamp {
        Stamp::from_millis(ms)
    }

    /// Execution `id`, with token `id`.
    fn execution(id: u64, key: &str, gateway: u8, start: u64, end: u64) -> Execution {
        Execution {
            id,
            key: key.into(),
            gateway: GatewayId(gateway),
            token: id,
            start: at(start),
            end: Some(at(end)),
        }
    }

    fn answered(key: &str, execution: u64) -> Operation {
        Operation {
            key: key.into(),
            started: at(0),
            ended: at(10_000),
            outcome: Reply::Answered {
                status: 201,
                replayed: false,
                execution: Some(execution),
            },
        }
    }

    fn kill(gateway: u8, ms: u64) -> FaultEvent {
        FaultEvent::GatewayKilled {
            gateway: GatewayId(gateway),
            at: at(ms),
        }
    }

    fn pause(gateway: u8, from: u64, until: u64) -> FaultEvent {
        FaultEvent::GatewayPaused {
            gateway: GatewayId(gateway),
            from: at(from),
            until: at(until),
        }
    }

    fn partition(gateway: u8, link: Link, from: u64, until: u64) -> FaultEvent {
        FaultEvent::Partitioned {
            gateway: GatewayId(gateway),
            link,
            mode: PartitionMode::BothWays,
            from: at(from),
            until: at(until),
        }
    }

    /// `op-1` executed at 1 s through gateway 0, and again at 4 s through gateway 1.
    fn step(gateway: u8, ms: u64, offset_ms: i64) -> FaultEvent {
        FaultEvent::ClockStepped {
            gateway: GatewayId(gateway),
            at: at(ms),
            offset_ms,
        }
    }

    fn executed_twice(faults: Vec<FaultEvent>) -> History {
        History {
            operations: vec![answered("op-1", 2), answered("op-2", 3)],
            executions: vec![
                execution(1, "op-1", 0, 1_000, 1_050),
                execution(2, "op-1", 1, 4_000, 4_050),
                execution(3, "op-2", 1, 1_000, 1_020),
            ],
            faults,
            ..History::default()
        }
    }

    #[test]
    fn a_duplicate_without_a_kill_fails_in_retry_mode() {
        let verdict = check(&executed_twice(vec![]), settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.duplicates, 1);
        assert_eq!(verdict.figures.explained_duplicates, 0);
        assert_eq!(
            verdict.failures,
            [Failure::UnexplainedDuplicates { count: 1 }]
        );
        assert!(!verdict.passed());
    }

    #[test]
    fn a_kill_of_another_gateway_explains_nothing() {
        let verdict = check(
            &executed_twice(vec![kill(1, 1_020)]),
            settings(Ambiguous::Retry),
        );
        // It came during op-2's only execution, whose result its caller got.
        assert_eq!(verdict.figures.interrupted, 0);
        assert_eq!(verdict.figures.explained_duplicates, 0);
        assert!(!verdict.passed());
    }

    #[test]
    fn a_kill_long_after_the_call_explains_nothing() {
        // 1,050 ms end + 2 s lease = 3,050 ms.
        let verdict = check(
            &executed_twice(vec![kill(0, 3_100)]),
            settings(Ambiguous::Retry),
        );
        assert_eq!(verdict.figures.explained_duplicates, 0);
        assert!(!verdict.passed());
    }

    #[test]
    fn a_kill_during_the_call_explains_the_duplicate_in_retry_mode() {
        let verdict = check(
            &executed_twice(vec![kill(0, 1_020)]),
            settings(Ambiguous::Retry),
        );
        assert_eq!(verdict.figures.interrupted, 1);
        assert_eq!(verdict.figures.duplicates, 1);
        assert_eq!(verdict.figures.explained_duplicates, 1);
        assert_eq!(verdict.failures, []);
    }

    #[test]
    fn a_kill_while_the_result_is_recorded_explains_the_duplicate() {
        let verdict = check(
            &executed_twice(vec![kill(0, 2_900)]),
            settings(Ambiguous::Retry),
        );
        assert_eq!(verdict.figures.explained_duplicates, 1);
        assert!(verdict.passed());
    }

    #[test]
    fn an_execution_whose_result_a_caller_got_explains_nothing() {
        let mut history = executed_twice(vec![kill(0, 1_020)]);
        history.operations[0] = answered("op-1", 1);
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.interrupted, 0);
        assert_eq!(verdict.figures.explained_duplicates, 0);
        assert!(!verdict.passed());
    }

    #[test]
    fn any_duplicate_fails_in_reject_mode() {
        let verdict = check(
            &executed_twice(vec![kill(0, 1_020)]),
            settings(Ambiguous::Reject),
        );
        assert_eq!(verdict.failures, [Failure::Duplicates { count: 1 }]);
    }

    #[test]
    fn one_kill_explains_one_extra_execution() {
        let mut history = executed_twice(vec![kill(0, 1_020)]);
        history
            .executions
            .push(execution(4, "op-1", 1, 7_000, 7_050));
        history.operations[0] = answered("op-1", 4);
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.duplicates, 1);
        assert_eq!(verdict.figures.explained_duplicates, 0);
        assert!(!verdict.passed());
        // A second kill, during the second execution, explains the third.
        history.faults.push(kill(1, 4_010));
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.explained_duplicates, 1);
        assert!(verdict.passed());
    }

    #[test]
    fn a_kill_during_the_later_execution_does_not_explain_it() {
        let verdict = check(
            &executed_twice(vec![kill(1, 4_020)]),
            settings(Ambiguous::Retry),
        );
        // Its caller got the later execution's result: the kill interrupted nothing.
        assert_eq!(verdict.figures.interrupted, 0);
        assert_eq!(verdict.figures.explained_duplicates, 0);
        assert!(!verdict.passed());
    }

    #[test]
    fn lost_stuck_and_forgotten_keys_fail_both_modes() {
        let mut history = History {
            operations: vec![
                answered("done", 1),
                Operation {
                    outcome: Reply::GaveUp {
                        reason: "the deadline passed".into(),
                    },
                    ..answered("lost", 0)
                },
                answered("gone", 2),
            ],
            executions: vec![
                execution(1, "done", 0, 10, 20),
                execution(2, "gone", 0, 10, 20),
            ],
            ..History::default()
        };
        history.records = [
            ("done".to_owned(), RecordState::Completed),
            ("lost".to_owned(), RecordState::Processing),
            ("gone".to_owned(), RecordState::Absent),
        ]
        .into();
        for mode in [Ambiguous::Retry, Ambiguous::Reject] {
            let verdict = check(&history, settings(mode));
            assert_eq!(
                verdict.failures,
                [
                    Failure::Lost { count: 1 },
                    Failure::Stuck { count: 1 },
                    Failure::Forgotten { count: 1 },
                ]
            );
        }
    }

    #[test]
    fn a_record_older_than_the_ttl_may_be_gone() {
        let mut history = History {
            operations: vec![answered("old", 1), answered("new", 2)],
            executions: vec![
                execution(1, "old", 0, 10, 20),
                execution(2, "new", 0, 58_000, 58_020),
            ],
            records_read: at(60_500),
            ..History::default()
        };
        history.operations[1].started = at(58_000);
        history.records = [
            ("old".to_owned(), RecordState::Absent),
            ("new".to_owned(), RecordState::Absent),
        ]
        .into();
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.forgotten, 1);
        assert_eq!(verdict.failures, [Failure::Forgotten { count: 1 }]);
    }

    #[test]
    fn an_answer_naming_another_operations_execution_is_wrong() {
        let history = History {
            operations: vec![answered("a", 2), answered("b", 2)],
            executions: vec![execution(1, "a", 0, 10, 20), execution(2, "b", 0, 10, 20)],
            ..History::default()
        };
        let verdict = check(&history, settings(Ambiguous::Reject));
        assert_eq!(verdict.figures.wrong_answers, 1);
        assert_eq!(verdict.failures, [Failure::WrongAnswers { count: 1 }]);
    }

    #[test]
    fn outcome_unknown_is_expected_in_reject_mode_only() {
        let history = History {
            operations: vec![Operation {
                outcome: Reply::OutcomeUnknown,
                ..answered("k", 0)
            }],
            ..History::default()
        };
        assert!(check(&history, settings(Ambiguous::Reject)).passed());
        assert_eq!(
            check(&history, settings(Ambiguous::Retry)).failures,
            [Failure::OutcomeUnknownInRetryMode { count: 1 }]
        );
    }

    #[test]
    fn a_replayed_503_is_a_refusal_in_reject_mode_and_unexpected_otherwise() {
        let refused = |replayed| History {
            operations: vec![Operation {
                outcome: Reply::Answered {
                    status: 503,
                    replayed,
                    execution: None,
                },
                ..answered("k", 0)
            }],
            ..History::default()
        };
        let verdict = check(&refused(true), settings(Ambiguous::Reject));
        assert_eq!(verdict.figures.refused, 1);
        assert!(verdict.passed());
        assert_eq!(
            check(&refused(false), settings(Ambiguous::Reject)).failures,
            [Failure::UnexpectedAnswers { count: 1 }]
        );
        assert_eq!(
            check(&refused(true), settings(Ambiguous::Retry)).failures,
            [Failure::UnexpectedAnswers { count: 1 }]
        );
    }

    #[test]
    fn faults_are_counted_from_the_history() {
        let mut history = executed_twice(vec![
            kill(0, 1),
            kill(1, 2),
            FaultEvent::StoreRestarted {
                down: at(3),
                up: at(4),
            },
            FaultEvent::UpstreamSlow {
                from: at(5),
                until: at(6),
            },
            pause(1, 7, 8),
            step(0, 9, -3_000),
            partition(0, Link::Store, 9, 10),
        ]);
        history.attempts = vec![
            Attempt {
                key: "op-1".into(),
                at: at(1),
                gateway: Some(GatewayId(0)),
                result: AttemptResult::Dropped {
                    status: 201,
                    stalled: false,
                },
                answer: None,
            },
            Attempt {
                key: "op-1".into(),
                at: at(2),
                gateway: Some(GatewayId(1)),
                result: AttemptResult::Answered { status: 201 },
                answer: None,
            },
        ];
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(
            verdict.faults,
            FaultCounts {
                gateway_kills: 2,
                gateway_pauses: 1,
                store_restarts: 1,
                dropped_answers: 1,
                slow_windows: 1,
                error_windows: 0,
                clock_steps: 1,
                largest_clock_offset_ms: 3_000,
                partitions: 1,
                longest_store_outage_ms: 1,
                failovers: 0,
                longest_failover_ms: 0,
            }
        );
        assert_eq!(verdict.figures.attempts, 2);
    }

    #[test]
    fn a_pause_during_the_call_explains_the_duplicate_in_retry_mode() {
        // Stopped at 0.9 s, during the first execution, for 4 s.
        let verdict = check(
            &executed_twice(vec![pause(0, 900, 4_900)]),
            settings(Ambiguous::Retry),
        );
        assert_eq!(verdict.figures.interrupted, 0);
        assert_eq!(verdict.figures.interrupted_by_pause, 1);
        assert_eq!(verdict.figures.explained_duplicates, 1);
        assert_eq!(verdict.failures, []);
        // Reject mode never executes twice, paused or not.
        assert_eq!(
            check(
                &executed_twice(vec![pause(0, 900, 4_900)]),
                settings(Ambiguous::Reject)
            )
            .failures,
            [Failure::Duplicates { count: 1 }]
        );
    }

    #[test]
    fn a_request_sent_as_the_gateway_continues_was_in_its_hands() {
        // Continued at 0.8 s, the gateway sent the request it held: it reached the upstream at
        // 1 s, within the slack. Continued at 0.7 s, 300 ms before: sent after the pause.
        let verdict = check(
            &executed_twice(vec![pause(0, 200, 800)]),
            settings(Ambiguous::Retry),
        );
        assert_eq!(verdict.figures.explained_duplicates, 1);
        let verdict = check(
            &executed_twice(vec![pause(0, 200, 700)]),
            settings(Ambiguous::Retry),
        );
        assert_eq!(verdict.figures.explained_duplicates, 0);
    }

    #[test]
    fn a_pause_of_another_gateway_explains_a_duplicate_on_sqlite_only() {
        let history = executed_twice(vec![pause(1, 900, 4_900)]);
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.interrupted_by_pause, 0);
        assert_eq!(
            verdict.failures,
            [Failure::UnexplainedDuplicates { count: 1 }]
        );
        // Gateway 1, stopped in a write transaction, holds up gateway 0's record of its result.
        let sqlite = Settings {
            store: StoreKind::Sqlite,
            ..settings(Ambiguous::Retry)
        };
        let verdict = check(&history, sqlite);
        assert_eq!(verdict.figures.interrupted_by_pause, 1);
        assert_eq!(verdict.figures.explained_duplicates, 1);
        assert!(verdict.passed());
    }

    #[test]
    fn a_kill_and_a_pause_of_one_execution_explain_one_extra_execution() {
        let mut history = executed_twice(vec![kill(0, 1_020), pause(0, 900, 4_900)]);
        history
            .executions
            .push(execution(4, "op-1", 1, 7_000, 7_050));
        history.operations[0] = answered("op-1", 4);
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.interrupted, 1);
        // Counted once, as a kill; the pause of gateway 0 did not touch gateway 1's execution,
        // so the third is not explained.
        assert_eq!(verdict.figures.interrupted_by_pause, 0);
        assert_eq!(verdict.figures.explained_duplicates, 0);
        assert!(!verdict.passed());
    }

    #[test]
    fn stale_writes_are_counted_from_the_history() {
        // op-1 applied with token 3 through gateway 0, then with token 2 through gateway 1: a
        // stale write applied, whatever the upstream said.
        let mut history = executed_twice(vec![kill(0, 1_020)]);
        history.executions[0].token = 3;
        history.executions[1].token = 2;
        history.stale_writes = vec![StaleWrite {
            key: "op-2".into(),
            gateway: GatewayId(0),
            token: 1,
            highest: 3,
            at: at(2_000),
        }];
        for mode in [Ambiguous::Retry, Ambiguous::Reject] {
            let verdict = check(&history, settings(mode));
            assert_eq!(verdict.figures.stale_writes_refused, 1);
            assert_eq!(verdict.figures.stale_writes_applied, 1);
            assert!(
                verdict
                    .failures
                    .contains(&Failure::StaleWritesApplied { count: 1 }),
                "{:?}",
                verdict.failures
            );
        }
    }

    #[test]
    fn an_equal_or_higher_token_is_no_stale_write_and_a_refusal_no_failure() {
        let mut history = executed_twice(vec![kill(0, 1_020)]);
        history.executions[1].token = history.executions[0].token;
        history.stale_writes = vec![StaleWrite {
            key: "op-1".into(),
            gateway: GatewayId(0),
            token: 0,
            highest: 1,
            at: at(2_000),
        }];
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.stale_writes_applied, 0);
        assert_eq!(verdict.figures.stale_writes_refused, 1);
        assert_eq!(verdict.failures, []);
    }
    #[test]
    fn a_partition_during_the_call_explains_the_duplicate_in_retry_mode() {
        // Gateway 0 cut at 0.9 s, during the first execution, for 4 s: from the store, it could
        // neither renew nor record; from the upstream, its answer did not come back.
        for link in [Link::Store, Link::Upstream] {
            let history = executed_twice(vec![partition(0, link, 900, 4_900)]);
            let verdict = check(&history, settings(Ambiguous::Retry));
            assert_eq!(verdict.figures.interrupted, 0);
            assert_eq!(verdict.figures.interrupted_by_pause, 0);
            assert_eq!(verdict.figures.interrupted_by_partition, 1);
            assert_eq!(verdict.figures.explained_duplicates, 1);
            assert_eq!(verdict.failures, []);
            // Reject mode never executes twice, cut off or not.
            assert_eq!(
                check(&history, settings(Ambiguous::Reject)).failures,
                [Failure::Duplicates { count: 1 }]
            );
        }
    }

    #[test]
    fn a_request_held_until_the_partition_heals_was_in_its_gateways_hands() {
        // Healed at 0.8 s, the held request reached the upstream at 1 s, within the slack.
        // Healed at 0.7 s, 300 ms before: sent after the partition.
        let verdict = check(
            &executed_twice(vec![partition(0, Link::Upstream, 200, 800)]),
            settings(Ambiguous::Retry),
        );
        assert_eq!(verdict.figures.interrupted_by_partition, 1);
        assert_eq!(verdict.figures.explained_duplicates, 1);
        let verdict = check(
            &executed_twice(vec![partition(0, Link::Upstream, 200, 700)]),
            settings(Ambiguous::Retry),
        );
        assert_eq!(verdict.figures.interrupted_by_partition, 0);
        assert_eq!(verdict.figures.explained_duplicates, 0);
    }

    #[test]
    fn a_partition_of_another_gateway_explains_nothing_on_any_store() {
        let history = executed_twice(vec![partition(1, Link::Upstream, 900, 4_900)]);
        for store in [
            StoreKind::Sqlite,
            StoreKind::Postgres,
            StoreKind::Mysql,
            StoreKind::Redis,
        ] {
            let verdict = check(
                &history,
                Settings {
                    store,
                    ..settings(Ambiguous::Retry)
                },
            );
            // Gateway 1 was cut during op-2's only execution, whose result its caller got; and
            // a partition stops no process, so it holds no SQLite lock.
            assert_eq!(verdict.figures.interrupted_by_partition, 0);
            assert_eq!(
                verdict.failures,
                [Failure::UnexplainedDuplicates { count: 1 }]
            );
        }
    }

    #[test]
    fn a_pause_and_a_partition_of_one_execution_explain_one_extra_execution() {
        let mut history = executed_twice(vec![
            pause(0, 900, 4_900),
            partition(0, Link::Store, 950, 2_000),
        ]);
        history
            .executions
            .push(execution(4, "op-1", 1, 7_000, 7_050));
        history.operations[0] = answered("op-1", 4);
        let verdict = check(&history, settings(Ambiguous::Retry));
        // Counted once, as a pause.
        assert_eq!(verdict.figures.interrupted_by_pause, 1);
        assert_eq!(verdict.figures.interrupted_by_partition, 0);
        assert_eq!(verdict.figures.explained_duplicates, 0);
        assert!(!verdict.passed());
        // A partition of gateway 1 during the second execution explains the third.
        history
            .faults
            .push(partition(1, Link::Upstream, 4_010, 5_000));
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.interrupted_by_partition, 1);
        assert_eq!(verdict.figures.explained_duplicates, 1);
        assert!(verdict.passed());
    }

    fn sqlite(ambiguous: Ambiguous) -> Settings {
        Settings {
            store: StoreKind::Sqlite,
            ..settings(ambiguous)
        }
    }

    #[test]
    fn a_clock_step_during_the_call_explains_the_duplicate_on_sqlite_in_retry_mode() {
        // Gateway 1's clock jumped 5 s ahead at 1.02 s, while gateway 0's execution ran: gateway
        // 0's lease looked run out to it.
        let history = executed_twice(vec![step(1, 1_020, 5_000)]);
        let verdict = check(&history, sqlite(Ambiguous::Retry));
        assert_eq!(verdict.figures.interrupted_by_clock_step, 1);
        assert_eq!(verdict.figures.explained_duplicates, 1);
        assert!(verdict.passed());
        // PostgreSQL and Redis read their server's clock: a gateway's step explains nothing.
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.interrupted_by_clock_step, 0);
        assert_eq!(
            verdict.failures,
            [Failure::UnexplainedDuplicates { count: 1 }]
        );
        // Reject mode never executes twice, whatever the clocks say.
        assert_eq!(
            check(&history, sqlite(Ambiguous::Reject)).failures,
            [Failure::Duplicates { count: 1 }]
        );
    }

    #[test]
    fn clocks_set_apart_before_the_call_explain_it_and_clocks_set_right_do_not() {
        // Set apart at 0.2 s and still apart when the first execution started at 1 s.
        let apart = executed_twice(vec![step(0, 200, -4_000)]);
        let verdict = check(&apart, sqlite(Ambiguous::Retry));
        assert_eq!(verdict.figures.explained_duplicates, 1);
        // Set right again at 0.5 s: the gateways agreed for the whole call.
        let right = executed_twice(vec![step(0, 200, -4_000), step(0, 500, 0)]);
        let verdict = check(&right, sqlite(Ambiguous::Retry));
        assert_eq!(verdict.figures.interrupted_by_clock_step, 0);
        assert_eq!(
            verdict.failures,
            [Failure::UnexplainedDuplicates { count: 1 }]
        );
        // Both a second ahead: they agree, and a gateway alone keeps its leases by its own clock.
        let together = executed_twice(vec![step(0, 200, 1_000), step(1, 300, 1_000)]);
        let verdict = check(&together, sqlite(Ambiguous::Retry));
        assert_eq!(verdict.figures.explained_duplicates, 0);
    }

    #[test]
    fn under_clocks_set_apart_an_answered_execution_explains_a_takeover_too() {
        // The first execution was answered (its gateway still answers its client, or a duplicate
        // following its stream, after the takeover), yet the clocks, apart when it started, let
        // gateway 1 take its key over: the second execution is the skew's doing.
        let mut apart = executed_twice(vec![step(0, 200, -4_000)]);
        apart.operations[0] = answered("op-1", 1);
        let verdict = check(&apart, sqlite(Ambiguous::Retry));
        assert_eq!(verdict.figures.explained_duplicates, 1);
        assert!(verdict.passed());
        // With the clocks together, the same history fails.
        let mut together = executed_twice(vec![]);
        together.operations[0] = answered("op-1", 1);
        let verdict = check(&together, sqlite(Ambiguous::Retry));
        assert_eq!(
            verdict.failures,
            [Failure::UnexplainedDuplicates { count: 1 }]
        );
    }

    #[test]
    fn a_record_may_be_gone_as_much_sooner_as_a_clock_was_off() {
        // Started at 58 s with a 60 s TTL: kept until 118 s. Read at 115.5 s, 2.5 s sooner.
        let mut history = History {
            operations: vec![answered("k", 1)],
            executions: vec![execution(1, "k", 0, 58_000, 58_020)],
            records_read: at(115_500),
            records: [("k".to_owned(), RecordState::Absent)].into(),
            ..History::default()
        };
        history.operations[0].started = at(58_000);
        assert_eq!(
            check(&history, sqlite(Ambiguous::Reject)).failures,
            [Failure::Forgotten { count: 1 }]
        );
        // A clock 3 s behind wrote it: it expired up to 3 s sooner in true time.
        history.faults.push(step(0, 50_000, -3_000));
        let verdict = check(&history, sqlite(Ambiguous::Reject));
        assert_eq!(verdict.figures.forgotten, 0);
        assert!(verdict.passed());
    }

    fn failover(down: u64) -> FaultEvent {
        FaultEvent::Failover {
            port: 7000,
            down: at(down),
            promoted: at(down + 3_000),
            up: at(down + 6_000),
        }
    }

    fn cluster(ambiguous: Ambiguous) -> Settings {
        Settings {
            store: StoreKind::RedisCluster,
            ..settings(ambiguous)
        }
    }

    /// A gateway's 2xx answer naming `execution` reached the proxy at `ms`, and was dropped.
    fn acknowledged(key: &str, execution: u64, ms: u64) -> Attempt {
        Attempt {
            key: key.into(),
            at: at(ms - 100),
            gateway: Some(GatewayId(0)),
            result: AttemptResult::Dropped {
                status: 201,
                stalled: false,
            },
            answer: Some(Answer {
                execution,
                at: at(ms),
            }),
        }
    }

    /// `op-1` executed at 1 s and answered at 1.06 s (the answer dropped), then executed again
    /// at 4 s.
    fn executed_again_after_an_answer(faults: Vec<FaultEvent>) -> History {
        let mut history = executed_twice(faults);
        history.attempts = vec![acknowledged("op-1", 1, 1_060)];
        history
    }

    #[test]
    fn a_failover_after_an_acknowledged_completion_explains_the_duplicate_on_a_cluster() {
        for mode in [Ambiguous::Reject, Ambiguous::Retry] {
            let verdict = check(
                &executed_again_after_an_answer(vec![failover(2_000)]),
                cluster(mode),
            );
            assert_eq!(verdict.figures.duplicates, 1);
            assert_eq!(verdict.figures.explained_duplicates, 1);
            assert_eq!(verdict.figures.explained_by_failover, 1);
            assert_eq!(verdict.figures.lost_to_failover, 1);
            assert_eq!(verdict.figures.lost_to_failover_at_end, 0);
            assert_eq!(verdict.faults.failovers, 1);
            assert_eq!(verdict.faults.longest_failover_ms, 3_000);
            assert_eq!(verdict.failures, []);
        }
    }

    #[test]
    fn a_failover_during_the_first_execution_explains_the_duplicate() {
        // Its record, written before the execution started, may not have reached the replica.
        let verdict = check(
            &executed_again_after_an_answer(vec![failover(1_000)]),
            cluster(Ambiguous::Reject),
        );
        assert_eq!(verdict.figures.explained_by_failover, 1);
        assert!(verdict.passed());
    }

    #[test]
    fn a_failover_before_the_first_execution_explains_nothing() {
        let verdict = check(
            &executed_again_after_an_answer(vec![failover(999)]),
            cluster(Ambiguous::Reject),
        );
        assert_eq!(verdict.figures.explained_by_failover, 0);
        assert_eq!(verdict.figures.lost_to_failover, 0);
        assert_eq!(verdict.failures, [Failure::Duplicates { count: 1 }]);
    }

    #[test]
    fn a_failover_long_after_the_acknowledgement_explains_nothing() {
        let bound = u64::try_from(FAILOVER_BOUND.as_millis()).unwrap();
        let mut history = executed_again_after_an_answer(vec![failover(1_060 + bound + 1)]);
        // The second execution after the failover, as in the explained case.
        history.executions[1].start = at(1_060 + bound + 500);
        history.executions[1].end = Some(at(1_060 + bound + 550));
        let verdict = check(&history, cluster(Ambiguous::Reject));
        assert_eq!(verdict.figures.explained_by_failover, 0);
        assert_eq!(verdict.figures.lost_to_failover, 0);
        assert_eq!(verdict.failures, [Failure::Duplicates { count: 1 }]);
        // At the bound, it explains the duplicate.
        history.faults = vec![failover(1_060 + bound)];
        let verdict = check(&history, cluster(Ambiguous::Reject));
        assert_eq!(verdict.figures.explained_by_failover, 1);
        assert!(verdict.passed());
    }

    #[test]
    fn a_failover_after_the_second_execution_explains_nothing() {
        let verdict = check(
            &executed_again_after_an_answer(vec![failover(4_001)]),
            cluster(Ambiguous::Reject),
        );
        assert_eq!(verdict.figures.explained_by_failover, 0);
        assert_eq!(verdict.failures, [Failure::Duplicates { count: 1 }]);
    }

    #[test]
    fn an_execution_no_gateway_answered_is_not_lost_to_failover() {
        let verdict = check(
            &executed_twice(vec![failover(2_000)]),
            cluster(Ambiguous::Reject),
        );
        assert_eq!(verdict.figures.lost_to_failover, 0);
        assert_eq!(verdict.failures, [Failure::Duplicates { count: 1 }]);
    }

    #[test]
    fn a_failover_explains_nothing_on_other_stores() {
        for store in [
            StoreKind::Redis,
            StoreKind::Postgres,
            StoreKind::Mysql,
            StoreKind::Sqlite,
        ] {
            let settings = Settings {
                store,
                ..settings(Ambiguous::Reject)
            };
            let verdict = check(
                &executed_again_after_an_answer(vec![failover(2_000)]),
                settings,
            );
            assert_eq!(verdict.figures.explained_duplicates, 0);
            assert_eq!(verdict.figures.explained_by_failover, 0);
            assert_eq!(verdict.figures.lost_to_failover, 0);
            assert_eq!(verdict.failures, [Failure::Duplicates { count: 1 }]);
        }
    }

    #[test]
    fn one_lost_record_explains_one_extra_execution() {
        let mut history = executed_again_after_an_answer(vec![failover(2_000)]);
        history
            .executions
            .push(execution(4, "op-1", 1, 7_000, 7_050));
        history.operations[0] = answered("op-1", 4);
        let verdict = check(&history, cluster(Ambiguous::Reject));
        assert_eq!(verdict.figures.explained_by_failover, 0);
        assert_eq!(verdict.figures.lost_to_failover, 1);
        assert_eq!(verdict.failures, [Failure::Duplicates { count: 1 }]);
    }

    #[test]
    fn a_completed_key_missing_after_a_failover_is_lost_to_it_not_forgotten() {
        let history = |state| History {
            operations: vec![answered("gone", 1), answered("kept", 2)],
            executions: vec![
                execution(1, "gone", 0, 1_000, 1_050),
                execution(2, "kept", 0, 1_000, 1_050),
            ],
            attempts: vec![acknowledged("gone", 1, 1_060)],
            faults: vec![failover(2_000)],
            records: [
                ("gone".to_owned(), state),
                ("kept".to_owned(), RecordState::Completed),
            ]
            .into(),
            ..History::default()
        };
        for state in [RecordState::Absent, RecordState::Processing] {
            let verdict = check(&history(state), cluster(Ambiguous::Reject));
            assert_eq!(verdict.figures.lost_to_failover, 1);
            assert_eq!(verdict.figures.lost_to_failover_at_end, 1);
            assert_eq!(verdict.figures.forgotten, 0);
            assert_eq!(verdict.figures.stuck, 0);
            assert_eq!(verdict.failures, []);
        }
        // On a single Redis, a missing record is forgotten.
        let single = Settings {
            store: StoreKind::Redis,
            ..settings(Ambiguous::Reject)
        };
        let verdict = check(&history(RecordState::Absent), single);
        assert_eq!(verdict.figures.lost_to_failover, 0);
        assert_eq!(verdict.failures, [Failure::Forgotten { count: 1 }]);
    }

    #[test]
    fn a_failover_during_the_call_interrupts_it_on_a_cluster_only() {
        // The master killed at 0.9 s, its replica master at 3.9 s: gateway 0 could not record
        // the first execution's result, and the key went to the next attempt.
        let history = executed_twice(vec![failover(900)]);
        let verdict = check(&history, cluster(Ambiguous::Retry));
        assert_eq!(verdict.figures.interrupted_by_failover, 1);
        assert_eq!(verdict.figures.explained_duplicates, 1);
        assert_eq!(verdict.figures.explained_by_failover, 0);
        assert_eq!(verdict.failures, []);
        // In reject mode an interruption explains nothing, and no gateway answered 2xx for the
        // first execution: no record of it was lost.
        assert_eq!(
            check(&history, cluster(Ambiguous::Reject)).failures,
            [Failure::Duplicates { count: 1 }]
        );
        let verdict = check(&history, settings(Ambiguous::Retry));
        assert_eq!(verdict.figures.interrupted_by_failover, 0);
        assert_eq!(
            verdict.failures,
            [Failure::UnexplainedDuplicates { count: 1 }]
        );
    }
}
