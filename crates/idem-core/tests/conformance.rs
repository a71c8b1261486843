//! The shared store contract, run against `MemoryStore`.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::sync::Arc;

use idem_conformance::ManualSubject;
use idem_core::{ManualClock, MemoryStore};

async fn subject() -> ManualSubject<Arc<MemoryStore>> {
    let clock = ManualClock::default();
    ManualSubject {
        store: Arc::new(MemoryStore::with_clock(clock.clone())),
        clock,
    }
}

idem_conformance::conformance_tests!(subject());
