//! Group commit: a store's writes, coalesced into one statement (or one round trip) per batch.
//!
//! Each kind of write ([`Kind`]: acquire, complete, renew, release) has a [`Queue`] and a task
//! that serves it. The task takes the oldest waiting operation, adds what else is already waiting,
//! up to the batch size, runs the batch ([`Kind::attempt`]: the store's statements, in one
//! transaction), and answers each caller once that has returned, so after the commit: nothing is
//! acknowledged before it is durable. Up to `in_flight` batches run at once; the operations that
//! arrive meanwhile form the next one. An operation that finds room runs at once, alone: batches
//! only grow when operations arrive faster than the database commits them. With an `overlap`
//! delay, a batch starts beside running ones only once the youngest of them has run that long: a
//! database whose concurrent batches contend (MySQL's, inserting at the end of the same indexes)
//! runs one at a time, and a batch stuck in a lock wait holds the others up for the delay only.
//!
//! Operations on one address run in the order they were queued: one on an address that a running
//! batch holds waits for it, and so do the newer ones behind a waiting one. A batch holds at most
//! one completion, renewal or release per address, so that a statement never changes a row twice;
//! it may hold several acquisitions of one address ([`Kind::REPEATS`]), of which only the first
//! writes. An acquisition that lost a race runs again in the next batch, before anything newer on
//! its address.
//!
//! Each operation gets its own answer: a lost lease or a record that cannot be read is that
//! operation's alone. When the server rejects a whole batch for something one operation may have
//! caused (a data exception, a deadlock with another batch, as the row locks of two batches may be
//! taken in different orders), it rolled all of it back, and each operation runs again on its own
//! ([`Failed::one_at_fault`]). Any other failure (a connection lost, a statement timeout) is every
//! operation's: each caller gets it ([`BatchError::Batch`]), and none of the operations was
//! acknowledged.
//!
//! The PostgreSQL and MySQL stores run their writes through it.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    error::Error as StdError,
    fmt,
    future::Future,
    sync::Arc,
    time::Duration,
};

use futures_util::{StreamExt, stream::FuturesUnordered};
use idem_core::{Address, StoreError};
use tokio::{
    sync::{mpsc, oneshot},
    time::{Instant, sleep_until},
};

/// How many times an acquisition runs again after losing a race to a concurrent writer of the
/// same key. Each loss means another writer committed a change to that record in between, so this
/// is only reached under pathological contention.
pub const ATTEMPTS: u32 = 8;

/// What one operation's statement decided.
#[derive(Debug)]
pub enum Step<T> {
    /// Its answer.
    Done(Result<T, StoreError>),
    /// It lost a race with a concurrent writer: run it again.
    Again,
}

/// A kind of write that runs in batches.
pub trait Kind: Send + Sync + 'static {
    /// One operation's arguments.
    type Op: Send + Sync + 'static;
    /// One operation's answer.
    type Output: Send + 'static;
    /// What runs a batch: the store's connections and statements.
    type Runner: Send + Sync + 'static;
    /// Whether one batch may hold several operations on one address, in the order they were
    /// queued: the statement lets the first one write, and answers the others as it would have
    /// without that write, or has them run again.
    const REPEATS: bool;

    /// The record the operation is about.
    fn address(op: &Self::Op) -> &Address;

    /// Runs `ops` (at distinct addresses, unless [`REPEATS`](Self::REPEATS)) as one batch, on a
    /// connection of `runner`'s: their steps, in order. An error is the whole batch's, and none
    /// of its operations was applied.
    fn attempt<'a>(
        runner: &'a Self::Runner,
        ops: &'a [&'a Self::Op],
    ) -> impl Future<Output = Result<Vec<Step<Self::Output>>, Failed>> + Send + 'a;
}

/// How a [`Queue`] batches.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Operations in one batch at most.
    pub batch_size: usize,
    /// Batches running at once at most.
    pub in_flight: usize,
    /// How long the youngest running batch runs before another starts beside it; zero starts
    /// one as soon as there is room.
    pub overlap: Duration,
    /// Operations waiting in the queue at most.
    pub capacity: usize,
    /// How long a caller waits for room in a full queue.
    pub wait: Duration,
}

