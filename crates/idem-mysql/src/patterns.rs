//! Idempotent operations on your own tables.
