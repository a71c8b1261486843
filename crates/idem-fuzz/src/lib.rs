//! The bodies of idem's fuzz targets, and the invariants each one checks.
//!
//! Each target is a plain function of the fuzzer's bytes that panics when an invariant breaks.
//! The `cargo fuzz` targets under `fuzz/` of the repository call them, and this crate's tests
//! replay the committed corpus and crash reproducers through them on stable Rust.
//!
//! - [`key`]: `Idempotency-Key` header values, checked against the key syntax of docs/http.md.
//! - [`fingerprint`]: request bodies as JSON, checked against a reference canonical form.
//! - [`stored_response`]: stored responses read back from a corrupted store.
//! - [`gateway_request`]: sequences of requests through the tower layer, checked against a model
//!   of the HTTP contract.
//!
//! # Examples
//!
//! ```
//! idem_fuzz::key(br#""order \"42\"""#);
//! idem_fuzz::fingerprint(br#"{"b": 1.50, "a": [true, null]}"#);
//! idem_fuzz::stored_response(b"IDR\x01");
//! idem_fuzz::gateway_request(b"\x00\x01\x02\x03");
//! ```

mod fingerprint;
mod gateway;
mod key;
mod stored_response;

pub use fingerprint::fingerprint;
pub use gateway::gateway_request;
pub use key::key;
pub use stored_response::stored_response;
