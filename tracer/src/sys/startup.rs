//! Start-up stages for `--verbose`: what each step of loading cost, in wall time since
//! `main` began and in the process's CPU time (the verifier's work is charged to the
//! loading process, as system time), so a slow start can be put on its stage.
use std::{sync::OnceLock, time::Instant};

/// The log target the stages are written under (`--verbose` turns it on).
pub const TARGET: &str = "startup";

static BEGAN: OnceLock<Instant> = OnceLock::new();

/// Marks the start; call first in `main`.
pub fn begin() {
    BEGAN.get_or_init(Instant::now);
}

/// This process's CPU time (user + system) in ms.
fn cpu_ms() -> f64 {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    ts.tv_sec as f64 * 1e3 + ts.tv_nsec as f64 / 1e6
}

/// Says that `what` is done, with the wall and CPU time so far.
pub fn stage(what: std::fmt::Arguments) {
    if log::log_enabled!(target: TARGET, log::Level::Info) {
        let wall = BEGAN.get().map_or(0.0, |t| t.elapsed().as_secs_f64() * 1e3);
        log::info!(target: TARGET, "{wall:6.1} ms wall {:6.1} ms CPU  {what}", cpu_ms());
    }
}
