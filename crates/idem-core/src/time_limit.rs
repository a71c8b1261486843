//! [`within`]: the time limit of a store call, as the [`Engine`](crate::Engine) applies
//! [`Policy::store_timeout`](crate::Policy::store_timeout) to each of its calls.
//!
//! # Examples
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use std::time::Duration;
//! use idem_core::{Address, MemoryStore, Store, StoreError, time_limit::within};
//!
//! let store = MemoryStore::new();
//! let address = Address::anonymous("k".parse()?);
//! let record = within(Duration::from_secs(1), store.get(&address)).await?;
//! assert_eq!(record, None);
//!
//! let hung = within(Duration::from_millis(1), std::future::pending::<Result<(), StoreError>>());
//! assert!(matches!(hung.await, Err(StoreError::Unavailable(_))));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::{
    future::{Future, poll_fn},
    pin::pin,
    task::Poll,
    time::Duration,
};

use crate::StoreError;

/// Runs `call` for at most `limit`. A call still unanswered then is dropped and fails as
/// [`StoreError::timed_out`]: a store that stops answering (a network partition that swallows
/// packets, a lock held by a stuck transaction) would otherwise hold the request, or the lease
/// renewal, for as long as the operating system keeps the connection open.
///
/// The limit runs from the call's first wait (see [`bounded`]): a store that answers at once,
/// as the memory store does, costs no clock read and no timer.
pub async fn within<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    bounded(limit, call)
        .await
        .unwrap_or_else(|| Err(StoreError::timed_out(limit)))
}

/// `future`'s output, or `None` when it has not ended `limit` after it first had to wait. It is
/// polled once before the timer is made: a future ready at once (a store that answers in
/// place, a body that came with its head) reads no clock and sets no timer, and one that waits
/// is given its whole `limit` from then, a poll later than from its start.
pub async fn bounded<F: Future>(limit: Duration, future: F) -> Option<F::Output> {
    let mut future = pin!(future);
    if let Poll::Ready(output) = poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await {
        return Some(output);
    }
    tokio::time::timeout(limit, future).await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_call_that_does_not_answer_is_unavailable_at_the_limit() {
        let started = tokio::time::Instant::now();
        let result = within(
            Duration::from_millis(500),
            std::future::pending::<Result<(), StoreError>>(),
        )
        .await;
        assert_eq!(started.elapsed(), Duration::from_millis(500));
        let Err(error @ StoreError::Unavailable(_)) = result else {
            panic!("{result:?}");
        };
        let source = std::error::Error::source(&error).unwrap().to_string();
        assert_eq!(source, "the store did not answer within 500ms");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_waits_then_answers_in_time_is_untouched() {
        let started = tokio::time::Instant::now();
        let call = async {
            tokio::time::sleep(Duration::from_millis(499)).await;
            Ok::<_, StoreError>(7)
        };
        assert_eq!(within(Duration::from_millis(500), call).await.unwrap(), 7);
        assert_eq!(started.elapsed(), Duration::from_millis(499));
    }

    #[test]
    fn a_future_ready_at_once_needs_no_timer() {
        // No runtime, so no timer could be made: the future's answer comes back all the same.
        let ready = bounded(Duration::from_millis(1), std::future::ready(7));
        assert_eq!(futures_util::FutureExt::now_or_never(ready), Some(Some(7)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_that_answers_in_time_is_untouched() {
        let result = within(Duration::from_millis(500), async { Ok::<_, StoreError>(7) }).await;
        assert_eq!(result.unwrap(), 7);
    }
}
