//! Streams followed through the store, by duplicates on other instances.
//!
//! In wait mode, the recording of a streamed response appends its parts to the store as they
//! pass ([`Appender`], [`Store::append_part`]): part 0 is the head (the status and the headers a
//! replay has, encoded as a [`StoredResponse`] without a body), then each chunk, and an empty part
//! if the stream passes the stored-response limit, after which nothing more is appended. A
//! duplicate waiting for the key on any instance looks for that head each time it finds the key
//! held ([`probe`]); once it is there, it gets the head and the chunks so far, then
//! [follows](follow) the parts as they are appended: woken by the store's notifications where it
//! has them ([`Store::changed`]), polling with a bounded backoff where it does not. When the
//! record completes, the rest comes from it (the parts are discarded once the record is written),
//! and the end with its trailers; when the execution ends any other way (released, taken over,
//! its lease run out, or past the limit) the duplicate's response ends abnormally, as the first
//! client's does.

use std::{
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use idem_core::{
    Address, Clock, Engine, FencingToken, Fingerprint, Outcome, Record, RecordState, Store,
    StoreError, StoredResponse, SystemClock,
};
use tokio::{
    sync::{mpsc, oneshot},
    time::{sleep, timeout},
};

use crate::{
    body::End,
    capture::{is_not_stored, replay_headers, stored_whole, trailer_map},
    live::LAG,
};

/// The most bytes one read of the parts asks for.
const PAGE: usize = 256 * 1024;
/// The first and the longest pause between two looks at the parts while none comes.
const POLL_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_millis(250));

/// Appends the parts of a stream being recorded, under its execution's token. Stops at the first
/// failure: followers then get the rest from the record once it is written.
pub(crate) struct Appender<St> {
    engine: Engine<St>,
    address: Address,
    token: FencingToken,
    /// The head, encoded, until it is appended: with the first part, after the client has it,
    /// so that the store's round trip does not delay the first byte.
    head: Option<Bytes>,
    next: u32,
    limit: Duration,
    stopped: bool,
}

impl<St: Store> Appender<St> {
    /// Appends for the execution `token` at `address` the response whose duplicates get
    /// `status` and the replay `headers`, each append bounded by `limit`.
    pub(crate) fn new(
        engine: Engine<St>,
        address: Address,
        token: FencingToken,
        (status, headers): (StatusCode, &HeaderMap),
        limit: Duration,
    ) -> Self {
        let head = stored_whole(status, headers, Bytes::new(), None).encode();
        Self {
            engine,
            address,
            token,
            head: Some(Bytes::from(head)),
            next: 0,
            limit,
            stopped: false,
        }
    }

    /// Appends a chunk of the body (an empty one carries nothing, and is not appended).
    pub(crate) async fn chunk(&mut self, chunk: &Bytes) {
        if !chunk.is_empty() {
            self.append(chunk).await;
        }
    }

    /// Marks the stream as past the limit, and appends nothing more.
    pub(crate) async fn over(&mut self) {
        self.append(&Bytes::new()).await;
        self.stopped = true;
    }

    /// Appends `part`, after the head if it is the first.
    async fn append(&mut self, part: &Bytes) {
        if let Some(head) = self.head.take() {
            self.put(&head).await;
        }
        self.put(part).await;
    }

    async fn put(&mut self, part: &Bytes) {
        if self.stopped {
            return;
        }
        let appended = timeout(
            self.limit,
            self.engine
                .store()
                .append_part(&self.address, self.token, self.next, part),
        )
        .await
        .unwrap_or_else(|_| Err(StoreError::timed_out(self.limit)));
        match appended {
            Ok(()) => self.next += 1,
            // The store keeps no parts, or the execution lost its key: nobody follows.
            Err(StoreError::Unsupported { .. } | StoreError::LeaseLost) => self.stopped = true,
            Err(error) => {
                tracing::warn!(
                    key = %self.address.key.digest(),
                    error = &error as &(dyn std::error::Error + 'static),
                    "appending a streamed part to the store failed; duplicates on other \
                     instances get the rest once the response is recorded"
                );
                self.stopped = true;
            }
        }
    }

    /// Discards the parts once the outcome is recorded (or the key released), in a task of its
    /// own: the record holds the response now, and what is not discarded expires with it.
    pub(crate) fn discard(self) {
        if self.next == 0 {
            return;
        }
        let Self {
            engine,
            address,
            token,
            limit,
            ..
        } = self;
        tokio::spawn(async move {
            let _ = timeout(limit, engine.store().discard_parts(&address, token)).await;
        });
    }
}

/// How far the recording of a streamed response has gone, as the store holds it: what the admin
/// API shows of a processing record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamProgress {
    /// The chunks of the body appended so far.
    pub chunks: u32,
    /// Their bytes.
    pub bytes: u64,
    /// The stream passed the stored-response limit: nothing more is appended.
    pub past_limit: bool,
}

