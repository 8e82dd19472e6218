//! A workload for `tracer offcpu --unwind`: threads that block through Debian's libc
//! (std's sleep and pipe read and write call the libc wrappers, which keep no frame
//! pointer) inside named functions, for times they measure themselves:
//! - `napper` sleeps in `bars_nap()` (nanosleep);
//! - `waiter` reads a pipe in `bars_wait_on_pipe()` until the main thread writes to it
//!   from `bars_write_pipe()`, `--pipe-ms` later.
//!
//! std only, no crates: the offcpu_unwind test compiles it with plain `rustc`, once with
//! frame pointers and once without.
//!
//! Usage: bars-workload [--nap-ms N] [--pipe-ms N] --out FILE
use std::{
    hint::black_box,
    io::{Read as _, Write as _},
    time::{Duration, Instant},
};

/// This thread's id, from `/proc/thread-self` (`PID/task/TID`).
fn tid() -> u64 {
    let l = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    let s = l.to_string_lossy();
    s.rsplit('/').next().unwrap().parse().expect("a TID")
}

/// Sleeps `ms` through libc's nanosleep; returns how long it took, ns.
#[inline(never)]
#[no_mangle]
pub fn bars_nap(ms: u64) -> u64 {
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_millis(black_box(ms)));
    t0.elapsed().as_nanos() as u64
}

/// Reads the pipe until a byte comes (libc's read); returns how long it took, ns.
#[inline(never)]
#[no_mangle]
pub fn bars_wait_on_pipe(r: &mut std::io::PipeReader) -> u64 {
    let t0 = Instant::now();
    let mut b = [0u8; 1];
    r.read_exact(black_box(&mut b)).expect("pipe read");
    t0.elapsed().as_nanos() as u64
}

/// Writes the byte the waiter waits for (libc's write).
#[inline(never)]
#[no_mangle]
pub fn bars_write_pipe(w: &mut std::io::PipeWriter) {
    w.write_all(black_box(b"x")).expect("pipe write");
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: u64| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map(|v| v.parse::<u64>().expect("a number"))
            .unwrap_or(default)
    };
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .expect("--out FILE")
        .clone();
    let (nap_ms, pipe_ms) = (arg("--nap-ms", 1000), arg("--pipe-ms", 500));
    let (mut r, mut w) = std::io::pipe().expect("pipe");
    let napper = std::thread::Builder::new()
        .name("napper".into())
        .spawn(move || (tid(), bars_nap(nap_ms)))
        .unwrap();
    let waiter = std::thread::Builder::new()
        .name("waiter".into())
        .spawn(move || (tid(), bars_wait_on_pipe(&mut r)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(pipe_ms));
    bars_write_pipe(&mut w);
    let (napper_tid, nap_ns) = napper.join().unwrap();
    let (waiter_tid, wait_ns) = waiter.join().unwrap();
    let doc = format!(
        "{{\"napper_tid\":{napper_tid},\"nap_ns\":{nap_ns},\"waiter_tid\":{waiter_tid},\"wait_ns\":{wait_ns},\"writer_tid\":{}}}\n",
        tid()
    );
    std::fs::write(out, doc).expect("--out");
}
