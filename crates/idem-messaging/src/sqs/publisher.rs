//! [`SqsPublisher`]: sends with `SendMessageBatch` and waits for SQS's answer for each message.

use std::{collections::HashMap, fmt, ops::Range, sync::Mutex};

use aws_sdk_sqs::{
    Client,
    operation::send_message_batch::SendMessageBatchOutput,
    types::{MessageAttributeValue, SendMessageBatchRequestEntry},
};
use futures_util::future::join_all;
use tokio::sync::OnceCell;

use super::{
    MESSAGE_ID_ATTRIBUTE,
    error::{classify, is_rejection, reason, spread},
    is_fifo, is_queue_url,
};
use crate::{
    BoxPublisher, Confirmations, Envelope, PublishError, Publisher, broker::unreachable,
    sqs::url::SqsUrl,
};

/// The most entries SQS takes in one `SendMessageBatch`.
const MAX_ENTRIES: usize = 10;
/// The most bytes (bodies and attributes) SQS takes in one `SendMessageBatch`.
const MAX_BATCH_BYTES: usize = 256 * 1024;
/// How many queue names the publisher remembers the URL of; past it, it starts over.
const MAX_QUEUE_URLS: usize = 1024;

/// Sends messages to Amazon SQS, each confirmed by SQS's answer: the [`Publisher`] of the `sqs`
/// feature.
///
/// Each message goes to the queue its destination names (a queue name, whose URL is looked up
/// once and remembered, or a queue URL), with its outbox id in the `message-id` string attribute
/// and its headers as string attributes (SQS takes ten attributes per message, the id being one;
/// a repeated name keeps its last value). The payload is the message body: SQS bodies are text,
/// so a payload that is not UTF-8 is a rejection. On a FIFO queue (a name ending in `.fifo`)
/// the ordering key is the `MessageGroupId` (the message id when there is none: such messages
/// have no order between them) and the outbox id the `MessageDeduplicationId`.
///
/// # Examples
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use idem_messaging::{Envelope, OutboxMessage, Publisher, sqs::{SqsPublisher, config_loader}};
///
/// let config = config_loader().region(aws_sdk_sqs::config::Region::new("eu-west-1")).load().await;
/// let publisher = SqsPublisher::new(aws_sdk_sqs::Client::new(&config));
/// let envelope = Envelope::new(
///     "order-42/paid".parse()?,
///     OutboxMessage::new("orders.fifo", "{}").ordering_key("order-42"),
///     1,
/// );
/// publisher.publish(&envelope).await?; // stored by SQS
/// # Ok(())
/// # }
/// ```
pub struct SqsPublisher {
    client: OnceCell<Client>,
    /// Where a publisher built from a URL gets its client.
    settings: Option<SqsUrl>,
    queue_urls: Mutex<HashMap<String, String>>,
}

impl SqsUrl {
    /// A publisher to this region: the destination is the queue. Loads its configuration (and
    /// reads the CA file) on its first batch.
    pub(crate) fn publisher(&self) -> BoxPublisher {
        BoxPublisher::new(SqsPublisher::lazy(self.clone()))
    }
}

impl SqsPublisher {
    /// A publisher that sends with `client`.
    pub fn new(client: Client) -> Self {
        Self {
            client: OnceCell::new_with(Some(client)),
            settings: None,
            queue_urls: Mutex::new(HashMap::new()),
        }
    }

    /// A publisher to `url`'s region, through its endpoint when given (an SQS-compatible
    /// server), with the credentials of its profile or of the usual chain, trusting its CA
    /// file besides the system's roots. Loads its configuration on the first batch; a CA file
    /// that cannot be read fails that batch, and the next tries again.
    pub(crate) fn lazy(url: SqsUrl) -> Self {
        Self {
            client: OnceCell::new(),
            settings: Some(url),
            queue_urls: Mutex::new(HashMap::new()),
        }
    }

    async fn client(&self) -> Result<&Client, PublishError> {
        self.client
            .get_or_try_init(|| async {
                let url = self.settings.as_ref().ok_or_else(|| {
                    PublishError::unavailable("an SQS publisher has neither a client nor a URL")
                })?;
                url.client().await.map_err(PublishError::unavailable)
            })
            .await
    }

