//! The report as JSON: the typed [`Report`]'s `Serialize` (the schema is in the README).
use serde_json::Value;

use crate::output::report::Report;

/// The report as one JSON document. Goes through a [`Value`], whose object keys are
/// sorted: a report prints in one stable key order whatever the field order of its
/// types (as it always has).
pub fn to_json(r: &Report) -> serde_json::Result<Value> {
    serde_json::to_value(r)
}

/// The report as one line (JSON Lines in interval mode).
pub fn to_line(r: &Report) -> serde_json::Result<String> {
    Ok(to_json(r)?.to_string())
}
