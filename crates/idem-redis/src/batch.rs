//! Natural batching: the operations that arrive while a script call is on its way go together
//! in the next one.
//!
//! Every store call becomes an [`Operation`] in one bounded queue, read by one task per store.
//! The task takes whatever the queue holds (up to the batch size, and up to
//! [`MAX_BATCH_BYTES`] of arguments), sends it as one `EVALSHA` of the script, which runs the
//! operations in order and answers each one's reply in its place, hands each caller its own
//! reply, and only then takes the next batch. An empty queue adds no wait: an operation that
//! finds the task idle goes at once, alone. Under load, the callers that arrive during a round
//! trip share the next one, so Redis runs one script, with one `TIME`, one parse and one reply,
//! for many keys.
//!
//! - **Order.** One batch is in flight at a time, and a batch runs its operations in the queue's
//!   order, so two operations on one key run in the order they were queued, within a batch and
//!   across batches (even when a batch is sent again after `NOSCRIPT`).
//! - **Failures are each operation's own.** An operation that fails inside the script (an
//!   unreadable record) has an error in its place; the others' replies stand. A failure of the
//!   whole call (the connection, a timeout) is every operation's failure, as it would have been
//!   for each sent alone.
//! - **Redis Cluster**: a script's keys must share one slot, so a batch is split by slot, and
//!   the slots' calls go at once (pipelined on the nodes' connections). idem's keys carry a hash
//!   tag per address, so on a cluster a call rarely carries more than one operation.
//! - **An accepted operation runs**, even when its caller stops waiting for it, as an operation
//!   already written to the connection would.

use std::{collections::HashMap, mem};

use futures_util::future::join_all;
use idem_core::StoreError;
use redis::{Cmd, ErrorKind, RedisError, RedisResult, ServerErrorKind, Value};
use tokio::sync::{mpsc, oneshot};

use crate::{Error, connection::Connection, error::store_error, operation::Operation, scripts};

/// A batch ends before the operation that would take its keys and arguments past this (an
/// operation larger than that goes alone), so that one script call stays small next to the
/// server's limits and does not hold Redis for long.
pub(crate) const MAX_BATCH_BYTES: usize = 1024 * 1024;

/// The sending side of a store's queue. The task ends when it is dropped and the queue is empty.
pub(crate) struct Batcher {
    queue: mpsc::Sender<Call>,
}

struct Call {
    operation: Operation,
    reply: oneshot::Sender<RedisResult<Value>>,
}

impl Batcher {
    /// Starts the task that sends the batches on `connection`: at most `batch_size` operations
    /// per script call, and at most `queue_capacity` operations waiting for one (callers wait for
    /// room beyond that).
    pub(crate) fn start(connection: Connection, batch_size: usize, queue_capacity: usize) -> Self {
        let (queue, calls) = mpsc::channel(queue_capacity.max(1));
        tokio::spawn(run(calls, connection, batch_size.max(1)));
        Self { queue }
    }

    /// Runs `operation` in the next batch and returns its own reply.
    pub(crate) async fn call(&self, operation: Operation) -> Result<Value, StoreError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::unavailable(Error::Stopped);
        self.queue
            .send(Call { operation, reply })
            .await
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?.map_err(store_error)
    }
}

async fn run(mut queue: mpsc::Receiver<Call>, connection: Connection, batch_size: usize) {
    // The calls taken from the queue that did not fit the last batch.
    let mut next = Vec::with_capacity(batch_size);
    loop {
        let mut batch = mem::take(&mut next);
        if batch.is_empty() {
            if queue.recv_many(&mut batch, batch_size).await == 0 {
                return; // the store is gone and the queue is empty
            }
        } else {
            while batch.len() < batch_size {
                let Ok(call) = queue.try_recv() else { break };
                batch.push(call);
            }
        }
        let mut bytes = 0;
        let fits = batch.iter().position(|call| {
            bytes += call.operation.size();
            bytes > MAX_BATCH_BYTES
        });
        if let Some(fits) = fits {
            next = batch.split_off(fits.max(1));
        }
        match &connection {
            Connection::Single(_) => execute(&connection, batch).await,
            Connection::Cluster(_) => {
                join_all(by_slot(batch).map(|calls| execute(&connection, calls))).await;
            }
        }
    }
}

/// The calls grouped by the slot of their keys, each group in the calls' order.
fn by_slot(batch: Vec<Call>) -> impl Iterator<Item = Vec<Call>> {
    let mut groups: Vec<Vec<Call>> = Vec::new();
    let mut slots = HashMap::new();
    for call in batch {
        let group = *slots.entry(call.operation.slot()).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[group].push(call);
    }
    groups.into_iter()
}

/// Sends `calls` as one script call and hands each caller its reply.
async fn execute(connection: &Connection, calls: Vec<Call>) {
    let command = script_call(connection, &calls);
    let replies = match exchange(connection, &command).await {
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

/// Sends `command`, loading the script first when the server lacks it (after a restart or a
/// failover).
async fn exchange(connection: &Connection, command: &Cmd) -> RedisResult<Value> {
    match connection.send(command).await {
        Err(error) if error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
            connection.load(&scripts::SCRIPT).await?;
            connection.send(command).await
        }
        result => result,
    }
}