/// How far the execution `token` at `address` has streamed its response to the store, or `None`
/// when it has appended nothing (its response is not streamed, not yet, or not in wait mode).
/// Reads every part.
///
/// # Errors
///
/// The store's, when it fails; a store that keeps no parts has none.
pub async fn stream_progress<St: Store>(
    store: &St,
    address: &Address,
    token: FencingToken,
) -> Result<Option<StreamProgress>, StoreError> {
    let mut progress = StreamProgress {
        chunks: 0,
        bytes: 0,
        past_limit: false,
    };
    let mut next = 0;
    loop {
        let page = match store.read_parts(address, token, next, PAGE).await {
            Err(StoreError::Unsupported { .. }) => return Ok(None),
            read => read?,
        };
        if page.is_empty() {
            break;
        }
        for part in page {
            // Part 0 is the head.
            if next > 0 {
                progress.past_limit |= part.is_empty();
                progress.chunks += u32::from(!part.is_empty());
                progress.bytes += part.len() as u64;
            }
            next += 1;
        }
    }
    Ok((next > 0).then_some(progress))
}

/// A stream found in the store, for a duplicate to follow: its head, the chunks so far, and where
/// to go on from.
pub(crate) struct Found {
    token: FencingToken,
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    prefix: Vec<Bytes>,
}

/// The execution whose stream passed the limit, last seen: not read again by later looks.
#[derive(Default)]
pub(crate) struct PastLimit(AtomicU64);

/// Looks in the store for a stream of the request with `fingerprint` at `address` that can be
/// followed from its start: the record is processing, its head appended, and it has not passed
/// the limit (`past_limit` remembers one that has). Reads the chunks so far (at most `max_bytes`
/// and the head).
pub(crate) async fn probe<St: Store>(
    engine: &Engine<St>,
    address: &Address,
    fingerprint: &Fingerprint,
    past_limit: &PastLimit,
    max_bytes: usize,
) -> Option<Found> {
    let store = engine.store();
    let record = store.get(address).await.ok()??;
    let RecordState::Processing { token, .. } = record.state else {
        return None;
    };
    if record.fingerprint != *fingerprint || past_limit.0.load(Ordering::Relaxed) == token.get() {
        return None;
    }
    let mut parts: Vec<Bytes> = Vec::new();
    let mut len = 0;
    loop {
        let from = u32::try_from(parts.len()).ok()?;
        let page = store.read_parts(address, token, from, PAGE).await.ok()?;
        if page.is_empty() {
            break;
        }
        for part in page {
            if part.is_empty() {
                past_limit.0.store(token.get(), Ordering::Relaxed);
                return None;
            }
            len += part.len();
            parts.push(part);
        }
        if len > max_bytes.saturating_add(PAGE) {
            return None;
        }
    }
    let mut parts = parts.into_iter();
    let head = StoredResponse::decode(&parts.next()?)
        .inspect_err(|error| {
            tracing::warn!(
                key = %address.key.digest(),
                %error,
                "the head of a streamed response in the store does not decode; waiting for the record"
            );
        })
        .ok()?;
    Some(Found {
        token,
        status: StatusCode::from_u16(head.status).ok()?,
        headers: replay_headers(&head.headers),
        prefix: parts.collect(),
    })
}

