//! Reading every key's record at the end of a run, through a gateway's admin API
//! (`GET /v1/keys/{key}`, the anonymous scope: callers send no `Authorization`).

use std::collections::BTreeMap;

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
            let (status, body) = get(client, &url).await?;
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
