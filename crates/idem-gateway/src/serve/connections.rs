//! [`Connections`]: how many client connections the gateway holds at once, and when it closes
//! them: idle for `--idle-timeout`, idle while the limit is reached, or on shutdown.
//!
//! At `--max-connections`, the gateway stops accepting: the connection just accepted waits for
//! a free slot, and the next ones wait in the kernel's accept queue. The gateway then closes
//! every connection that has been idle (no request in progress) for half a second or more, and
//! does so again every half second while a connection waits, so that idle keep-alive
//! connections never keep a new client out for long. The half second spares a connection just
//! accepted whose first request is on its way. A connection closes gracefully: a request in
//! progress is answered first.

use std::{
    error::Error,
    future::{Future, poll_fn},
    net::SocketAddr,
    pin::{Pin, pin},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    task::{Context, Poll, Wake, Waker},
    time::Duration,
};

use axum::body::Body;
use bytes::Bytes;
use futures_util::task::AtomicWaker;
use http::Response;
use http_body::{Frame, SizeHint};
use hyper_util::server::graceful::GracefulConnection;
use tokio::{
    net::{TcpListener, TcpStream},
    sync::{Notify, OwnedSemaphorePermit, Semaphore},
    time::{Instant, sleep, sleep_until},
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};

/// How often a full gateway closes idle connections again, and how long a connection must have
/// been idle to be closed then.
const SHED_EVERY: Duration = Duration::from_millis(500);
/// How long the accept loop waits after a failed accept.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);

/// The client connections: their limit, their tasks, and the signals that close them.
#[derive(Debug)]
pub(crate) struct Connections {
    slots: Arc<Semaphore>,
    /// Notified when the limit is reached: idle connections close.
    full: Arc<Notify>,
    /// Whether the limit was reached the last time a connection was accepted (for the log).
    at_limit: AtomicBool,
    idle_timeout: Duration,
    shutdown: CancellationToken,
    tasks: TaskTracker,
}

