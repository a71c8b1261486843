//! The shared case table's transport failures (`clients/cases.json`, which the Python and
//! TypeScript clients' tests read too): an attempt that gets no answer is retried, whichever
//! way it got none.

use std::{path::Path, time::Duration};

use idem_client::{Client, GiveUpReason};
use tokio::{
    io::AsyncReadExt,
    net::{TcpListener, TcpStream},
};

use crate::support::gave_up_on_transport;

/// A server that fails every attempt the way `failure` names, and its URL.
async fn failing(failure: &str) -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/charges", listener.local_addr().unwrap());
    let answer: fn(TcpStream) -> tokio::task::JoinHandle<()> = match failure {
        // Nothing listens on the port any more: the connection is refused.
        "connect" => {
            drop(listener);
            return (url, tokio::spawn(async {}));
        }
        // The request is read, and never answered.
        "timeout" => |mut stream| {
            tokio::spawn(async move {
                let mut buffer = [0; 4096];
                while stream.read(&mut buffer).await.is_ok_and(|n| n > 0) {}
            })
        },
        // The request is read, and the connection closed before any answer.
        "broken" => |mut stream| {
            tokio::spawn(async move {
                let mut buffer = [0; 4096];
                let _ = stream.read(&mut buffer).await;
            })
        },
        other => panic!("unknown transport failure {other:?}"),
    };
    let server = tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            held.push(answer(stream));
        }
    });
    (url, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shared_transport_failures_are_retried() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/cases.json");
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let cases = cases["transport"].as_array().unwrap();
    assert_eq!(cases.len(), 3);
    for case in cases {
        let (name, failure) = (
            case["name"].as_str().unwrap(),
            case["failure"].as_str().unwrap(),
        );
        assert_eq!(case["expect"]["action"], "retry", "{name}");
        let (url, server) = failing(failure).await;
        let client = Client::builder()
            .max_attempts(3)
            .attempt_timeout(Duration::from_millis(300))
            .initial_backoff(Duration::from_millis(1))
            .max_backoff(Duration::from_millis(1))
            .build();

        let error = client.post(url).body("charge").send().await.unwrap_err();
        let (attempts, reason, last) = gave_up_on_transport(error);
        assert_eq!(attempts, 3, "{name}");
        assert_eq!(reason, GiveUpReason::MaxAttempts, "{name}");
        assert_eq!(last.is_connect(), failure == "connect", "{name}: {last:?}");
        assert_eq!(last.is_timeout(), failure == "timeout", "{name}: {last:?}");
        server.abort();
    }
}