/// The body of a duplicate that follows `found` at `address`: the chunks so far at once, then a
/// task that reads the next ones from the store as they are appended (each read bounded by
/// `limit`, an execution whose holder stopped renewing its `lease` given up) and ends as the
/// execution does.
pub(crate) fn follow<St: Store>(
    engine: Engine<St>,
    address: Address,
    found: Found,
    lease: Duration,
    limit: Duration,
) -> (Vec<Bytes>, mpsc::Receiver<Bytes>, oneshot::Receiver<End>) {
    let Found { token, prefix, .. } = found;
    let (chunks, received) = mpsc::channel(LAG);
    let (end, ended) = oneshot::channel();
    let follower = Follower {
        engine,
        address,
        token,
        next: u32::try_from(prefix.len() + 1).unwrap_or(u32::MAX),
        sent: prefix.iter().map(Bytes::len).sum(),
        lease,
        limit,
    };
    tokio::spawn(async move {
        if let Some(how) = follower.run(&chunks).await {
            let _ = end.send(how);
        }
    });
    (prefix, received, ended)
}

struct Follower<St> {
    engine: Engine<St>,
    address: Address,
    token: FencingToken,
    /// The index of the next part.
    next: u32,
    /// The bytes of the body sent so far.
    sent: usize,
    lease: Duration,
    limit: Duration,
}

impl<St: Store> Follower<St> {
    /// Sends the chunks as they are appended; how the body ends, or `None` once its reader has
    /// gone.
    async fn run(mut self, chunks: &mpsc::Sender<Bytes>) -> Option<End> {
        let mut pause = POLL_BACKOFF.0;
        // Since when the store has not answered; given up after a lease.
        let mut failing: Option<tokio::time::Instant> = None;
        loop {
            // Interest registered before looking, so that an append right after is not missed.
            let changed = self.engine.store().changed(&self.address);
            let answered = match self.read().await {
                Ok(parts) if !parts.is_empty() => {
                    for part in parts {
                        if part.is_empty() {
                            return Some(Err(PAST_LIMIT.into()));
                        }
                        self.next += 1;
                        self.sent += part.len();
                        chunks.send(part).await.ok()?;
                    }
                    pause = POLL_BACKOFF.0;
                    failing = None;
                    continue;
                }
                Ok(_) => match self.settled().await {
                    Ok(Some(how)) => return self.finish(how, chunks).await,
                    Ok(None) => true,
                    Err(_) => false,
                },
                Err(_) => false,
            };
            if answered {
                failing = None;
            } else if failing
                .get_or_insert_with(tokio::time::Instant::now)
                .elapsed()
                > self.lease
            {
                return Some(Err(
                    "the store did not answer for a lease while following the response".into(),
                ));
            }
            tokio::select! {
                () = changed => {}
                () = sleep(pause) => pause = (pause * 2).min(POLL_BACKOFF.1),
                () = chunks.closed() => return None,
            }
        }
    }

    async fn read(&self) -> Result<Vec<Bytes>, StoreError> {
        let read = self
            .engine
            .store()
            .read_parts(&self.address, self.token, self.next, PAGE);
        timeout(self.limit, read)
            .await
            .unwrap_or_else(|_| Err(StoreError::timed_out(self.limit)))
    }

    /// `None` while the execution goes on; how it ended otherwise.
    async fn settled(&self) -> Result<Option<Settled>, StoreError> {
        let record = timeout(self.limit, self.engine.store().get(&self.address))
            .await
            .unwrap_or_else(|_| Err(StoreError::timed_out(self.limit)))?;
        Ok(match record {
            Some(Record {
                state: RecordState::Processing { token, lease_until },
                ..
            }) if token == self.token => {
                // A holder that stopped renewing (allowing a lease of clock skew) is dead.
                let overdue = SystemClock.now().saturating_since(lease_until) > self.lease;
                overdue.then_some(Settled::Abandoned)
            }
            Some(Record {
                state:
                    RecordState::Completed {
                        token,
                        outcome: Outcome::Response(stored),
                        ..
                    },
                ..
            }) if token == self.token => Some(Settled::Recorded(stored)),
            _ => Some(Settled::Ended),
        })
    }

