//! The purge of expired records, in the background of a running gateway.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::GatewayStore;

/// How often expired records are purged, and how many at most per store call.
const PURGE_EVERY: Duration = Duration::from_secs(60);
const PURGE_BATCH: usize = 1000;

/// Removes expired records at start and then every minute, in batches, each store call limited
/// to `limit`, until cancelled.
pub(super) async fn purge_expired(store: GatewayStore, limit: Duration, cancel: CancellationToken) {
    idem_sql::PurgeLoop::new(store, "expired records")
        .every(PURGE_EVERY)
        .batch(PURGE_BATCH)
        .time_limit(limit)
        .run(cancel)
        .await;
}
