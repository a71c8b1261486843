//! Forgetting a key on an operator's request, as the admin API's `DELETE /v1/keys/{key}` and
//! `idem keys forget` do: a key that a request holds is kept unless the operator forces it.
//!
//! The check and the removal are two store calls. A key that becomes processing between them is
//! removed as if forced; that needs its completed record to expire, or to be forgotten by
//! someone else, in that instant, followed by a new request with that key. Its request then
//! runs on, and its result is discarded (fencing), so a retry executes again.

use idem_core::{Address, RecordState, Store, StoreError};

/// What [`forget`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Forgotten {
    /// The record was removed.
    Removed,
    /// There was no live record.
    NotFound,
    /// A request holds the key, and `force` was not given: nothing was removed.
    Processing,
}

/// Removes the record at `address`, unless a request holds it and `force` is false.
pub(crate) async fn forget(
    store: &impl Store,
    address: &Address,
    force: bool,
) -> Result<Forgotten, StoreError> {
    if !force {
        match store.get(address).await {
            Ok(None) => return Ok(Forgotten::NotFound),
            Ok(Some(record)) if matches!(record.state, RecordState::Processing { .. }) => {
                return Ok(Forgotten::Processing);
            }
            // A record that cannot be read (a sealed response that does not open) is what an
            // operator forgets to let the key run again; no request holds it.
            Ok(Some(_)) | Err(StoreError::Corrupted(_)) => {}
            Err(error) => return Err(error),
        }
    }
    Ok(if store.forget(address).await? {
        Forgotten::Removed
    } else {
        Forgotten::NotFound
    })
}
