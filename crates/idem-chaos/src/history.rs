//! The history of a run: every logical operation, every attempt that reached the gateways,
//! every execution of the upstream and every fault, stamped with the time since the run began.
//!
//! The harness writes it while the run goes on (from the callers, the proxy, the upstream and
//! the fault schedule) and [`check()`](crate::check()) reads it at the end. `--history FILE`
//! saves it as JSON, to look into a failed run.
//!
//! # Examples
//!
//! ```
//! use idem_chaos::Stamp;
//!
//! let kill = Stamp::from_millis(1_500);
//! assert_eq!(kill.to_string(), "1.500s");
//! assert!(Stamp::from_millis(900) < kill);
//! ```

use std::{
    collections::BTreeMap,
    fmt,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// A moment of the run: microseconds since it started.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Stamp(u64);

impl Stamp {
    /// `ms` milliseconds after the start.
    pub const fn from_millis(ms: u64) -> Self {
        Self(ms * 1000)
    }

    /// `elapsed` after the start.
    pub fn from_duration(elapsed: Duration) -> Self {
        Self(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
    }

    /// The time since the start.
    pub const fn as_duration(self) -> Duration {
        Duration::from_micros(self.0)
    }

    /// `self + by`, capped.
    #[must_use]
    pub fn saturating_add(self, by: Duration) -> Self {
        Self(self.0.saturating_add(Self::from_duration(by).0))
    }
}

impl fmt::Display for Stamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03}s", self.0 / 1_000_000, self.0 / 1000 % 1000)
    }
}

/// One of the gateways of the run, numbered from 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GatewayId(pub u8);

impl fmt::Display for GatewayId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "gateway {}", self.0)
    }
}

/// A network link of a gateway, which a partition cuts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Link {
    /// To the store's server (PostgreSQL, MariaDB or Redis; a SQLite file has no network link).
    Store,
    /// To the upstream.
    Upstream,
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Store => "store",
            Self::Upstream => "upstream",
        })
    }
}

/// What a partition does to a link's traffic while it lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PartitionMode {
    /// Bytes from the gateway to the server are held: requests do not arrive, and new
    /// connections stall.
    GatewayToServer,
    /// Bytes from the server to the gateway are held: requests arrive and are acted on, their
    /// answers do not come back, and new connections stall.
    ServerToGateway,
    /// Both directions are held.
    BothWays,
    /// Every connection is reset (RST), and new ones are reset at once.
    Reset,
}

impl PartitionMode {
    /// Every mode, in the order the schedule draws from.
    pub const ALL: [Self; 4] = [
        Self::GatewayToServer,
        Self::ServerToGateway,
        Self::BothWays,
        Self::Reset,
    ];
}

impl fmt::Display for PartitionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::GatewayToServer => "gateway-to-server traffic black-holed",
            Self::ServerToGateway => "server-to-gateway traffic black-holed",
            Self::BothWays => "traffic black-holed both ways",
            Self::Reset => "every connection reset",
        })
    }
}

/// One logical operation: one key, sent as many times as its caller needed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// Its idempotency key.
    pub key: String,
    /// When the caller started it.
    pub started: Stamp,
    /// When the caller got its result.
    pub ended: Stamp,
    /// What the caller got.
    pub outcome: Reply,
}

/// What a caller got for an operation, as `idem_client` reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reply {
    /// A definite answer: executed, or replayed.
    Answered {
        /// Its status.
        status: u16,
        /// Whether it was a replay (`Idempotent-Replayed: true`).
        replayed: bool,
        /// The upstream execution the body names, when it names one.
        execution: Option<u64>,
    },
    /// The gateway recorded that the outcome is unknown (`--ambiguous reject`): definite, but
    /// the operation may or may not have taken effect.
    OutcomeUnknown,
    /// No definite answer before the deadline or the last attempt: the operation is lost.
    GaveUp {
        /// Why the client stopped, for people reading the history.
        reason: String,
    },
}

/// One HTTP request of a caller, as the proxy in front of the gateways saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attempt {
    /// The key it carried.
    pub key: String,
    /// When it reached the proxy.
    pub at: Stamp,
    /// The gateway it was forwarded to; `None` when neither could be reached.
    pub gateway: Option<GatewayId>,
    /// What became of it.
    pub result: AttemptResult,
    /// The gateway's 2xx answer naming an execution, whether the caller got it or not.
    #[serde(default)]
    pub answer: Option<Answer>,
}

/// A 2xx answer of a gateway: the execution it names was completed, its result recorded (or
/// given up on after a lease), before it was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The execution its body names.
    pub execution: u64,
    /// When it reached the proxy.
    pub at: Stamp,
}

/// What became of an [`Attempt`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AttemptResult {
    /// The gateway's answer was passed on to the caller.
    Answered {
        /// Its status.
        status: u16,
    },
    /// The gateway answered, and the proxy dropped the answer: the caller's attempt failed after
    /// the gateway had done its work.
    Dropped {
        /// The status the caller never saw.
        status: u16,
        /// Whether the proxy held the connection until the caller's attempt timed out (rather
        /// than closing it at once).
        stalled: bool,
    },
    /// The connection to the gateway broke after the request was sent (the gateway died).
    Broken,
    /// No gateway accepted a connection; nothing was sent.
    NoGateway,
    /// The caller went away (its attempt timed out) before the gateway answered.
    Abandoned,
}

