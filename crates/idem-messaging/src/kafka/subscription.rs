//! A Kafka [`Subscription`]: a task that owns the consumer and polls it all the time, handing
//! each message over as a [`Received`] while fewer than the in-flight limit are held.
//!
//! Kafka has no prefetch limit, and a consumer that stops polling for `max.poll.interval.ms`
//! (5 minutes) is removed from its group, its partitions given to others. So the subscription's
//! task never stops polling; it bounds what it hands over instead:
//!
//! - Each message handed over takes a permit of a semaphore of `max_in_flight` permits, and
//!   gives it back when it is settled or dropped. The messages handed over, read or not, are
//!   therefore never more than the limit.
//! - When the permits run out, the task pauses every partition assigned to it (librdkafka drops
//!   what it had fetched of them, and fetches nothing more) and goes on polling, which serves
//!   rebalances and keeps the consumer in its group, until a permit comes back; then it resumes
//!   them, and librdkafka fetches from the message after the last one handed over.
//! - A message that still arrives while no permit is free (from a partition assigned since the
//!   pause) is not handed over: its partition is paused too, and sought back to it.
//!
//! Offsets are stored in order (see [`Offsets`]): a settled message's offset is stored only once
//! every message before it in its partition is settled, so that handling several messages of a
//! partition at once never commits one that was not handled. A message dropped without being
//! settled is sought back to, as a requeue would.

use std::{
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime},
};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use rdkafka::{
    ClientConfig, ClientContext, Message as _, TopicPartitionList,
    consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer},
    error::KafkaError,
    message::{BorrowedMessage, Headers},
    types::RDKafkaErrorCode,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};

use super::{
    KafkaSecurity, MESSAGE_ID_HEADER,
    consumer::{SEEK_TIMEOUT, message_id, seek_back, store_offset},
    offsets::{Offsets, Revoked},
};
use crate::{
    BoxError, Error, Received, SubscribeOptions, Subscription,
    consume::{Message, Settle},
};

/// How long subscribing waits for the topic's metadata.
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// The subscription's consumer.
type Subscribed = StreamConsumer<SubscriptionContext>;

/// A topic that the cluster does not have: a subscription to it is refused rather than left
/// waiting for a topic that a cluster with automatic creation would make on first use and
/// another would never have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the Kafka topic `{topic}` does not exist")]
pub struct UnknownTopic {
    /// The topic.
    pub topic: String,
}

/// The settlement of a message whose partition was revoked since it was handed over.
#[derive(Debug, thiserror::Error)]
#[error(
    "partition {partition} of the Kafka topic `{topic}` was revoked: its new owner consumes the \
     message again"
)]
struct RevokedPartition {
    topic: String,
    partition: i32,
}

/// Subscribes to `options`' topic as its group, with `config` (the bootstrap servers, the URL's
/// consumer settings and [`consumer_config`](super::consumer_config)'s) secured by `security`.
pub(super) async fn subscribe(
    mut config: ClientConfig,
    security: &KafkaSecurity,
    options: SubscribeOptions,
) -> Result<Subscription, Error> {
    security.apply(&mut config).map_err(receive)?;
    let topic = options.from().to_owned();
    let consumer: Subscribed = config
        .create_with_context(SubscriptionContext::default())
        .map_err(receive)?;
    let consumer = Arc::new(consumer);
    let subscribed = check_topic(&consumer, &topic)
        .await
        .and_then(|()| consumer.subscribe(&[&topic]).map_err(receive));
    if let Err(error) = subscribed {
        close(consumer);
        return Err(error);
    }
    let (sender, mut messages) = mpsc::unbounded_channel();
    let error_unread = Arc::new(AtomicBool::new(false));
    let feed = Feed {
        sender,
        error_unread: Arc::clone(&error_unread),
    };
    let permits = Arc::new(Semaphore::new(usize::from(options.in_flight_limit())));
    tokio::spawn(run(consumer, topic, permits, feed));
    Ok(Subscription::new(futures_util::stream::poll_fn(
        move |cx| {
            messages.poll_recv(cx).map(|item| {
                if let Some(Err(_)) = &item {
                    error_unread.store(false, Ordering::Release);
                }
                item
            })
        },
    )))
}

