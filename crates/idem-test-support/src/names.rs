//! [`unique_name`]: a name no other test uses.

use std::{
    hash::{BuildHasher, RandomState},
    sync::atomic::{AtomicU64, Ordering},
    time::Instant,
};

/// `prefix` and 16 random hex digits: a name no other test of this run or another uses, for a
/// schema, a key prefix, a queue or a stream of the test's own.
///
/// # Examples
///
/// ```
/// let name = idem_test_support::unique_name("idem_test_");
/// assert_eq!(name.len(), "idem_test_".len() + 16);
/// assert_ne!(name, idem_test_support::unique_name("idem_test_"));
/// ```
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let random = RandomState::new().hash_one((std::process::id(), n, Instant::now()));
    format!("{prefix}{random:016x}")
}
