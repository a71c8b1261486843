//! [`ResponseBody`]: the body of every response the service returns.
//!
//! # Examples
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use http_body_util::{BodyExt, Full};
//! use idem_http::ResponseBody;
//!
//! let passed_through = ResponseBody::new(Full::new(bytes::Bytes::from("inner")));
//! assert_eq!(passed_through.collect().await?.to_bytes(), "inner");
//!
//! let buffered = ResponseBody::<Full<bytes::Bytes>>::full("replayed");
//! assert_eq!(buffered.collect().await?.to_bytes(), "replayed");
//! # Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! # }).unwrap();
//! ```

use std::{
    collections::VecDeque,
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll, ready},
};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::{mpsc, oneshot};

/// How a streamed body ends: after its last chunk, with or without trailers, or with an error.
pub(crate) type End = Result<Option<HeaderMap>, BoxError>;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// The body of a response from [`Idempotency`](crate::Idempotency): bytes held in memory
    /// (with trailers, if any), the inner service's body passed through untouched, the buffered
    /// start of the inner body followed by the rest of it, or the inner body's chunks as the
    /// recording of a streamed response hands them on, ended once the response is recorded.
    pub struct ResponseBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Buffered {
            data: Option<Bytes>,
            trailers: Option<HeaderMap>,
        },
        Inner {
            #[pin]
            body: B,
        },
        // Boxed because the capture polled it before deciding to pass it on.
        Prefixed {
            prefix: Option<Bytes>,
            rest: Pin<Box<B>>,
        },
        // The chunks a recording hands on (see `stream`), after those a joined duplicate got at
        // once (see `live`), then its end once it is recorded.
        Streamed {
            prefix: VecDeque<Bytes>,
            chunks: mpsc::Receiver<Bytes>,
            end: Option<oneshot::Receiver<End>>,
            hint: SizeHint,
            // What the body holds until it is dropped (a joined duplicate's place among the
            // waiters).
            held: Option<Box<dyn Send + Sync>>,
        },
    }
}

impl<B> ResponseBody<B> {
    /// Passes `body` through untouched.
    pub fn new(body: B) -> Self {
        Self {
            kind: Kind::Inner { body },
        }
    }

    /// A body of `data`, held in memory.
    pub fn full(data: impl Into<Bytes>) -> Self {
        Self::buffered(data.into(), None)
    }

    /// `data` then `trailers`, held in memory.
    pub(crate) fn buffered(data: Bytes, trailers: Option<HeaderMap>) -> Self {
        Self {
            kind: Kind::Buffered {
                data: Some(data).filter(|data| !data.is_empty()),
                trailers,
            },
        }
    }

    /// The chunks of `prefix`, then those `chunks` yields, then the end `end` says (trailers, or
    /// an error), with the inner body's size `hint`; `held` is kept until the body is dropped (a
    /// joined duplicate's place among the waiters).
    pub(crate) fn streamed(
        prefix: Vec<Bytes>,
        chunks: mpsc::Receiver<Bytes>,
        end: oneshot::Receiver<End>,
        hint: SizeHint,
        held: Option<Box<dyn Send + Sync>>,
    ) -> Self {
        Self {
            kind: Kind::Streamed {
                prefix: prefix.into(),
                chunks,
                end: Some(end),
                hint,
                held,
            },
        }
    }

    /// The `chunks`, each a frame, then `trailers`, all held in memory (a replay of server-sent
    /// events).
    pub(crate) fn chunks(chunks: Vec<Bytes>, trailers: Option<HeaderMap>) -> Self {
        let len: u64 = chunks.iter().map(|chunk| chunk.len() as u64).sum();
        // The senders go at once: the body ends after the chunks it holds.
        let (_, none) = mpsc::channel(1);
        let (end, ended) = oneshot::channel();
        let _ = end.send(Ok(trailers));
        let mut hint = SizeHint::new();
        hint.set_lower(len);
        Self::streamed(chunks, none, ended, hint, None)
    }

    /// `prefix` (already read from `rest`), then the rest of the inner body.
    pub(crate) fn prefixed(prefix: Bytes, rest: Pin<Box<B>>) -> Self {
        Self {
            kind: Kind::Prefixed {
                prefix: Some(prefix).filter(|prefix| !prefix.is_empty()),
                rest,
            },
        }
    }
}

impl<B> From<Bytes> for ResponseBody<B> {
    fn from(data: Bytes) -> Self {
        Self::full(data)
    }
}

