//! [`OutboxMessage`], what a service enqueues, and [`Envelope`], what a relay publishes.

use bytes::Bytes;

use crate::MessageId;

/// A message to publish: its destination, an optional ordering key, headers and a payload.
///
/// Build it as a struct, or with [`new`](Self::new) and the setters.
///
/// # Examples
///
/// ```
/// use idem_messaging::OutboxMessage;
///
/// let message = OutboxMessage::new("orders.created", r#"{"order":42}"#)
///     .ordering_key("order-42")
///     .header("content-type", "application/json");
/// assert_eq!(message.destination, "orders.created");
/// assert_eq!(message.ordering_key.as_deref(), Some("order-42"));
/// assert_eq!(message.headers, [("content-type".to_owned(), "application/json".to_owned())]);
/// assert_eq!(message.payload.as_ref(), br#"{"order":42}"#);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxMessage {
    /// Where the message goes; its meaning is the publisher's: for AMQP, the routing key on the
    /// publisher's exchange (a queue's name on the default exchange).
    pub destination: String,
    /// With the relay's ordering on, the messages of one key are published one at a time, in
    /// enqueue order (see [`Relay::ordering`](crate::Relay::ordering)).
    pub ordering_key: Option<String>,
    /// Headers, in order; a name may appear more than once, though AMQP keeps only the last
    /// value of a name.
    pub headers: Vec<(String, String)>,
    /// The payload.
    pub payload: Bytes,
}

impl OutboxMessage {
    /// A message for `destination`, without ordering key nor headers.
    pub fn new(destination: impl Into<String>, payload: impl Into<Bytes>) -> Self {
        Self {
            destination: destination.into(),
            ordering_key: None,
            headers: Vec::new(),
            payload: payload.into(),
        }
    }

    /// Sets the ordering key.
    #[must_use]
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Adds a header.
    #[must_use]
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// A message claimed from the outbox, as a [`Publisher`](crate::Publisher) gets it: the message,
/// its id and which attempt this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope {
    id: MessageId,
    message: OutboxMessage,
    attempt: u32,
}

impl Envelope {
    /// A message with its id, on its `attempt`th attempt (from 1). The relay makes these; tests
    /// of a publisher may too.
    pub fn new(id: MessageId, message: OutboxMessage, attempt: u32) -> Self {
        Self {
            id,
            message,
            attempt,
        }
    }

    /// The message's stable id, the same on every attempt: publish it as the message id that
    /// consumers deduplicate on.
    pub fn id(&self) -> &MessageId {
        &self.id
    }

    /// The message.
    pub fn message(&self) -> &OutboxMessage {
        &self.message
    }

    /// Which attempt this is: 1 the first time the message is claimed.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The message's headers, for the relay to write the trace context of its publish in.
    pub(crate) fn headers_mut(&mut self) -> &mut Vec<(String, String)> {
        &mut self.message.headers
    }
}
