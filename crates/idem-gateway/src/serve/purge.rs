//! The purge of expired records, in the background of a running gateway.

use std::time::Duration;

use idem_core::Store;
use tokio_util::sync::CancellationToken;

use crate::GatewayStore;

/// How often expired records are purged, and how many at most per store call.
const PURGE_EVERY: Duration = Duration::from_secs(60);
const PURGE_BATCH: usize = 1000;

/// Removes expired records every minute, in batches, each store call limited to `limit`, until
/// cancelled.
pub(super) async fn purge_expired(store: GatewayStore, limit: Duration, cancel: CancellationToken) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(PURGE_EVERY) => {}
        }
        let mut purged = 0;
        loop {
            match idem_core::time_limit::within(limit, store.purge_expired(PURGE_BATCH)).await {
                Ok(n) => {
                    purged += n;
                    if n < PURGE_BATCH {
                        break;
                    }
                }
                Err(error) => {
                    tracing::warn!(
                        error = &error as &(dyn std::error::Error + 'static),
                        "purging expired records failed"
                    );
                    break;
                }
            }
        }
        if purged > 0 {
            tracing::info!(purged, "purged expired records");
        }
    }
}
