//! `/proc/powerpc/vcpudispatch_stats`: the pseries hypervisor's per-vCPU dispatch counters,
//! and crash-safe changes of the Dispatch Trace Log settings.
//!
//! The counters say where the hypervisor ran each virtual CPU: on the same physical CPU as
//! last time, elsewhere on the chip, on another chip or socket, and relative to the vCPU's
//! home node. They are cumulative since enabling, so useful numbers are deltas and rates.
//!
//! # Settings and the state file
//! `tracer dtl` may enable `vcpudispatch_stats`, change `vcpudispatch_stats_freq` and the
//! debugfs `dtl_event_mask`. Before it changes any of them it writes the original values
//! to [`STATE_PATH`] (`/run/tracer/dtl-state`, under `--root`), one `key value` per line:
//!
//! ```text
//! # tracer dtl: original DTL settings, restored at exit or by the next run if this one died
//! pid 4242
//! starttime 1234567
//! vcpudispatch_stats 0
//! vcpudispatch_stats_freq 50
//! dtl_event_mask 0x7
//! ```
//!
//! The values are restored, and the file removed, at normal exit, after SIGINT/SIGTERM
//! (the caller turns them into a normal exit) and on unwinding. After a crash or SIGKILL the
//! next `tracer dtl` finds the file, sees that the PID is gone (or reused: `starttime`, field
//! 22 of `/proc/PID/stat`, differs) and restores the settings before doing anything else.
//! While the writer is alive, a second run refuses to touch the settings.
pub mod busy;
pub mod settings;
pub mod stats;

pub use busy::busy_hint;
pub use settings::{
    parse_starttime, recover_stale, write_setting, Recovered, SavedSettings, SettingsGuard,
};
pub(crate) use stats::{excerpt, read_text};
pub use stats::{
    is_pseries, parse_dtl_mask, parse_stats, read_dtl_mask, read_freq, read_stats, vcpu_reports,
    DispatchCounters, DispatchRates, StatsState, VcpuCounters, VcpuReport, COUNTER_NAMES, DTL_DIR,
    DTL_MASK_PATH, FREQ_PATH, STATE_PATH, STATS_PATH,
};