impl Connections {
    /// At most `max` connections at once, each closed after `idle_timeout` without a request.
    pub(crate) fn new(max: usize, idle_timeout: Duration) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS))),
            full: Arc::new(Notify::new()),
            at_limit: AtomicBool::new(false),
            idle_timeout,
            shutdown: CancellationToken::new(),
            tasks: TaskTracker::new(),
        }
    }

    /// Accepts the next connection on `listener` and waits for its slot, unless `shutdown`
    /// completes first (then `None`). A failed accept (out of file descriptors, a connection
    /// reset before it was accepted) is logged, and the next one awaited after a short pause
    /// rather than in a spin.
    pub(crate) async fn accept(
        &self,
        listener: &TcpListener,
        mut shutdown: Pin<&mut impl Future<Output = ()>>,
    ) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
        let (stream, peer) = loop {
            tokio::select! {
                biased;
                () = &mut shutdown => return None,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => break accepted,
                    Err(error) => {
                        tracing::warn!(%error, "accepting a connection failed");
                        sleep(ACCEPT_PAUSE).await;
                    }
                },
            }
        };
        // At the limit, this connection waits here (and the next ones in the accept queue)
        // while idle connections are closed for it.
        tokio::select! {
            biased;
            () = &mut shutdown => None,
            slot = self.slot() => Some((stream, peer, slot)),
        }
    }

    /// Waits until a connection may be accepted; while the limit is reached, closes the idle
    /// connections every half second.
    pub(crate) async fn slot(&self) -> OwnedSemaphorePermit {
        if let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() {
            self.at_limit.store(false, Ordering::Relaxed);
            return slot;
        }
        if !self.at_limit.swap(true, Ordering::Relaxed) {
            tracing::warn!("the connection limit is reached: closing idle connections");
        }
        loop {
            self.full.notify_waiters();
            tokio::select! {
                slot = Arc::clone(&self.slots).acquire_owned() => {
                    return slot.expect("the semaphore is never closed");
                }
                () = sleep(SHED_EVERY) => {}
            }
        }
    }

    /// Serves `connection` in a task of its own, which holds `slot` until the connection ends.
    /// `activity` must be the one its requests are [`Activity::track`]ed with.
    pub(crate) fn spawn<C>(
        &self,
        connection: C,
        activity: Arc<Activity>,
        slot: OwnedSemaphorePermit,
        peer: std::net::SocketAddr,
    ) where
        C: GracefulConnection + Send + 'static,
        C::Error: Into<Box<dyn Error + Send + Sync>>,
    {
        let full = Arc::clone(&self.full);
        let shutdown = self.shutdown.clone();
        let idle_timeout = self.idle_timeout;
        self.tasks.spawn(async move {
            let result = drive(connection, &activity, idle_timeout, &full, &shutdown).await;
            drop(slot);
            if let Err(error) = result {
                let error = error.into();
                tracing::debug!(%peer, error = &*error as &(dyn Error + 'static), "connection ended with an error");
            }
        });
    }

    /// Asks every connection to close once its requests are answered, and waits for them for at
    /// most `timeout`. Whether they all closed.
    pub(crate) async fn shutdown(&self, timeout: Duration) -> bool {
        self.shutdown.cancel();
        self.tasks.close();
        tokio::time::timeout(timeout, self.tasks.wait())
            .await
            .is_ok()
    }
}

/// Runs a connection to its end, closing it gracefully when it has been idle too long, when it
/// is idle while the limit is reached, or on shutdown.
///
/// The connection's task wakes for every read and write of its connection; the three signals
/// are polled only when one of them woke it ([`SignalWaker`]), not on each of those wake-ups.
async fn drive<C>(
    connection: C,
    activity: &Activity,
    idle_timeout: Duration,
    full: &Notify,
    shutdown: &CancellationToken,
) -> Result<(), C::Error>
where
    C: GracefulConnection,
{
    let mut connection = pin!(connection);
    let signals = Arc::new(SignalWaker::default());
    let signal_waker = Waker::from(Arc::clone(&signals));
    let mut cancelled = pin!(shutdown.cancelled());
    loop {
        let idle_deadline = activity.idle_since().map_or_else(
            || Instant::now() + idle_timeout,
            |since| since + idle_timeout,
        );
        let mut idle = pin!(sleep_until(idle_deadline));
        let mut shed = pin!(full.notified());
        // The new signals are polled once, which registers them.
        signals.woken.store(true, Ordering::Release);
        let signal = poll_fn(|cx| {
            if let Poll::Ready(result) = connection.as_mut().poll(cx) {
                return Poll::Ready(Signal::Ended(result));
            }
            if !signals.woken.swap(false, Ordering::AcqRel) {
                return Poll::Pending;
            }
            signals.task.register(cx.waker());
            let mut cx = Context::from_waker(&signal_waker);
            if cancelled.as_mut().poll(&mut cx).is_ready() {
                return Poll::Ready(Signal::Shutdown);
            }
            if shed.as_mut().poll(&mut cx).is_ready() {
                return Poll::Ready(Signal::Full);
            }
            if idle.as_mut().poll(&mut cx).is_ready() {
                return Poll::Ready(Signal::IdleTimeout);
            }
            Poll::Pending
        });
        let close = match signal.await {
            Signal::Ended(result) => return result,
            Signal::Shutdown => true,
            Signal::Full => activity
                .idle_since()
                .is_some_and(|since| since + SHED_EVERY <= Instant::now()),
            Signal::IdleTimeout => activity
                .idle_since()
                .is_some_and(|since| since + idle_timeout <= Instant::now()),
        };
        if close {
            connection.as_mut().graceful_shutdown();
            return connection.await;
        }
    }
}

/// What made [`drive`] look up from its connection.
enum Signal<E> {
    Ended(Result<(), E>),
    Shutdown,
    Full,
    IdleTimeout,
}

/// The waker of a connection's close signals: it marks them for polling and wakes the
/// connection's task.
#[derive(Default)]
struct SignalWaker {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for SignalWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

/// The requests in progress on one connection, and since when it has had none.
#[derive(Debug)]
pub(crate) struct Activity {
    requests: AtomicUsize,
    idle_since: Mutex<Instant>,
}

impl Activity {
    /// A connection just accepted: idle from now.
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            requests: AtomicUsize::new(0),
            idle_since: Mutex::new(Instant::now()),
        })
    }

    /// Counts a request from now until the returned guard is dropped (give it to
    /// [`Busy::response`] so that it lasts until the response is sent).
    pub(crate) fn track(self: &Arc<Self>) -> Busy {
        self.requests.fetch_add(1, Ordering::AcqRel);
        Busy(Arc::clone(self))
    }

    /// Since when the connection has had no request in progress; `None` while it has one.
    fn idle_since(&self) -> Option<Instant> {
        if self.requests.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(
            *self
                .idle_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }
}

/// A request in progress on a connection.
#[derive(Debug)]
pub(crate) struct Busy(Arc<Activity>);

impl Busy {
    /// `response`, its request counted as in progress until its body is sent (or dropped).
    pub(crate) fn response(self, response: Response<Body>) -> Response<TrackedBody> {
        response.map(|body| TrackedBody { body, _busy: self })
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let activity = &self.0;
        let mut since = activity
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if activity.requests.fetch_sub(1, Ordering::AcqRel) == 1 {
            *since = Instant::now();
        }
    }
}

/// A response body that keeps its request counted while it is sent.
pub(crate) struct TrackedBody {
    body: Body,
    _busy: Busy,
}

impl http_body::Body for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_is_idle_once_its_last_response_is_sent() {
        let activity = Activity::new();
        assert!(activity.idle_since().is_some());
        let first = activity.track();
        let second = activity.track();
        assert_eq!(activity.idle_since(), None);
        let response = first.response(Response::new(Body::from("x")));
        drop(second);
        assert_eq!(activity.idle_since(), None);
        let before = Instant::now();
        drop(response);
        assert!(activity.idle_since().is_some_and(|since| since >= before));
    }
}
