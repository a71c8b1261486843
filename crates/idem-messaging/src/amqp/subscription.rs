//! [`subscribe`]: a RabbitMQ queue's deliveries as a [`Subscription`] of [`Received`].

use std::{
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use futures_util::{Stream, StreamExt, future::BoxFuture, stream};
use lapin::{
    Acker, Channel, Connection, Consumer,
    message::Delivery,
    options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions},
    types::{AMQPValue, FieldTable, ShortString, ShortStringError},
};

use super::{connection::connect, delivery};
use crate::{
    BoxError, Error, Received, SubscribeOptions, Subscription,
    broker::TlsFiles,
    consume::{Message, Settle},
};

/// Consumes the queue `options.from()` of the broker at `uri`, with manual acks and a prefetch
/// of `options.in_flight_limit()`, as the consumer tag `{group}-{a UUID}`.
pub(super) async fn subscribe(
    uri: &str,
    tls: &TlsFiles,
    options: &SubscribeOptions,
) -> Result<Subscription, Error> {
    let queue = options.from();
    let queue_name = short("queue name", queue)?;
    let tag = short(
        "consumer tag",
        format!("{}-{}", options.group_name(), uuid::Uuid::new_v4().simple()),
    )?;
    let connection = connect(uri, tls).await.map_err(SubscribeError::Connect)?;
    let channel = connection
        .create_channel()
        .await
        .map_err(SubscribeError::Channel)?;
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(queue_name.clone(), passive, FieldTable::default())
        .await
        .map_err(|source| SubscribeError::Queue {
            queue: queue.to_owned(),
            source,
        })?;
    let consume = async {
        channel
            .basic_qos(options.in_flight_limit(), BasicQosOptions::default())
            .await?;
        channel
            .basic_consume(
                queue_name,
                tag,
                BasicConsumeOptions::default(), // manual acks
                FieldTable::default(),
            )
            .await
    };
    let consumer = consume.await.map_err(|source| SubscribeError::Consume {
        queue: queue.to_owned(),
        source,
    })?;
    Ok(Subscription::new(deliveries(
        Consuming {
            consumer,
            channel,
            _connection: connection,
        },
        Arc::from(queue),
    )))
}

/// What a subscription holds while it runs: its consumer (cancelled when dropped), and the
/// channel and connection the consumer needs.
struct Consuming {
    consumer: Consumer,
    channel: Channel,
    _connection: Connection,
}

/// The consumer's deliveries as [`Received`], until the consumer fails or is cancelled: then
/// one error, and the end.
fn deliveries(
    consuming: Consuming,
    queue: Arc<str>,
) -> impl Stream<Item = Result<Received, Error>> + Send + 'static {
    stream::unfold(Some(consuming), move |consuming| {
        let queue = Arc::clone(&queue);
        async move {
            let mut consuming = consuming?;
            let ended = match consuming.consumer.next().await {
                Some(Ok(delivery)) => {
                    let received = received(delivery, &queue, &consuming.channel);
                    return Some((Ok(received), Some(consuming)));
                }
                Some(Err(source)) => SubscribeError::Failed { queue, source },
                None => SubscribeError::Cancelled { queue },
            };
            Some((Err(ended.into()), None))
        }
    })
}

/// `delivery` from `queue`, settled on `channel`.
fn received(delivery: Delivery, queue: &str, channel: &Channel) -> Received {
    let Delivery {
        properties,
        data,
        acker,
        redelivered,
        ..
    } = delivery;
    let message = Message {
        message_id: properties.message_id().as_ref().map(ToString::to_string),
        broker_id: None,
        source: queue.to_owned(),
        ordering_key: Some(queue.to_owned()),
        headers: headers(properties.headers().as_ref()),
        payload: Bytes::from(data),
        time: (*properties.timestamp()).and_then(time),
        redelivered,
    };
    Received::new(
        message,
        Settlement {
            acker,
            _channel: channel.clone(),
        },
    )
}

/// The entries of `table` that read as text, in the table's order (lapin keeps it sorted by
/// name): strings that are UTF-8, integers in decimal, booleans as `true` or `false`. Floats,
/// decimals, timestamps, byte arrays, arrays, tables and voids are left out.
fn headers(table: Option<&FieldTable>) -> Vec<(String, String)> {
    let Some(table) = table else {
        return Vec::new();
    };
    table
        .inner()
        .iter()
        .filter_map(|(name, value)| Some((name.to_string(), text(value)?)))
        .collect()
}

/// `value` as text, if it is text, an integer or a boolean.
fn text(value: &AMQPValue) -> Option<String> {
    Some(match value {
        AMQPValue::LongString(text) => std::str::from_utf8(text.as_bytes()).ok()?.to_owned(),
        AMQPValue::ShortString(text) => text.to_string(),
        AMQPValue::Boolean(flag) => flag.to_string(),
        AMQPValue::ShortShortInt(n) => n.to_string(),
        AMQPValue::ShortShortUInt(n) => n.to_string(),
        AMQPValue::ShortInt(n) => n.to_string(),
        AMQPValue::ShortUInt(n) => n.to_string(),
        AMQPValue::LongInt(n) => n.to_string(),
        AMQPValue::LongUInt(n) => n.to_string(),
        AMQPValue::LongLongInt(n) => n.to_string(),
        _ => return None,
    })
}

