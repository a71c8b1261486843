//! Responses of unknown length (chunked, `text/event-stream`): each chunk reaches the first
//! client as the inner service produces it, the response is recorded as it passes, and its end
//! reaches the client once it is recorded; a body that breaks off ends the client's response
//! abnormally and follows the ambiguity policy.

use std::io;

use bytes::Bytes;
use http::StatusCode;
use http_body::Frame;
use idem_core::{Address, Ambiguous, InFlight, Store};
use idem_http::{RequestOutcome, problem};

use crate::common::{Fixture, PATIENCE, Read, Reader, Reply, keyed, send, trailer_map};

fn data(text: &'static str) -> Read {
    Read::Data(Bytes::from_static(text.as_bytes()))
}

fn event(text: &'static str) -> Result<Frame<Bytes>, io::Error> {
    Ok(Frame::data(Bytes::from_static(text.as_bytes())))
}

fn cut_off() -> Result<Frame<Bytes>, io::Error> {
    Err(io::Error::new(
        io::ErrorKind::ConnectionReset,
        "upstream reset",
    ))
}

fn address(key: &str) -> Address {
    Address::anonymous(key.parse().unwrap())
}

#[tokio::test]
async fn each_chunk_reaches_the_client_as_it_comes_and_a_retry_replays_them_all() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(first.headers["content-type"], "text/event-stream");
    assert_eq!(first.headers.get("content-length"), None);

    // Each chunk is read while the upstream has not sent the next one yet.
    upstream.send(event("data: 1\n\n")).await.unwrap();
    assert_eq!(first.next().await, data("data: 1\n\n"));
    upstream.send(event("data: 2\n\n")).await.unwrap();
    assert_eq!(first.next().await, data("data: 2\n\n"));
    drop(upstream);
    assert_eq!(first.next().await, Read::End);

    // The end came once the response was recorded: a retry at once replays it.
    let retry = send(&app, keyed("/stream", "k", "")).await;
    assert_eq!(retry.outcome, Some(RequestOutcome::Replayed));
    assert!(retry.is_replay());
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.header("content-type"), Some("text/event-stream"));
    assert_eq!(retry.text(), "data: 1\n\ndata: 2\n\n");
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn a_streamed_response_keeps_its_trailers_for_the_client_and_the_replay() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("body")).await.unwrap();
    upstream
        .send(Ok(Frame::trailers(trailer_map())))
        .await
        .unwrap();
    drop(upstream);
    assert_eq!(first.next().await, data("body"));
    assert_eq!(first.next().await, Read::Trailers(trailer_map()));
    assert_eq!(first.next().await, Read::End);

    let retry = send(&app, keyed("/stream", "k", "")).await;
    assert!(retry.is_replay());
    assert_eq!(retry.text(), "body");
    assert_eq!(retry.trailers, Some(trailer_map()));
}

