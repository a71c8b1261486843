//! The client against the real gateway (in-process, memory store) in front of a test upstream,
//! and against scripted servers for what the gateway never answers.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod definite;
mod give_up;
mod lost_responses;
mod outcome_unknown;
mod scripted;
mod slow_upstream;
mod support;
mod transport;
