//! [`subscribe`]: a JetStream durable pull consumer's messages as a [`Subscription`] of
//! [`Received`], each kept from redelivery while it is held.

use std::{
    sync::Arc,
    time::{Duration, SystemTime},
};

use async_nats::{
    Client, HeaderMap, Subject,
    header::NATS_MESSAGE_ID,
    jetstream::{
        self, AckKind,
        consumer::{AckPolicy, Consumer, DeliverPolicy, FromConsumer, PullConsumer, pull},
        context::{ConsumerInfoErrorKind, RequestError},
        response::Response,
        stream::ConsumerError,
    },
};
use bytes::Bytes;
use futures_util::{StreamExt, future::BoxFuture};
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::{connection::connect, subject::invalid_filter};
use crate::{
    BoxError, Error, Received, SubscribeOptions, Subscription,
    broker::TlsFiles,
    consume::{Message, Settle},
};

/// Reads the subject `options.from()` of the server at `url` through the durable pull consumer
/// `options.group_name()` of the stream that captures it, created if missing.
pub(super) async fn subscribe(
    url: &str,
    tls: &TlsFiles,
    options: &SubscribeOptions,
) -> Result<Subscription, Error> {
    let subject = options.from();
    if let Some(reason) = invalid_filter(subject) {
        return Err(SubscribeError::InvalidSubject {
            subject: subject.to_owned(),
            reason,
        }
        .into());
    }
    let client = connect(url, tls, options.group_name())
        .await
        .map_err(SubscribeError::Connect)?;
    let context = jetstream::new(client);
    let stream = capturing(&context, subject).await?;
    let consumer = durable(&context, &stream, options).await?;
    let every = extension_interval(&consumer.cached_info().config);
    let name: Arc<str> = Arc::from(consumer.cached_info().name.as_str());
    let messages = consumer
        .stream()
        .max_messages_per_batch(usize::from(options.in_flight_limit()))
        .messages()
        .await
        .map_err(|source| SubscribeError::Pull {
            consumer: Arc::clone(&name),
            source: Box::new(source),
        })?;
    Ok(Subscription::new(messages.map(move |message| {
        let message = message.map_err(|source| SubscribeError::Pull {
            consumer: Arc::clone(&name),
            source: Box::new(source),
        })?;
        received(message, every)
    })))
}

