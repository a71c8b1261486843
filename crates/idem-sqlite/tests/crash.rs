//! A process killed (SIGKILL) while transactions of many writes are in flight: every completion
//! it acknowledged is in the file when it is opened again.
//!
//! The test runs its own executable again as the process to kill: in that child, 32 tasks
//! acquire and complete new keys on one store and print each key once `complete` returned.

#![allow(clippy::unwrap_used)] // test code: a failed unwrap is a failed test

use std::{
    io::{BufRead, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use idem_core::{Acquisition, Address, Fingerprint, Outcome, Policy, Store, StoredResponse, Terms};
use idem_sqlite::SqliteStore;

/// Set in the child to the database file it writes.
const CHILD: &str = "IDEM_SQLITE_CRASH_CHILD";
const TASKS: usize = 32;
/// How many acknowledged keys the parent waits for before it kills the child.
const ACKNOWLEDGED: usize = 2_000;
const FP: Fingerprint = Fingerprint::from_bytes([9; 32]);

fn terms() -> Terms {
    (&Policy::default()).into()
}

fn response(key: &str) -> Outcome {
    StoredResponse::new(201).body(key.to_owned()).into()
}

#[test]
fn every_acknowledged_completion_survives_a_sigkill_during_batches() {
    if let Ok(path) = std::env::var(CHILD) {
        return write_until_killed(&path);
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.db");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "every_acknowledged_completion_survives_a_sigkill_during_batches",
            "--nocapture",
        ])
        .env(CHILD, &path)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acknowledged = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(120);
    while acknowledged.len() < ACKNOWLEDGED {
        assert!(
            Instant::now() < deadline,
            "the child acknowledged {} keys",
            acknowledged.len()
        );
        let line = lines.next().expect("the child runs until killed").unwrap();
        if let Some(key) = line.strip_prefix("acknowledged ") {
            acknowledged.push(key.to_owned());
        }
    }
    // Rust's `Child::kill` is SIGKILL on Unix: no destructor, no last commit.
    child.kill().unwrap();
    child.wait().unwrap();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(&path).await.unwrap();
        for key in &acknowledged {
            let address = Address::anonymous(key.parse().unwrap());
            let found = store.acquire(&address, &FP, terms()).await.unwrap();
            assert_eq!(found, Acquisition::Completed(response(key)), "{key}");
        }
    });
}

/// The child: writes until it is killed.
fn write_until_killed(path: &str) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(path).await.unwrap();
        let tasks: Vec<_> = (0..TASKS)
            .map(|task| {
                let store = store.clone();
                tokio::spawn(async move {
                    for n in 0.. {
                        let key = format!("key-{task}-{n}");
                        let address = Address::anonymous(key.parse().unwrap());
                        let Acquisition::Acquired(lease) =
                            store.acquire(&address, &FP, terms()).await.unwrap()
                        else {
                            panic!("{key} is new");
                        };
                        store
                            .complete(&address, lease.token, &response(&key), terms().ttl)
                            .await
                            .unwrap();
                        println!("acknowledged {key}");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
}
