//! [`KeyFrom`]: which of a message's identities keys it.

use std::{fmt, str::FromStr};

use super::Message;

/// Which of a message's identities keys it (`idem deliver --key-from`): the value the same on
/// every copy of the message, that an idempotency key is made of.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum KeyFrom {
    /// The id the relay gave it, the outbox message id (`outbox-id`, the default); a message
    /// without one (not published by a relay) falls back to the broker's id of it.
    #[default]
    OutboxId,
    /// The broker's own id of it (`message-id`): Kafka's topic, partition and offset, JetStream's
    /// stream and sequence, SQS's `MessageId`; on RabbitMQ, which assigns none, the `message_id`
    /// property its producer set.
    BrokerId,
    /// The value of one of its headers (`header:NAME`, the name compared without case).
    Header(String),
}

impl KeyFrom {
    /// The value `message` is identified by, if it has one.
    pub fn identity<'m>(&self, message: &'m Message) -> Option<&'m str> {
        match self {
            Self::OutboxId => message
                .message_id
                .as_deref()
                .or(message.broker_id.as_deref()),
            Self::BrokerId => message
                .broker_id
                .as_deref()
                .or(message.message_id.as_deref()),
            Self::Header(name) => message
                .headers
                .iter()
                .rev()
                .find(|(header, _)| header.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.as_str()),
        }
    }
}

impl FromStr for KeyFrom {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, String> {
        match value {
            "outbox-id" => Ok(Self::OutboxId),
            "message-id" => Ok(Self::BrokerId),
            _ => match value.strip_prefix("header:") {
                Some(name) if is_token(name) => Ok(Self::Header(name.to_ascii_lowercase())),
                _ => Err(format!(
                    "expected outbox-id, message-id or header:NAME; got {value:?}"
                )),
            },
        }
    }
}

impl fmt::Display for KeyFrom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutboxId => f.write_str("outbox-id"),
            Self::BrokerId => f.write_str("message-id"),
            Self::Header(name) => write!(f, "header:{name}"),
        }
    }
}

/// Whether `name` is an HTTP header name: one or more of RFC 9110's token characters.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_from_is_read_and_refused_in_one_line() {
        assert_eq!("outbox-id".parse(), Ok(KeyFrom::OutboxId));
        assert_eq!("message-id".parse(), Ok(KeyFrom::BrokerId));
        assert_eq!("header:X-Id".parse(), Ok(KeyFrom::Header("x-id".into())));
        assert_eq!(KeyFrom::Header("x-id".into()).to_string(), "header:x-id");
        assert_eq!(
            "uuid".parse::<KeyFrom>(),
            Err("expected outbox-id, message-id or header:NAME; got \"uuid\"".into())
        );
        assert!("header:".parse::<KeyFrom>().is_err());
        assert!("header:a b".parse::<KeyFrom>().is_err());
    }
}
