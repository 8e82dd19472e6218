//! The scheduling family's object for `tracer record` and `tracer slow`
//! (`tracer-record`): `tracer-sched`'s programs (`sched_programs.rs`), with, under the
//! `record` feature, the switch programs that stream events, record's task events and
//! the event ring, so that `tracer run` creates none of them.
#![no_std]
#![no_main]

#[path = "sched_programs.rs"]
mod programs;