/// Fails unless the cluster has `topic`: Kafka may create a topic a client asks about, or not,
/// depending on the cluster's settings; a subscription reads only what exists.
async fn check_topic(consumer: &Arc<Subscribed>, topic: &str) -> Result<(), Error> {
    let metadata = tokio::task::spawn_blocking({
        let (consumer, topic) = (Arc::clone(consumer), topic.to_owned());
        move || consumer.fetch_metadata(Some(&topic), METADATA_TIMEOUT)
    })
    .await
    .map_err(receive)?
    .map_err(receive)?;
    let found = metadata.topics().iter().find(|found| found.name() == topic);
    match found.map(|found| (found.error(), found.partitions().is_empty())) {
        Some((None, false)) => Ok(()),
        Some((Some(error), _))
            if RDKafkaErrorCode::from(error) != RDKafkaErrorCode::UnknownTopicOrPartition =>
        {
            Err(receive(KafkaError::MetadataFetch(error.into())))
        }
        _ => Err(receive(UnknownTopic {
            topic: topic.to_owned(),
        })),
    }
}

/// Where the task sends what it polled: the messages (bounded by the permits they hold), and at
/// most one failure not read yet (the others are logged), so that a subscription nobody reads
/// holds no more than its limit.
struct Feed {
    sender: mpsc::UnboundedSender<Result<Received, Error>>,
    error_unread: Arc<AtomicBool>,
}

impl Feed {
    fn message(&self, received: Received) {
        // Closed: the task sees it on its next turn.
        let _ = self.sender.send(Ok(received));
    }

    fn error(&self, error: KafkaError) {
        if self.error_unread.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                %error,
                "cannot consume from Kafka (an earlier failure is not read yet)"
            );
            return;
        }
        let _ = self.sender.send(Err(receive(error)));
    }
}

/// Polls `consumer` until the subscription is dropped, handing over a message for each permit.
async fn run(consumer: Arc<Subscribed>, topic: String, permits: Arc<Semaphore>, feed: Feed) {
    loop {
        let permit = match Arc::clone(&permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => match at_the_limit(&consumer, &permits, &feed).await {
                Some(permit) => permit,
                None => break,
            },
        };
        tokio::select! {
            () = feed.sender.closed() => break,
            polled = consumer.recv() => match polled {
                Ok(message) => feed.message(received(&message, &consumer, &topic, permit)),
                Err(error) => feed.error(error),
            },
        }
    }
    close(consumer);
}

/// Every permit is taken: pauses the assigned partitions and polls until a permit comes back,
/// then resumes them; `None` if the subscription was dropped meanwhile.
async fn at_the_limit(
    consumer: &Subscribed,
    permits: &Arc<Semaphore>,
    feed: &Feed,
) -> Option<OwnedSemaphorePermit> {
    pause(consumer, true);
    let permit = loop {
        tokio::select! {
            () = feed.sender.closed() => return None,
            permit = Arc::clone(permits).acquire_owned() => break permit.ok()?,
            polled = consumer.recv() => match polled {
                Ok(message) => give_back(consumer, &message),
                Err(error) => feed.error(error),
            },
        }
    };
    pause(consumer, false);
    Some(permit)
}

/// Pauses (or resumes) every partition assigned to `consumer`.
fn pause(consumer: &Subscribed, paused: bool) {
    let done = consumer.assignment().and_then(|assigned| {
        if paused {
            consumer.pause(&assigned)
        } else {
            consumer.resume(&assigned)
        }
    });
    if let Err(error) = done {
        tracing::warn!(
            %error,
            paused,
            "cannot pause or resume the Kafka subscription's partitions"
        );
    }
}

/// A message polled while no permit is free, from a partition assigned since the pause: its
/// partition is paused and sought back to it, to be fetched again after the resume.
fn give_back(consumer: &Subscribed, message: &BorrowedMessage<'_>) {
    let (topic, partition) = (message.topic(), message.partition());
    let mut paused = TopicPartitionList::new();
    paused.add_partition(topic, partition);
    let done = consumer
        .pause(&paused)
        .map_err(BoxError::from)
        .and_then(|()| seek_back(consumer, topic, partition, message.offset(), Duration::ZERO));
    if let Err(error) = done {
        tracing::warn!(
            error = &*error as &dyn std::error::Error,
            topic,
            partition,
            "cannot give back a Kafka message polled past the in-flight limit"
        );
    }
}

/// Closes `consumer` when its last holder drops it (its stored offsets committed, its group
/// left), on a thread where blocking is allowed: librdkafka's close waits for the cluster.
fn close(consumer: Arc<Subscribed>) {
    tokio::task::spawn_blocking(move || drop(consumer));
}

