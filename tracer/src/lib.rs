//! tracer: a Linux scheduling tracer built on eBPF.
//!
//! The kernel programs (`tracer-ebpf`) account per-thread on-CPU time, run-queue latency
//! and off-CPU time with their histograms at every context switch; this crate loads and
//! attaches them, reads the aggregates, joins them with perf counters, procfs and the
//! pseries hypervisor's dispatch statistics, and prints reports.
// Every unsafe block says why it is sound (CI's clippy runs with -D warnings).
#![warn(clippy::undocumented_unsafe_blocks)]
// Floors, top to bottom; a module imports only from floors below it (tests/layers.rs
// in this crate's tests keeps it so).
pub mod bpf;
pub mod cli;
pub mod cmd;
pub mod error;
pub mod model;
pub mod output;
pub mod perf;
pub mod pseries;
pub mod sys;

/// Runs the command line and returns the process exit code.
pub fn main_entry() -> i32 {
    cli::main()
}
