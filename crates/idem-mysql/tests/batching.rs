//! Group commit: writes queued together run as one batch, and each gets its own values and its
//! own answer, in both forms a batch can take (one compound statement, or `;`-separated
//! statements).

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

mod common;

use std::time::Duration;

use idem_core::{
    Acquisition, Clock, FencingToken, ManualClock, Outcome, RecordState, Store, StoreError,
    StoredResponse,
};
use idem_mysql::BatchForm;
use idem_test_support::{in_order, require};

use common::{TERMS, TestDatabase, address, fingerprint};

const KEYS: usize = 12;

fn response(n: usize) -> Outcome {
    StoredResponse::new(201)
        .body(format!("response {n}"))
        .into()
}

/// A lease or TTL of 1, 2 or 3 minutes: operations of one batch with the same value and with
/// different ones.
fn minutes(n: usize) -> Duration {
    Duration::from_secs(60 * (1 + n as u64 % 3))
}

/// On a single-threaded runtime every call is queued before the store's tasks run, so that each
/// kind of write below is one batch.
async fn each_write_of_a_batch_has_its_own_values(form: BatchForm) {
    let url = require!(Mysql);
    let database = TestDatabase::new(&url).await;
    let clock = ManualClock::default();
    let store = database
        .store(
            database
                .options()
                .test_clock(clock.clone())
                .batch_form(form),
        )
        .await;
    let now = clock.now();

    let keys: Vec<_> = (0..KEYS).map(|n| address(&format!("key-{n}"))).collect();
    let one = fingerprint(1);
    let acquisitions = in_order(keys.iter().map(|key| store.acquire(key, &one, TERMS))).await;
    let tokens: Vec<FencingToken> = acquisitions
        .into_iter()
        .map(|got| match got.unwrap() {
            Acquisition::Acquired(lease) => lease.token,
            other => panic!("expected Acquired, got {other:?}"),
        })
        .collect();

    // Renewals of different lengths; one with a token that does not hold its key.
    let stale = FencingToken::new(tokens[0].get() + 1_000);
    let renewals = in_order(
        keys.iter()
            .zip(&tokens)
            .enumerate()
            .map(|(n, (key, token))| {
                let token = if n == 5 { stale } else { *token };
                store.renew(key, token, minutes(n))
            }),
    )
    .await;
    for (n, renewal) in renewals.into_iter().enumerate() {
        match n {
            5 => assert!(matches!(renewal, Err(StoreError::LeaseLost)), "{renewal:?}"),
            _ => assert_eq!(renewal.unwrap(), now + minutes(n), "renewal {n}"),
        }
    }
    for (n, key) in keys.iter().enumerate() {
        let lease_until = match store.get(key).await.unwrap().unwrap().state {
            RecordState::Processing { lease_until, .. } => lease_until,
            other => panic!("expected processing, got {other:?}"),
        };
        let lease = if n == 5 { TERMS.lease } else { minutes(n) };
        assert_eq!(lease_until, now + lease, "the lease of {n}");
    }

    // Completions of the first half, each with its own response and TTL, one with a stale token;
    // releases of the second half.
    let (completed, released) = keys.split_at(KEYS / 2);
    let outcomes: Vec<_> = (0..completed.len()).map(response).collect();
    let completions = in_order(completed.iter().zip(&tokens).enumerate().map(
        |(n, (key, token))| {
            let token = if n == 2 { stale } else { *token };
            store.complete(key, token, &outcomes[n], minutes(n))
        },
    ))
    .await;
    for (n, completion) in completions.into_iter().enumerate() {
        match n {
            2 => assert!(
                matches!(completion, Err(StoreError::LeaseLost)),
                "{completion:?}"
            ),
            _ => completion.unwrap(),
        }
    }
    let releases = in_order(
        released
            .iter()
            .zip(&tokens[KEYS / 2..])
            .map(|(key, token)| store.release(key, *token)),
    )
    .await;
    assert!(releases.iter().all(Result::is_ok), "{releases:?}");

    for (n, key) in completed.iter().enumerate() {
        let record = store.get(key).await.unwrap().unwrap();
        if n == 2 {
            assert!(
                matches!(record.state, RecordState::Processing { .. }),
                "{record:?}"
            );
            continue;
        }
        assert_eq!(record.expires_at, now + minutes(n), "completion {n}");
        assert_eq!(
            store.acquire(key, &fingerprint(1), TERMS).await.unwrap(),
            Acquisition::Completed(response(n))
        );
    }
    for key in released {
        assert_eq!(store.get(key).await.unwrap(), None);
    }
}

#[tokio::test]
async fn each_write_of_a_compound_batch_has_its_own_values() {
    each_write_of_a_batch_has_its_own_values(BatchForm::Compound).await;
}

#[tokio::test]
async fn each_write_of_a_batch_of_statements_has_its_own_values() {
    each_write_of_a_batch_has_its_own_values(BatchForm::Statements).await;
}
