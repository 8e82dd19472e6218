//! tracer: a Linux scheduling tracer built on eBPF.
//!
//! The kernel programs (`tracer-ebpf`) account per-thread on-CPU time, run-queue latency
//! and off-CPU time with their histograms at every context switch; this crate loads and
//! attaches them, reads the aggregates, joins them with perf counters, procfs and the
//! pseries hypervisor's dispatch statistics, and prints reports.
pub mod btf;
pub mod check;
pub mod cli;
pub mod cmd_record;
pub mod cmd_slow;
pub mod collect;
pub mod compat;
pub mod counters;
pub mod dtl;
pub mod error;
pub mod hist;
pub mod hypervisor;
pub mod launch;
pub mod loader;
pub mod privileges;
pub mod procfs;
pub mod record;
pub mod report;
pub mod root;
pub mod run;
pub mod tracefs;
pub mod vcpudispatch;

/// Runs the command line and returns the process exit code.
pub fn main_entry() -> i32 {
    cli::main()
}
