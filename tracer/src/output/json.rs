//! The report as JSON: the typed [`Report`]'s `Serialize` (the schema is in the README).
use serde_json::Value;

use crate::output::report::Report;

/// The report as one JSON document.
pub fn to_json(r: &Report) -> Value {
    // Through a Value: its object keys are sorted, so a report prints in one stable key
    // order whatever the field order of the types (as it always has).
    serde_json::to_value(r).unwrap_or_else(|e| {
        // Only a map with non-string keys or a failing custom Serialize could do this:
        // neither is in the report's types.
        serde_json::json!({ "error": format!("report not serializable: {e}") })
    })
}

/// The report as one line (JSON Lines in interval mode).
pub fn to_line(r: &Report) -> String {
    to_json(r).to_string()
}
