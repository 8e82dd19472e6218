//! Reports as text and JSON, and standard output that never panics.
pub mod openmetrics;
pub mod report;
pub mod stdout;
