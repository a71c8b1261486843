//! The shared store contract, run through the type-erased `DynStore` wrapper.

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
