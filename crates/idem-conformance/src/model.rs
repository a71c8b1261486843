//! Item 11: a model-based property test: random sequences of operations and clock moves, the store
//! compared after every step with a small reference model of the contract.
//!
//! The model is written independently of the stores (it does not use
//! `idem_core::transition`), so a rule that a store and the shared planner both get wrong still
//! shows up here as a disagreement with the contract as written.

use std::{collections::BTreeMap, future::Future, time::Duration};

use idem_core::{Acquisition, FencingToken, Outcome, RecordState, Store, StoreError};
use proptest::{prelude::*, test_runner::TestRunner};

use crate::{
    Subject,
    checks::{LEASE, TERMS, TTL, address, fingerprint, response},
};

const ADDRESSES: usize = 3;

/// One step of a generated history.
#[derive(Debug, Clone)]
enum Op {
    Acquire {
        at: usize,
        fp: u8,
    },
    Complete {
        at: usize,
        pick: TokenPick,
        short_ttl: bool,
    },
    Release {
        at: usize,
        pick: TokenPick,
    },
    Renew {
        at: usize,
        pick: TokenPick,
    },
    Get {
        at: usize,
    },
    Forget {
        at: usize,
    },
    Purge {
        limit: usize,
    },
    Advance {
        millis: u64,
    },
}

/// What the completion at step `id` records: an unknown outcome at every fifth step, the
/// response that identifies the step otherwise.
fn outcome(id: u16) -> Outcome {
    if id.is_multiple_of(5) {
        Outcome::Unknown
    } else {
        response(id).into()
    }
}

/// Which token a `complete`, `release` or `renew` presents.
#[derive(Debug, Clone, Copy)]
enum TokenPick {
    Latest,
    First,
    BeforeLatest,
    Bogus,
}

fn op() -> impl Strategy<Value = Op> {
    let at = 0..ADDRESSES;
    let pick = prop_oneof![
        4 => Just(TokenPick::Latest),
        1 => Just(TokenPick::First),
        1 => Just(TokenPick::BeforeLatest),
        1 => Just(TokenPick::Bogus),
    ];
    prop_oneof![
        4 => (at.clone(), 1..3u8).prop_map(|(at, fp)| Op::Acquire { at, fp }),
        3 => (at.clone(), pick.clone(), any::<bool>())
            .prop_map(|(at, pick, short_ttl)| Op::Complete { at, pick, short_ttl }),
        1 => (at.clone(), pick.clone()).prop_map(|(at, pick)| Op::Release { at, pick }),
        1 => (at.clone(), pick).prop_map(|(at, pick)| Op::Renew { at, pick }),
        1 => at.clone().prop_map(|at| Op::Get { at }),
        1 => at.prop_map(|at| Op::Forget { at }),
        // Limits that cover every address: which expired records a partial purge removes is the
        // store's choice, and a later acquire on that address would tell them apart. Bounded
        // batches have their own check.
        1 => (ADDRESSES..ADDRESSES + 2).prop_map(|limit| Op::Purge { limit }),
        3 => prop_oneof![Just(500u64), Just(1_000), Just(2_000), Just(2_500), Just(11_000)]
            .prop_map(|millis| Op::Advance { millis }),
    ]
}

#[derive(Debug, Clone)]
struct ModelRecord {
    fp: u8,
    token: FencingToken,
    completed: Option<u16>,
    lease_until: u64,
    expires_at: u64,
}

#[derive(Debug, Default)]
struct Model {
    now: u64,
    records: BTreeMap<usize, ModelRecord>,
    issued: BTreeMap<usize, Vec<FencingToken>>,
}

impl Model {
    fn live(&self, at: usize) -> Option<&ModelRecord> {
        self.records.get(&at).filter(|r| self.now < r.expires_at)
    }

    fn token(&self, at: usize, pick: TokenPick) -> FencingToken {
        let issued = self.issued.get(&at).map(Vec::as_slice).unwrap_or_default();
        let bogus = FencingToken::new(u64::MAX / 2);
        match pick {
            TokenPick::Latest => issued.last().copied().unwrap_or(bogus),
            TokenPick::First => issued.first().copied().unwrap_or(bogus),
            TokenPick::BeforeLatest => issued.iter().rev().nth(1).copied().unwrap_or(bogus),
            TokenPick::Bogus => bogus,
        }
    }

    /// Whether `token` holds a live processing record at `at`.
    fn holds(&self, at: usize, token: FencingToken) -> bool {
        self.live(at)
            .is_some_and(|r| r.completed.is_none() && r.token == token)
    }
}

const MS: fn(Duration) -> u64 = |d| d.as_millis() as u64;

/// Runs the model test: `make` builds a fresh subject for each generated history.
///
/// # Panics
///
/// When the store disagrees with the model; proptest shrinks the history first and prints it.
pub fn check<Sub, Fut>(make: impl Fn() -> Fut)
where
    Sub: Subject,
    Fut: Future<Output = Sub>,
{
    // PROPTEST_CASES raises it for a longer hunt.
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256);
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&proptest::collection::vec(op(), 1..48), |ops| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let subject = make().await;
            run_history(&subject, &ops).await;
        });
        Ok(())
    });
    if let Err(failure) = result {
        panic!("the store disagrees with the model: {failure}");
    }
}

