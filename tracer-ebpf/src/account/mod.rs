//! The accounting shared by every attach mode.
//!
//! At a switch: the previous thread's slice is closed (on-CPU time, slice count,
//! voluntary/involuntary, off-CPU start, runnable again if preempted) together with
//! what ended when that slice began (its run-queue wait, off-CPU time, migration); the
//! next thread's slice is opened in per-CPU state.
//! The cost on the hot path: one per-CPU lookup, one entry lookup for the thread leaving
//! (task-local storage in tp_btf mode on 6.4+, else the `THREADS` hash), histogram slots
//! (array lookups in the default scope), in task-storage mode one more storage lookup
//! for the thread arriving (its wakeup time), and with a target one `TRACKED` lookup for
//! the next thread. Untraced threads cost the per-CPU lookup and the filter lookup only.
//!
//! `membership`: the traced set; `entries`: per-thread entries and what a dying thread
//! hands over; `switch`: the switch itself; `events`: wakeups, execs, runtime records.
//! Only `membership` is in the off-CPU family (feature `offcpu` without `sched`).
#[cfg(feature = "scheduling")]
mod entries;
#[cfg(feature = "scheduling")]
mod events;
mod membership;
#[cfg(feature = "scheduling")]
mod switch;

#[cfg(feature = "scheduling")]
pub use entries::{existing_entry, exiting, task_addr};
#[cfg(feature = "scheduling")]
pub use events::{add_runtime, exec, runtime_gap, wakeup};
pub use membership::{follow_exec, fork, member, traced};
#[cfg(feature = "scheduling")]
pub use switch::{switch, switch_in, switch_out};
