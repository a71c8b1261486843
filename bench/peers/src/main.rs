//! One in-process measurement of `scripts/load peers`: a tower layer around a handler that
//! answers as the harness's upstream does, called by CONCURRENCY tasks on a runtime with one
//! worker thread per core, for DURATION; prints "requests/s p50_ms p99_ms".
//!
//! ```text
//! idem-peers-layers LAYER KEYS DURATION CONCURRENCY
//! idem-peers-layers idem unique 10s 32        # idem-http's layer, a new key per request
//! idem-peers-layers idempotent same 10s 32    # the idempotent crate's layer, replays
//! idem-peers-layers none unique 10s 32        # the handler alone
//! ```
//!
//! LAYER is `idem` (idem-http's `IdempotencyLayer` on idem-core's `MemoryStore`, its bounds
//! raised as the harness's memory gateways' are), `idem-raw` (the same with raw fingerprints,
//! which hash the body as sent, as idempotent's do, where the default canonicalizes JSON),
//! `idempotent` (`idempotent::middleware::
//! IdempotencyLayer` on `idempotent::memory::MemoryStore`, both with their defaults) or `none`.
//! KEYS is `unique` (a new key per request) or `same` (one key, executed once before the
//! measurement, then replayed). Each request is the harness's (bench/wrk/payment.lua): a POST of
//! the 52-byte JSON payment with a unique `X-Request-Id`, built afresh, its response body read
//! to the end. Every response must be 201, the handler's; anything else fails the run. Each
//! measurement runs in a process of its own, on a fresh store.

use std::{
    convert::Infallible,
    fmt::Debug,
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use axum_core::body::Body;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use tower::{Layer as _, Service, ServiceExt as _};

/// The harness's upstream's answer (crates/idem-bench/src/bin/upstream.rs).
const ANSWER: &[u8] = br#"{"id":"ch_3PqR8s2eZvKYlo2C0","object":"charge","amount":1000,"currency":"eur","status":"succeeded"}"#;
/// bench/wrk/payment.lua's payment.
const PAYMENT: &[u8] = br#"{"amount":1000,"currency":"eur","source":"tok_visa"}"#;
/// bench/wrk/payment.lua's key for replays.
const REPLAY_KEY: &str = "bench-replay-key";

/// The upstream, in process: reads the body to its end and answers 201 with a JSON charge.
async fn handler(request: Request<Body>) -> Result<Response<Body>, Infallible> {
    let mut body = request.into_body();
    while let Some(frame) = body.frame().await {
        if frame.is_err() {
            break;
        }
    }
    let response = Response::builder()
        .status(StatusCode::CREATED)
        .header("content-type", "application/json")
        .body(Body::from(Bytes::from_static(ANSWER)))
        .expect("static response");
    Ok(response)
}

#[derive(Clone, Copy, PartialEq)]
enum Keys {
    Unique,
    Same,
}

/// What one task measured: its requests' latencies in microseconds, and the first response that
/// was not the handler's.
struct Measured {
    latencies: Vec<u32>,
    unexpected: Option<String>,
}

fn payment(key: &str) -> Request<Body> {
    Request::post("/")
        .header("content-type", "application/json")
        .header("x-request-id", key)
        .header("idempotency-key", key)
        .body(Body::from(Bytes::from_static(PAYMENT)))
        .expect("a valid request")
}

/// Sends one request and reads its response to the end; the response's status and body if it is
/// not the handler's 201.
async fn call<S, B>(service: &S, request: Request<Body>) -> Result<(), String>
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible> + Clone,
    B: http_body::Body<Data = Bytes>,
    B::Error: Debug,
{
    let Ok(response) = service.clone().oneshot(request).await;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| format!("{status}, its body failed: {e:?}"))?
        .to_bytes();
    if status == StatusCode::CREATED {
        Ok(())
    } else {
        Err(format!("{status}: {}", String::from_utf8_lossy(&body)))
    }
}

