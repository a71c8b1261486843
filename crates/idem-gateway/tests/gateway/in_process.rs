//! [`Gateway`] started in the test's own process, as `idem demo` will.

use axum::{body::Body, http::Request};
use idem_gateway::{Config, Gateway};

use crate::support::{Client, Upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_runs_in_process_and_stops_when_told() {
    let upstream = Upstream::start().await;
    let mut config = Config::new(upstream.url().parse().unwrap());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.store = "memory://".parse().unwrap();
    let gateway = Gateway::bind(config).await.unwrap();
    let addr = gateway.addr();
    let admin = gateway.admin_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(gateway.run(async {
        let _ = stopped.await;
    }));

    let client = Client::new();
    let first = client
        .post(&format!("http://{addr}/charges"), "in-process-1", "{}")
        .await;
    assert_eq!(first.status, 201);
    let retry = client
        .post(&format!("http://{addr}/charges"), "in-process-1", "{}")
        .await;
    assert!(retry.replayed());
    let ready = client
        .send(
            Request::get(format!("http://{admin}/readyz"))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(ready.status, 200);

    stop.send(()).unwrap();
    running.await.unwrap().unwrap();
    assert_eq!(upstream.hits("charges"), 1);
}
