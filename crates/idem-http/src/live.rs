//! Streams being recorded, which a duplicate in wait mode on the same instance joins: it gets the
//! head and every chunk so far at once, then each chunk as it comes, and the end once the
//! response is recorded, like the first client.
//!
//! A stream can be joined while all of it is kept for the store (up to the stored-response
//! limit); a duplicate that comes later waits for the record, as for any response in flight. A
//! duplicate that joined before the limit was passed still gets the whole stream. Each joined
//! duplicate takes a place among the waiters (`max_waiters`), and may fall [`LAG`] chunks behind
//! the stream at most: further behind, its response ends abnormally, so that a slow duplicate
//! holds neither the stream nor unbounded memory.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use idem_core::{Address, Fingerprint, WaitSlot};
use tokio::sync::{mpsc, oneshot};

use crate::body::End;

/// The most chunks a joined duplicate may fall behind the stream.
pub(crate) const LAG: usize = 64;

/// The streams this layer is recording, in wait mode, by address.
#[derive(Default)]
pub(crate) struct LiveStreams {
    streams: Mutex<HashMap<Address, Arc<Live>>>,
    /// How many there are, so that a request looks at the map only when there are some.
    count: AtomicUsize,
}

/// A stream being recorded: what a duplicate that joins it gets.
pub(crate) struct Live {
    fingerprint: Fingerprint,
    status: StatusCode,
    /// The headers a joined duplicate gets: those of a replay.
    headers: HeaderMap,
    state: Mutex<State>,
}

struct State {
    /// The chunks so far, while they are all kept: `None` once they passed the limit.
    prefix: Option<Vec<Bytes>>,
    joiners: Vec<Joiner>,
    /// The response is recorded and its joiners ended: nobody joins any more.
    settled: bool,
}

struct Joiner {
    chunks: mpsc::Sender<Bytes>,
    end: oneshot::Sender<End>,
}

/// What a duplicate that joined a stream gets: the head, the chunks so far, the chunks to come and
/// the end, and its place among the waiters.
pub(crate) struct Joined {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) prefix: Vec<Bytes>,
    pub(crate) chunks: mpsc::Receiver<Bytes>,
    pub(crate) end: oneshot::Receiver<End>,
    pub(crate) slot: WaitSlot,
}

/// A stream's place in [`LiveStreams`], held by its recording. [`finish`](Self::finish)ed once
/// the response is recorded; dropped before (the recording panicked), it ends the joiners
/// abnormally and forgets the stream all the same, so that no duplicate waits on it.
pub(crate) struct Registration {
    streams: Arc<LiveStreams>,
    address: Address,
    live: Arc<Live>,
    finished: bool,
}

impl Registration {
    /// The stream, for the recording to hand its chunks to.
    pub(crate) fn live(&self) -> &Arc<Live> {
        &self.live
    }

    /// Ends the joiners as `end` says, and forgets the stream.
    pub(crate) fn finish(mut self, end: &End) {
        self.finished = true;
        self.streams.finish(&self.address, &self.live, end);
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if !self.finished {
            let stopped = Err("the recording of the response stopped before its end".into());
            self.streams.finish(&self.address, &self.live, &stopped);
        }
    }
}

impl LiveStreams {
    /// Registers the stream of the request at `address` with `fingerprint`, whose joiners get
    /// `status` and the replay `headers`.
    pub(crate) fn start(
        self: &Arc<Self>,
        address: Address,
        fingerprint: Fingerprint,
        status: StatusCode,
        headers: HeaderMap,
    ) -> Registration {
        let live = Arc::new(Live {
            fingerprint,
            status,
            headers,
            state: Mutex::new(State {
                prefix: Some(Vec::new()),
                joiners: Vec::new(),
                settled: false,
            }),
        });
        if self
            .lock()
            .insert(address.clone(), Arc::clone(&live))
            .is_none()
        {
            self.count.fetch_add(1, Ordering::SeqCst);
        }
        Registration {
            streams: Arc::clone(self),
            address,
            live,
            finished: false,
        }
    }

    /// Joins the stream at `address`, if one of this `fingerprint` is being recorded, can still be
    /// joined from its start, and `slot` gives a place among the waiters.
    pub(crate) fn join(
        &self,
        address: &Address,
        fingerprint: &Fingerprint,
        slot: impl FnOnce() -> Option<WaitSlot>,
    ) -> Option<Joined> {
        if self.count.load(Ordering::SeqCst) == 0 {
            return None;
        }
        let live = self.lock().get(address).cloned()?;
        if live.fingerprint != *fingerprint {
            return None;
        }
        let mut state = live.lock();
        if state.settled {
            return None;
        }
        let prefix = state.prefix.clone()?;
        let slot = slot()?;
        let (chunks, received) = mpsc::channel(LAG);
        let (end, ended) = oneshot::channel();
        state.joiners.push(Joiner { chunks, end });
        Some(Joined {
            status: live.status,
            headers: live.headers.clone(),
            prefix,
            chunks: received,
            end: ended,
            slot,
        })
    }

