//! The retry contract's shared cases (`clients/cases.json` in the repository), which the Python
//! and TypeScript clients' tests read too.

use std::{path::Path, time::Duration};

use serde_json::Value;

/// The parsed case table.
pub(crate) fn shared_cases() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/cases.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    serde_json::from_str(&text).expect("the case table is JSON")
}

/// A number of seconds in the table: `null` for none, `"forever"` for longer than any deadline.
pub(crate) fn seconds(value: &Value) -> Option<Duration> {
    match value {
        Value::Null => None,
        Value::String(forever) if forever == "forever" => Some(Duration::MAX),
        n => Some(Duration::from_secs(n.as_u64().expect("whole seconds"))),
    }
}
