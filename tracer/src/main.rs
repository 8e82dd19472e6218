//! `tracer`: see the crate documentation in `lib.rs`.
fn main() {
    std::process::exit(tracer::main_entry());
}