/// The name of the one stream whose subjects take in `subject`.
async fn capturing(context: &jetstream::Context, subject: &str) -> Result<String, SubscribeError> {
    let failed = |source| SubscribeError::FindStream {
        subject: subject.to_owned(),
        source,
    };
    // `stream_by_subject` gives the first of them: a wildcard subject may span several streams.
    let names: Response<serde_json::Value> = context
        .request("STREAM.NAMES", &serde_json::json!({ "subject": subject }))
        .await
        .map_err(|error: RequestError| failed(Box::new(error)))?;
    let page = match names {
        Response::Ok(page) => page,
        Response::Err { error } => return Err(failed(Box::new(error))),
    };
    let mut streams: Vec<String> = page
        .get("streams")
        .and_then(serde_json::Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(|name| name.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    match streams.len() {
        0 => Err(SubscribeError::NoStream {
            subject: subject.to_owned(),
        }),
        1 => Ok(streams.remove(0)),
        _ => {
            streams.sort();
            Err(SubscribeError::SeveralStreams {
                subject: subject.to_owned(),
                streams,
            })
        }
    }
}

/// The durable pull consumer `options.group_name()` of `stream`, filtering `options.from()`
/// with explicit acks: created with the options' `max_ack_pending` and `ack_wait`, or, when it
/// exists, set to them. One that filters another subject, pushes or takes other acks is
/// refused, not changed.
async fn durable(
    context: &jetstream::Context,
    stream: &str,
    options: &SubscribeOptions,
) -> Result<PullConsumer, SubscribeError> {
    let (group, subject) = (options.group_name(), options.from());
    let max_ack_pending = i64::from(options.in_flight_limit());
    let ack_wait = options.ack_wait_time();
    let refused = |reason| SubscribeError::Refused {
        consumer: group.to_owned(),
        stream: stream.to_owned(),
        reason,
    };
    let failed = |source| SubscribeError::Consumer {
        consumer: group.to_owned(),
        stream: stream.to_owned(),
        source,
    };
    let handle = context
        .get_stream_no_info(stream)
        .await
        .map_err(|error| failed(Box::new(error)))?;
    let config = match handle.consumer_info(group).await {
        Ok(info) => {
            let existing = &info.config;
            if existing.deliver_subject.is_some() {
                return Err(refused(Mismatch::Push));
            }
            if existing.ack_policy != AckPolicy::Explicit {
                return Err(refused(Mismatch::Acks(existing.ack_policy)));
            }
            if existing.filter_subject != subject {
                return Err(refused(Mismatch::Filter {
                    filter: existing.filter_subject.clone(),
                    subject: subject.to_owned(),
                }));
            }
            if existing.max_ack_pending == max_ack_pending && existing.ack_wait == ack_wait {
                let config =
                    pull::Config::try_from_consumer_config(info.config.clone()).map_err(failed)?;
                return Ok(Consumer::new(config, info, context.clone()));
            }
            tracing::info!(
                consumer = group,
                stream,
                max_ack_pending,
                ?ack_wait,
                "setting a JetStream consumer's max_ack_pending and ack_wait to the subscription's"
            );
            let mut config = pull::Config::try_from_consumer_config(info.config).map_err(failed)?;
            config.max_ack_pending = max_ack_pending;
            config.ack_wait = ack_wait;
            config
        }
        Err(error) if error.kind() == ConsumerInfoErrorKind::NotFound => pull::Config {
            durable_name: Some(group.to_owned()),
            filter_subject: subject.to_owned(),
            ack_policy: AckPolicy::Explicit,
            deliver_policy: DeliverPolicy::All,
            max_ack_pending,
            ack_wait,
            ..pull::Config::default()
        },
        Err(error) if error.kind() == ConsumerInfoErrorKind::InvalidName => {
            return Err(SubscribeError::InvalidGroup {
                group: group.to_owned(),
            });
        }
        Err(error) => return Err(failed(Box::new(error))),
    };
    // Creating a durable consumer that exists updates it (the server refuses a change that is
    // not allowed): two subscribers that create it at once agree.
    handle
        .create_consumer(config)
        .await
        .map_err(|error: ConsumerError| failed(Box::new(error)))
}

/// How often a held message is extended: every third of the shortest time the consumer waits
/// for an acknowledgement before it redelivers (its `ack_wait`, or a shorter `backoff` step).
fn extension_interval(config: &jetstream::consumer::Config) -> Duration {
    let wait = config
        .backoff
        .iter()
        .copied()
        .chain([config.ack_wait])
        .filter(|wait| !wait.is_zero())
        .min()
        // JetStream's default.
        .unwrap_or(Duration::from_secs(30));
    wait / 3
}

/// `message` as a [`Received`], extended every `every` until it is settled.
fn received(message: jetstream::Message, every: Duration) -> Result<Received, Error> {
    let info = message
        .info()
        .map_err(|source| SubscribeError::NotJetStream {
            subject: message.subject.to_string(),
            source,
        })?;
    let broker_id = format!("{}/{}", info.stream, info.stream_sequence);
    let time = SystemTime::from(info.published);
    let redelivered = info.delivered > 1;
    let (message_id, headers) = split_headers(message.headers.as_ref());
    let subject = message.subject.to_string();
    let fields = Message {
        message_id,
        broker_id: Some(broker_id),
        source: subject.clone(),
        ordering_key: Some(subject),
        headers,
        payload: message.payload.clone(),
        time: Some(time),
        redelivered,
    };
    Ok(Received::new(fields, Settlement::new(message, every)))
}

/// The `Nats-Msg-Id` header, and the other headers sorted by name (async-nats keeps no order
/// between names), each name's values in the order they came.
fn split_headers(headers: Option<&HeaderMap>) -> (Option<String>, Vec<(String, String)>) {
    let Some(headers) = headers else {
        return (None, Vec::new());
    };
    let message_id = headers
        .get(NATS_MESSAGE_ID)
        .map(|id| id.as_str().to_owned());
    let mut names: Vec<_> = headers
        .iter()
        .filter(|(name, _)| **name != NATS_MESSAGE_ID)
        .collect();
    names.sort_by(|(a, _), (b, _)| AsRef::<str>::as_ref(*a).cmp(b.as_ref()));
    let others = names
        .into_iter()
        .flat_map(|(name, values)| {
            values
                .iter()
                .map(move |value| (name.to_string(), value.as_str().to_owned()))
        })
        .collect();
    (message_id, others)
}

/// How a received message is settled, each answer awaited from the server (a double ack). From
/// its receipt until it is settled or dropped, a task tells JetStream the message is in
/// progress (`+WPI`) every third of the consumer's `ack_wait`, so that it is not redelivered
/// while its handler runs, however long that takes.
struct Settlement {
    message: jetstream::Message,
    heartbeat: Option<Heartbeat>,
}

/// The task that extends a message's ack wait, stopped when dropped.
struct Heartbeat {
    stop: DropGuard,
    task: JoinHandle<()>,
}

impl Settlement {
    fn new(message: jetstream::Message, every: Duration) -> Self {
        let heartbeat = message.reply.clone().map(|reply| {
            let stop = CancellationToken::new();
            let task = tokio::spawn(extend(message.context.client(), reply, every, stop.clone()));
            Heartbeat {
                stop: stop.drop_guard(),
                task,
            }
        });
        Self { message, heartbeat }
    }

    /// Stops the extensions, once one in flight has been sent (so that it cannot follow the
    /// answer), then gives the server `kind` and waits for its confirmation.
    async fn settle(mut self, kind: AckKind) -> Result<(), BoxError> {
        if let Some(Heartbeat { stop, task }) = self.heartbeat.take() {
            drop(stop);
            let _ = task.await;
        }
        self.message.double_ack_with(kind).await
    }
}

/// Every `every`, tells JetStream through `reply` that the message is still in progress, until
/// `stop`.
async fn extend(client: Client, reply: Subject, every: Duration, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        let progress = Bytes::from(AckKind::Progress);
        if let Err(error) = client.publish(reply.clone(), progress).await {
            tracing::warn!(
                error = &error as &dyn std::error::Error,
                "cannot tell JetStream a message is in progress: it may be redelivered"
            );
        }
    }
}

impl Settle for Settlement {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.settle(AckKind::Ack))
    }

    fn requeue(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.settle(AckKind::Nak(None)))
    }

    fn reject(self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(self.settle(AckKind::Term))
    }
}

