//! The scheduling family's object for `tracer run`, `top` and `serve` (`tracer-sched`):
//! the switch, wakeup, fork and exec programs of every probe mode and the task iterator, in `sched_programs.rs`, shared with `tracer-record` and
//! `tracer-serve`.
#![no_std]
#![no_main]

#[path = "sched_programs.rs"]
mod programs;
