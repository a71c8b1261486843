//! What the server tests share: a schema of the test's own with a ledger table, and publishers
//! that record, refuse or stall. (The servers' URLs and the skip are `idem_test_support`'s.)

#![allow(dead_code, unreachable_pub)] // each test file uses a part

use std::{
    ops::Deref,
    sync::{Arc, Mutex},
    time::Duration,
};

use idem_messaging::{
    Confirmations, ConsumerName, Envelope, InboxOptions, Outbox, OutboxOptions, PgInbox,
    PublishError, Publisher,
};
use idem_test_support::Ledger;
use tokio::sync::Notify;

/// How long a test waits for something that should happen in milliseconds.
pub const EVENTUALLY: Duration = Duration::from_secs(60);

/// A [`Ledger`] (a schema of the test's own, with a `ledger` table) where the inbox and the
/// outbox live too.
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

    pub fn inbox_options(&self) -> InboxOptions {
        InboxOptions::new().schema(self.name.parse().unwrap())
    }

    pub async fn inbox(&self) -> PgInbox {
        let inbox = PgInbox::new(self.inbox_options());
        inbox.migrate(&self.pool).await.unwrap();
        inbox
    }

    pub async fn outbox(&self) -> Outbox {
        let outbox = Outbox::new(OutboxOptions::new().schema(self.name.parse().unwrap()));
        outbox.migrate(&self.pool).await.unwrap();
        outbox
    }

    pub async fn inbox_rows(&self) -> i64 {
        self.count("SELECT count(*) FROM {schema}.idem_inbox").await
    }
}

pub fn consumer(name: &str) -> ConsumerName {
    name.parse().unwrap()
}

/// Decides, per message, whether the broker refuses it.
pub type Refusal = Box<dyn Fn(&Envelope) -> Option<PublishError> + Send + Sync>;

/// A broker in memory: records what it confirms, in order, and refuses what `refuse` says.
#[derive(Clone, Default)]
pub struct Recorder {
    pub confirmed: Arc<Mutex<Vec<Envelope>>>,
    pub batches: Arc<Mutex<Vec<Vec<Envelope>>>>,
    refuse: Option<Arc<Refusal>>,
}

impl Recorder {
    pub fn refusing(
        refuse: impl Fn(&Envelope) -> Option<PublishError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            refuse: Some(Arc::new(Box::new(refuse))),
            ..Self::default()
        }
    }

    pub fn confirmed(&self) -> Vec<Envelope> {
        self.confirmed.lock().unwrap().clone()
    }

    /// The ids confirmed, in order.
    pub fn ids(&self) -> Vec<String> {
        self.confirmed()
            .iter()
            .map(|e| e.id().as_str().to_owned())
            .collect()
    }
}

impl Publisher for Recorder {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        self.batches.lock().unwrap().push(batch.to_vec());
        batch
            .iter()
            .map(|envelope| {
                if let Some(error) = self.refuse.as_ref().and_then(|refuse| refuse(envelope)) {
                    return Err(error);
                }
                self.confirmed.lock().unwrap().push(envelope.clone());
                Ok(())
            })
            .collect()
    }
}

/// Publishes through `inner`, then tells `published` and never returns: a relay that dies
/// between the broker's confirmation and marking the messages sent (the test aborts it).
pub struct DiesAfterPublish<P> {
    pub inner: P,
    pub published: Arc<Notify>,
}

impl<P: Publisher> Publisher for DiesAfterPublish<P> {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        let _ = self.inner.publish_batch(batch).await;
        self.published.notify_one();
        std::future::pending().await
    }
}

/// Publishes through `inner` once `open` gives a permit; tells `waiting` when a batch arrives.
pub struct Gated<P> {
    pub inner: P,
    pub open: Arc<tokio::sync::Semaphore>,
    pub waiting: Arc<Notify>,
}

impl<P: Publisher> Publisher for Gated<P> {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        self.waiting.notify_one();
        self.open.acquire().await.unwrap().forget();
        self.inner.publish_batch(batch).await
    }
}

pub mod suite;

/// The error and its sources, joined by `: `, a source that the text before it already ends with
/// said once (an `io::Error` and rdkafka's errors repeat what they wrap): as `idem` prints an
/// error.
pub fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
