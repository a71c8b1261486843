//! Settings precedence: flag, then `IDEM_*`, then the `--config` file, then the default. The key
//! header's effect is observable: only requests keyed with the winning header are replayed.

use std::path::Path;

use crate::support::{Client, Gateway, Upstream, idem_command};

const FILE: &str = r#"
key-header = "X-File-Key"
methods = ["POST"]
ttl = "1h"
"#;

/// Starts a gateway with the file and `env`, sends two identical requests keyed with `header`
/// and tells whether the second was a replay.
async fn replays_with(
    upstream: &Upstream,
    config: &Path,
    env: Option<&str>,
    flag: Option<&str>,
    header: &str,
) -> bool {
    let mut command = idem_command();
    command.args([
        "serve",
        "--upstream",
        &upstream.url(),
        "--store",
        "memory://",
    ]);
    command.arg("--config").arg(config);
    if let Some(env) = env {
        command.env("IDEM_KEY_HEADER", env);
    }
    if let Some(flag) = flag {
        command.args(["--key-header", flag]);
    }
    let gateway = Gateway::spawn(command, &[]);
    let client = Client::new();
    let send = || {
        axum::http::Request::post(gateway.url("/charges"))
            .header(header, "precedence-1")
            .body(axum::body::Body::from("{}"))
            .unwrap()
    };
    assert_eq!(client.send(send()).await.status, 201);
    client.send(send()).await.replayed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flag_beats_env_beats_file_beats_default() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("idem.toml");
    std::fs::write(&config, FILE).unwrap();
    let empty = dir.path().join("empty.toml");
    std::fs::write(&empty, "").unwrap();

    let all = (Some("X-Env-Key"), Some("X-Flag-Key"));
    assert!(replays_with(&upstream, &config, all.0, all.1, "x-flag-key").await);
    assert!(!replays_with(&upstream, &config, all.0, all.1, "x-env-key").await);

    assert!(replays_with(&upstream, &config, Some("X-Env-Key"), None, "x-env-key").await);
    assert!(!replays_with(&upstream, &config, Some("X-Env-Key"), None, "x-file-key").await);

    assert!(replays_with(&upstream, &config, None, None, "x-file-key").await);
    assert!(!replays_with(&upstream, &config, None, None, "idempotency-key").await);

    assert!(replays_with(&upstream, &empty, None, None, "idempotency-key").await);
}