    /// Sends what the record holds past the chunks sent, and says how the body ends.
    async fn finish(&self, how: Settled, chunks: &mpsc::Sender<Bytes>) -> Option<End> {
        let stored = match how {
            Settled::Recorded(stored) => stored,
            Settled::Abandoned => {
                return Some(Err(
                    "the response's execution stopped renewing its lease".into()
                ));
            }
            Settled::Ended => {
                return Some(Err(
                    "the response's execution ended without a response to replay".into(),
                ));
            }
        };
        if is_not_stored(&stored) {
            return Some(Err(PAST_LIMIT.into()));
        }
        let Some(rest) = stored.body.get(self.sent..) else {
            return Some(Err(
                "the recorded response is shorter than the stream".into()
            ));
        };
        if !rest.is_empty() {
            chunks.send(stored.body.slice(self.sent..)).await.ok()?;
        }
        Some(Ok(stored.trailers.as_deref().map(trailer_map)))
    }
}

/// How the execution a duplicate follows ended.
enum Settled {
    /// It completed with this response.
    Recorded(StoredResponse),
    /// Its holder stopped renewing its lease.
    Abandoned,
    /// It was released, taken over, forgotten or expired, or recorded no response.
    Ended,
}

const PAST_LIMIT: &str = "the response passed the stored-response limit; the rest of it is not \
                          kept for duplicates on other instances";

#[cfg(test)]
mod tests {
    use idem_core::{Acquisition, MemoryStore, Policy, Terms};

    use super::*;

    const FP: Fingerprint = Fingerprint::from_bytes([5; 32]);

    fn address() -> Address {
        Address::anonymous("followed".parse().unwrap())
    }

    /// An engine whose store holds a streaming execution with a `lease`, its head and `chunks`
    /// appended; and its token.
    async fn streaming(
        lease: Duration,
        chunks: &[&'static str],
    ) -> (Engine<MemoryStore>, Appender<MemoryStore>) {
        let engine = Engine::new(MemoryStore::new(), Policy::default());
        let terms = Terms {
            lease,
            ttl: Duration::from_secs(60),
        };
        let Ok(Acquisition::Acquired(held)) = engine.store().acquire(&address(), &FP, terms).await
        else {
            panic!("acquired")
        };
        let head = (StatusCode::CREATED, &HeaderMap::new());
        let mut appender = Appender::new(engine.clone(), address(), held.token, head, lease);
        for chunk in chunks {
            appender.chunk(&Bytes::from_static(chunk.as_bytes())).await;
        }
        (engine, appender)
    }

    #[tokio::test]
    async fn a_stream_is_found_with_its_head_and_chunks_so_far() {
        let (engine, _appender) = streaming(Duration::from_secs(30), &["a", "b"]).await;
        let past = PastLimit::default();
        let found = probe(&engine, &address(), &FP, &past, 1024).await.unwrap();
        assert_eq!(found.status, StatusCode::CREATED);
        assert_eq!(found.prefix, ["a", "b"]);
        let other = Fingerprint::from_bytes([6; 32]);
        assert!(
            probe(&engine, &address(), &other, &past, 1024)
                .await
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_stream_past_the_limit_is_not_followed_and_not_read_again() {
        let (engine, mut appender) = streaming(Duration::from_secs(30), &["a"]).await;
        let token = appender.token;
        appender.over().await;
        appender.chunk(&Bytes::from_static(b"not appended")).await;
        let parts = engine
            .store()
            .read_parts(&address(), token, 0, usize::MAX)
            .await
            .unwrap();
        assert_eq!(parts.len(), 3, "head, chunk and the mark");
        let past = PastLimit::default();
        assert!(probe(&engine, &address(), &FP, &past, 1024).await.is_none());
        assert_eq!(past.0.load(Ordering::Relaxed), token.get());
    }

    #[tokio::test]
    async fn a_follower_of_a_holder_that_stopped_renewing_ends_abnormally() {
        let lease = Duration::from_millis(100);
        let (engine, _appender) = streaming(lease, &["a"]).await;
        let found = probe(&engine, &address(), &FP, &PastLimit::default(), 1024)
            .await
            .unwrap();
        let (prefix, mut chunks, end) = follow(engine, address(), found, lease, lease);
        assert_eq!(prefix, ["a"]);
        let ended = timeout(Duration::from_secs(10), end)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            ended.unwrap_err().to_string(),
            "the response's execution stopped renewing its lease"
        );
        assert_eq!(chunks.recv().await, None);
    }
}
