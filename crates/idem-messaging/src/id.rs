//! [`MessageId`] and [`ConsumerName`]: the two halves of the inbox's deduplication key.

use std::{fmt, str::FromStr};

use uuid::Uuid;

/// The longest id or name: AMQP's `message_id` property is a short string of at most 255 bytes.
const MAX_LEN: usize = 255;

/// Why a string is not a valid [`MessageId`] or [`ConsumerName`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidId {
    /// Empty, or longer than 255 bytes.
    #[error("a {kind} is 1 to 255 bytes long; this one has {len}")]
    Length {
        /// `"message id"` or `"consumer name"`.
        kind: &'static str,
        /// The length given.
        len: usize,
    },
    /// A control character (`U+0000`–`U+001F`, `U+007F`–`U+009F`).
    #[error("a {kind} holds no control characters; one is at byte {position}")]
    Control {
        /// `"message id"` or `"consumer name"`.
        kind: &'static str,
        /// The byte offset of the first one.
        position: usize,
    },
}

fn validate(kind: &'static str, value: &str) -> Result<(), InvalidId> {
    if value.is_empty() || value.len() > MAX_LEN {
        return Err(InvalidId::Length {
            kind,
            len: value.len(),
        });
    }
    match value.char_indices().find(|(_, c)| c.is_control()) {
        Some((position, _)) => Err(InvalidId::Control { kind, position }),
        None => Ok(()),
    }
}

macro_rules! id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Box<str>);

        impl $name {
            /// The value.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<&str> for $name {
            type Error = InvalidId;

            fn try_from(value: &str) -> Result<Self, InvalidId> {
                validate($kind, value)?;
                Ok(Self(value.into()))
            }
        }

        impl TryFrom<String> for $name {
            type Error = InvalidId;

            fn try_from(value: String) -> Result<Self, InvalidId> {
                validate($kind, &value)?;
                Ok(Self(value.into_boxed_str()))
            }
        }

        impl FromStr for $name {
            type Err = InvalidId;

            fn from_str(value: &str) -> Result<Self, InvalidId> {
                Self::try_from(value)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), self.0)
            }
        }
    };
}

id!(
    /// The producer's id of a message: 1 to 255 bytes without control characters.
    ///
    /// It is what the inbox deduplicates on, so it must be stable: the same for every copy of a
    /// message, whoever sends it and however often. The [`Outbox`](crate::Outbox) gives each
    /// message a UUIDv7 and the brokers carry it (AMQP's `message_id` property). It is never a
    /// broker's delivery tag or offset, which differ between copies.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_messaging::MessageId;
    ///
    /// let id: MessageId = "order-42/created".parse()?;
    /// assert_eq!(id.as_str(), "order-42/created");
    /// assert!("".parse::<MessageId>().is_err());
    /// assert!("a\nb".parse::<MessageId>().is_err());
    /// # Ok::<(), idem_messaging::InvalidId>(())
    /// ```
    MessageId,
    "message id"
);

id!(
    /// The name of a consumer: 1 to 255 bytes without control characters.
    ///
    /// The inbox keys on `(consumer, message id)`, so that several consumers of one message
    /// (an e-mail sender and a ledger, say) each process it once. Give each logical consumer one
    /// stable name, shared by all its instances: instances with different names would each
    /// apply the effect.
    ///
    /// # Examples
    ///
    /// ```
    /// use idem_messaging::ConsumerName;
    ///
    /// let consumer: ConsumerName = "ledger".parse()?;
    /// assert_eq!(consumer.to_string(), "ledger");
    /// # Ok::<(), idem_messaging::InvalidId>(())
    /// ```
    ConsumerName,
    "consumer name"
);

impl MessageId {
    /// A new id: a UUIDv7, as [`Outbox::enqueue`](crate::Outbox::enqueue) gives its messages.
    pub fn now_v7() -> Self {
        Self::from(Uuid::now_v7())
    }

    /// A new time-ordered UUIDv7, as the outbox gives every message.
    pub(crate) fn new_v7() -> (Uuid, Self) {
        let uuid = Uuid::now_v7();
        (uuid, Self::from(uuid))
    }
}

impl From<Uuid> for MessageId {
    /// The UUID's hyphenated lower-case form.
    fn from(uuid: Uuid) -> Self {
        Self(uuid.hyphenated().to_string().into_boxed_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bounded_and_printable() {
        let longest = "x".repeat(255);
        assert_eq!(
            MessageId::try_from(longest.clone()).unwrap().as_str(),
            longest
        );
        assert_eq!(
            MessageId::try_from("x".repeat(256)),
            Err(InvalidId::Length {
                kind: "message id",
                len: 256
            })
        );
        assert_eq!(
            "ab\u{7f}".parse::<ConsumerName>(),
            Err(InvalidId::Control {
                kind: "consumer name",
                position: 2
            })
        );
        assert_eq!(
            "ünïcode ok".parse::<MessageId>().unwrap().as_str(),
            "ünïcode ok"
        );
    }

    #[test]
    fn uuids_become_their_hyphenated_form() {
        let (uuid, id) = MessageId::new_v7();
        assert_eq!(id.as_str(), uuid.hyphenated().to_string());
        assert_eq!(id.as_str().len(), 36);
        assert_eq!(uuid.get_version_num(), 7);
    }
}