    /// The URL of the queue `destination` names: itself when it is a URL.
    async fn queue_url(&self, client: &Client, destination: &str) -> Result<String, PublishError> {
        if is_queue_url(destination) {
            return Ok(destination.to_owned());
        }
        if let Some(url) = self.urls().get(destination) {
            return Ok(url.clone());
        }
        let output = client
            .get_queue_url()
            .queue_name(destination)
            .send()
            .await
            .map_err(classify)?;
        let url = output
            .queue_url()
            .ok_or_else(|| PublishError::unavailable("GetQueueUrl answered without a URL"))?
            .to_owned();
        let mut urls = self.urls();
        if urls.len() >= MAX_QUEUE_URLS {
            urls.clear();
        }
        urls.insert(destination.to_owned(), url.clone());
        Ok(url)
    }

    fn urls(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.queue_urls
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Sends the messages of one queue, in requests SQS accepts; their outcomes by index.
    async fn send_queue(
        &self,
        client: &Client,
        destination: &str,
        entries: Vec<Entry<'_>>,
    ) -> Vec<(usize, Result<(), PublishError>)> {
        let url = match self.queue_url(client, destination).await {
            Ok(url) => url,
            Err(error) => {
                let errors = spread(error, entries.len());
                return entries
                    .iter()
                    .map(|e| e.index)
                    .zip(errors.into_iter().map(Err))
                    .collect();
            }
        };
        let sizes: Vec<usize> = entries.iter().map(Entry::size).collect();
        let requests = chunks(&sizes)
            .into_iter()
            .map(|range| send_chunk(client, &url, &entries[range]));
        join_all(requests).await.into_iter().flatten().collect()
    }
}

/// One message as SQS gets it.
struct Entry<'a> {
    /// Its place in the relay's batch, and its id in the request.
    index: usize,
    envelope: &'a Envelope,
    body: &'a str,
    fifo: bool,
}

impl Entry<'_> {
    /// What SQS counts against a request's size: the body, and each attribute's name, type and
    /// value.
    fn size(&self) -> usize {
        let attribute = |name: &str, value: &str| name.len() + "String".len() + value.len();
        self.body.len()
            + attribute(MESSAGE_ID_ATTRIBUTE, self.envelope.id().as_str())
            + self
                .headers()
                .map(|(name, value)| attribute(name, value))
                .sum::<usize>()
    }

    fn headers(&self) -> impl Iterator<Item = (&str, &str)> {
        self.envelope
            .message()
            .headers
            .iter()
            .filter(|(name, _)| name != MESSAGE_ID_ATTRIBUTE)
            .map(|(name, value)| (name.as_str(), value.as_str()))
    }

    fn attributes(&self) -> Result<HashMap<String, MessageAttributeValue>, PublishError> {
        let string = |value: &str| {
            MessageAttributeValue::builder()
                .data_type("String")
                .string_value(value)
                .build()
                .map_err(|error| PublishError::Rejected {
                    reason: error.to_string(),
                })
        };
        let mut attributes = HashMap::new();
        for (name, value) in self.headers() {
            attributes.insert(name.to_owned(), string(value)?);
        }
        attributes.insert(
            MESSAGE_ID_ATTRIBUTE.to_owned(),
            string(self.envelope.id().as_str())?,
        );
        Ok(attributes)
    }

    /// `MessageGroupId` and `MessageDeduplicationId`, on a FIFO queue.
    fn fifo_ids(&self) -> Option<(&str, &str)> {
        let id = self.envelope.id().as_str();
        self.fifo.then(|| {
            let group = self
                .envelope
                .message()
                .ordering_key
                .as_deref()
                .unwrap_or(id);
            (group, id)
        })
    }

    fn batch_entry(&self) -> Result<SendMessageBatchRequestEntry, PublishError> {
        let (group, dedup) = self.fifo_ids().unzip();
        SendMessageBatchRequestEntry::builder()
            .id(self.index.to_string())
            .message_body(self.body)
            .set_message_attributes(Some(self.attributes()?))
            .set_message_group_id(group.map(str::to_owned))
            .set_message_deduplication_id(dedup.map(str::to_owned))
            .build()
            .map_err(|error| PublishError::Rejected {
                reason: error.to_string(),
            })
    }

    /// Sends the message alone, with `SendMessage`.
    async fn send_alone(&self, client: &Client, url: &str) -> Result<(), PublishError> {
        let (group, dedup) = self.fifo_ids().unzip();
        client
            .send_message()
            .queue_url(url)
            .message_body(self.body)
            .set_message_attributes(Some(self.attributes()?))
            .set_message_group_id(group.map(str::to_owned))
            .set_message_deduplication_id(dedup.map(str::to_owned))
            .send()
            .await
            .map(|_| ())
            .map_err(classify)
    }
}