#[tokio::test]
async fn a_client_that_goes_away_mid_stream_stops_neither_the_recording_nor_the_upstream() {
    let f = Fixture::new();
    let app = f.app(f.layer().in_flight(InFlight::Wait { timeout: PATIENCE }));
    let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("one ")).await.unwrap();
    assert_eq!(first.next().await, data("one "));
    drop(first);

    // The body is still read, chunk after chunk, with nobody taking them.
    for chunk in ["two ", "three ", "four ", "five"] {
        upstream.send(event(chunk)).await.unwrap();
    }
    drop(upstream);
    let retry = send(&app, keyed("/stream", "k", "")).await;
    assert!(retry.is_replay());
    assert_eq!(retry.text(), "one two three four five");
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn a_duplicate_in_wait_mode_joins_the_stream_and_follows_it_live() {
    let f = Fixture::new();
    let app = f.app(f.layer().in_flight(InFlight::Wait { timeout: PATIENCE }));
    let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("a")).await.unwrap();
    assert_eq!(first.next().await, data("a"));

    // It gets the head and the chunk so far at once, then each chunk as it comes.
    let mut joined = Reader::send(&app, keyed("/stream", "k", "")).await;
    assert_eq!(joined.status, StatusCode::OK);
    assert_eq!(joined.headers["content-type"], "text/event-stream");
    assert_eq!(joined.headers["idempotent-replayed"], "true");
    assert_eq!(joined.next().await, data("a"));
    upstream.send(event("b")).await.unwrap();
    assert_eq!(joined.next().await, data("b"));
    assert_eq!(first.next().await, data("b"));
    drop(upstream);
    assert_eq!(first.next().await, Read::End);
    assert_eq!(joined.next().await, Read::End);
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn a_joined_duplicate_gets_the_whole_stream_even_past_the_stored_limit() {
    let f = Fixture::new();
    let app = f.app(
        f.layer()
            .in_flight(InFlight::Wait { timeout: PATIENCE })
            .max_stored_response(4),
    );
    let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("abc")).await.unwrap();
    assert_eq!(first.next().await, data("abc"));
    let mut joined = Reader::send(&app, keyed("/stream", "k", "")).await;
    upstream.send(event("def")).await.unwrap();
    drop(upstream);
    assert_eq!(joined.next().await, data("abc"));
    for reader in [&mut first, &mut joined] {
        assert_eq!(reader.next().await, data("def"));
        assert_eq!(reader.next().await, Read::End);
    }
    // Past the limit nobody joins: a later duplicate gets the record, not stored.
    let later = send(&app, keyed("/stream", "k", "")).await;
    assert_eq!(later.problem_type(), problem::RESPONSE_NOT_STORED);
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn joined_duplicates_count_among_the_waiters_and_reject_mode_joins_nobody() {
    for waits in [true, false] {
        let f = Fixture::new();
        let layer = match waits {
            true => f
                .layer()
                .in_flight(InFlight::Wait { timeout: PATIENCE })
                .max_waiters(0),
            false => f.layer(),
        };
        let app = f.app(layer);
        let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
        let upstream = f.next_stream().await;
        upstream.send(event("a")).await.unwrap();
        assert_eq!(first.next().await, data("a"));
        let duplicate = send(&app, keyed("/stream", "k", "")).await;
        assert_eq!(duplicate.status, StatusCode::CONFLICT);
        assert_eq!(duplicate.problem_type(), problem::IN_FLIGHT);
    }
}

#[tokio::test]
async fn a_joined_duplicate_of_a_stream_cut_off_ends_abnormally_too() {
    let f = Fixture::new();
    let app = f.app(f.layer().in_flight(InFlight::Wait { timeout: PATIENCE }));
    let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("partial")).await.unwrap();
    assert_eq!(first.next().await, data("partial"));
    let mut joined = Reader::send(&app, keyed("/stream", "k", "")).await;
    assert_eq!(joined.next().await, data("partial"));
    upstream.send(cut_off()).await.unwrap();
    for reader in [&mut first, &mut joined] {
        assert_eq!(reader.next().await, Read::Failed);
    }
    assert_eq!(joined.next().await, Read::End);
}

#[tokio::test]
async fn a_stream_over_the_stored_limit_reaches_its_client_whole_and_is_not_replayed() {
    let f = Fixture::new();
    let app = f.app(f.layer().max_stored_response(5));
    let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    for chunk in ["abc", "def", "ghi"] {
        upstream.send(event(chunk)).await.unwrap();
    }
    drop(upstream);
    for chunk in ["abc", "def", "ghi"] {
        assert_eq!(first.next().await, Read::Data(Bytes::from(chunk)));
    }
    assert_eq!(first.next().await, Read::End);

    let retry = send(&app, keyed("/stream", "k", "")).await;
    assert!(retry.is_replay());
    assert_eq!(retry.status, StatusCode::OK);
    assert_eq!(retry.problem_type(), problem::RESPONSE_NOT_STORED);
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn a_stream_cut_off_ends_abnormally_and_releases_the_key_under_retry() {
    let f = Fixture::new();
    let app = f.app(f.layer());
    let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("partial")).await.unwrap();
    assert_eq!(first.next().await, data("partial"));
    upstream.send(cut_off()).await.unwrap();
    assert_eq!(first.next().await, Read::Failed);
    // Released before the client saw the failure.
    assert_eq!(f.store.get(&address("k")).await.unwrap(), None);
}

