//! [`Incoming`] for `lapin`'s [`Delivery`]: the id is the `message_id` property.

use lapin::{
    message::Delivery,
    options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions},
};

use crate::{BoxError, Incoming};

impl Incoming for Delivery {
    fn message_id(&self) -> Option<&str> {
        self.properties.message_id().as_ref().map(|id| id.as_str())
    }

    fn payload(&self) -> &[u8] {
        &self.data
    }

    async fn ack(self) -> Result<(), BoxError> {
        settled(self.acker.ack(BasicAckOptions::default()).await)
    }

    async fn requeue(self) -> Result<(), BoxError> {
        let options = BasicNackOptions {
            requeue: true,
            ..BasicNackOptions::default()
        };
        settled(self.acker.nack(options).await)
    }

    async fn reject(self) -> Result<(), BoxError> {
        let options = BasicRejectOptions { requeue: false };
        settled(self.acker.reject(options).await)
    }
}

/// The channel was lost when `lapin` answers `false`: the broker redelivers the message.
fn settled(result: lapin::Result<bool>) -> Result<(), BoxError> {
    match result {
        Ok(true) => Ok(()),
        Ok(false) => Err("the delivery's channel is closed, or it was settled already".into()),
        Err(error) => Err(error.into()),
    }
}
