//! Reports as text and JSON, and standard output that never panics.
pub mod counters;
pub mod report;
pub mod stdout;
