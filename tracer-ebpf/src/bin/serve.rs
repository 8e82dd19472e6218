//! The scheduling family's object for `tracer serve` (`tracer-serve`): `tracer-sched`'s
//! programs (`sched_programs.rs`) with, under the `serve` feature, the `cgroup_mkdir`
//! program and its ring, so that `tracer run` creates neither.
#![no_std]
#![no_main]

#[path = "sched_programs.rs"]
mod programs;
