//! A hostile neighbour for the end-to-end tests: threads that name themselves with
//! escape sequences, bidi overrides or bytes that are not UTF-8 (any user may, with
//! `prctl(PR_SET_NAME)`), and work and sleep so that every view shows them.
//!
//! Usage: hostile-names --ms D [--cgroup DIR] NAME...
//! Each NAME is C-escaped (`\e`, `\a`, `\n`, `\r`, `\t`, `\xNN`, `\\`); the main thread
//! takes the first, one thread each takes the others. `--cgroup DIR` moves the process
//! into that cgroup first. It prints its PID and exits after D ms.
use std::time::{Duration, Instant};

use tracer_tests::thread_cpu_ns;

fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            i += 1;
            match b[i] {
                b'e' => out.push(0x1b),
                b'a' => out.push(0x07),
                b'n' => out.push(b'\n'),
                b'r' => out.push(b'\r'),
                b't' => out.push(b'\t'),
                b'x' if i + 2 < b.len() => {
                    let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).expect("\\xNN"));
                    i += 2;
                }
                c => out.push(c),
            }
        } else {
            out.push(b[i]);
        }
        i += 1;
    }
    out
}

fn set_name(name: &[u8]) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// Works 2 ms and sleeps 2 ms until `end`: on-CPU time, run-queue waits (against the
/// other threads) and off-CPU time for every view.
fn work(end: Instant) {
    while Instant::now() < end {
        let t = thread_cpu_ns() + 2_000_000;
        while thread_cpu_ns() < t {
            std::hint::spin_loop();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut ms = 5000;
    let mut names = Vec::new();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--ms" => {
                ms = args[i + 1].parse().expect("--ms N");
                i += 1;
            }
            "--cgroup" => {
                let procs = std::path::Path::new(&args[i + 1]).join("cgroup.procs");
                std::fs::write(&procs, std::process::id().to_string())
                    .unwrap_or_else(|e| panic!("joining {}: {e}", procs.display()));
                i += 1;
            }
            n => names.push(unescape(n)),
        }
        i += 1;
    }
    let end = Instant::now() + Duration::from_millis(ms);
    let threads: Vec<_> = names
        .iter()
        .skip(1)
        .cloned()
        .map(|n| {
            std::thread::spawn(move || {
                set_name(&n);
                work(end);
            })
        })
        .collect();
    if let Some(first) = names.first() {
        set_name(first);
    }
    println!("{}", std::process::id());
    work(end);
    for t in threads {
        let _ = t.join();
    }
}
