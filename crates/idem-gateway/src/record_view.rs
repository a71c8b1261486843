//! [`RecordView`]: a record as the admin API and `idem keys show` print it.

use idem_core::{Address, Outcome, Record, RecordState, Timestamp};
use idem_http::problem::{Problem, Rejection};
use serde::Serialize;
use utoipa::{
    ToSchema,
    openapi::{Object, ObjectBuilder, Type},
};

/// A record as JSON: the key's digest (never the key), the scope in hex, the state's name, the
/// token, RFC 3339 timestamps, and the stored status once completed.
///
/// # Examples
///
/// ```
/// use idem_core::{Address, FencingToken, Fingerprint, Record, RecordState, Timestamp};
/// use idem_gateway::RecordView;
///
/// let address = Address::anonymous("order-42".parse()?);
/// let record = Record {
///     fingerprint: Fingerprint::from_bytes([0; 32]),
///     created_at: Timestamp::from_millis(1_767_225_600_000),
///     expires_at: Timestamp::from_millis(1_767_312_000_000),
///     state: RecordState::Processing {
///         token: FencingToken::new(7),
///         lease_until: Timestamp::from_millis(1_767_225_630_000),
///     },
/// };
/// let json = serde_json::to_value(RecordView::new(&address, &record))?;
/// assert_eq!(json["state"], "processing");
/// assert_eq!(json["token"], 7);
/// assert_eq!(json["lease_until"], "2026-01-01T00:00:30.000Z");
/// assert!(json.get("status").is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Serialize, ToSchema)]
// The schema's description, in the admin API's OpenAPI document, is the first paragraph alone.
#[schema(
    description = "A record: the key's digest (never the key), the scope in hex, the \
    state's name, the token, RFC 3339 timestamps, and the stored status once completed."
)]
pub struct RecordView {
    /// The key's digest, as the logs show it.
    #[schema(pattern = "^[0-9a-f]{16}$")]
    pub key_digest: String,
    /// The scope in hex.
    #[schema(pattern = "^[0-9a-f]{64}$")]
    pub scope: String,
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
}

/// The schema of [`RecordView::state`]: the names of [`RecordState`]'s variants.
fn state_schema() -> Object {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(["processing", "completed"]))
        .description(Some("`processing` or `completed`."))
        .build()
}

impl RecordView {
    /// The view of `record`, stored under `address`.
    pub fn new(address: &Address, record: &Record) -> Self {
        let (lease_until, completed_at, status) = match &record.state {
            RecordState::Processing { lease_until, .. } => {
                (Some(rfc3339(*lease_until)), None, None)
            }
            RecordState::Completed {
                outcome,
                completed_at,
                ..
            } => {
                let status = match outcome {
                    Outcome::Response(response) => response.status,
                    Outcome::Unknown => Rejection::OutcomeUnknown.status().as_u16(),
                };
                (None, Some(rfc3339(*completed_at)), Some(status))
            }
        };
        Self {
            key_digest: address.key.digest(),
            scope: address.scope.to_string(),
            state: record.state.name(),
            token: record.state.token().get(),
            created_at: rfc3339(record.created_at),
            expires_at: rfc3339(record.expires_at),
            lease_until,
            completed_at,
            status,
        }
    }
}

fn rfc3339(time: Timestamp) -> String {
    humantime::format_rfc3339_millis(time.to_system_time()).to_string()
}
