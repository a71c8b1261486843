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

use std::{future::Future, time::Duration};

use crate::StoreError;

/// Runs `call` for at most `limit`. A call still unanswered then is dropped and fails as
/// [`StoreError::timed_out`]: a store that stops answering (a network partition that swallows
/// packets, a lock held by a stuck transaction) would otherwise hold the request, or the lease
/// renewal, for as long as the operating system keeps the connection open.
pub async fn within<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, StoreError>>,
) -> Result<T, StoreError> {
    tokio::time::timeout(limit, call)
        .await
        .unwrap_or_else(|_| Err(StoreError::timed_out(limit)))
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
    async fn a_call_that_answers_in_time_is_untouched() {
        let result = within(Duration::from_millis(500), async { Ok::<_, StoreError>(7) }).await;
        assert_eq!(result.unwrap(), 7);
    }
}