/// `message` as a [`Received`] that holds `permit` until it is settled.
fn received(
    message: &BorrowedMessage<'_>,
    consumer: &Arc<Subscribed>,
    topic: &str,
    permit: OwnedSemaphorePermit,
) -> Received {
    let (partition, offset) = (message.partition(), message.offset());
    let generation = consumer.context().offsets().deliver(partition, offset);
    let headers = message.headers();
    let text = |value: Option<&[u8]>| Some(std::str::from_utf8(value?).ok()?.to_owned());
    let message = Message {
        message_id: headers.and_then(message_id).map(str::to_owned),
        broker_id: Some(format!("{topic}/{partition}/{offset}")),
        source: topic.to_owned(),
        ordering_key: Some(format!("{topic}/{partition}")),
        headers: headers
            .into_iter()
            .flat_map(|headers| headers.iter())
            .filter(|header| header.key != MESSAGE_ID_HEADER)
            .filter_map(|header| Some((header.key.to_owned(), text(header.value)?)))
            .collect(),
        payload: Bytes::copy_from_slice(message.payload().unwrap_or_default()),
        time: message
            .timestamp()
            .to_millis()
            .and_then(|millis| u64::try_from(millis).ok())
            .map(|millis| SystemTime::UNIX_EPOCH + Duration::from_millis(millis)),
        redelivered: false,
    };
    Received::new(
        message,
        Settlement {
            consumer: Arc::clone(consumer),
            topic: topic.to_owned(),
            partition,
            offset,
            generation,
            settled: false,
            _permit: permit,
        },
    )
}

/// How a handed-over message is settled: as [`KafkaMessage`](super::KafkaMessage) is (ack and
/// reject store its offset, requeue seeks back to it), with the offset stored in order.
struct Settlement {
    consumer: Arc<Subscribed>,
    topic: String,
    partition: i32,
    offset: i64,
    generation: u64,
    settled: bool,
    /// Given back when the settlement is dropped: after it is settled, or with the message.
    _permit: OwnedSemaphorePermit,
}

impl Settlement {
    /// Stores the offset of the messages settled in order up to this one, if any.
    fn store(&mut self) -> Result<(), BoxError> {
        self.settled = true;
        // Under the lock, so that the offsets of a partition are stored in increasing order.
        let mut offsets = self.consumer.context().offsets();
        match offsets.settle(self.partition, self.offset, self.generation) {
            Ok(Some(last)) => store_offset(&*self.consumer, &self.topic, self.partition, last),
            Ok(None) => Ok(()),
            Err(Revoked) => Err(RevokedPartition {
                topic: self.topic.clone(),
                partition: self.partition,
            }
            .into()),
        }
    }

    fn seek_back(&mut self, timeout: Duration) -> Result<(), BoxError> {
        self.settled = true;
        seek_back(
            &*self.consumer,
            &self.topic,
            self.partition,
            self.offset,
            timeout,
        )
    }
}

impl Settle for Settlement {
    fn ack(mut self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(std::future::ready(self.store()))
    }

    fn requeue(mut self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(std::future::ready(self.seek_back(SEEK_TIMEOUT)))
    }

    fn reject(mut self: Box<Self>) -> BoxFuture<'static, Result<(), BoxError>> {
        Box::pin(std::future::ready(self.store()))
    }
}

/// Dropped unsettled, a message is sought back to, without waiting: it comes again, and its
/// offset holds the partition's back meanwhile.
impl Drop for Settlement {
    fn drop(&mut self) {
        if !self.settled {
            let _ = self.seek_back(Duration::ZERO);
        }
    }
}

/// The subscription consumer's context: librdkafka's errors about the cluster are logged, and
/// a rebalance forgets what was held of the partitions it moves.
#[derive(Default)]
struct SubscriptionContext {
    offsets: Mutex<Offsets>,
}

impl SubscriptionContext {
    fn offsets(&self) -> MutexGuard<'_, Offsets> {
        self.offsets.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl ClientContext for SubscriptionContext {
    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(%error, reason, "the Kafka cluster cannot be used");
    }
}

impl ConsumerContext for SubscriptionContext {
    fn pre_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        // Only the subscription's topic is assigned.
        if let Rebalance::Assign(partitions) | Rebalance::Revoke(partitions) = rebalance {
            self.offsets()
                .forget(partitions.elements().iter().map(|p| p.partition()));
        }
    }
}

/// A failure to receive.
fn receive(error: impl Into<BoxError>) -> Error {
    Error::Receive(error.into())
}
