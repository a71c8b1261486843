//! The demo's clients: each logical payment gets one key, kept on every retry; responses get
//! lost on the way back and some payments go out as concurrent duplicates.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use futures_util::future::join_all;
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::{
    client::legacy::{Client, connect::HttpConnector},
    rt::TokioExecutor,
};
use indicatif::ProgressBar;

use super::{DemoArgs, Tally};

/// Gives up on a payment after this many attempts (it then counts as never charged).
const MAX_ATTEMPTS: u32 = 200;

/// The clients' settings, shared by both runs so they face the same faults.
pub(super) struct Fleet {
    payments: u64,
    clients: u64,
    loss: f64,
    duplicates: f64,
    seed: u64,
    client: Client<HttpConnector, Full<Bytes>>,
}

#[derive(Default)]
struct Counters {
    attempts: AtomicU64,
    replays: AtomicU64,
    conflicts: AtomicU64,
}

/// What became of one HTTP request.
enum Attempt {
    Charged,
    Conflict,
    Lost,
    Failed,
}

impl Fleet {
    pub(super) fn new(args: &DemoArgs, seed: u64) -> Self {
        Self {
            payments: args.payments,
            clients: args.clients,
            loss: args.loss,
            duplicates: args.duplicates,
            seed,
            client: Client::builder(TokioExecutor::new()).build_http(),
        }
    }

    /// Makes every payment against `target`; the tally's charge counts are the API's to fill.
    pub(super) async fn run(&self, target: SocketAddr, bar: &ProgressBar) -> Tally {
        let next = Arc::new(AtomicU64::new(0));
        let counters = Arc::new(Counters::default());
        let workers = (0..self.clients).map(|_| {
            let (next, counters) = (next.clone(), counters.clone());
            async move {
                loop {
                    let payment = next.fetch_add(1, Ordering::Relaxed);
                    if payment >= self.payments {
                        break;
                    }
                    self.pay(target, payment, &counters).await;
                    bar.inc(1);
                }
            }
        });
        join_all(workers).await;
        Tally {
            payments: self.payments,
            attempts: counters.attempts.load(Ordering::Relaxed),
            replays: counters.replays.load(Ordering::Relaxed),
            conflicts: counters.conflicts.load(Ordering::Relaxed),
            ..Tally::default()
        }
    }

    /// One logical payment: one key, retried until an answer gets through.
    async fn pay(&self, target: SocketAddr, payment: u64, counters: &Counters) {
        let mut rng = fastrand::Rng::with_seed(self.seed ^ payment.wrapping_mul(0x9e37_79b9));
        let key = format!("demo-{:x}-{payment}", self.seed);
        let body = format!(
            r#"{{"payment":{payment},"amount":{}}}"#,
            100 + payment % 900
        );
        for attempt in 0..MAX_ATTEMPTS {
            let copies = if attempt == 0 && rng.f64() < self.duplicates {
                rng.usize(2..=3)
            } else {
                1
            };
            let sends = (0..copies).map(|_| {
                let lose = rng.f64() < self.loss;
                let timeout = Duration::from_millis(rng.u64(0..6));
                self.send(target, &key, &body, lose.then_some(timeout), counters)
            });
            let results = join_all(sends).await;
            if results.iter().any(|r| matches!(r, Attempt::Charged)) {
                return;
            }
            let pause = if results.iter().any(|r| matches!(r, Attempt::Conflict)) {
                // The first copy is still running; a real client would honour Retry-After,
                // the demo retries sooner to stay short.
                rng.u64(10..30)
            } else if results.iter().any(|r| matches!(r, Attempt::Failed)) {
                50
            } else {
                0
            };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    /// Sends one request. With `lose`, the response does not reach the client: either it gives up
    /// waiting after `lose` (and disconnects) or the answer arrives and is thrown away.
    async fn send(
        &self,
        target: SocketAddr,
        key: &str,
        body: &str,
        lose: Option<Duration>,
        counters: &Counters,
    ) -> Attempt {
        counters.attempts.fetch_add(1, Ordering::Relaxed);
        let request = Request::post(format!("http://{target}/payments"))
            .header("content-type", "application/json")
            .header("idempotency-key", key)
            .body(Full::new(Bytes::from(body.to_owned())))
            .expect("valid request");
        let response = self.client.request(request);
        if let Some(timeout) = lose {
            if timeout.as_millis() % 2 == 0 {
                let _ = tokio::time::timeout(timeout, response).await;
            } else {
                let _ = response.await;
            }
            return Attempt::Lost;
        }
        match response.await {
            Ok(response) if response.status() == StatusCode::CREATED => {
                if response.headers().contains_key("idempotent-replayed") {
                    counters.replays.fetch_add(1, Ordering::Relaxed);
                }
                Attempt::Charged
            }
            Ok(response) if response.status() == StatusCode::CONFLICT => {
                counters.conflicts.fetch_add(1, Ordering::Relaxed);
                Attempt::Conflict
            }
            Ok(_) | Err(_) => Attempt::Failed,
        }
    }
}
