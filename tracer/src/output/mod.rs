//! Reports as text and JSON, and standard output that never panics.
pub mod dtl;
pub mod hypervisor;
pub mod report;
pub mod stdout;
