//! The purge of expired records, in the background of a running gateway.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::store::GatewayStore;

/// How often expired records are purged, how many at most per store call, and the share of a
/// round's time its store calls may take: a backlog (a million records after an outage, or
/// after the TTL was shortened) is deleted at 15% of the store's speed, leaving it to live
/// traffic the rest of the time. On SQLite, whose one writer commits the purge's batches with
/// the new keys, the share is about what new keys lose while a backlog goes.
const PURGE_EVERY: Duration = Duration::from_secs(60);
const PURGE_BATCH: usize = 1000;
const PURGE_SHARE: f64 = 0.15;

/// Removes expired records at start and then every minute, in batches, each store call limited
/// to `limit`, until cancelled.
pub(super) async fn purge_expired(store: GatewayStore, limit: Duration, cancel: CancellationToken) {
    idem_sql::PurgeLoop::new(store, "expired records")
        .every(PURGE_EVERY)
        .batch(PURGE_BATCH)
        .pace(PURGE_SHARE)
        .time_limit(limit)
        .run(cancel)
        .await;
}