/// How an existing durable consumer differs from what a subscription needs.
#[derive(Debug)]
enum Mismatch {
    /// It pushes its messages to a subject.
    Push,
    /// Its messages are not acknowledged one by one.
    Acks(AckPolicy),
    /// It filters another subject.
    Filter { filter: String, subject: String },
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Push => f.write_str("it is a push consumer, not a pull consumer"),
            Self::Acks(policy) => write!(f, "its ack policy is {policy:?}, not explicit"),
            Self::Filter { filter, subject } if filter.is_empty() => write!(
                f,
                "it filters no subject, or several, not {subject:?}: delete it, or subscribe as \
                 another group"
            ),
            Self::Filter { filter, subject } => write!(
                f,
                "it filters {filter:?}, not {subject:?}: delete it, or subscribe as another group"
            ),
        }
    }
}

/// Why a JetStream subscription could not start, or a message could not be received.
#[derive(Debug, thiserror::Error)]
enum SubscribeError {
    /// The subject is not one NATS takes.
    #[error("cannot subscribe to the subject {subject:?}: it {reason}")]
    InvalidSubject {
        subject: String,
        reason: &'static str,
    },
    /// The group is not a valid durable consumer name.
    #[error(
        "the group {group:?} cannot name a JetStream consumer: it must be non-empty, without \
         white space, `.`, `*`, `>`, `/` or `\\`"
    )]
    InvalidGroup { group: String },
    /// The server cannot be reached, or refused the connection.
    #[error("cannot connect to NATS")]
    Connect(#[source] BoxError),
    /// The server did not say which streams capture the subject.
    #[error("cannot find the JetStream stream of the subject {subject:?}")]
    FindStream {
        subject: String,
        #[source]
        source: BoxError,
    },
    /// No stream captures the subject.
    #[error("no JetStream stream captures the subject {subject:?}")]
    NoStream { subject: String },
    /// A wildcard subject spans several streams.
    #[error(
        "the subject {subject:?} spans several JetStream streams ({}): subscribe to a subject \
         of one",
        streams.join(", ")
    )]
    SeveralStreams {
        subject: String,
        streams: Vec<String>,
    },
    /// The durable consumer could not be read, created or updated.
    #[error("cannot get or create the JetStream consumer {consumer:?} of the stream {stream:?}")]
    Consumer {
        consumer: String,
        stream: String,
        #[source]
        source: BoxError,
    },
    /// The durable consumer exists, and does not fit.
    #[error("the JetStream consumer {consumer:?} of the stream {stream:?} does not fit: {reason}")]
    Refused {
        consumer: String,
        stream: String,
        reason: Mismatch,
    },
    /// Pulling messages failed (the connection was lost, the consumer deleted).
    #[error("cannot pull the messages of the JetStream consumer {consumer:?}")]
    Pull {
        consumer: Arc<str>,
        #[source]
        source: BoxError,
    },
    /// The message's reply subject is not a JetStream acknowledgement's.
    #[error("a message on {subject:?} is not a JetStream consumer's")]
    NotJetStream {
        subject: String,
        #[source]
        source: BoxError,
    },
}