/// One caller's operation, waiting for its batch.
struct Request<K: Kind> {
    op: K::Op,
    /// The races it lost so far.
    raced: u32,
    reply: oneshot::Sender<Result<K::Output, StoreError>>,
}

/// The queue of one kind of write, and the task that runs it in batches.
pub struct Queue<K: Kind> {
    sender: mpsc::Sender<Request<K>>,
    capacity: usize,
    wait: Duration,
}

impl<K: Kind> Queue<K> {
    /// Starts the task: up to `in_flight` batches at a time of at most `batch_size` operations,
    /// taken from a queue of at most `capacity` operations, in which a caller waits at most `wait`
    /// for room. The task ends once the queue is dropped and emptied.
    pub fn spawn(runner: Arc<K::Runner>, limits: Limits) -> Self {
        let (sender, receiver) = mpsc::channel(limits.capacity);
        tokio::spawn(serve::<K>(runner, receiver, limits));
        let Limits { capacity, wait, .. } = limits;
        Self {
            sender,
            capacity,
            wait,
        }
    }

    /// Runs `op` in the next batch that can take it, and returns its answer once that batch
    /// committed.
    pub async fn call(&self, op: K::Op) -> Result<K::Output, StoreError> {
        let (reply, answer) = oneshot::channel();
        let request = Request {
            op,
            raced: 0,
            reply,
        };
        match self.sender.try_send(request) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return Err(StoreError::unavailable(BatchError::Stopped));
            }
            Err(mpsc::error::TrySendError::Full(request)) => {
                match tokio::time::timeout(self.wait, self.sender.send(request)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return Err(StoreError::unavailable(BatchError::Stopped)),
                    Err(_) => {
                        return Err(StoreError::unavailable(BatchError::QueueFull {
                            capacity: self.capacity,
                            waited: self.wait,
                        }));
                    }
                }
            }
        }
        answer
            .await
            .unwrap_or_else(|_| Err(StoreError::unavailable(BatchError::Stopped)))
    }
}

/// The task: up to `in_flight` batches at a time, each beside others only once they ran for the
/// `overlap` delay, until the queue is dropped and empty.
async fn serve<K: Kind>(
    runner: Arc<K::Runner>,
    mut receiver: mpsc::Receiver<Request<K>>,
    limits: Limits,
) {
    let Limits {
        batch_size,
        in_flight,
        overlap,
        ..
    } = limits;
    let mut pending = VecDeque::new();
    let mut running = FuturesUnordered::new();
    // The addresses of the running batches: their next operations wait for them.
    let mut busy: HashSet<Address> = HashSet::new();
    // When the running batches started, in the order they did.
    let mut started: VecDeque<Instant> = VecDeque::new();
    let mut open = true;
    loop {
        // When another batch may start beside the running ones.
        let room_at = |started: &VecDeque<Instant>| started.back().map(|&at| at + overlap);
        while running.len() < in_flight && room_at(&started).is_none_or(|at| at <= Instant::now()) {
            let shape = Shape {
                batch_size,
                repeats: K::REPEATS,
                busy: &busy,
            };
            let (batch, waiting) = form(
                std::mem::take(&mut pending),
                || receiver.try_recv().ok(),
                shape,
                |request: &Request<K>| K::address(&request.op),
                |request| request.reply.is_closed(),
            );
            pending = waiting;
            if batch.is_empty() {
                break;
            }
            busy.extend(batch.iter().map(|request| K::address(&request.op).clone()));
            let now = Instant::now();
            started.push_back(now);
            running.push(run::<K>(&runner, batch, now));
        }
        if !open && running.is_empty() && pending.is_empty() {
            return;
        }
        // Operations wait for a batch to end, or for room beside the running ones.
        let overlap_at =
            room_at(&started).filter(|_| running.len() < in_flight && !pending.is_empty());
        tokio::select! {
            Some((start, done, again)) = running.next(), if !running.is_empty() => {
                if let Some(at) = started.iter().position(|&at| at == start) {
                    started.remove(at);
                }
                for address in &done {
                    busy.remove(address);
                }
                // Lost races run again first, before anything newer on their addresses.
                for request in again.into_iter().rev() {
                    pending.push_front(request);
                }
            }
            // Writes that wait for a running batch's addresses are held to one batch's worth.
            request = receiver.recv(), if open && running.len() < in_flight && pending.len() < batch_size => match request {
                Some(request) => pending.push_back(request),
                None => open = false,
            },
            () = sleep_until(overlap_at.unwrap_or_else(Instant::now)), if overlap_at.is_some() => {}
        }
    }
}

