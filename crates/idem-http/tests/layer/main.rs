//! The HTTP contract of docs/http.md, row by row, through an axum application (and a tonic server)
//! wrapped in the layer.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod ambiguous;
mod bounds;
mod common;
mod concurrency;
mod fencing;
mod grpc;
mod keys;
mod limits;
mod replay;
mod socket;
mod store_errors;
mod streaming;
mod tenancy;
mod trailers;
