//! JSON through `serde_json`: the tracer's reports and bpftool's output are read as
//! `serde_json::Value`s (index with `v["key"]`, Null when absent); the benchmark's results
//! are written from `Serialize` structs (`bench/results.rs`).

pub use serde_json::Value as Json;

/// Parses one JSON document.
pub fn parse(text: &str) -> serde_json::Result<Json> {
    serde_json::from_str(text)
}

/// Every line of `text` that parses as a JSON object on its own (JSON Lines), in order;
/// other lines (the text report, warnings) are skipped.
pub fn lines(text: &str) -> Vec<Json> {
    text.lines()
        .filter(|l| l.trim_start().starts_with('{'))
        .filter_map(|l| parse(l).ok())
        .collect()
}

/// `items()`: the elements of an array, empty for anything else (a missing member reads
/// as no elements rather than as an error, like `v["key"]` reads as Null).
pub trait Items {
    fn items(&self) -> &[Json];
}

impl Items for Json {
    fn items(&self) -> &[Json] {
        self.as_array().map_or(&[], Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_skip_text_and_bad_lines() {
        let v = lines("report\n{\"a\":1}\n{bad\n  {\"b\":[1,2]}\n");
        assert_eq!(v.len(), 2);
        assert_eq!(v[0]["a"].as_u64(), Some(1));
        assert_eq!(v[1]["b"].items().len(), 2);
        assert!(v[0]["missing"].is_null());
        assert!(v[0]["missing"].items().is_empty());
    }
}
