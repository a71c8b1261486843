//! [`RecordView`]: a record as the admin API and `idem keys show` print it.

use idem_core::{
    Address, ListPage, Listed, Outcome, Record, RecordState, Store, Timestamp, sealing::is_sealed,
};
use idem_http::{
    StreamProgress,
    problem::{Problem, Rejection},
    stream_progress,
};
use serde::Serialize;
use utoipa::{
    ToSchema,
    openapi::{Object, ObjectBuilder, Type},
};

/// A record as JSON: the key's digest (never the key), the scope in hex, the state's name, the
/// token, RFC 3339 timestamps, and the stored status once completed.
#[derive(Debug, Clone, Serialize, ToSchema)]
// The schema's description, in the admin API's OpenAPI document, is the first paragraph alone.
#[schema(
    description = "A record: the key's digest (never the key), the scope in hex, the \
    state's name, the token, RFC 3339 timestamps, and the stored status once completed."
)]
pub(crate) struct RecordView {
    /// The key's digest, as the logs show it.
    #[schema(pattern = "^[0-9a-f]{16}$")]
    pub key_digest: String,
    /// The scope in hex.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub scope: String,
    /// The state, the token and the times.
    #[serde(flatten)]
    pub fields: RecordFields,
    /// While processing, how much of a streamed response has been recorded so far.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub stream: Option<StreamView>,
}

/// How much of a streamed response a processing record holds so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct StreamView {
    /// The body's chunks recorded so far.
    pub chunks: u32,
    /// Their bytes.
    pub bytes: u64,
    /// The response passed the stored-response limit: it will not be replayed, and nothing more
    /// of it is recorded.
    pub past_limit: bool,
}

/// A record found by a listing, as JSON: the SHA-256 of its key (stores keep no more of it; the
/// log digest needs the key), the scope in hex, and the same fields as [`RecordView`]. Under
/// sealing, a completed record's status is sealed with its response, and not shown.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[schema(
    description = "A listed record: the SHA-256 of its key (stores keep no more of it), the \
    scope in hex, the state's name, the token, RFC 3339 timestamps, and the stored status once \
    completed (unless it is sealed)."
)]
pub(crate) struct ListedView {
    /// SHA-256 of the key, in hex.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub key_sha256: String,
    /// The scope in hex.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub scope: String,
    /// The state, the token and the times.
    #[serde(flatten)]
    pub fields: RecordFields,
}

/// A page of a listing as JSON: what `GET /v1/keys` answers and `idem keys list --json` prints.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct KeyList {
    /// The records, newest first (on Redis, newest first within the page).
    pub records: Vec<ListedView>,
    /// The cursor of the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub next: Option<String>,
}

impl KeyList {
    /// The view of `page`.
    pub(crate) fn new(page: &ListPage) -> Self {
        Self {
            records: page.records.iter().map(ListedView::new).collect(),
            next: page.next.map(|cursor| cursor.to_string()),
        }
    }
}

/// What [`RecordView`] and [`ListedView`] show of a record besides its address.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub(crate) struct RecordFields {
    /// `processing` or `completed`.
    #[schema(schema_with = state_schema)]
    pub state: &'static str,
    /// The fencing token of the worker that holds or completed the record.
    pub token: u64,
    /// When the current operation was acquired.
    #[schema(format = DateTime)]
    pub created_at: String,
    /// When the record stops counting.
    #[schema(format = DateTime)]
    pub expires_at: String,
    /// When the lease runs out, while processing.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub lease_until: Option<String>,
    /// When it was completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime, nullable = false)]
    pub completed_at: Option<String>,
    /// The stored response's status.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 100, maximum = 599, nullable = false)]
    pub status: Option<u16>,
    /// The stored response's body, in bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub body_bytes: Option<u64>,
}

/// The schema of [`RecordFields::state`]: the names of [`RecordState`]'s variants.
fn state_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["processing", "completed"]))
        .description(Some("`processing` or `completed`."))
        .build()
}

impl RecordView {
    /// The view of `record`, stored under `address`.
    pub(crate) fn new(address: &Address, record: &Record) -> Self {
        Self {
            key_digest: address.key.digest(),
            scope: address.scope.to_string(),
            fields: RecordFields::new(record),
            stream: None,
        }
    }

    /// The view, with how much of its streamed response a processing record holds.
    pub(crate) fn with_stream(mut self, progress: Option<StreamProgress>) -> Self {
        self.stream = progress.map(|progress| StreamView {
            chunks: progress.chunks,
            bytes: progress.bytes,
            past_limit: progress.past_limit,
        });
        self
    }
}

/// How much of its streamed response the processing `record` at `address` holds, if any (a store
/// that fails to say shows none: the rest of the view is worth showing).
pub(crate) async fn stream_of<St: Store>(
    store: &St,
    address: &Address,
    record: &Record,
) -> Option<StreamProgress> {
    let RecordState::Processing { token, .. } = record.state else {
        return None;
    };
    stream_progress(store, address, token).await.ok().flatten()
}

impl ListedView {
    /// The view of a listed record.
    pub(crate) fn new(listed: &Listed) -> Self {
        Self {
            key_sha256: hex(&listed.key_sha256),
            scope: listed.scope.to_string(),
            fields: RecordFields::new(&listed.record),
        }
    }
}

impl RecordFields {
    /// The fields of `record`.
    pub(crate) fn new(record: &Record) -> Self {
        let (lease_until, completed_at, status, body_bytes) = match &record.state {
            RecordState::Processing { lease_until, .. } => {
                (Some(rfc3339(*lease_until)), None, None, None)
            }
            RecordState::Completed {
                outcome,
                completed_at,
                ..
            } => {
                let (status, body_bytes) = match outcome {
                    Outcome::Response(response) if is_sealed(response) => (None, None),
                    Outcome::Response(response) => {
                        (Some(response.status), Some(response.body.len() as u64))
                    }
                    Outcome::Unknown => (Some(Rejection::OutcomeUnknown.status().as_u16()), None),
                };
                (None, Some(rfc3339(*completed_at)), status, body_bytes)
            }
        };
        Self {
            state: record.state.name(),
            token: record.state.token().get(),
            created_at: rfc3339(record.created_at),
            expires_at: rfc3339(record.expires_at),
            lease_until,
            completed_at,
            status,
            body_bytes,
        }
    }
}

/// `time` as RFC 3339 with milliseconds, in UTC.
pub(crate) fn rfc3339(time: Timestamp) -> String {
    humantime::format_rfc3339_millis(time.to_system_time()).to_string()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use idem_core::{FencingToken, Fingerprint};

    use super::*;

    #[test]
    fn a_processing_record_shows_its_token_and_lease_and_no_status()
    -> Result<(), Box<dyn std::error::Error>> {
        let address = Address::anonymous("order-42".parse()?);
        let record = Record {
            fingerprint: Fingerprint::from_bytes([0; 32]),
            created_at: Timestamp::from_millis(1_767_225_600_000),
            expires_at: Timestamp::from_millis(1_767_312_000_000),
            state: RecordState::Processing {
                token: FencingToken::new(7),
                lease_until: Timestamp::from_millis(1_767_225_630_000),
            },
        };
        let json = serde_json::to_value(RecordView::new(&address, &record))?;
        assert_eq!(json["state"], "processing");
        assert_eq!(json["token"], 7);
        assert_eq!(json["lease_until"], "2026-01-01T00:00:30.000Z");
        assert!(json.get("status").is_none());
        Ok(())
    }
}