/// CONCURRENCY tasks calling `service` until `duration` has passed: the requests/s, p50 and p99.
async fn drive<S, B>(
    service: S,
    keys: Keys,
    duration: Duration,
    concurrency: usize,
) -> Result<(f64, f64, f64), String>
where
    S: Service<Request<Body>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Debug,
{
    if keys == Keys::Same {
        call(&service, payment(REPLAY_KEY)).await?;
    }
    let service = Arc::new(service);
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..concurrency)
        .map(|task| {
            let service = Arc::clone(&service);
            tokio::spawn(async move {
                // Unique across tasks and runs, as payment.lua's ids are.
                let prefix = format!(
                    "{}-{}-{task}-",
                    std::process::id(),
                    started.elapsed().as_nanos()
                );
                let mut measured = Measured {
                    latencies: Vec::with_capacity(1 << 16),
                    unexpected: None,
                };
                for n in 0u64.. {
                    let sent = Instant::now();
                    if sent >= deadline {
                        break;
                    }
                    let id = format!("{prefix}{n}");
                    let mut request = payment(&id);
                    if keys == Keys::Same {
                        request.headers_mut().insert(
                            "idempotency-key",
                            http::HeaderValue::from_static(REPLAY_KEY),
                        );
                    }
                    if let Err(unexpected) = call(&*service, request).await {
                        measured.unexpected = Some(unexpected);
                        break;
                    }
                    let micros = sent.elapsed().as_micros();
                    measured
                        .latencies
                        .push(u32::try_from(micros).unwrap_or(u32::MAX));
                }
                measured
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        let measured = task.await.map_err(|e| format!("a task failed: {e}"))?;
        if let Some(unexpected) = measured.unexpected {
            return Err(format!(
                "a response was not the handler's 201 but {unexpected}"
            ));
        }
        latencies.extend(measured.latencies);
    }
    let elapsed = started.elapsed().as_secs_f64();
    if latencies.is_empty() {
        return Err("no request completed".to_owned());
    }
    latencies.sort_unstable();
    let percentile = |p: f64| {
        let at = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        f64::from(latencies[at]) / 1000.0
    };
    Ok((
        latencies.len() as f64 / elapsed,
        percentile(0.5),
        percentile(0.99),
    ))
}

/// A duration as wrk takes it: `10s`, `2m`, or seconds.
fn duration(text: &str) -> Option<Duration> {
    let (number, unit) = match text.strip_suffix('s') {
        Some(seconds) => (seconds, 1),
        None => match text.strip_suffix('m') {
            Some(minutes) => (minutes, 60),
            None => (text, 1),
        },
    };
    number
        .parse::<u64>()
        .ok()
        .map(|n| Duration::from_secs(n * unit))
}

async fn measure(
    layer_name: &str,
    keys: Keys,
    duration: Duration,
    concurrency: usize,
) -> Result<(f64, f64, f64), String> {
    let handler = tower::service_fn(handler);
    match layer_name {
        "none" => drive(handler, keys, duration, concurrency).await,
        "idem" | "idem-raw" => {
            // The harness's memory gateways' bounds: no new key of a run is ever refused.
            let store = idem_core::MemoryStore::new()
                .max_keys(100_000_000)
                .max_bytes(64 << 30);
            let mut layer = idem_http::IdempotencyLayer::new(Arc::new(store));
            if layer_name == "idem-raw" {
                layer = layer.fingerprint(idem_core::FingerprintMode::Raw);
            }
            drive(layer.layer(handler), keys, duration, concurrency).await
        }
        "idempotent" => {
            let store = idempotent::memory::MemoryStore::builder()
                .try_build()
                .map_err(|e| format!("idempotent's memory store: {e}"))?;
            let layer = idempotent::middleware::IdempotencyLayer::new(store);
            drive(layer.layer(handler), keys, duration, concurrency).await
        }
        other => Err(format!(
            "LAYER is idem, idem-raw, idempotent or none, not {other}"
        )),
    }
}

fn main() -> ExitCode {
    const USAGE: &str =
        "usage: idem-peers-layers idem|idem-raw|idempotent|none unique|same DURATION CONCURRENCY";
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [layer, keys, time, concurrency] = &args[..] else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let keys = match keys.as_str() {
        "unique" => Keys::Unique,
        "same" => Keys::Same,
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let (Some(time), Ok(concurrency)) = (duration(time), concurrency.parse::<usize>()) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    match runtime.block_on(measure(layer, keys, time, concurrency.max(1))) {
        Ok((rps, p50, p99)) => {
            println!("{rps} {p50} {p99}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("idem-peers-layers {layer}: {e}");
            ExitCode::FAILURE
        }
    }
}
