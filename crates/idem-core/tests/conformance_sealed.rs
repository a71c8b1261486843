//! The shared store contract, run through the `Sealed` wrapper: sealing changes nothing a caller
//! can observe.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test
#![cfg(feature = "sealing")]

use std::sync::Arc;

use idem_conformance::ManualSubject;
use idem_core::{
    ManualClock, MemoryStore,
    sealing::{KeyRing, Sealed},
};

async fn subject() -> ManualSubject<Sealed<Arc<MemoryStore>>> {
    let clock = ManualClock::default();
    ManualSubject {
        store: Sealed::new(
            Arc::new(MemoryStore::with_clock(clock.clone())),
            KeyRing::single("conformance", [9; 32]),
        )
        .with_clock(clock.clone()),
        clock,
    }
}

idem_conformance::conformance_tests!(subject());
