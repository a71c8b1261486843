//! [`OutboxOptions`]: where an [`Outbox`](crate::Outbox) keeps its messages.

use crate::{SchemaName, TableName};

/// Where an [`Outbox`](crate::Outbox) keeps its messages: by default `public.idem_outbox` on
/// PostgreSQL, `idem_outbox` in the connection's database on MySQL, and `main.idem_outbox` on
/// SQLite.
///
/// # Examples
///
/// ```
/// use idem_messaging::OutboxOptions;
///
/// let options = OutboxOptions::new()
///     .schema("billing".parse()?)
///     .table("payment_events".parse()?);
/// # drop(options);
/// # Ok::<(), idem_messaging::InvalidName>(())
/// ```
#[derive(Debug, Clone)]
pub struct OutboxOptions {
    pub(crate) schema: Option<SchemaName>,
    pub(crate) table: TableName,
}

impl OutboxOptions {
    /// `idem_outbox` in the database's default schema: `public` on PostgreSQL, the database the
    /// connection uses on MySQL (its URL's; the statements then name the table alone), `main`
    /// (the database file itself) on SQLite.
    pub fn new() -> Self {
        Self {
            schema: None,
            table: TableName::from_static("idem_outbox"),
        }
    }

    /// Sets the schema. On PostgreSQL, [`Outbox::migrate`](crate::Outbox::migrate) creates it
    /// when missing; on MySQL it is a database (created when missing, too), which the business
    /// transactions reach on the same server; on SQLite it is the name of an attached database.
    #[must_use]
    pub fn schema(mut self, schema: SchemaName) -> Self {
        self.schema = Some(schema);
        self
    }

    /// Sets the table. Its migrations are tracked in `<table>_migrations`, and on PostgreSQL its
    /// sequence is `<table>_seq`, in the same schema.
    #[must_use]
    pub fn table(mut self, table: TableName) -> Self {
        self.table = table;
        self
    }
}

impl Default for OutboxOptions {
    fn default() -> Self {
        Self::new()
    }
}
