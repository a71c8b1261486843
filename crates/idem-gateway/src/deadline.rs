//! [`DeadlineBody`]: an upstream response body that ends in an error when the deadline of the
//! whole upstream exchange passes, so that `--upstream-timeout` bounds the body as well as the
//! head.

use std::{
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::time::{Instant, Sleep, sleep_until};

use crate::error::UpstreamError;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `body`, failing with [`UpstreamError::UpstreamTimeout`] if it has not ended by `deadline`.
pub(crate) struct DeadlineBody<B> {
    body: Pin<Box<B>>,
    deadline: Pin<Box<Sleep>>,
    timeout: Duration,
}

impl<B> DeadlineBody<B> {
    /// `timeout` is the setting `deadline` comes from, for the error.
    pub(crate) fn new(body: B, deadline: Instant, timeout: Duration) -> Self {
        Self {
            body: Box::pin(body),
            deadline: Box::pin(sleep_until(deadline)),
            timeout,
        }
    }
}

impl<B> http_body::Body for DeadlineBody<B>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Poll::Ready(frame) = self.body.as_mut().poll_frame(cx) {
            return Poll::Ready(frame.map(|frame| frame.map_err(Into::into)));
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(
                UpstreamError::UpstreamTimeout(self.timeout).into()
            ))),
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
        let body = DeadlineBody::new(stalled, Instant::now() + timeout, timeout);
        let error = body.collect().await.unwrap_err();
        assert!(matches!(
            error.downcast_ref::<UpstreamError>(),
            Some(UpstreamError::UpstreamTimeout(t)) if *t == timeout
        ));

        let whole = DeadlineBody::new(Full::new(Bytes::from("ok")), Instant::now(), timeout);
        assert_eq!(whole.collect().await.unwrap().to_bytes(), "ok");
    }
}