#[tokio::test]
async fn a_stream_cut_off_under_reject_ends_abnormally_and_is_replayed_as_outcome_unknown() {
    let f = Fixture::new();
    let app = f.app(f.layer().ambiguous(Ambiguous::Reject));
    let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("partial")).await.unwrap();
    upstream.send(cut_off()).await.unwrap();
    assert_eq!(first.next().await, data("partial"));
    assert_eq!(first.next().await, Read::Failed);

    let retry = send(&app, keyed("/stream", "k", "")).await;
    assert!(retry.is_replay());
    assert_eq!(retry.status, StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(retry.problem_type(), problem::OUTCOME_UNKNOWN);
    assert_eq!(f.calls.get(), 1);
}

/// The body `bytes` cut at `cuts` (positions, in any order, repeats and ends allowed), of
/// unknown length.
fn split(bytes: &[u8], cuts: &[usize]) -> Vec<Bytes> {
    let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut % (bytes.len() + 1)).collect();
    cuts.extend([0, bytes.len()]);
    cuts.sort_unstable();
    cuts.windows(2)
        .map(|w| Bytes::copy_from_slice(&bytes[w[0]..w[1]]))
        .collect()
}

/// Through the layer (limit `limit`): what the first client got and what a retry got, both
/// read whole.
async fn through(chunks: Vec<Bytes>, limit: usize) -> (Bytes, Reply) {
    use tower::{Layer, ServiceExt, service_fn};
    let layer =
        idem_http::IdempotencyLayer::new(std::sync::Arc::new(idem_core::MemoryStore::new()))
            .max_stored_response(limit);
    let service = layer.layer(service_fn(move |_: http::Request<axum::body::Body>| {
        let chunks = chunks.clone();
        async move {
            let body = crate::common::Chunks::new(chunks);
            Ok::<_, std::convert::Infallible>(http::Response::new(body))
        }
    }));
    let request = || keyed("/split", "k", "");
    let first = Reply::read(service.clone().oneshot(request()).await.unwrap()).await;
    let retry = Reply::read(service.oneshot(request()).await.unwrap()).await;
    (first.body, retry)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// However the same bytes are split into chunks, the first client gets them and a retry
    /// replays them, byte for byte, or, past the limit, the not-stored problem.
    #[test]
    fn any_split_of_the_same_bytes_replays_the_same_bytes(
        bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
        cuts in proptest::collection::vec(0usize..1000, 0..12),
        limit in 0usize..800,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let (first, retry) = runtime.block_on(through(split(&bytes, &cuts), limit));
        proptest::prop_assert_eq!(&first[..], &bytes[..]);
        proptest::prop_assert!(retry.is_replay());
        if bytes.len() <= limit {
            proptest::prop_assert_eq!(&retry.body[..], &bytes[..]);
        } else {
            proptest::prop_assert_eq!(retry.problem_type(), problem::RESPONSE_NOT_STORED);
        }
    }
}

