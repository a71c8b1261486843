//! Payments through any idempotent API, one line of JSON per payment: the Rust driver of the
//! clients' end-to-end test (`clients/e2e`), which the Python and TypeScript clients' drivers
//! mirror.
//!
//! ```sh
//! IDEM_E2E_URL=http://127.0.0.1:8080 IDEM_E2E_PAYMENTS=200 IDEM_E2E_PREFIX=run1 \
//!   cargo run -p idem-client --example payments
//! ```
//!
//! Each payment `{prefix}-{i}` is one operation (`POST /payments`, a generated key), sent with
//! short attempts (1 s) so that slow answers are retried too; `IDEM_E2E_CONCURRENCY` (8) run at
//! once. A line is `{"payment", "status", "attempts", "replayed", "answer"}`, `answer` being
//! the `payment` the response body names, or `{"payment", "error", "attempts"}`.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use idem_client::{Client, Error};
use serde_json::{Value, json};

fn setting(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        eprintln!("{name} is not set");
        std::process::exit(2)
    })
}

#[tokio::main]
async fn main() {
    let url = format!("{}/payments", setting("IDEM_E2E_URL").trim_end_matches('/'));
    let count: usize = setting("IDEM_E2E_PAYMENTS")
        .parse()
        .expect("a number of payments");
    let prefix = setting("IDEM_E2E_PREFIX");
    let concurrency: usize = std::env::var("IDEM_E2E_CONCURRENCY")
        .ok()
        .map_or(8, |n| n.parse().expect("a concurrency"));
    let client = Client::builder()
        .attempt_timeout(Duration::from_secs(1))
        .deadline(Duration::from_secs(60))
        .max_attempts(30)
        .initial_backoff(Duration::from_millis(50))
        .max_backoff(Duration::from_secs(1))
        .build();

    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..concurrency)
        .map(|_| {
            let (client, url, prefix, next) =
                (client.clone(), url.clone(), prefix.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= count {
                        break;
                    }
                    let payment = format!("{prefix}-{i}");
                    let sent = client
                        .post(&url)
                        .json(&json!({ "payment": payment, "amount": i + 1 }))
                        .send()
                        .await;
                    let line = match sent {
                        Ok(response) => json!({
                            "payment": payment,
                            "status": response.status().as_u16(),
                            "attempts": response.attempts(),
                            "replayed": response.replayed(),
                            "answer": response.json::<Value>().ok().and_then(|body| body.get("payment").cloned()),
                        }),
                        Err(error) => {
                            let (name, attempts) = match &error {
                                Error::GaveUp { attempts, .. } => ("GaveUp", Some(*attempts)),
                                Error::OutcomeUnknown { attempts, .. } => {
                                    ("OutcomeUnknown", Some(*attempts))
                                }
                                Error::Mismatch { attempts, .. } => ("Mismatch", Some(*attempts)),
                                _ => ("Error", None),
                            };
                            json!({ "payment": payment, "error": name, "attempts": attempts })
                        }
                    };
                    println!("{line}");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a worker panicked");
    }
}
