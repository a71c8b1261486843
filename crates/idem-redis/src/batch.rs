//! Natural batching: the operations that arrive while a script call is on its way go together
//! in the next one.
//!
//! Operations queue in lanes: a single server has a few ([`RedisOptions::lanes`]), which each
//! address falls in by its key's hash, a Redis Cluster has one lane per slot. At most one script
//! call of a lane is on its way at a time; the lanes' calls overlap on the connection. An
//! operation that finds none goes at once, alone, sent by its caller: an idle lane adds no wait
//! and no hop to another task. One that finds a call on its way waits in the lane's queue; when
//! that call is answered, a task takes whatever the queue holds (up to the batch size, and up
//! to [`MAX_BATCH_BYTES`] of keys and arguments) and sends it as one `EVALSHA` of the script,
//! which runs the operations in order and answers each one's reply in its place, hands each
//! caller its own reply, and goes on until the queue is empty. Under load, the callers that
//! arrive during a round trip share the next one, so Redis runs one script, with one `TIME`, one
//! parse and one reply, for many keys.
//!
//! - **Order.** One call of a lane is on its way at a time, a key always falls in the same lane,
//!   and a batch runs its operations in the queue's order, so two operations on one key run in
//!   the order they were queued, within a batch and across batches (even when a batch is sent
//!   again after `NOSCRIPT`).
//! - **Failures are each operation's own.** An operation that fails inside the script (an
//!   unreadable record) has an error in its place; the others' replies stand. A failure of the
//!   whole call (the connection, a timeout) is every operation's failure, as it would have been
//!   for each sent alone.
//! - **Redis Cluster**: a script's keys must share one slot, hence a lane per slot. The lanes'
//!   calls go independently (pipelined on the nodes' connections), so a master that stalls or
//!   fails over holds up the operations of its own slots only, not those of the healthy
//!   masters. idem's keys carry a hash tag per address, so on a cluster a call rarely carries
//!   more than one operation.
//! - **An accepted operation runs**, even when its caller stops waiting for it, as an operation
//!   already written to the connection would: a caller that sent its own operation and is
//!   dropped leaves it to a task, which then serves the queue.

use std::{
    collections::{HashMap, VecDeque},
    mem,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use futures_util::future::BoxFuture;
use idem_core::StoreError;
use redis::{Cmd, ErrorKind, RedisError, RedisResult, Value, cluster_routing::Slot};
use tokio::{
    runtime::Handle,
    sync::{Semaphore, oneshot},
};

use crate::{
    Error, RedisOptions, connection::Connection, error::store_error, operation::Operation, scripts,
};

/// A batch ends before the operation that would take its keys and arguments past this (an
/// operation larger than that goes alone), so that one script call stays small next to the
/// server's limits and does not hold Redis for long.
pub(crate) const MAX_BATCH_BYTES: usize = 1024 * 1024;

/// A store's lanes and the connection their script calls go on. Clones of the store share
/// them.
pub(crate) struct Batcher {
    shared: Arc<Shared>,
}

struct Shared {
    connection: Connection,
    batch_size: usize,
    /// How many lanes a single server has (at least 1: [`RedisOptions::lanes`] sees to it).
    single_lanes: usize,
    /// One permit per operation that may wait in a lane's queue, whichever lane.
    room: Semaphore,
    /// The lanes that have been used: a few on a single server, at most one per slot (16,384) on
    /// a cluster. A lane stays once made, so that a busy lane's queue keeps its room.
    lanes: Mutex<HashMap<Lane, State>>,
    /// Where the task that serves the queue runs: the runtime the store was opened in.
    runtime: Handle,
}

/// Where an operation queues: on a single server, one of its few lanes; on a cluster, its slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Lane {
    Single(usize),
    Slot(Slot),
}

#[derive(Default)]
struct State {
    /// Whether a script call of the lane is on its way, or a task serves its queue: its
    /// operations then wait.
    busy: bool,
    queue: VecDeque<Call>,
}

