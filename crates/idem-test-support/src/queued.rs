//! [`in_order`]: calls queued in a known order, for the tests of batched writes.

use std::pin::Pin;

use futures_util::future::join_all;

/// Runs `calls` together, each polled once first, in the order given, so that each is queued
/// (and must be waiting: a queued write waits for its batch) before the next; then awaits them
/// all. On a single-threaded runtime no batch runs before the last is queued.
///
/// # Panics
///
/// When a call finishes on its first poll.
pub async fn in_order<F: Future>(calls: impl IntoIterator<Item = F>) -> Vec<F::Output> {
    let mut calls: Vec<Pin<Box<F>>> = calls.into_iter().map(Box::pin).collect();
    for call in &mut calls {
        assert!(
            futures_util::poll!(call.as_mut()).is_pending(),
            "a queued write waits for its batch"
        );
    }
    join_all(calls).await
}
