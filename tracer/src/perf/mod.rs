//! perf events counted beside the trace, as `perf stat` counts them.
pub mod counters;
