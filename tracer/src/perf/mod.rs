//! perf events counted beside the trace, as `perf stat` counts them: the event syntax
//! ([`event`]), the one `perf_event_open` ([`sys`]), counter sets ([`set`]) and perf stat's
//! derived figures ([`derived`]). Their text is `output::counters`.
pub mod derived;
pub mod event;
pub mod set;
pub mod sys;

pub use derived::{
    context_switches, report, task_clock_ns, Breakdown, CounterJson, CounterReport, Derived,
    SYSTEM_WIDE_CLOCK_UNIT,
};
pub use event::{attr_fields, default_events, is_clock, parse_event, parse_events, EventSpec};
pub use set::{open_per_cpu, scale, CounterSnapshot, CounterTarget, Counters, EventReading, Scope};
pub use sys::{AttrFields, Reading};
pub mod exception_levels;