impl<B> http_body::Body for ResponseBody<B>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.project().kind.project() {
            KindProj::Buffered { data, trailers } => Poll::Ready(
                data.take()
                    .map(Frame::data)
                    .or_else(|| trailers.take().map(Frame::trailers))
                    .map(Ok),
            ),
            KindProj::Inner { body } => body.poll_frame(cx).map_err(Into::into),
            KindProj::Prefixed { prefix, rest } => match prefix.take() {
                Some(prefix) => Poll::Ready(Some(Ok(Frame::data(prefix)))),
                None => rest.as_mut().poll_frame(cx).map_err(Into::into),
            },
            KindProj::Streamed {
                prefix,
                chunks,
                end,
                ..
            } => {
                if let Some(chunk) = prefix.pop_front() {
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                if let Some(chunk) = ready!(chunks.poll_recv(cx)) {
                    return Poll::Ready(Some(Ok(Frame::data(chunk))));
                }
                let Some(ending) = end.as_mut() else {
                    return Poll::Ready(None);
                };
                let ended = ready!(Pin::new(ending).poll(cx));
                *end = None;
                Poll::Ready(match ended {
                    Ok(Ok(None)) => None,
                    Ok(Ok(Some(trailers))) => Some(Ok(Frame::trailers(trailers))),
                    Ok(Err(error)) => Some(Err(error)),
                    Err(_) => Some(Err("the response's recording stopped before its end".into())),
                })
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Buffered { data, trailers } => data.is_none() && trailers.is_none(),
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Prefixed { prefix, rest } => prefix.is_none() && rest.is_end_stream(),
            Kind::Streamed { end, .. } => end.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Buffered { data, trailers } => {
                let len = data.as_ref().map_or(0, |data| data.len() as u64);
                // Not exact with trailers, so that HTTP/1.1 servers send them chunked.
                match trailers {
                    None => SizeHint::with_exact(len),
                    Some(_) => {
                        let mut hint = SizeHint::new();
                        hint.set_lower(len);
                        hint
                    }
                }
            }
            Kind::Inner { body } => body.size_hint(),
            Kind::Prefixed { prefix, rest } => {
                let len = prefix.as_ref().map_or(0, |prefix| prefix.len() as u64);
                let rest = rest.size_hint();
                let mut hint = SizeHint::new();
                hint.set_lower(rest.lower() + len);
                if let Some(upper) = rest.upper() {
                    hint.set_upper(upper + len);
                }
                hint
            }
            Kind::Streamed { hint, .. } => *hint,
        }
    }
}

impl<B> fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Buffered { .. } => "Buffered",
            Kind::Inner { .. } => "Inner",
            Kind::Prefixed { .. } => "Prefixed",
            Kind::Streamed { .. } => "Streamed",
        };
        f.debug_tuple("ResponseBody").field(&kind).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use http_body::Body as _;
    use http_body_util::{BodyExt, Full};

    use super::*;

    /// Yields its chunks one frame at a time.
    struct Chunks(VecDeque<&'static str>);

    impl http_body::Body for Chunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            Poll::Ready(self.0.pop_front().map(|c| Ok(Frame::data(Bytes::from(c)))))
        }
    }

    #[tokio::test]
    async fn buffered_body_yields_data_then_trailers() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", "0".parse().unwrap());
        let body =
            ResponseBody::<Full<Bytes>>::buffered(Bytes::from("abc"), Some(trailers.clone()));
        assert_eq!(body.size_hint().exact(), None);
        let collected = body.collect().await.unwrap();
        assert_eq!(collected.trailers(), Some(&trailers));
        assert_eq!(collected.to_bytes(), "abc");
    }

    #[tokio::test]
    async fn buffered_body_without_trailers_has_an_exact_size() {
        let body = ResponseBody::<Full<Bytes>>::full("abc");
        assert_eq!(body.size_hint().exact(), Some(3));
        assert!(!body.is_end_stream());
        assert!(ResponseBody::<Full<Bytes>>::full("").is_end_stream());
    }

    #[tokio::test]
    async fn prefixed_body_yields_the_prefix_then_the_rest() {
        let rest = Box::pin(Chunks(VecDeque::from(["de", "f"])));
        let body = ResponseBody::prefixed(Bytes::from("abc"), rest);
        assert_eq!(body.collect().await.unwrap().to_bytes(), "abcdef");
    }
}