/// What a batch may hold, for [`form`].
#[derive(Clone, Copy)]
struct Shape<'a> {
    batch_size: usize,
    /// Several items at one address: [`Kind::REPEATS`].
    repeats: bool,
    /// The addresses of the running batches.
    busy: &'a HashSet<Address>,
}

/// Splits `pending` (oldest first), then what `more` yields while there is room, into the next
/// batch and what waits for a later one (oldest first again); together at most `batch_size` when
/// `pending` was. An item goes into the batch unless the batch is full, its address is `busy` (in
/// a running batch), an older item at its address waits, or (unless it `repeats`) one is in the
/// batch: so items at one address keep their order. Items whose caller is `gone` are dropped.
fn form<T>(
    pending: VecDeque<T>,
    mut more: impl FnMut() -> Option<T>,
    limits: Shape<'_>,
    address: impl Fn(&T) -> &Address,
    gone: impl Fn(&T) -> bool,
) -> (Vec<T>, VecDeque<T>) {
    let Shape {
        batch_size,
        repeats,
        busy,
    } = limits;
    let mut batch = Vec::new();
    let mut waiting = VecDeque::new();
    // Whether an address's items go into this batch (`true`) or wait (`false`) from now on.
    let mut seen: HashMap<Address, bool> = HashMap::new();
    let mut place = |item: T, batch: &mut Vec<T>, waiting: &mut VecDeque<T>| {
        if gone(&item) {
            return;
        }
        let at = address(&item);
        let joins = match seen.get(at) {
            None => !busy.contains(at),
            Some(&in_batch) => in_batch && repeats,
        };
        let joins = joins && batch.len() < batch_size;
        seen.insert(address(&item).clone(), joins);
        if joins {
            batch.push(item);
        } else {
            waiting.push_back(item);
        }
    };
    for item in pending {
        place(item, &mut batch, &mut waiting);
    }
    while batch.len() < batch_size && batch.len() + waiting.len() < batch_size {
        let Some(item) = more() else { break };
        place(item, &mut batch, &mut waiting);
    }
    (batch, waiting)
}

/// Runs `batch`, which started at `start`, and answers its callers; returns `start`, the batch's
/// addresses, and the requests that lost a race and run again.
async fn run<K: Kind>(
    runner: &K::Runner,
    mut batch: Vec<Request<K>>,
    start: Instant,
) -> (Instant, Vec<Address>, Vec<Request<K>>) {
    // One order of row locks for every batch (see `sql/acquire.sql`); stable, so operations on one
    // address stay in the order they were queued.
    batch.sort_by(|a, b| K::address(&a.op).cmp(K::address(&b.op)));
    let steps = match attempt::<K>(runner, &batch).await {
        Ok(steps) => steps,
        Err(failed) if failed.one_at_fault && batch.len() > 1 => {
            tracing::debug!(size = batch.len(), error = %failed.error, "a batch failed: running its operations one by one");
            let mut steps = Vec::with_capacity(batch.len());
            for request in &batch {
                steps.push(
                    match attempt::<K>(runner, std::slice::from_ref(request)).await {
                        Ok(mut one) => one.pop().expect("one step per operation"),
                        Err(failed) => Step::Done(Err(failed.error)),
                    },
                );
            }
            steps
        }
        Err(failed) => fan_out(failed.error, batch.len())
            .into_iter()
            .map(|error| Step::Done(Err(error)))
            .collect(),
    };
    let addresses = batch
        .iter()
        .map(|request| K::address(&request.op).clone())
        .collect();
    let mut again = Vec::new();
    for (mut request, step) in batch.into_iter().zip(steps) {
        let answer = match step {
            Step::Done(answer) => answer,
            Step::Again if request.raced + 1 < ATTEMPTS => {
                request.raced += 1;
                again.push(request);
                continue;
            }
            Step::Again => Err(StoreError::unavailable(BatchError::Contended(ATTEMPTS))),
        };
        // A caller that went away does not need its answer.
        let _ = request.reply.send(answer);
    }
    (start, addresses, again)
}

