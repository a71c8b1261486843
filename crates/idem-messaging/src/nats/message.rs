//! [`Incoming`] for JetStream's [`Message`]: the id is the `Nats-Msg-Id` header.

use async_nats::{
    header::NATS_MESSAGE_ID,
    jetstream::{AckKind, Message},
};

use crate::{BoxError, Incoming};

impl Incoming for Message {
    fn message_id(&self) -> Option<&str> {
        self.headers
            .as_ref()?
            .get(NATS_MESSAGE_ID)
            .map(|id| id.as_str())
    }

    fn payload(&self) -> &[u8] {
        &self.payload
    }

    fn header(&self, name: &str) -> Option<&str> {
        // Not `HeaderMap::get`, which panics on a name NATS would not allow.
        let (_, values) = self
            .headers
            .as_ref()?
            .iter()
            .find(|(header, _)| AsRef::<str>::as_ref(*header) == name)?;
        values.last().map(|value| value.as_str())
    }

    async fn ack(self) -> Result<(), BoxError> {
        Message::ack(&self).await
    }

    async fn requeue(self) -> Result<(), BoxError> {
        self.ack_with(AckKind::Nak(None)).await
    }

    async fn reject(self) -> Result<(), BoxError> {
        self.ack_with(AckKind::Term).await
    }
}