#[tokio::test]
async fn a_duplicate_on_another_instance_follows_the_stream_through_the_store() {
    let f = Fixture::new();
    let waits = || f.layer().in_flight(InFlight::Wait { timeout: PATIENCE });
    // Two layers on one store: each its own instance, which only the store joins.
    let (one, other) = (f.app(waits()), f.app(waits()));
    let mut first = Reader::send(&one, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("a")).await.unwrap();
    assert_eq!(first.next().await, data("a"));

    let mut followed = Reader::send(&other, keyed("/stream", "k", "")).await;
    assert_eq!(followed.status, StatusCode::OK);
    assert_eq!(followed.headers["content-type"], "text/event-stream");
    assert_eq!(followed.headers["idempotent-replayed"], "true");
    assert_eq!(followed.next().await, data("a"));
    upstream.send(event("b")).await.unwrap();
    assert_eq!(first.next().await, data("b"));
    assert_eq!(followed.next().await, data("b"));
    upstream.send(event("c")).await.unwrap();
    drop(upstream);
    assert_eq!(first.next().await, data("c"));
    assert_eq!(first.next().await, Read::End);
    // What it did not read before the record was written comes from the record.
    assert_eq!(followed.next().await, data("c"));
    assert_eq!(followed.next().await, Read::End);
    assert_eq!(f.calls.get(), 1);
    // The parts are discarded once the record holds the response.
    let Some(record) = f.store.get(&address("k")).await.unwrap() else {
        panic!("recorded")
    };
    let parts = f
        .store
        .read_parts(&address("k"), record.state.token(), 0, usize::MAX)
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let mut parts = parts;
    while !parts.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the parts stay");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        parts = f
            .store
            .read_parts(&address("k"), record.state.token(), 0, usize::MAX)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_follower_on_another_instance_of_a_stream_cut_off_ends_abnormally() {
    let f = Fixture::new();
    let waits = || f.layer().in_flight(InFlight::Wait { timeout: PATIENCE });
    let (one, other) = (f.app(waits()), f.app(waits()));
    let mut first = Reader::send(&one, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("partial")).await.unwrap();
    assert_eq!(first.next().await, data("partial"));
    let mut followed = Reader::send(&other, keyed("/stream", "k", "")).await;
    assert_eq!(followed.next().await, data("partial"));
    upstream.send(cut_off()).await.unwrap();
    assert_eq!(first.next().await, Read::Failed);
    assert_eq!(followed.next().await, Read::Failed);
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn past_the_limit_a_follower_on_another_instance_ends_abnormally_and_later_ones_wait() {
    let f = Fixture::new();
    let waits = || {
        f.layer()
            .in_flight(InFlight::Wait { timeout: PATIENCE })
            .max_stored_response(4)
    };
    let (one, other) = (f.app(waits()), f.app(waits()));
    let mut first = Reader::send(&one, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("abc")).await.unwrap();
    assert_eq!(first.next().await, data("abc"));
    let mut followed = Reader::send(&other, keyed("/stream", "k", "")).await;
    assert_eq!(followed.next().await, data("abc"));
    upstream.send(event("def")).await.unwrap();
    assert_eq!(first.next().await, data("def"));
    assert_eq!(followed.next().await, Read::Failed);
    // A later duplicate on that instance waits for the record: not stored.
    let later = tokio::spawn({
        let other = other.clone();
        async move { send(&other, keyed("/stream", "k", "")).await }
    });
    drop(upstream);
    assert_eq!(first.next().await, Read::End);
    let later = later.await.unwrap();
    assert_eq!(later.problem_type(), problem::RESPONSE_NOT_STORED);
    assert_eq!(f.calls.get(), 1);
}

#[tokio::test]
async fn a_joined_duplicate_ends_abnormally_when_the_stream_could_not_be_recorded() {
    let f = Fixture::new();
    let app = f.app(f.layer().in_flight(InFlight::Wait { timeout: PATIENCE }));
    let mut first = Reader::send(&app, keyed("/stream", "k", "")).await;
    let upstream = f.next_stream().await;
    upstream.send(event("a")).await.unwrap();
    assert_eq!(first.next().await, data("a"));
    let mut joined = Reader::send(&app, keyed("/stream", "k", "")).await;
    assert_eq!(joined.next().await, data("a"));
    // An operator forgets the key: the recording's completion is refused.
    assert!(f.store.forget(&address("k")).await.unwrap());
    upstream.send(event("b")).await.unwrap();
    drop(upstream);
    // The client whose request ran gets its response; the duplicate, which was promised the
    // recorded one, does not see a clean end.
    assert_eq!(first.next().await, data("b"));
    assert_eq!(first.next().await, Read::End);
    assert_eq!(joined.next().await, data("b"));
    assert_eq!(joined.next().await, Read::Failed);
    assert_eq!(f.store.get(&address("k")).await.unwrap(), None);
}