/// Splits messages of `sizes` bytes, in order, into requests of at most [`MAX_ENTRIES`]
/// messages and [`MAX_BATCH_BYTES`] bytes; a message larger than that goes alone (SQS decides).
fn chunks(sizes: &[usize]) -> Vec<Range<usize>> {
    let mut chunks = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && (i - start == MAX_ENTRIES || bytes + size > MAX_BATCH_BYTES) {
            chunks.push(start..i);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < sizes.len() {
        chunks.push(start..sizes.len());
    }
    chunks
}

/// Sends one `SendMessageBatch`; an entry that failed on SQS's side, or every entry of a request
/// SQS refused whole, is sent again alone.
async fn send_chunk(
    client: &Client,
    url: &str,
    entries: &[Entry<'_>],
) -> Vec<(usize, Result<(), PublishError>)> {
    let mut outcomes = Vec::with_capacity(entries.len());
    let mut request = Vec::with_capacity(entries.len());
    for entry in entries {
        match entry.batch_entry() {
            Ok(built) => request.push((entry, built)),
            Err(error) => outcomes.push((entry.index, Err(error))),
        }
    }
    if request.is_empty() {
        return outcomes;
    }
    let sent = client
        .send_message_batch()
        .queue_url(url)
        .set_entries(Some(
            request.iter().map(|(_, built)| built.clone()).collect(),
        ))
        .send()
        .await;
    let sent_entries: Vec<&Entry<'_>> = request.into_iter().map(|(entry, _)| entry).collect();
    let mut retries = Vec::new();
    match sent {
        Ok(output) => {
            let ids: Vec<String> = sent_entries
                .iter()
                .map(|entry| entry.index.to_string())
                .collect();
            for (entry, answer) in sent_entries.into_iter().zip(answers(&ids, &output)) {
                match answer {
                    Answer::Stored => outcomes.push((entry.index, Ok(()))),
                    Answer::Refused(reason) => {
                        outcomes.push((entry.index, Err(PublishError::Rejected { reason })));
                    }
                    Answer::Retry => retries.push(entry),
                }
            }
        }
        Err(error) => match classify(error) {
            // One message can make SQS refuse the whole request (too long a batch): each is sent
            // alone, so that only the guilty are refused.
            PublishError::Rejected { .. } if sent_entries.len() > 1 => retries = sent_entries,
            error => {
                let errors = spread(error, sent_entries.len());
                outcomes.extend(
                    sent_entries
                        .iter()
                        .map(|entry| entry.index)
                        .zip(errors.into_iter().map(Err)),
                );
                return outcomes;
            }
        },
    }
    let retried = join_all(
        retries
            .into_iter()
            .map(|entry| async move { (entry.index, entry.send_alone(client, url).await) }),
    );
    outcomes.extend(retried.await);
    outcomes
}

/// What SQS answered for one entry of a `SendMessageBatch`.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// Stored.
    Stored,
    /// Refused for the message's own sake (a sender fault), with SQS's reason.
    Refused(String),
    /// Failed on SQS's side, or not answered: to be sent again alone.
    Retry,
}

/// SQS's answer for each of `ids`, in order.
fn answers(ids: &[String], output: &SendMessageBatchOutput) -> Vec<Answer> {
    ids.iter()
        .map(|id| {
            if output.successful().iter().any(|ok| ok.id() == id) {
                return Answer::Stored;
            }
            match output.failed().iter().find(|failed| failed.id() == id) {
                Some(failed) if failed.sender_fault() || is_rejection(failed.code()) => {
                    Answer::Refused(reason(failed.code(), failed.message()))
                }
                _ => Answer::Retry,
            }
        })
        .collect()
}

impl Publisher for SqsPublisher {
    async fn publish_batch(&self, batch: &[Envelope]) -> Confirmations {
        let client = match self.client().await {
            Ok(client) => client,
            Err(error) => return unreachable(batch, "cannot set up the SQS client", error),
        };
        let mut outcomes: Vec<Option<Result<(), PublishError>>> =
            std::iter::repeat_with(|| None).take(batch.len()).collect();
        // The messages of each queue, in the batch's order.
        let mut queues: Vec<(&str, Vec<Entry<'_>>)> = Vec::new();
        for (index, envelope) in batch.iter().enumerate() {
            let message = envelope.message();
            let Ok(body) = std::str::from_utf8(&message.payload) else {
                outcomes[index] = Some(Err(PublishError::Rejected {
                    reason: "an SQS message body is text, and the payload is not UTF-8".into(),
                }));
                continue;
            };
            let destination = message.destination.as_str();
            let entry = Entry {
                index,
                envelope,
                body,
                fifo: is_fifo(destination),
            };
            match queues.iter_mut().find(|(queue, _)| *queue == destination) {
                Some((_, entries)) => entries.push(entry),
                None => queues.push((destination, vec![entry])),
            }
        }
        let sends = queues
            .into_iter()
            .map(|(destination, entries)| self.send_queue(client, destination, entries));
        for (index, outcome) in join_all(sends).await.into_iter().flatten() {
            outcomes[index] = Some(outcome);
        }
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| Err(PublishError::unavailable("SQS answered nothing")))
            })
            .collect()
    }
}

