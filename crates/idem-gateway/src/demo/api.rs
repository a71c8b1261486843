//! The demo's sample payments API: charges a payment each time it is asked, and counts.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use axum::{Json, Router, extract::State, http::StatusCode, routing::post};
use serde::Deserialize;

use super::{Tally, bind_loopback};
use crate::Error;

/// What a client asks for.
#[derive(Debug, Deserialize)]
struct Charge {
    payment: u64,
    amount: u64,
}

type Charges = Arc<Mutex<HashMap<u64, u64>>>;

/// The running API, on a loopback port until dropped.
pub(super) struct PaymentsApi {
    addr: SocketAddr,
    charges: Charges,
    server: tokio::task::JoinHandle<()>,
}

impl PaymentsApi {
    pub(super) async fn start() -> Result<Self, Error> {
        let charges = Charges::default();
        let listener = bind_loopback().await?;
        let addr = listener.local_addr().map_err(|source| Error::Demo {
            what: "bind a loopback port",
            source,
        })?;
        let app = Router::new()
            .route("/payments", post(charge))
            .with_state(charges.clone());
        let server = tokio::spawn(async move {
            // The API runs until the demo drops it; serve only fails if the socket does.
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            addr,
            charges,
            server,
        })
    }

    pub(super) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Completes a fleet's tally with what the API charged.
    pub(super) fn settle(&self, mut tally: Tally) -> Tally {
        let charges = self.charges.lock().expect("not poisoned");
        tally.charges = charges.values().sum();
        tally.duplicates = charges.values().map(|n| n.saturating_sub(1)).sum();
        tally.missing = tally.payments - charges.len() as u64;
        tally
    }

    pub(super) fn reset(&self) {
        self.charges.lock().expect("not poisoned").clear();
    }
}

impl Drop for PaymentsApi {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn charge(
    State(charges): State<Charges>,
    Json(charge): Json<Charge>,
) -> (StatusCode, Json<serde_json::Value>) {
    // A real charge takes a while: long enough for duplicates to overlap.
    tokio::time::sleep(Duration::from_millis(fastrand::u64(2..8))).await;
    let n = {
        let mut charges = charges.lock().expect("not poisoned");
        let n = charges.entry(charge.payment).or_default();
        *n += 1;
        *n
    };
    let body = serde_json::json!({
        "charge": format!("ch_{}_{n}", charge.payment),
        "payment": charge.payment,
        "amount": charge.amount,
        "status": "succeeded",
    });
    (StatusCode::CREATED, Json(body))
}
