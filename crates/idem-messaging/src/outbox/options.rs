//! [`OutboxOptions`]: where an [`Outbox`](crate::Outbox) keeps its messages.

use crate::{SchemaName, TableName};

/// Where an [`Outbox`](crate::Outbox) keeps its messages: `public.idem_outbox` by default.
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
    pub(crate) schema: SchemaName,
    pub(crate) table: TableName,
}

impl OutboxOptions {
    /// `public.idem_outbox`.
    pub fn new() -> Self {
        Self {
            schema: SchemaName::from_static("public"),
            table: TableName::from_static("idem_outbox"),
        }
    }

    /// Sets the schema. [`Outbox::migrate`](crate::Outbox::migrate) creates it when missing.
    #[must_use]
    pub fn schema(mut self, schema: SchemaName) -> Self {
        self.schema = schema;
        self
    }

    /// Sets the table. Its migrations are tracked in `<table>_migrations`, its sequence is
    /// `<table>_seq`, in the same schema.
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
