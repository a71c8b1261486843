//! The payments service against a real PostgreSQL, one schema per test: a charge and its key
//! commit together or not at all, whatever step fails, and the retry charges exactly once.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use axum::{
    Router,
    body::Body,
    http::{Request, StatusCode},
};
use axum_payments::{App, Step};
use http_body_util::BodyExt;
use idem_core::{Address, Outcome, RecordState, Scope, Store, StoredResponse};
use idem_test_support::PgSchema;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, PgPool};
use tower::ServiceExt;

const AUTHORIZATION: &str = "Bearer sk_test_alice";

/// The service in a schema of its own (its tables and idem's), dropped at the end.
struct Service {
    app: App,
    pool: PgPool,
    schema: PgSchema,
}

impl Service {
    /// `None` after saying why, when no server is configured.
    async fn start() -> Option<Self> {
        let common::Started { app, pool, schema } = common::start().await?;
        Some(Self { app, pool, schema })
    }

    fn router(&self) -> Router {
        self.app.router()
    }

    /// The answer's status and JSON body.
    async fn open_account(&self, id: &str, balance: i64) -> (StatusCode, Value) {
        let request = Request::put(format!("/accounts/{id}"))
            .header("content-type", "application/json")
            .body(Body::from(json!({ "balance": balance }).to_string()))
            .unwrap();
        let response = self.router().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    async fn balance(&self, id: &str) -> i64 {
        sqlx::query_scalar("SELECT balance FROM accounts WHERE id = $1")
            .bind(id)
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    async fn charges(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM charges")
            .fetch_one(&self.pool)
            .await
            .unwrap()
    }

    /// Checks that every charge has its key, completed with a 201 naming it, and that every key
    /// completed with a 201 names an existing charge made under that key.
    async fn assert_charges_and_keys_agree(&self) {
        // The store keeps SHA-256 of each key, not the key: the charges' keys are hashed the same
        // way to be matched with the records.
        let charges: Vec<(i64, Vec<u8>, String, Vec<u8>)> = sqlx::query_as(
            "SELECT id, key_scope, key, sha256(convert_to(key, 'UTF8')) FROM charges",
        )
        .fetch_all(&self.pool)
        .await
        .unwrap();
        for (id, scope, key, _) in &charges {
            let address = Address::new(
                Scope::try_from(scope.as_slice()).unwrap(),
                key.parse().unwrap(),
            );
            let record = self.app.store().get(&address).await.unwrap();
            match record.map(|r| r.state) {
                Some(RecordState::Completed {
                    outcome: Outcome::Response(response),
                    ..
                }) => {
                    assert_eq!(response.status, 201, "charge {id}");
                    let body: Value = serde_json::from_slice(&response.body).unwrap();
                    assert_eq!(body["charge"], *id, "charge {id}");
                }
                other => panic!("charge {id} has no completed key: {other:?}"),
            }
        }
        let records: Vec<LiveRecord> = sqlx::query_as(AssertSqlSafe(format!(
            r#"SELECT scope, key, response FROM "{}".idem_records WHERE now() < expires_at"#,
            self.schema.name()
        )))
        .fetch_all(&self.pool)
        .await
        .unwrap();
        for (scope, digest, response) in records {
            let response = response.expect("a processing record was committed");
            let response = StoredResponse::decode(&response).unwrap();
            if response.status == 201 {
                let body: Value = serde_json::from_slice(&response.body).unwrap();
                let made = charges
                    .iter()
                    .any(|(id, s, _, d)| body["charge"] == *id && *s == scope && *d == digest);
                assert!(made, "a key completed without its charge: {body}");
            }
        }
    }
}

/// A live record as the table holds it: scope, key digest, and the encoded response (none: a
/// processing record).
type LiveRecord = (Vec<u8>, Vec<u8>, Option<Vec<u8>>);

/// A response's status, whether it is a replay, and its JSON body.
struct Answer {
    status: StatusCode,
    replayed: bool,
    body: Value,
}

async fn charge(router: Router, key: &str, amount: i64) -> Answer {
    let request = Request::post("/accounts/alice/charges")
        .header("authorization", AUTHORIZATION)
        .header("idempotency-key", key)
        .header("content-type", "application/json")
        .body(Body::from(json!({ "amount": amount }).to_string()))
        .unwrap();
    let response = router.oneshot(request).await.unwrap();
    let status = response.status();
    let replayed = response.headers().get("idempotent-replayed").is_some();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        status,
        replayed,
        body,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_charge_is_made_once_and_replayed_to_every_retry() {
    let Some(service) = Service::start().await else {
        return;
    };
    assert_eq!(
        service.open_account("alice", 1_000).await.0,
        StatusCode::CREATED
    );

    let first = charge(service.router(), "pay-1", 250).await;
    assert_eq!((first.status, first.replayed), (StatusCode::CREATED, false));
    assert_eq!(first.body["balance"], 750);
    for _ in 0..3 {
        let retry = charge(service.router(), "pay-1", 250).await;
        assert_eq!((retry.status, retry.replayed), (StatusCode::CREATED, true));
        assert_eq!(retry.body, first.body);
    }
    assert_eq!(service.balance("alice").await, 750);
    assert_eq!(service.charges().await, 1);
    service.assert_charges_and_keys_agree().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_abort_at_any_step_leaves_neither_charge_nor_key_and_the_retry_charges_once() {
    let Some(service) = Service::start().await else {
        return;
    };
    service.open_account("alice", 1_000).await;
    let mut balance = 1_000;
    for (n, step) in [Step::BeforeCharge, Step::AfterCharge, Step::BeforeCommit]
        .into_iter()
        .enumerate()
    {
        let key = format!("pay-{step:?}");
        let charges_before = service.charges().await;
        service.app.faults().fail_once_at(step);
        let failed = charge(service.router(), &key, 100).await;
        assert_eq!(failed.status, StatusCode::INTERNAL_SERVER_ERROR, "{step:?}");
        // Nothing of the attempt remains: no charge, no debit, no key.
        assert_eq!(service.charges().await, charges_before, "{step:?}");
        assert_eq!(service.balance("alice").await, balance, "{step:?}");
        let address = Address::new(
            Scope::from_identity([AUTHORIZATION.as_bytes()]),
            key.parse().unwrap(),
        );
        assert_eq!(service.app.store().get(&address).await.unwrap(), None);
        service.assert_charges_and_keys_agree().await;

        // The client retries with the same key: charged exactly once.
        let retry = charge(service.router(), &key, 100).await;
        assert_eq!((retry.status, retry.replayed), (StatusCode::CREATED, false));
        balance -= 100;
        assert_eq!(service.balance("alice").await, balance);
        assert_eq!(service.charges().await, n as i64 + 1);
        let again = charge(service.router(), &key, 100).await;
        assert_eq!((again.status, again.replayed), (StatusCode::CREATED, true));
        assert_eq!(again.body, retry.body);
        service.assert_charges_and_keys_agree().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_wait_for_the_first_and_replay_it() {
    let Some(service) = Service::start().await else {
        return;
    };
    service.open_account("alice", 1_000).await;
    let requests: Vec<_> = (0..16)
        .map(|_| tokio::spawn(charge(service.router(), "pay-concurrent", 300)))
        .collect();
    let mut answers = Vec::new();
    for request in requests {
        answers.push(request.await.unwrap());
    }
    let executed: Vec<_> = answers.iter().filter(|a| !a.replayed).collect();
    assert_eq!(executed.len(), 1);
    for answer in &answers {
        assert_eq!(answer.status, StatusCode::CREATED);
        assert_eq!(answer.body, executed[0].body);
    }
    assert_eq!(service.balance("alice").await, 700);
    assert_eq!(service.charges().await, 1);
    service.assert_charges_and_keys_agree().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn final_refusals_are_kept_and_other_payloads_are_refused() {
    let Some(service) = Service::start().await else {
        return;
    };
    service.open_account("alice", 100).await;
    let refused = charge(service.router(), "pay-big", 500).await;
    assert_eq!(
        (refused.status, refused.replayed),
        (StatusCode::PAYMENT_REQUIRED, false)
    );
    // Topping the account up does not change the answer under this key: it was final.
    sqlx::query("UPDATE accounts SET balance = 1000 WHERE id = 'alice'")
        .execute(&service.pool)
        .await
        .unwrap();
    let retry = charge(service.router(), "pay-big", 500).await;
    assert_eq!(
        (retry.status, retry.replayed),
        (StatusCode::PAYMENT_REQUIRED, true)
    );
    let other = charge(service.router(), "pay-big", 400).await;
    assert_eq!(other.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(service.charges().await, 0);
    service.assert_charges_and_keys_agree().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_account_is_created_once_by_its_natural_key() {
    let Some(service) = Service::start().await else {
        return;
    };
    assert_eq!(
        service.open_account("bob", 500).await,
        (StatusCode::CREATED, json!({ "id": "bob", "balance": 500 }))
    );
    // The second request gets the account as it was: its balance is not the one it asked for.
    assert_eq!(
        service.open_account("bob", 9_999).await,
        (StatusCode::OK, json!({ "id": "bob", "balance": 500 }))
    );
    assert_eq!(service.balance("bob").await, 500);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_charge_is_refunded_once_even_by_concurrent_requests() {
    let Some(service) = Service::start().await else {
        return;
    };
    service.open_account("alice", 1_000).await;
    let charged = charge(service.router(), "pay-refund", 400).await;
    let id = charged.body["charge"].as_i64().unwrap();
    let refunds: Vec<_> = (0..8)
        .map(|_| {
            let router = service.router();
            tokio::spawn(async move {
                let request = Request::post(format!("/charges/{id}/refund"))
                    .body(Body::empty())
                    .unwrap();
                router.oneshot(request).await.unwrap().status()
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for refund in refunds {
        statuses.push(refund.await.unwrap());
    }
    statuses.sort();
    let mut expected = vec![StatusCode::CONFLICT; 7];
    expected.insert(0, StatusCode::OK);
    assert_eq!(statuses, expected);
    assert_eq!(service.balance("alice").await, 1_000);

    let request = Request::post("/charges/999999/refund")
        .body(Body::empty())
        .unwrap();
    let unknown = service.router().oneshot(request).await.unwrap().status();
    assert_eq!(unknown, StatusCode::NOT_FOUND);
}
