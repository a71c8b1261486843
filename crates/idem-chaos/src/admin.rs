//! Reading every key's record at the end of a run, through a gateway's admin API
//! (`GET /v1/keys/{key}`, the anonymous scope: callers send no `Authorization`).

use std::{collections::BTreeMap, time::Duration};

use futures_util::{StreamExt as _, TryStreamExt as _, stream};
use http::StatusCode;
use serde::Deserialize;

use crate::{
    Error,
    history::RecordState,
    http_client::{HttpClient, get},
};

/// Records read at once.
const CONCURRENCY: usize = 16;

/// How many times a read the gateway answers 503 (its store call timed out or failed: a busy
/// machine, a server still recovering) is tried in all.
const TRIES: u32 = 10;

/// The pause before a read is tried again.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// The admin API's record, as far as the run needs it.
#[derive(Deserialize)]
struct RecordView {
    state: StateView,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum StateView {
    Processing,
    Completed,
}

/// The state of each of `keys` in the store, from the admin API at `admin_url`.
pub(crate) async fn record_states(
    client: &HttpClient,
    admin_url: &str,
    keys: Vec<String>,
) -> Result<BTreeMap<String, RecordState>, Error> {
    stream::iter(keys)
        .map(|key| async move {
            let url = format!("{admin_url}/v1/keys/{key}");
            let mut tries = 1;
            let (status, body) = loop {
                let (status, body) = get(client, &url).await?;
                if status != StatusCode::SERVICE_UNAVAILABLE || tries == TRIES {
                    break (status, body);
                }
                tries += 1;
                tokio::time::sleep(RETRY_AFTER).await;
            };
            let state = match status {
                StatusCode::NOT_FOUND => RecordState::Absent,
                StatusCode::OK => {
                    let record: RecordView =
                        serde_json::from_slice(&body).map_err(|source| Error::Body {
                            url: url.clone(),
                            source: source.into(),
                        })?;
                    match record.state {
                        StateView::Processing => RecordState::Processing,
                        StateView::Completed => RecordState::Completed,
                    }
                }
                status => return Err(Error::Admin { url, status }),
            };
            Ok((key, state))
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect()
        .await
}
