//! The commands: each takes a typed configuration from `cli` and returns an exit code.
pub mod check;
pub mod diff;
pub mod dtl;
pub mod floor;
pub mod offcpu;
pub mod record;
pub mod run;
pub mod serve;
mod session;
pub mod slow;
mod targets;
pub(crate) use targets::resolve_workload;
pub mod top;