/// A batch that failed as a whole: none of its operations was applied.
#[derive(Debug)]
pub struct Failed {
    /// The error, every operation's.
    pub error: StoreError,
    /// The server rolled the batch back for something one operation may have caused (a data
    /// exception, a deadlock): its operations run again one by one.
    pub one_at_fault: bool,
}

/// The operations' `ops` of a batch, handed to [`Kind::attempt`].
async fn attempt<K: Kind>(
    runner: &K::Runner,
    batch: &[Request<K>],
) -> Result<Vec<Step<K::Output>>, Failed> {
    let ops: Vec<&K::Op> = batch.iter().map(|request| &request.op).collect();
    let steps = K::attempt(runner, &ops).await?;
    debug_assert_eq!(steps.len(), ops.len());
    Ok(steps)
}

impl From<StoreError> for Failed {
    fn from(error: StoreError) -> Self {
        Self {
            error,
            one_at_fault: false,
        }
    }
}

/// Why a batched write failed without the database saying so.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BatchError {
    /// `acquire` kept losing races to concurrent writers of the same key (each retry means another
    /// writer changed the record in between).
    #[error("acquire lost {0} races in a row on one key")]
    Contended(u32),
    /// The queue of one kind of write stayed full while the operation waited for room (the
    /// store's queue size and pool timeout): the database commits more slowly than operations
    /// arrive.
    #[error("{capacity} operations of this kind were waiting for {waited:?}: the queue is full")]
    QueueFull {
        /// The queue's capacity.
        capacity: usize,
        /// How long the operation waited for room.
        waited: Duration,
    },
    /// The task that runs the store's batches has stopped: its runtime shut down.
    #[error("the store's batches are no longer run")]
    Stopped,
    /// A batch of several operations failed as a whole; each of them fails with this error, and
    /// none was applied.
    #[error("a batch of {size} operations failed")]
    Batch {
        /// How many operations the batch held.
        size: usize,
        /// The batch's error.
        #[source]
        source: BatchFailure,
    },
}

/// The error of a whole batch, which each of its operations reports
/// ([`BatchError::Batch`]); its source is the database's error.
#[derive(Clone)]
pub struct BatchFailure(Arc<dyn StdError + Send + Sync>);

impl fmt::Debug for BatchFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for BatchFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for BatchFailure {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.0)
    }
}