impl fmt::Debug for SqsPublisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqsPublisher")
            .field("settings", &self.settings)
            .field("connected", &self.client.initialized())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use aws_sdk_sqs::types::{BatchResultErrorEntry, SendMessageBatchResultEntry};

    use super::*;

    #[test]
    #[allow(clippy::single_range_in_vec_init)] // one request, of the messages 0 to 2
    fn requests_hold_ten_messages_and_256_kib_at_most() {
        assert_eq!(chunks(&[]), Vec::<Range<usize>>::new());
        assert_eq!(chunks(&[1; 3]), [0..3]);
        assert_eq!(chunks(&[1; 23]), [0..10, 10..20, 20..23]);
        let quarter = MAX_BATCH_BYTES / 4;
        assert_eq!(
            chunks(&[quarter, quarter, quarter, quarter, 1, quarter]),
            [0..4, 4..6]
        );
        // A message over the limit goes alone: SQS decides.
        assert_eq!(chunks(&[1, MAX_BATCH_BYTES + 1, 1]), [0..1, 1..2, 2..3]);
    }

    #[test]
    fn entries_failed_on_sqs_side_are_retried_alone_and_sender_faults_refused() {
        let stored = |id: &str| {
            SendMessageBatchResultEntry::builder()
                .id(id)
                .message_id("sqs-id")
                .md5_of_message_body("md5")
                .build()
                .unwrap()
        };
        let failed = |id: &str, code: &str, sender_fault: bool| {
            BatchResultErrorEntry::builder()
                .id(id)
                .code(code)
                .message("why")
                .sender_fault(sender_fault)
                .build()
                .unwrap()
        };
        let output = SendMessageBatchOutput::builder()
            .successful(stored("0"))
            .successful(stored("3"))
            .failed(failed("1", "InternalError", false))
            .failed(failed("2", "InvalidParameterValue", true))
            .failed(failed("5", "InvalidMessageContents", false))
            .build()
            .unwrap();
        let ids: Vec<String> = (0..6).map(|i| i.to_string()).collect();
        assert_eq!(
            answers(&ids, &output),
            [
                Answer::Stored,
                Answer::Retry,
                Answer::Refused("InvalidParameterValue: why".into()),
                Answer::Stored,
                // Not answered at all.
                Answer::Retry,
                Answer::Refused("InvalidMessageContents: why".into()),
            ]
        );
    }
}
