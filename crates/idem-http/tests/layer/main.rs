//! The HTTP contract of docs/http.md, row by row, through an axum application (and a tonic server)
//! wrapped in the layer.

mod ambiguous;
mod bounds;
mod common;
mod concurrency;
mod grpc;
mod keys;
mod limits;
mod replay;
mod socket;
mod store_errors;
mod tenancy;
mod trailers;
