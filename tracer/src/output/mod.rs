//! Reports as text and JSON, and standard output that never panics.
pub mod flamegraph;
pub mod folded;
pub mod report;
pub mod stacks;
pub mod stdout;
