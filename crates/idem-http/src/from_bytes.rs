//! [`FromBytes`]: request bodies the layer can rebuild after buffering them.
//!
//! # Examples
//!
//! ```
//! use bytes::Bytes;
//! use http_body::Body as _;
//! use http_body_util::Full;
//! use idem_http::FromBytes;
//!
//! let body = Full::from_bytes(Bytes::from_static(b"{}"));
//! assert_eq!(body.size_hint().exact(), Some(2));
//! ```

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{
    BodyExt, Full,
    combinators::{BoxBody, UnsyncBoxBody},
};

/// A request body type that can be made from bytes held in memory.
///
/// A request with a key is buffered to be fingerprinted, then passed on to the inner service as a
/// new body of the same type holding those bytes. This is `From<Bytes>` in spirit; it is a trait
/// of its own because some body types (tonic's) do not implement `From<Bytes>`.
///
/// Implemented for http-body-util's [`Full`] and boxed bodies, for `axum::body::Body` with the
/// `axum` feature and for `tonic::body::Body` with the `tonic` feature.
pub trait FromBytes {
    /// A body that yields `bytes`.
    fn from_bytes(bytes: Bytes) -> Self;
}

#[cfg(feature = "axum")]
impl FromBytes for axum_core::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        Self::from(bytes)
    }
}

impl FromBytes for Full<Bytes> {
    fn from_bytes(bytes: Bytes) -> Self {
        Self::new(bytes)
    }
}

impl<E: 'static> FromBytes for BoxBody<Bytes, E> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
            .map_err(|never: Infallible| match never {})
            .boxed()
    }
}

impl<E: 'static> FromBytes for UnsyncBoxBody<Bytes, E> {
    fn from_bytes(bytes: Bytes) -> Self {
        Full::new(bytes)
            .map_err(|never: Infallible| match never {})
            .boxed_unsync()
    }
}

#[cfg(feature = "tonic")]
impl FromBytes for tonic::body::Body {
    fn from_bytes(bytes: Bytes) -> Self {
        Self::new(Full::new(bytes))
    }
}
