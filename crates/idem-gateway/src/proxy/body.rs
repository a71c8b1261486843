//! [`UpstreamBody`]: an upstream response's body on its way to the client.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep, sleep_until};

use super::pool::Checkout;
use crate::error::UpstreamError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body of a response from the upstream, as [`Proxy`](super::Proxy) returns it. It gives its
/// connection back to the pool once read to its end (a body dropped before its end closes its
/// connection), and ends in [`UpstreamError::UpstreamTimeout`] when the deadline of the whole
/// upstream exchange passes first, so that `--upstream-timeout` bounds the body as well as the
/// head. A body of unknown length (chunked: a stream of events, say) may last longer: each chunk
/// moves its deadline to `--upstream-timeout` from its arrival, so that it bounds the wait for the
/// next chunk instead.
pub struct UpstreamBody<B: http_body::Body + Unpin = Incoming> {
    body: B,
    connection: Option<Checkout>,
    deadline: Instant,
    /// The deadline's timer, set the first time the body has to wait: a body that arrived with
    /// its head never needs one.
    timer: Option<Pin<Box<Sleep>>>,
    /// The setting `deadline` comes from, for the error.
    timeout: Duration,
    /// Whether each chunk moves the deadline (a body of unknown length).
    streamed: bool,
}

impl<B: http_body::Body + Unpin> UpstreamBody<B> {
    /// `body`, releasing `connection` once it has ended, and failing if it has not ended by
    /// `deadline` (which comes from the setting `timeout`).
    pub(crate) fn new(
        body: B,
        connection: Option<Checkout>,
        deadline: Instant,
        timeout: Duration,
    ) -> Self {
        let streamed = body.size_hint().exact().is_none();
        let mut this = Self {
            body,
            connection,
            deadline,
            timer: None,
            timeout,
            streamed,
        };
        this.release_if_ended();
        this
    }

    fn release_if_ended(&mut self) {
        if self.body.is_end_stream()
            && let Some(connection) = self.connection.take()
        {
            connection.release();
        }
    }
}

impl<B: http_body::Body + Unpin> std::fmt::Debug for UpstreamBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamBody")
            .field("deadline", &self.deadline)
            .field("pooled", &self.connection.is_some())
            .finish_non_exhaustive()
    }
}

impl<B> http_body::Body for UpstreamBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.release_if_ended();
                if this.streamed {
                    this.deadline = Instant::now() + this.timeout;
                    if let Some(timer) = &mut this.timer {
                        timer.as_mut().reset(this.deadline);
                    }
                }
                return Poll::Ready(Some(Ok(frame)));
            }
            Poll::Ready(None) => {
                if let Some(connection) = this.connection.take() {
                    connection.release();
                }
                return Poll::Ready(None);
            }
            Poll::Ready(Some(Err(error))) => {
                // The connection is closed with it.
                this.connection = None;
                return Poll::Ready(Some(Err(error.into())));
            }
            Poll::Pending => {}
        }
        let deadline = this.deadline;
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(sleep_until(deadline)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => {
                this.connection = None;
                Poll::Ready(Some(Err(
                    UpstreamError::UpstreamTimeout(this.timeout).into()
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl<B: http_body::Body + Unpin> Drop for UpstreamBody<B> {
    fn drop(&mut self) {
        // A body read to its end without a last poll (its size was known) still gives its
        // connection back; one dropped before its end closes it.
        self.release_if_ended();
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, Full, StreamBody};

    use super::*;

    #[tokio::test]
    async fn a_body_that_stalls_past_the_deadline_fails_with_the_upstream_timeout() {
        let stalled = StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, std::convert::Infallible>,
        >());
        let timeout = Duration::from_millis(50);
        let body = UpstreamBody::new(stalled, None, Instant::now() + timeout, timeout);
        let error = body.collect().await.unwrap_err();
        assert!(matches!(
            error.downcast_ref::<UpstreamError>(),
            Some(UpstreamError::UpstreamTimeout(t)) if *t == timeout
        ));

        let whole = UpstreamBody::new(Full::new(Bytes::from("ok")), None, Instant::now(), timeout);
        assert_eq!(whole.collect().await.unwrap().to_bytes(), "ok");
    }

    /// Ten chunks 30 ms apart, 300 ms in all, under a timeout of 100 ms: the deadline is the wait
    /// for the next chunk.
    #[tokio::test(start_paused = true)]
    async fn each_chunk_of_a_streamed_body_moves_its_deadline() {
        let ten_chunks = || {
            StreamBody::new(Box::pin(futures_util::stream::unfold(0, |n| async move {
                (n < 10).then_some(())?;
                tokio::time::sleep(Duration::from_millis(30)).await;
                let chunk = Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from("x")));
                Some((chunk, n + 1))
            })))
        };
        let timeout = Duration::from_millis(100);
        let start = Instant::now();
        let body = UpstreamBody::new(ten_chunks(), None, start + timeout, timeout);
        assert_eq!(body.collect().await.unwrap().to_bytes(), "xxxxxxxxxx");
        assert_eq!(start.elapsed(), Duration::from_millis(300));

        // A known length keeps the whole exchange's deadline.
        let known = Known(ten_chunks(), 10);
        let body = UpstreamBody::new(known, None, Instant::now() + timeout, timeout);
        let error = body.collect().await.unwrap_err();
        assert!(error.downcast_ref::<UpstreamError>().is_some(), "{error}");
    }

    /// A body that says it has this many bytes.
    struct Known<B>(B, u64);

    impl<B: http_body::Body + Unpin> http_body::Body for Known<B> {
        type Data = B::Data;
        type Error = B::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
            Pin::new(&mut self.0).poll_frame(cx)
        }

        fn size_hint(&self) -> SizeHint {
            SizeHint::with_exact(self.1)
        }
    }
}
