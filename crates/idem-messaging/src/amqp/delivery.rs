//! [`Incoming`] for `lapin`'s [`Delivery`]: the id is the `message_id` property. And how a
//! delivery is settled, which a subscription's messages share.

use lapin::{
    Acker,
    message::Delivery,
    options::{BasicAckOptions, BasicNackOptions, BasicRejectOptions},
    types::AMQPValue,
};

use crate::{BoxError, Incoming};

impl Incoming for Delivery {
    fn message_id(&self) -> Option<&str> {
        self.properties.message_id().as_ref().map(|id| id.as_str())
    }

    fn payload(&self) -> &[u8] {
        &self.data
    }

    fn header(&self, name: &str) -> Option<&str> {
        match self.properties.headers().as_ref()?.inner().get(name)? {
            AMQPValue::LongString(text) => std::str::from_utf8(text.as_bytes()).ok(),
            AMQPValue::ShortString(text) => Some(text.as_str()),
            _ => None,
        }
    }

    async fn ack(self) -> Result<(), BoxError> {
        ack(&self.acker).await
    }

    async fn requeue(self) -> Result<(), BoxError> {
        requeue(&self.acker).await
    }

    async fn reject(self) -> Result<(), BoxError> {
        reject(&self.acker).await
    }
}

/// `basic.ack`: the message is done with.
pub(super) async fn ack(acker: &Acker) -> Result<(), BoxError> {
    settled(acker.ack(BasicAckOptions::default()).await)
}

/// `basic.nack` with requeue: the queue delivers the message again, flagged redelivered.
pub(super) async fn requeue(acker: &Acker) -> Result<(), BoxError> {
    let options = BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    };
    settled(acker.nack(options).await)
}

/// `basic.reject` without requeue: the queue drops the message, or gives it to its dead-letter
/// exchange.
pub(super) async fn reject(acker: &Acker) -> Result<(), BoxError> {
    let options = BasicRejectOptions { requeue: false };
    settled(acker.reject(options).await)
}

/// The channel was lost when `lapin` answers `false`: the broker redelivers the message.
fn settled(result: lapin::Result<bool>) -> Result<(), BoxError> {
    match result {
        Ok(true) => Ok(()),
        Ok(false) => Err("the delivery's channel is closed, or it was settled already".into()),
        Err(error) => Err(error.into()),
    }
}
