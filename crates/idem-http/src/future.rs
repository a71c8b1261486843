//! [`ResponseFuture`]: the future of [`Idempotency`](crate::Idempotency)'s responses.
//!
//! # Examples
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use std::{convert::Infallible, sync::Arc};
//!
//! use bytes::Bytes;
//! use http::{Request, Response};
//! use http_body_util::Full;
//! use idem_http::{IdempotencyLayer, ResponseFuture};
//! use tower::{Layer, Service, ServiceExt, service_fn};
//!
//! let mut service = IdempotencyLayer::new(Arc::new(idem_core::MemoryStore::new())).layer(
//!     service_fn(|_: Request<Full<Bytes>>| async {
//!         Ok::<_, Infallible>(Response::new(Full::new(Bytes::from("ok"))))
//!     }),
//! );
//! let request = Request::post("/").body(Full::new(Bytes::new())).unwrap();
//! let future: ResponseFuture<Full<Bytes>, Infallible> = service.ready().await?.call(request);
//! assert_eq!(future.await?.status(), 200);
//! # Ok::<(), Infallible>(())
//! # }).unwrap();
//! ```

use std::{
    fmt,
    future::Future,
    pin::Pin,
    task::{Context, Poll},
};

use http::Response;

use crate::ResponseBody;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The response future of [`Idempotency`](crate::Idempotency).
///
/// Boxed: the request goes through the engine's key lookup, wait and recording, whose futures
/// cannot be named.
pub struct ResponseFuture<B, E> {
    inner: BoxFuture<Result<Response<ResponseBody<B>>, E>>,
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn new(
        future: impl Future<Output = Result<Response<ResponseBody<B>>, E>> + Send + 'static,
    ) -> Self {
        Self {
            inner: Box::pin(future),
        }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<ResponseBody<B>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