/// `error` once per operation of a batch of `size`, as [`BatchError::Batch`] when there are
/// several.
fn fan_out(error: StoreError, size: usize) -> Vec<StoreError> {
    if size <= 1 {
        return vec![error];
    }
    let each = |source: Box<dyn StdError + Send + Sync>, make: fn(BatchError) -> StoreError| {
        let source = BatchFailure(Arc::from(source));
        (0..size)
            .map(|_| {
                make(BatchError::Batch {
                    size,
                    source: source.clone(),
                })
            })
            .collect()
    };
    match error {
        StoreError::LeaseLost => (0..size).map(|_| StoreError::LeaseLost).collect(),
        StoreError::Unavailable(source) => each(source, StoreError::unavailable),
        StoreError::Corrupted(source) => each(source, StoreError::corrupted),
        StoreError::Misconfigured { message, source } => {
            let source = source.map(|source| BatchFailure(Arc::from(source)));
            (0..size)
                .map(|_| StoreError::Misconfigured {
                    message: message.clone(),
                    source: source.clone().map(|source| {
                        Box::new(BatchError::Batch { size, source })
                            as Box<dyn StdError + Send + Sync>
                    }),
                })
                .collect()
        }
        other => each(Box::new(other), StoreError::unavailable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(key: &str) -> Address {
        Address::anonymous(key.parse().unwrap())
    }

    /// Items are (address, position in the queue).
    fn split(
        pending: &[(&str, usize)],
        queued: &[(&str, usize)],
        batch_size: usize,
    ) -> (Vec<usize>, Vec<usize>, usize) {
        split_around(&[], false, pending, queued, batch_size)
    }

    /// [`split`] while batches at the `busy` addresses run.
    fn split_around(
        busy: &[&str],
        repeats: bool,
        pending: &[(&str, usize)],
        queued: &[(&str, usize)],
        batch_size: usize,
    ) -> (Vec<usize>, Vec<usize>, usize) {
        let pending = pending.iter().map(|&(k, n)| (address(k), n)).collect();
        let mut queued = queued
            .iter()
            .map(|&(k, n)| (address(k), n))
            .collect::<VecDeque<_>>();
        let busy = busy.iter().map(|k| address(k)).collect();
        let shape = Shape {
            batch_size,
            repeats,
            busy: &busy,
        };
        let (batch, waiting) = form(
            pending,
            || queued.pop_front(),
            shape,
            |(a, _)| a,
            |(_, n)| *n == 99,
        );
        (
            batch.into_iter().map(|(_, n)| n).collect(),
            waiting.into_iter().map(|(_, n)| n).collect(),
            queued.len(),
        )
    }

    #[test]
    fn a_batch_takes_one_operation_per_address_and_the_rest_waits_in_order() {
        let queued = [("a", 0), ("b", 1), ("a", 2), ("c", 3), ("a", 4), ("b", 5)];
        assert_eq!(split(&[], &queued, 64), (vec![0, 1, 3], vec![2, 4, 5], 0));
        // The next batch starts with what waited: the second "a" and "b", not the third "a".
        let waiting = [("a", 2), ("a", 4), ("b", 5)];
        assert_eq!(
            split(&waiting, &[("d", 6)], 64),
            (vec![2, 5, 6], vec![4], 0)
        );
    }

    #[test]
    fn an_item_behind_a_waiting_one_at_its_address_waits_too() {
        // The batch is full when the second "b" comes: it waits, and so must the third one, even
        // though the batch has no "b".
        let pending = [("a", 0), ("b", 1), ("b", 2), ("c", 3)];
        assert_eq!(split(&pending, &[], 1), (vec![0], vec![1, 2, 3], 0));
        let pending = [("b", 1), ("b", 2), ("c", 3)];
        assert_eq!(split(&pending, &[], 2), (vec![1, 3], vec![2], 0));
    }

    #[test]
    fn the_batch_and_what_waits_stay_within_the_batch_size() {
        let queued: Vec<_> = (0..10).map(|n| ("hot", n)).collect();
        // One "hot" per batch; at most four items taken off the queue in all.
        assert_eq!(split(&[], &queued, 4), (vec![0], vec![1, 2, 3], 6));
        let distinct = [("a", 0), ("b", 1), ("c", 2), ("d", 3), ("e", 4)];
        assert_eq!(split(&[], &distinct, 4), (vec![0, 1, 2, 3], vec![], 1));
    }

    #[test]
    fn operations_at_the_address_of_a_running_batch_wait_for_it() {
        let queued = [("a", 0), ("b", 1), ("a", 2), ("c", 3)];
        assert_eq!(
            split_around(&["a"], false, &[], &queued, 64),
            (vec![1, 3], vec![0, 2], 0)
        );
    }

    #[test]
    fn a_kind_that_repeats_takes_several_operations_per_address_in_order() {
        let queued = [("a", 0), ("b", 1), ("a", 2), ("c", 3), ("a", 4)];
        assert_eq!(
            split_around(&[], true, &[], &queued, 64),
            (vec![0, 1, 2, 3, 4], vec![], 0)
        );
        // Once one "a" waits (the batch is full, or "a" is running), the later ones wait too.
        assert_eq!(
            split_around(&[], true, &[], &queued, 2),
            (vec![0, 1], vec![], 3)
        );
        let pending = [("a", 0), ("b", 1), ("a", 2)];
        assert_eq!(
            split_around(&[], true, &pending, &[("a", 3)], 2),
            (vec![0, 1], vec![2], 1)
        );
        assert_eq!(
            split_around(&["a"], true, &[], &queued, 64),
            (vec![1, 3], vec![0, 2, 4], 0)
        );
    }

    /// A kind of write whose batches take 10 ms, or wait for `gate` when they hold the key
    /// "stuck"; it counts the batches running at once.
    #[derive(Default)]
    struct Probe {
        running: std::sync::atomic::AtomicUsize,
        most: std::sync::atomic::AtomicUsize,
        gate: tokio::sync::Notify,
    }

    impl Kind for Probe {
        type Op = Address;
        type Output = ();
        type Runner = Self;
        const REPEATS: bool = false;

        fn address(op: &Address) -> &Address {
            op
        }

        fn attempt<'a>(
            probe: &'a Self,
            ops: &'a [&'a Address],
        ) -> impl Future<Output = Result<Vec<Step<()>>, Failed>> + Send + 'a {
            use std::sync::atomic::Ordering::SeqCst;
            async move {
                let now = probe.running.fetch_add(1, SeqCst) + 1;
                probe.most.fetch_max(now, SeqCst);
                if ops.iter().any(|op| op.key.as_str() == "stuck") {
                    probe.gate.notified().await;
                } else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                probe.running.fetch_sub(1, SeqCst);
                Ok(ops.iter().map(|_| Step::Done(Ok(()))).collect())
            }
        }
    }

    fn probe_queue(overlap: Duration) -> (Arc<Probe>, Arc<Queue<Probe>>) {
        let probe = Arc::new(Probe::default());
        let limits = Limits {
            batch_size: 4,
            in_flight: 2,
            overlap,
            capacity: 64,
            wait: Duration::from_secs(1),
        };
        let queue = Arc::new(Queue::spawn(Arc::clone(&probe), limits));
        (probe, queue)
    }

    /// The most batches that ran at once while 40 operations, arriving 2 ms apart, went through.
    async fn most_at_once(overlap: Duration) -> usize {
        let (probe, queue) = probe_queue(overlap);
        let mut calls = Vec::new();
        for n in 0..40 {
            let queue = Arc::clone(&queue);
            calls.push(tokio::spawn(async move {
                queue.call(address(&format!("key-{n}"))).await
            }));
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        for call in calls {
            call.await.unwrap().unwrap();
        }
        probe.most.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test(start_paused = true)]
    async fn quick_batches_overlap_only_without_a_delay() {
        assert_eq!(most_at_once(Duration::ZERO).await, 2);
        assert_eq!(most_at_once(Duration::from_millis(50)).await, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_batch_holds_the_others_up_for_the_overlap_delay_only() {
        let (probe, queue) = probe_queue(Duration::from_millis(50));
        let stuck = tokio::spawn({
            let queue = Arc::clone(&queue);
            async move { queue.call(address("stuck")).await }
        });
        tokio::time::sleep(Duration::from_millis(1)).await;
        let start = tokio::time::Instant::now();
        queue.call(address("other")).await.unwrap();
        // 49 ms waiting for room beside the stuck batch, then its own 10 ms.
        assert_eq!(start.elapsed(), Duration::from_millis(59));
        assert!(!stuck.is_finished());
        probe.gate.notify_one();
        stuck.await.unwrap().unwrap();
    }

    #[test]
    fn operations_whose_caller_went_away_are_dropped() {
        let queued = [("a", 99), ("a", 1), ("b", 99)];
        assert_eq!(split(&[], &queued, 64), (vec![1], vec![], 0));
    }
}
