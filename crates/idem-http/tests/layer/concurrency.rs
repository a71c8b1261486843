//! Concurrent requests with one key, and clients that go away.

use std::time::Duration;

use http::StatusCode;
use idem_core::{InFlight, ManualClock, MemoryStore};
use idem_http::{RequestOutcome, problem};
use tokio::task::JoinSet;
use tower::ServiceExt;

use crate::common::{Fixture, Reply, keyed, send};

const WAIT: InFlight = InFlight::Wait {
    timeout: Duration::from_secs(10),
};

/// Sends twenty requests with one key to `/slow` at once; opens the gate once `open_after`
/// of them have been answered (or, with `None`, once the first has started).
async fn twenty_at_once(f: &Fixture, app: &axum::Router, open_after: Option<usize>) -> Vec<Reply> {
    let mut requests = JoinSet::new();
    for _ in 0..20 {
        let app = app.clone();
        requests.spawn(async move { send(&app, keyed("/slow", "k", "")).await });
    }
    if open_after.is_none() {
        f.started.notified().await;
        // Give the others time to start waiting; the result is the same if they are late.
        tokio::time::sleep(Duration::from_millis(100)).await;
        f.open_gate();
    }
    let mut replies = Vec::new();
    while let Some(reply) = requests.join_next().await {
        replies.push(reply.unwrap());
        if Some(replies.len()) == open_after {
            f.open_gate();
        }
    }
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_concurrent_requests_with_one_key_execute_once_and_the_others_get_409() {
    // A manual clock stands still, so the holder's remaining lease is exactly 7.5 s.
    let f = Fixture::with_store(MemoryStore::with_clock(ManualClock::default()));
    let app = f.app(f.layer().lease(Duration::from_millis(7_500)));

    let replies = twenty_at_once(&f, &app, Some(19)).await;
    let (executed, conflicts): (Vec<_>, Vec<_>) = replies
        .iter()
        .partition(|r| r.outcome == Some(RequestOutcome::Executed));
    assert_eq!(executed.len(), 1);
    assert_eq!(executed[0].status, StatusCode::CREATED);
    assert_eq!(executed[0].text(), "slow call 1");
    assert_eq!(conflicts.len(), 19);
    for conflict in conflicts {
        assert_eq!(conflict.status, StatusCode::CONFLICT);
        assert_eq!(conflict.outcome, Some(RequestOutcome::Conflict));
        assert_eq!(conflict.problem_type(), problem::IN_FLIGHT);
        assert_eq!(conflict.header("retry-after"), Some("8"));
    }
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_wait_mode_twenty_concurrent_requests_all_get_the_one_response() {
    let f = Fixture::new();
    let app = f.app(f.layer().in_flight(WAIT));

    let replies = twenty_at_once(&f, &app, None).await;
    let executed = replies
        .iter()
        .filter(|r| r.outcome == Some(RequestOutcome::Executed))
        .count();
    let replayed = replies
        .iter()
        .filter(|r| r.outcome == Some(RequestOutcome::Replayed) && r.is_replay())
        .count();
    assert_eq!((executed, replayed), (1, 19));
    for reply in &replies {
        assert_eq!(reply.status, StatusCode::CREATED);
        assert_eq!(reply.text(), "slow call 1");
    }
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn in_wait_mode_a_request_still_waiting_after_the_timeout_gets_409() {
    let f = Fixture::with_store(MemoryStore::with_clock(ManualClock::default()));
    let app = f.app(f.layer().in_flight(InFlight::Wait {
        timeout: Duration::from_millis(50),
    }));
    let first = tokio::spawn({
        let app = app.clone();
        async move { send(&app, keyed("/slow", "k", "")).await }
    });
    f.started.notified().await;
    let second = send(&app, keyed("/slow", "k", "")).await;
    assert_eq!(second.status, StatusCode::CONFLICT);
    assert_eq!(second.header("retry-after"), Some("30"));
    f.open_gate();
    assert_eq!(first.await.unwrap().outcome, Some(RequestOutcome::Executed));
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn a_client_that_goes_away_does_not_abandon_the_work() {
    let f = Fixture::new();
    let app = f.app(f.layer().in_flight(WAIT));

    let first = app.clone().oneshot(keyed("/slow", "k", ""));
    tokio::select! {
        _ = first => panic!("the handler cannot finish while the gate is closed"),
        () = f.started.notified() => {}
    }
    // The first request's future is dropped: its client went away mid-request.
    f.open_gate();
    let retry = send(&app, keyed("/slow", "k", "")).await;
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert_eq!(retry.status, StatusCode::CREATED);
    assert_eq!(retry.text(), "slow call 1");
    assert_eq!(f.calls.get(), 1);
}
