//! The report as JSON: the typed [`Report`]'s `Serialize` (the schema is in the README).
use serde_json::Value;

use crate::{model::words, output::report::Report};

/// The report as one JSON document (for tests and tools that want a tree).
pub fn to_json(r: &Report) -> serde_json::Result<Value> {
    serde_json::to_value(r)
}

/// The report as one line (JSON Lines in interval mode), keys in the types' field order.
/// Written straight from the typed report: a tree of [`Value`]s first cost ~15x the
/// line's size (20 MiB for a document of 5,000 threads), the tracer's peak memory.
pub fn to_line(r: &Report) -> serde_json::Result<String> {
    Ok(terminal_safe(serde_json::to_string(r)?))
}

/// JSON text with the characters [`words::escape`] would escape that serde_json leaves
/// raw (DEL, C1 controls, bidi overrides, line separators) written as `\uXXXX`: the same
/// document once decoded, harmless on a terminal. They can only be inside strings.
pub fn terminal_safe(json: String) -> String {
    if !json.chars().any(words::needs_escape) {
        return json;
    }
    let mut out = String::with_capacity(json.len() + 16);
    for c in json.chars() {
        if words::needs_escape(c) && c as u32 >= 0x20 {
            // All of them are in the Basic Multilingual Plane: one \u escape each.
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}
