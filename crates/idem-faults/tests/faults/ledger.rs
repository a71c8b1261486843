//! The consumer's database: a [`Ledger`] (a schema of the test's own with a `ledger` table of
//! the effects, one row per message handled) holding the outbox and the inbox too.

#![allow(unreachable_pub)] // shared with the other modules of this test only

use std::ops::Deref;

use idem_messaging::{InboxOptions, Outbox, OutboxOptions, PgInbox};
use idem_test_support::Ledger;

/// A [`Ledger`] where the inbox and the outbox live too.
pub struct TestSchema(Ledger);

impl Deref for TestSchema {
    type Target = Ledger;

    fn deref(&self) -> &Ledger {
        &self.0
    }
}

impl TestSchema {
    pub async fn new(url: &str) -> Self {
        Self(Ledger::create(url).await)
    }

    pub async fn inbox(&self) -> PgInbox {
        let inbox = PgInbox::new(InboxOptions::new().schema(self.name.parse().unwrap()));
        inbox.migrate(&self.pool).await.unwrap();
        inbox
    }

    pub async fn outbox(&self) -> Outbox {
        let outbox = Outbox::new(OutboxOptions::new().schema(self.name.parse().unwrap()));
        outbox.migrate(&self.pool).await.unwrap();
        outbox
    }
}
