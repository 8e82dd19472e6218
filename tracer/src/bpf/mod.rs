//! The kernel programs: loading and attaching them per probe mode, kernel quirks
//! (`compat`), and reading their maps into [`crate::model::snapshot::Snapshot`]s.
pub mod attach;
mod batch;
pub mod cgroups;
pub mod collect;
pub mod compat;
pub mod config;
pub mod irq;
pub mod loader;
pub mod object;
pub mod read;
pub mod record;
pub mod runqlen;
pub mod scheduler;
pub mod stacks;
pub mod table;
pub mod window;
