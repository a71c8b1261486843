//! The shared store contract, run against `MemoryStore`.

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