    /// Ends `live`'s joiners as `end` says, and forgets it.
    fn finish(&self, address: &Address, live: &Arc<Live>, end: &End) {
        {
            let mut streams = self.lock();
            if streams.get(address).is_some_and(|l| Arc::ptr_eq(l, live)) {
                streams.remove(address);
                self.count.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let joiners = {
            let mut state = live.lock();
            state.settled = true;
            state.prefix = None;
            std::mem::take(&mut state.joiners)
        };
        for joiner in joiners {
            let _ = joiner.end.send(copy(end));
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Address, Arc<Live>>> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Live {
    /// Hands `chunk` to the joiners, and keeps it for later ones unless `kept` is false (the
    /// stream passed the limit: nobody joins any more). A joiner too far behind is let go.
    pub(crate) fn push(&self, chunk: &Bytes, kept: bool) {
        let mut state = self.lock();
        match (&mut state.prefix, kept) {
            (Some(prefix), true) => prefix.push(chunk.clone()),
            (prefix, _) => *prefix = None,
        }
        state
            .joiners
            .retain(|joiner| joiner.chunks.try_send(chunk.clone()).is_ok());
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The same end, for one more joiner.
fn copy(end: &End) -> End {
    match end {
        Ok(trailers) => Ok(trailers.clone()),
        Err(error) => Err(error.to_string().into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address() -> Address {
        Address::anonymous("live".parse().unwrap())
    }

    const FP: Fingerprint = Fingerprint::from_bytes([7; 32]);

    fn slot() -> Option<WaitSlot> {
        idem_core::Engine::new(idem_core::MemoryStore::new(), idem_core::Policy::default())
            .wait_slot()
    }

    #[tokio::test]
    async fn a_joiner_gets_the_chunks_so_far_then_the_next_ones_then_the_end() {
        let streams = Arc::new(LiveStreams::default());
        let registration = streams.start(address(), FP, StatusCode::OK, HeaderMap::new());
        let live = Arc::clone(registration.live());
        live.push(&Bytes::from("a"), true);
        let mut joined = streams.join(&address(), &FP, slot).unwrap();
        assert_eq!(joined.prefix, [Bytes::from("a")]);
        live.push(&Bytes::from("b"), true);
        assert_eq!(joined.chunks.recv().await, Some(Bytes::from("b")));
        registration.finish(&Ok(None));
        assert!(matches!(joined.end.await, Ok(Ok(None))));
        // Gone once finished.
        assert!(streams.join(&address(), &FP, slot).is_none());
        assert_eq!(streams.count.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_recording_that_stops_before_its_end_ends_its_joiners_abnormally() {
        let streams = Arc::new(LiveStreams::default());
        let registration = streams.start(address(), FP, StatusCode::OK, HeaderMap::new());
        let joined = streams.join(&address(), &FP, slot).unwrap();
        drop(registration);
        assert!(matches!(joined.end.await, Ok(Err(_))));
        assert!(streams.join(&address(), &FP, slot).is_none());
        assert_eq!(streams.count.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn nobody_joins_past_the_limit_another_fingerprint_or_without_a_place() {
        let streams = Arc::new(LiveStreams::default());
        let registration = streams.start(address(), FP, StatusCode::OK, HeaderMap::new());
        let live = registration.live();
        let other = Fingerprint::from_bytes([8; 32]);
        assert!(streams.join(&address(), &other, slot).is_none());
        assert!(streams.join(&address(), &FP, || None).is_none());
        let mut early = streams.join(&address(), &FP, slot).unwrap();
        live.push(&Bytes::from("over"), false);
        assert!(streams.join(&address(), &FP, slot).is_none());
        // The one that joined before still gets the stream.
        assert_eq!(early.chunks.recv().await, Some(Bytes::from("over")));
    }

    #[tokio::test]
    async fn a_joiner_too_far_behind_is_let_go() {
        let streams = Arc::new(LiveStreams::default());
        let registration = streams.start(address(), FP, StatusCode::OK, HeaderMap::new());
        let live = registration.live();
        let mut slow = streams.join(&address(), &FP, slot).unwrap();
        for n in 0..=LAG {
            live.push(&Bytes::from(n.to_string()), true);
        }
        for n in 0..LAG {
            assert_eq!(slow.chunks.recv().await, Some(Bytes::from(n.to_string())));
        }
        assert_eq!(slow.chunks.recv().await, None);
        assert!(slow.end.await.is_err(), "its end is never sent");
    }
}