/// AMQP's `timestamp` property, in seconds since the epoch, as a time (none past what the
/// platform's clock can hold).
fn time(seconds: u64) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(Duration::from_secs(seconds))
}

/// `name` as AMQP's short string, or why it cannot be one.
fn short(what: &'static str, name: impl Into<String>) -> Result<ShortString, SubscribeError> {
    let name = name.into();
    ShortString::try_new(name.clone()).map_err(|source| SubscribeError::TooLong {
        what,
        name,
        source,
    })
}

/// How a received delivery is settled: by its acker, on its channel, which stays open (and its
/// connection with it) until the last held delivery is settled or dropped, even after the
/// subscription was dropped.
struct Settlement {
    acker: Acker,
    _channel: Channel,
}

impl Settle for Settlement {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move { delivery::ack(&self.acker).await })
    }

    fn requeue(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move { delivery::requeue(&self.acker).await })
    }

    fn reject(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(async move { delivery::reject(&self.acker).await })
    }
}

/// Why a RabbitMQ subscription could not start, or ended.
#[derive(Debug, thiserror::Error)]
enum SubscribeError {
    /// The name does not fit AMQP's short strings.
    #[error("the {what} {name:?} is too long for AMQP")]
    TooLong {
        what: &'static str,
        name: String,
        #[source]
        source: ShortStringError,
    },
    /// The broker cannot be reached, or refused the connection.
    #[error("cannot connect to RabbitMQ")]
    Connect(#[source] BoxError),
    /// The connection took no channel.
    #[error("cannot open a channel to RabbitMQ")]
    Channel(#[source] lapin::Error),
    /// The passive declaration failed: the queue does not exist, or the user may not see it.
    #[error("cannot consume the queue {queue:?}: it does not exist, or may not be used")]
    Queue {
        queue: String,
        #[source]
        source: lapin::Error,
    },
    /// `basic.qos` or `basic.consume` failed.
    #[error("cannot consume the queue {queue:?}")]
    Consume {
        queue: String,
        #[source]
        source: lapin::Error,
    },
    /// The consumer's channel or connection failed.
    #[error("the consumer of the queue {queue:?} failed: the subscription ends")]
    Failed {
        queue: Arc<str>,
        #[source]
        source: lapin::Error,
    },
    /// RabbitMQ cancelled the consumer.
    #[error(
        "RabbitMQ cancelled the consumer of the queue {queue:?} (the queue was deleted, or its \
         node went down): the subscription ends"
    )]
    Cancelled { queue: Arc<str> },
}

impl From<SubscribeError> for Error {
    fn from(error: SubscribeError) -> Self {
        Self::Receive(Box::new(error))
    }
}

#[cfg(test)]
mod tests {
    use lapin::types::{ByteArray, FieldArray, LongString};

    use super::*;

    #[test]
    fn headers_keep_what_reads_as_text_in_name_order() {
        let mut table = FieldTable::default();
        for (name, value) in [
            ("trace", AMQPValue::LongString(LongString::from("t-1"))),
            ("kind", AMQPValue::ShortString("paid".into())),
            ("attempt", AMQPValue::LongLongInt(-3)),
            ("count", AMQPValue::ShortShortUInt(7)),
            ("urgent", AMQPValue::Boolean(true)),
            (
                "binary",
                AMQPValue::LongString(LongString::from(vec![0xff])),
            ),
            ("ratio", AMQPValue::Double(0.5)),
            ("bytes", AMQPValue::ByteArray(ByteArray::from(vec![1]))),
            ("x-death", AMQPValue::FieldArray(FieldArray::default())),
            ("nothing", AMQPValue::Void),
        ] {
            table.insert(name.into(), value);
        }
        let text = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|&(name, value)| (name.to_owned(), value.to_owned()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            headers(Some(&table)),
            text(&[
                ("attempt", "-3"),
                ("count", "7"),
                ("kind", "paid"),
                ("trace", "t-1"),
                ("urgent", "true"),
            ])
        );
        assert_eq!(headers(None), text(&[]));
    }

    #[test]
    fn the_timestamp_property_is_seconds_since_the_epoch() {
        assert_eq!(
            time(1_700_000_000),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        assert_eq!(time(0), Some(UNIX_EPOCH));
    }

    #[test]
    fn names_longer_than_a_short_string_are_refused() {
        assert_eq!(short("queue name", "orders").unwrap().as_str(), "orders");
        let refused = short("queue name", "q".repeat(256)).unwrap_err();
        assert_eq!(
            refused.to_string(),
            format!("the queue name {:?} is too long for AMQP", "q".repeat(256))
        );
    }
}
