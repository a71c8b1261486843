//! The shared store contract, run through `KeyedAddresses` during a change-over: keyed digests
//! change nothing a caller can observe, but what a listing shows.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{sync::Arc, time::Duration};

use idem_conformance::{ManualSubject, Subject};
use idem_core::{Address, DigestKey, KeyedAddresses, ManualClock, MemoryStore};

struct KeyedSubject(ManualSubject<KeyedAddresses<Arc<MemoryStore>>>);

impl Subject for KeyedSubject {
    type Store = KeyedAddresses<Arc<MemoryStore>>;

    fn store(&self) -> Self::Store {
        self.0.store()
    }

    async fn advance(&self, by: Duration) {
        self.0.advance(by).await;
    }

    fn stored(&self, address: &Address) -> Address {
        self.0.store.keyed(address)
    }
}

async fn subject() -> KeyedSubject {
    let clock = ManualClock::default();
    KeyedSubject(ManualSubject {
        store: KeyedAddresses::new(
            Arc::new(MemoryStore::with_clock(clock.clone())),
            &DigestKey::new([3; 32]),
        )
        .with_clock(clock.clone())
        // Longer than any check runs: every call looks at plain addresses too.
        .changeover_for(Duration::from_secs(365 * 24 * 3600)),
        clock,
    })
}

idem_conformance::conformance_tests!(subject());