/// One execution of an operation by the upstream: its effect, applied once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Execution {
    /// Its number, from 1, in the order executions started; the response body names it.
    pub id: u64,
    /// The operation's key.
    pub key: String,
    /// The gateway that forwarded it (each gateway has its own upstream port).
    pub gateway: GatewayId,
    /// The fencing token the gateway sent with it.
    pub token: u64,
    /// When the upstream started it (and applied its effect).
    pub start: Stamp,
    /// When the upstream answered, or stopped because the gateway went away; `None` while it
    /// runs.
    pub end: Option<Stamp>,
}

/// A request the upstream refused because its fencing token was lower than one it had already
/// applied for the operation: a gateway that lost its key wrote late. Nothing was executed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StaleWrite {
    /// The operation's key.
    pub key: String,
    /// The gateway that forwarded it.
    pub gateway: GatewayId,
    /// Its fencing token.
    pub token: u64,
    /// The highest token the upstream had applied for the operation.
    pub highest: u64,
    /// When it reached the upstream.
    pub at: Stamp,
}

/// A fault the harness injected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultEvent {
    /// A gateway was SIGKILLed; `at` is when it was known dead.
    GatewayKilled {
        /// Which.
        gateway: GatewayId,
        /// When.
        at: Stamp,
    },
    /// A gateway was stopped (SIGSTOP) and continued (SIGCONT).
    GatewayPaused {
        /// Which.
        gateway: GatewayId,
        /// When it was stopped.
        from: Stamp,
        /// When it was continued, or found killed.
        until: Stamp,
    },
    /// A killed gateway listens again.
    GatewayRestarted {
        /// Which.
        gateway: GatewayId,
        /// When it answered its readiness check.
        at: Stamp,
    },
    /// The store was restarted: its server crashed and started again, or, for SQLite, every
    /// gateway was killed and restarted on the same file.
    StoreRestarted {
        /// When it went down.
        down: Stamp,
        /// When it answered again.
        up: Stamp,
    },
    /// A master of the Redis Cluster was SIGKILLed, its replica took its place, and it came
    /// back as a replica.
    Failover {
        /// The killed master's port.
        port: u16,
        /// When it was killed.
        down: Stamp,
        /// When its replica was master and every node said `cluster_state:ok`.
        promoted: Stamp,
        /// When it was a replica of the new master, in sync.
        up: Stamp,
    },
    /// The upstream answered later than the callers' attempt timeout.
    UpstreamSlow {
        /// From.
        from: Stamp,
        /// Until.
        until: Stamp,
    },
    /// The upstream answered 503 at once, without executing anything.
    UpstreamFailing {
        /// From.
        from: Stamp,
        /// Until.
        until: Stamp,
    },
    /// A gateway's clock was set `offset_ms` milliseconds from true time (behind when
    /// negative; 0: right again).
    ClockStepped {
        /// Which.
        gateway: GatewayId,
        /// When.
        at: Stamp,
        /// Its new offset from true time.
        offset_ms: i64,
    },
    /// A gateway was cut from its store or its upstream.
    Partitioned {
        /// Which.
        gateway: GatewayId,
        /// From what.
        link: Link,
        /// How.
        mode: PartitionMode,
        /// When the link was cut.
        from: Stamp,
        /// When it was whole again.
        until: Stamp,
    },
}

/// The state of a key's record in the store at the end of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordState {
    /// Still held by a worker: after the end of the run and one more lease, a stuck key.
    Processing,
    /// Completed: its response is replayed to retries.
    Completed,
    /// No record: never acquired, released, or forgotten.
    Absent,
}

/// Everything a run recorded.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The logical operations, in the order they ended.
    pub operations: Vec<Operation>,
    /// The attempts, in the order they ended.
    pub attempts: Vec<Attempt>,
    /// The upstream's executions, in the order they started.
    pub executions: Vec<Execution>,
    /// The requests the upstream refused for a stale fencing token, in the order they came.
    pub stale_writes: Vec<StaleWrite>,
    /// The faults, in the order they were injected.
    pub faults: Vec<FaultEvent>,
    /// The state of each operation's record after the run, by key (empty when not read).
    pub records: BTreeMap<String, RecordState>,
    /// When the last record was read.
    pub records_read: Stamp,
}

/// Collects the history while the run goes on; cheap to clone, shared by every part of the run.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    start: Instant,
    history: Mutex<History>,
    next_execution: AtomicU64,
}

/// Counts for the progress line.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tally {
    pub(crate) operations: usize,
    pub(crate) attempts: usize,
    pub(crate) dropped: usize,
    pub(crate) kills: usize,
    pub(crate) pauses: usize,
    pub(crate) store_restarts: usize,
    pub(crate) partitions: usize,
}

