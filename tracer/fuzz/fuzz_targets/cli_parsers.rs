//! Fuzz target: see the crate docs (src/lib.rs) for how to run it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tracer_fuzz::cli_parsers(data));
