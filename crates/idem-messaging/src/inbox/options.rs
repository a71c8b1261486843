//! [`InboxOptions`]: where an [`Inbox`](crate::Inbox) keeps its rows, and for how long.

use std::time::Duration;

use crate::{SchemaName, TableName};

/// Where an [`Inbox`](crate::Inbox) keeps its rows (`idem_inbox` in the default schema), and
/// its dedup window.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use idem_messaging::InboxOptions;
///
/// let options = InboxOptions::new()
///     .schema("billing".parse()?)
///     .table("payments_inbox".parse()?)
///     .dedup_window(Duration::from_secs(14 * 24 * 3600));
/// # drop(options);
/// # Ok::<(), idem_messaging::InvalidName>(())
/// ```
#[derive(Debug, Clone)]
pub struct InboxOptions {
    pub(crate) schema: Option<SchemaName>,
    pub(crate) table: TableName,
    pub(crate) dedup_window: Duration,
}

impl InboxOptions {
    /// The default schema (`public` on PostgreSQL, the connection's database on MySQL, `main` on
    /// SQLite), the table `idem_inbox`, and a dedup window of [`DEFAULT_DEDUP_WINDOW`](Self::DEFAULT_DEDUP_WINDOW).
    pub fn new() -> Self {
        Self {
            schema: None,
            table: TableName::from_static("idem_inbox"),
            dedup_window: Self::DEFAULT_DEDUP_WINDOW,
        }
    }

    /// Seven days: far longer than any broker keeps redelivering a message, a consumer stays
    /// down, or an operator takes to replay a dead-letter queue.
    pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

    /// Sets the schema that holds the table: a PostgreSQL schema or a MySQL database
    /// ([`Inbox::migrate`](crate::Inbox::migrate) creates either when missing), or on SQLite the
    /// name of an attached database.
    #[must_use]
    pub fn schema(mut self, schema: SchemaName) -> Self {
        self.schema = Some(schema);
        self
    }

    /// Sets the table. Its migrations are tracked in `<table>_migrations`, in the same schema.
    #[must_use]
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }

    /// Sets how long a processed message is remembered: a copy delivered within the window is
    /// skipped; [`Inbox::purge`](crate::Inbox::purge) forgets rows older than that, so a copy
    /// delivered later is processed again.
    ///
    /// The window must outlast the longest time between two deliveries of one message: broker
    /// redeliveries, a relay that publishes again after its lease ran out, a consumer down for a
    /// weekend, a dead-letter queue replayed by hand. Too short a window turns those into
    /// duplicate effects; too long a window only costs disk.
    #[must_use]
    pub fn dedup_window(mut self, window: Duration) -> Self {
        self.dedup_window = window;
        self
    }
}

impl Default for InboxOptions {
    fn default() -> Self {
        Self::new()
    }
}