impl Recorder {
    /// A recorder whose clock starts now.
    pub(crate) fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                start: Instant::now(),
                history: Mutex::default(),
                next_execution: AtomicU64::new(1),
            }),
        }
    }

    /// The time since the start.
    pub(crate) fn now(&self) -> Stamp {
        Stamp::from_duration(self.inner.start.elapsed())
    }

    fn with<T>(&self, f: impl FnOnce(&mut History) -> T) -> T {
        f(&mut self
            .inner
            .history
            .lock()
            .expect("no panic holds the history"))
    }

    pub(crate) fn operation(&self, operation: Operation) {
        self.with(|history| history.operations.push(operation));
    }

    pub(crate) fn attempt(&self, attempt: Attempt) {
        self.with(|history| history.attempts.push(attempt));
    }

    pub(crate) fn fault(&self, fault: FaultEvent) {
        self.with(|history| history.faults.push(fault));
    }

    pub(crate) fn stale_write(&self, stale: StaleWrite) {
        self.with(|history| history.stale_writes.push(stale));
    }

    /// Records that the upstream starts executing `key` for `gateway` with fencing token
    /// `token`; the execution ends when the returned guard is dropped, whether the handler
    /// finished or was cancelled.
    pub(crate) fn execution(&self, key: String, gateway: GatewayId, token: u64) -> ExecutionGuard {
        let (id, index) = self.with(|history| {
            // Stamped and numbered under the lock, so that ids follow the order of `executions`
            // and of their starts.
            let start = self.now();
            let id = self.inner.next_execution.fetch_add(1, Ordering::Relaxed);
            history.executions.push(Execution {
                id,
                key,
                gateway,
                token,
                start,
                end: None,
            });
            (id, history.executions.len() - 1)
        });
        ExecutionGuard {
            recorder: self.clone(),
            id,
            index,
        }
    }

    pub(crate) fn tally(&self) -> Tally {
        self.with(|history| Tally {
            operations: history.operations.len(),
            attempts: history.attempts.len(),
            dropped: history
                .attempts
                .iter()
                .filter(|a| matches!(a.result, AttemptResult::Dropped { .. }))
                .count(),
            kills: history
                .faults
                .iter()
                .filter(|f| matches!(f, FaultEvent::GatewayKilled { .. }))
                .count(),
            pauses: history
                .faults
                .iter()
                .filter(|f| matches!(f, FaultEvent::GatewayPaused { .. }))
                .count(),
            store_restarts: history
                .faults
                .iter()
                .filter(|f| {
                    matches!(
                        f,
                        FaultEvent::StoreRestarted { .. } | FaultEvent::Failover { .. }
                    )
                })
                .count(),
            partitions: history
                .faults
                .iter()
                .filter(|f| matches!(f, FaultEvent::Partitioned { .. }))
                .count(),
        })
    }

    /// The keys of the operations so far.
    pub(crate) fn keys(&self) -> Vec<String> {
        self.with(|history| history.operations.iter().map(|o| o.key.clone()).collect())
    }

    /// The history, with the records read at the end, the last one at `read`.
    pub(crate) fn finish(&self, records: BTreeMap<String, RecordState>, read: Stamp) -> History {
        self.with(|history| {
            let mut history = std::mem::take(history);
            history.records = records;
            history.records_read = read;
            history
        })
    }
}

/// An execution in progress; dropping it records its end.
#[derive(Debug)]
pub(crate) struct ExecutionGuard {
    recorder: Recorder,
    id: u64,
    index: usize,
}

impl ExecutionGuard {
    /// The execution's number.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

impl Drop for ExecutionGuard {
    fn drop(&mut self) {
        let end = self.recorder.now();
        self.recorder.with(|history| {
            // Absent once the history was taken: the run is over and nobody reads it anymore.
            if let Some(execution) = history.executions.get_mut(self.index) {
                execution.end = Some(end);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_execution_ends_when_its_guard_is_dropped() {
        let recorder = Recorder::new();
        let first = recorder.execution("a".into(), GatewayId(0), 1);
        let second = recorder.execution("b".into(), GatewayId(1), 2);
        assert_eq!((first.id(), second.id()), (1, 2));
        drop(second);
        let history = recorder.finish(BTreeMap::new(), Stamp::default());
        assert_eq!(history.executions.len(), 2);
        assert_eq!(history.executions[0].end, None);
        assert!(history.executions[1].end.is_some());
        assert_eq!(history.executions[1].gateway, GatewayId(1));
        assert_eq!(history.executions[1].token, 2);
        drop(first);
    }

    #[test]
    fn stamps_show_seconds_and_milliseconds() {
        assert_eq!(Stamp::from_millis(0).to_string(), "0.000s");
        assert_eq!(Stamp::from_millis(61_042).to_string(), "61.042s");
        assert_eq!(
            Stamp::from_millis(1).saturating_add(Duration::from_millis(2)),
            Stamp::from_millis(3)
        );
    }
}