async fn run_history(subject: &impl Subject, ops: &[Op]) {
    let store = subject.store();
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let context = format!("step {step}: {op:?}");
        match *op {
            Op::Acquire { at, fp } => {
                let got = store
                    .acquire(&address(&format!("m{at}")), &fingerprint(fp), TERMS)
                    .await
                    .expect(&context);
                acquire(&mut model, at, fp, got, &context);
            }
            Op::Complete {
                at,
                pick,
                short_ttl,
            } => {
                let token = model.token(at, pick);
                let ttl = if short_ttl {
                    Duration::from_secs(1)
                } else {
                    TTL
                };
                let id = step as u16;
                let got = store
                    .complete(&address(&format!("m{at}")), token, &outcome(id), ttl)
                    .await;
                let expected = model.holds(at, token);
                assert_fenced(got.map(drop), expected, &context);
                if expected {
                    let now = model.now;
                    let record = model.records.get_mut(&at).expect("held");
                    record.completed = Some(id);
                    record.expires_at = now + MS(ttl);
                }
            }
            Op::Release { at, pick } => {
                let token = model.token(at, pick);
                let got = store.release(&address(&format!("m{at}")), token).await;
                let expected = model.holds(at, token);
                assert_fenced(got, expected, &context);
                if expected {
                    model.records.remove(&at);
                }
            }
            Op::Renew { at, pick } => {
                let token = model.token(at, pick);
                let got = store.renew(&address(&format!("m{at}")), token, LEASE).await;
                let expected = model.holds(at, token);
                assert_fenced(got.map(drop), expected, &context);
                if expected {
                    let until = model.now + MS(LEASE);
                    let record = model.records.get_mut(&at).expect("held");
                    record.lease_until = until;
                    record.expires_at = record.expires_at.max(until);
                }
            }
            Op::Get { at } => {
                let got = store
                    .get(&address(&format!("m{at}")))
                    .await
                    .expect(&context);
                let expected = model.live(at);
                match (got, expected) {
                    (None, None) => {}
                    (Some(record), Some(want)) => {
                        assert_eq!(record.fingerprint, fingerprint(want.fp), "{context}");
                        assert_eq!(record.state.token(), want.token, "{context}");
                        match (&record.state, want.completed) {
                            (RecordState::Completed { outcome: r, .. }, Some(id)) => {
                                assert_eq!(*r, outcome(id), "{context}");
                            }
                            (RecordState::Processing { .. }, None) => {}
                            (state, want) => panic!("{context}: got {state:?}, model {want:?}"),
                        }
                    }
                    (got, want) => panic!("{context}: got {got:?}, model {want:?}"),
                }
            }
            Op::Forget { at } => {
                let got = store
                    .forget(&address(&format!("m{at}")))
                    .await
                    .expect(&context);
                assert_eq!(got, model.live(at).is_some(), "{context}");
                model.records.remove(&at);
            }
            Op::Purge { limit } => {
                let got = store.purge_expired(limit).await.expect(&context);
                let now = model.now;
                let expired: Vec<usize> = model
                    .records
                    .iter()
                    .filter(|(_, r)| now >= r.expires_at)
                    .map(|(at, _)| *at)
                    .collect();
                assert_eq!(got, expired.len(), "{context}");
                for at in expired {
                    model.records.remove(&at);
                }
            }
            Op::Advance { millis } => {
                subject.advance(Duration::from_millis(millis)).await;
                model.now += millis;
            }
        }
    }
}

fn acquire(model: &mut Model, at: usize, fp: u8, got: Acquisition, context: &str) {
    let now = model.now;
    let expected = match model.live(at) {
        None => None,
        Some(r) if r.fp != fp => Some(Acquisition::Mismatch),
        Some(r) => match r.completed {
            Some(id) => Some(Acquisition::Completed(outcome(id))),
            None if now < r.lease_until => Some(Acquisition::InFlight {
                retry_after: Duration::from_millis(r.lease_until - now),
            }),
            None => None,
        },
    };
    if let Some(expected) = expected {
        assert_eq!(got, expected, "{context}");
        return;
    }
    let Acquisition::Acquired(lease) = got else {
        panic!("{context}: expected Acquired, got {got:?}");
    };
    let issued = model.issued.entry(at).or_default();
    if let Some(last) = issued.last() {
        assert!(
            lease.token > *last,
            "{context}: token {lease:?} after {last:?}"
        );
    }
    issued.push(lease.token);
    let lease_until = now + MS(LEASE);
    let took_over = model.live(at).is_some();
    assert_eq!(lease.took_over, took_over, "{context}");
    let expires_at = match model.live(at) {
        Some(r) => r.expires_at.max(lease_until),
        None => now + MS(TTL.max(LEASE)),
    };
    model.records.insert(
        at,
        ModelRecord {
            fp,
            token: lease.token,
            completed: None,
            lease_until,
            expires_at,
        },
    );
}

fn assert_fenced(got: Result<(), StoreError>, expected_ok: bool, context: &str) {
    match (got, expected_ok) {
        (Ok(()), true) | (Err(StoreError::LeaseLost), false) => {}
        (got, _) => panic!("{context}: got {got:?}, model expects ok = {expected_ok}"),
    }
}
