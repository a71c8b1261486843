//! The shared store contract, run through the type-erased `DynStore` wrapper.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use idem_conformance::ManualSubject;
use idem_core::{DynStore, ManualClock, MemoryStore};

async fn subject() -> ManualSubject<DynStore> {
    let clock = ManualClock::default();
    ManualSubject {
        store: DynStore::new(MemoryStore::with_clock(clock.clone())),
        clock,
    }
}

idem_conformance::conformance_tests!(subject());
