//! Outputs: the run's typed report as text and JSON behind one [`sink::Sink`], perf-stat-style
//! counter text, the DTL and hypervisor views, off-CPU stacks (text, JSON, folded, flame
//! graph), the exporter's OpenMetrics, and standard output that never panics.
pub mod counters;
pub mod diff;
pub mod dtl;
pub mod flamegraph;
pub mod folded;
pub mod heatmap;
pub mod hypervisor;
pub mod json;
pub mod openmetrics;
pub mod perfetto;
pub mod report;
pub mod sink;
pub mod slow;
pub mod stacks;
pub mod stdout;
pub mod text;
pub mod tui;
