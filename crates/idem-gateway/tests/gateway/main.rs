//! The `idem` binary end to end: real sockets, real processes, an upstream that counts
//! executions.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod admin;
mod bounds;
mod cli;
mod concurrency;
mod config;
mod contract;
mod dashboard;
mod deliver;
mod demo;
mod deploy;
mod durability;
mod failures;
mod in_process;
mod linkage;
mod listing;
mod openapi;
mod outage;
mod outbox_writers;
mod proxying;
mod relay;
mod relay_outbox;
mod sealing;
mod servers;
mod shared_store;
mod store_bounds;
mod stores;
mod streaming;
mod support;
mod tenancy;
mod tls;
mod tls_servers;
mod traces;
