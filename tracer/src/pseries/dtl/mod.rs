//! `tracer dtl`: the pseries hypervisor's view of the virtual CPUs.
//!
//! Two sources, which the kernel lets only one of at a time use the Dispatch Trace Log:
//! - `/proc/powerpc/vcpudispatch_stats` (default): per-vCPU dispatch locality counters,
//!   enabled for the window when off (see [`crate::pseries::vcpudispatch`] for the crash-safe
//!   handling of the settings);
//! - `--raw`: the log itself, from debugfs `powerpc/dtl/cpu-N`: 48-byte big-endian
//!   `struct dtl_entry` records, turned into dispatch-latency histograms (timebase ticks
//!   converted to ns with the `timebase` of /proc/cpuinfo), reason counts and gaps.
//!
//! # Lost entries (gaps)
//! The hypervisor writes each vCPU's log into a ring of [`RING_ENTRIES`] entries; a reader
//! that falls behind silently loses the oldest ones. Nothing says how many, so `lost`
//! counts *gaps*, places where at least one entry evidently went missing (a lower bound):
//! - an entry whose timebase is lower than its predecessor's on the same vCPU (the ring
//!   was overwritten while being copied out), and
//! - on the live system, one read returning a whole ring or more: the reader was at
//!   least a ring behind, so the kernel skipped what had been overwritten.
//!
//! Fixture and copied trees (`--root`) are plain files, so only the first rule applies.
pub mod analyze;
pub mod decode;
pub mod read;
pub mod report;

pub use analyze::{DtlAnalyzer, DtlHists, DtlSummary, VcpuDtl};
pub use decode::{DtlEntry, ENTRY_SIZE, RING_ENTRIES};
pub use report::{raw_report, snapshot, DtlReport};