impl From<SubscribeError> for Error {
    fn from(error: SubscribeError) -> Self {
        Self::Receive(Box::new(error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_id_is_taken_out_and_the_other_headers_sorted_by_name() {
        let mut headers = HeaderMap::new();
        headers.append("trace", "a");
        headers.append(NATS_MESSAGE_ID, "0190-a");
        headers.append("content-type", "text/plain");
        headers.append("trace", "b");
        let (id, others) = split_headers(Some(&headers));
        assert_eq!(id.as_deref(), Some("0190-a"));
        assert_eq!(
            others,
            [
                ("content-type", "text/plain"),
                ("trace", "a"),
                ("trace", "b")
            ]
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
        );
        assert_eq!(split_headers(None), (None, Vec::new()));
    }

    #[test]
    fn a_held_message_is_extended_every_third_of_the_shortest_wait() {
        let config = |ack_wait, backoff: &[u64]| jetstream::consumer::Config {
            ack_wait,
            backoff: backoff.iter().map(|s| Duration::from_secs(*s)).collect(),
            ..jetstream::consumer::Config::default()
        };
        assert_eq!(
            extension_interval(&config(Duration::from_secs(30), &[])),
            Duration::from_secs(10)
        );
        assert_eq!(
            extension_interval(&config(Duration::from_secs(30), &[6, 60])),
            Duration::from_secs(2)
        );
        assert_eq!(
            extension_interval(&config(Duration::ZERO, &[])),
            Duration::from_secs(10)
        );
    }

    #[test]
    fn a_consumer_that_does_not_fit_says_why() {
        let refused = |reason| {
            SubscribeError::Refused {
                consumer: "ledger".into(),
                stream: "ORDERS".into(),
                reason,
            }
            .to_string()
        };
        assert_eq!(
            refused(Mismatch::Filter {
                filter: "orders.eu".into(),
                subject: "orders.>".into()
            }),
            "the JetStream consumer \"ledger\" of the stream \"ORDERS\" does not fit: it filters \
             \"orders.eu\", not \"orders.>\": delete it, or subscribe as another group"
        );
        assert_eq!(
            refused(Mismatch::Acks(AckPolicy::None)),
            "the JetStream consumer \"ledger\" of the stream \"ORDERS\" does not fit: its ack \
             policy is None, not explicit"
        );
    }
}