impl State {
    /// Leaves the lane idle if its queue is empty, with room for at most `keep` calls: a queue
    /// that a burst grew gives the rest back, so that the lanes of a cluster (up to 16,384, each
    /// kept once made) do not each hold on to the largest queue they ever had.
    fn idle_if_empty(&mut self, keep: usize) -> bool {
        self.busy = !self.queue.is_empty();
        if !self.busy {
            self.queue.shrink_to(keep);
        }
        !self.busy
    }
}

struct Call {
    operation: Operation,
    reply: oneshot::Sender<RedisResult<Value>>,
}

impl Batcher {
    /// Lanes for `connection`: at most the options' batch size of operations per script call,
    /// at most their queue size waiting, over all lanes (callers wait for room beyond that);
    /// both at least 1. Call it inside the Tokio runtime the store will run in.
    pub(crate) fn new(connection: Connection, options: &RedisOptions) -> Self {
        Self {
            shared: Arc::new(Shared {
                connection,
                batch_size: options.batch_size,
                single_lanes: options.lanes,
                room: Semaphore::new(options.queue_size),
                lanes: Mutex::default(),
                runtime: Handle::current(),
            }),
        }
    }

    /// Runs `operation`, alone at once if no script call of its lane is on its way, else in
    /// the lane's next batch, and returns its own reply.
    pub(crate) async fn call(&self, operation: Operation) -> Result<Value, StoreError> {
        let stopped = || StoreError::unavailable(Error::Stopped);
        let room = self.shared.room.acquire().await.map_err(|_| stopped())?;
        let lane = match self.shared.connection {
            Connection::Single(_) => Lane::Single(operation.lane(self.shared.single_lanes)),
            Connection::Cluster(_) => Lane::Slot(operation.slot()),
        };
        let (reply, answer) = oneshot::channel();
        let call = Call { operation, reply };
        let leader = {
            let mut lanes = self.shared.lock();
            let state = lanes.entry(lane).or_default();
            if state.busy {
                state.queue.push_back(call);
                room.forget(); // given back when a batch takes the call
                None
            } else {
                state.busy = true;
                drop(room);
                Some(Leader::new(Arc::clone(&self.shared), lane, call))
            }
        };
        if let Some(leader) = leader {
            leader.send().await;
        }
        answer.await.map_err(|_| stopped())?.map_err(store_error)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, HashMap<Lane, State>> {
        // The lanes are whole between statements: a panic elsewhere cannot leave them
        // half-changed.
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Leaves `lane` idle if its queue is empty.
    fn idle_if_empty(&self, lane: Lane) -> bool {
        self.lock()
            .entry(lane)
            .or_default()
            .idle_if_empty(self.batch_size)
    }

    /// The lane's next batch, in its queue's order, or `None` (and the lane idle) when the
    /// queue is empty.
    fn next_batch(&self, lane: Lane) -> Option<Vec<Call>> {
        let mut lanes = self.lock();
        let state = lanes.entry(lane).or_default();
        if state.idle_if_empty(self.batch_size) {
            return None;
        }
        let queue = &mut state.queue;
        let mut batch = Vec::with_capacity(self.batch_size.min(queue.len()));
        let mut bytes = 0;
        while let Some(call) = queue.front() {
            bytes += call.operation.size();
            if batch.len() == self.batch_size || (bytes > MAX_BATCH_BYTES && !batch.is_empty()) {
                break;
            }
            batch.extend(queue.pop_front());
        }
        drop(lanes);
        self.room.add_permits(batch.len());
        Some(batch)
    }
}

/// A caller sending its own operation, which no other call of its lane precedes. Once it is
/// answered (or if the caller is dropped first), the lane's queue that formed meanwhile is
/// served by a task.
struct Leader {
    shared: Arc<Shared>,
    lane: Lane,
    sending: Option<BoxFuture<'static, ()>>,
}

impl Leader {
    fn new(shared: Arc<Shared>, lane: Lane, call: Call) -> Self {
        let connection = shared.connection.clone();
        let sending = Box::pin(async move { execute(&connection, vec![call]).await });
        Self {
            shared,
            lane,
            sending: Some(sending),
        }
    }

    async fn send(mut self) {
        if let Some(sending) = &mut self.sending {
            sending.await;
        }
        self.sending = None;
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        let sending = self.sending.take();
        if sending.is_none() && self.shared.idle_if_empty(self.lane) {
            return;
        }
        let serving = Serving {
            shared: Arc::clone(&self.shared),
            lane: self.lane,
            done: false,
        };
        // The caller's own call, if the caller was dropped while it was on its way, then the
        // queue.
        self.shared.runtime.spawn(async move {
            if let Some(sending) = sending {
                sending.await;
            }
            serving.serve().await;
        });
    }
}

/// The task's right to send a lane's next script calls: what the lane's `busy` stands for.
/// Dropped before the queue is empty (its runtime shut down), it fails the waiting calls, whose
/// callers hear that the store stopped, and frees the lane for callers in another runtime.
struct Serving {
    shared: Arc<Shared>,
    lane: Lane,
    done: bool,
}

impl Serving {
    /// Sends the lane's batches until its queue is empty.
    async fn serve(mut self) {
        while let Some(batch) = self.shared.next_batch(self.lane) {
            execute(&self.shared.connection, batch).await;
        }
        self.done = true;
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut lanes = self.shared.lock();
        let state = lanes.entry(self.lane).or_default();
        let failed = mem::take(&mut state.queue);
        state.busy = false;
        drop(lanes);
        self.shared.room.add_permits(failed.len());
    }
}

/// Sends `calls`, all of one lane, as one script call and hands each caller its reply.
async fn execute(connection: &Connection, calls: Vec<Call>) {
    let command = script_call(connection, &calls);
    let replies = match connection
        .run_script(&scripts::SCRIPT, &command, None)
        .await
    {
        Ok(Value::Array(replies)) if replies.len() == calls.len() => replies,
        Ok(_) => {
            let error = RedisError::from((ErrorKind::UnexpectedReturnType, "a batch's replies"));
            return fail(calls, &error);
        }
        Err(error) => return fail(calls, &error),
    };
    for (call, reply) in calls.into_iter().zip(replies) {
        let reply = match reply {
            Value::ServerError(error) => Err(error.into()),
            reply => Ok(reply),
        };
        // The caller may have stopped waiting: its operation ran all the same.
        let _ = call.reply.send(reply);
    }
}

fn fail(calls: Vec<Call>, error: &RedisError) {
    for call in calls {
        let _ = call.reply.send(Err(error.clone()));
    }
}

/// `EVALSHA` of the script on the calls' keys and arguments, as `lua/batch.lua` reads them.
fn script_call(connection: &Connection, calls: &[Call]) -> Cmd {
    let keys: usize = calls.iter().map(|call| call.operation.keys().len()).sum();
    let mut command = redis::cmd("EVALSHA");
    command.arg(scripts::SCRIPT.get_hash()).arg(keys);
    for call in calls {
        command.arg(call.operation.keys());
    }
    command.arg(connection.publish_command());
    for call in calls {
        command.arg(call.operation.args());
    }
    command
}

#[cfg(test)]
mod tests {
    use idem_core::Address;

    use super::*;
    use crate::{KeyPrefix, keys::Keys, operation::Kind};

    fn call() -> Call {
        let address = Address::anonymous("k".parse().unwrap());
        let keys = Keys::new(&KeyPrefix::default(), &address);
        Call {
            operation: Operation::new(Kind::Get, &keys, ""),
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn an_idle_lane_keeps_room_for_at_most_a_batch() {
        let mut state = State {
            busy: true,
            queue: (0..1000).map(|_| call()).collect(),
        };
        assert!(!state.idle_if_empty(64), "a lane with a queue stays busy");
        assert!(state.busy);
        assert!(state.queue.capacity() >= 1000);

        state.queue.clear();
        assert!(state.idle_if_empty(64));
        assert!(!state.busy);
        assert_eq!(state.queue.capacity(), 64);

        // A queue smaller than a batch keeps its room: a busy single server reuses it.
        state.queue.extend((0..10).map(|_| call()));
        let small = state.queue.capacity();
        state.queue.clear();
        assert!(state.idle_if_empty(64));
        assert_eq!(state.queue.capacity(), small);
    }
}
