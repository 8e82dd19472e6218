//! The data every layer shares, as plain types: options, snapshots of the kernel's
//! aggregates, histograms, the typed report. No clap, no aya, no I/O.
pub mod boundaries;
pub mod cgroup_cpu;
pub mod cross_check;
pub mod diff;
pub mod drops;
pub mod events;
pub mod hist;
pub mod irq;
pub mod options;
pub mod report;
pub mod runqlen;
pub mod scheduler;
pub mod series;
pub mod snapshot;
pub mod stacks;
pub mod targets;
pub mod thread_hist;
pub mod window;
pub mod words;
pub mod workload;
