//! The retry contract's shared cases (`clients/cases.json` in the repository), which the Python
//! and TypeScript clients' tests read too.

use std::path::Path;

/// The parsed case table.
pub(crate) fn shared_cases() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/cases.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("reading {}: {error}", path.display()));
    serde_json::from_str(&text).expect("the case table is JSON")
}
