//! Workloads for the end-to-end tests. Each thread records the kernel's own accounting
//! for itself just before it ends (schedstat and CLOCK_THREAD_CPUTIME_ID), so the tests
//! have ground truth even for threads that are gone when the tracer reports.
//!
//! Usage: tracer-workload MODE --out FILE [options]
//!   busy-sleep --threads N --work-ms W --sleep-ms S --duration-ms D
//!   spin --threads N --cpu C --duration-ms D      (all pinned to CPU C)
//!        [--rename]                               (each spinner renames itself spin-I with
//!                                                  prctl, the main thread spinmain and spins)
//!   churn --per-sec N --duration-ms D             (short threads, each a little work)
//!   pingpong --cpu-a A --cpu-b B --duration-ms D  (two threads, pinned, passing a byte
//!                                                  back and forth through two pipes)
//!   chain --step-us S --duration-ms D             (a chain of threads, each spinning S us,
//!                                                  starting the next and ending: one
//!                                                  link missed takes every later one)
//!   net-flood --duration-ms D                     (a thread sending 64 KiB writes over a
//!                                                  loopback TCP connection to another
//!                                                  that reads them: NET_RX softirqs)
use std::{
    fs::File,
    io::Write,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use tracer_tests::{gettid, thread_cpu_ns};

fn schedstat(tid: u32) -> (u64, u64, u64) {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap_or_default();
    let v: Vec<u64> = s
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    (
        v.first().copied().unwrap_or(0),
        v.get(1).copied().unwrap_or(0),
        v.get(2).copied().unwrap_or(0),
    )
}

/// One thread's ground truth, as a JSON line.
fn record(out: &Mutex<Vec<String>>) {
    let tid = gettid();
    let cpu = thread_cpu_ns();
    let (run, wait, slices) = schedstat(tid);
    let truth = tracer_truth::Truth {
        tid: tid.into(),
        pid: std::process::id().into(),
        run_ns: run,
        wait_ns: wait,
        slices: Some(slices),
        cpu_ns: Some(cpu),
        ..Default::default()
    };
    out.lock()
        .unwrap()
        .push(serde_json::to_string(&truth).expect("numbers only"));
}

/// One link of `chain`: spins `step` ns of CPU, starts the next link (until `until`),
/// records its truth and ends; the last one then says so on `done`.
fn link(
    step: u64,
    until: Instant,
    out: Arc<Mutex<Vec<String>>>,
    done: std::sync::mpsc::Sender<()>,
) {
    std::thread::spawn(move || {
        spin_for(step);
        let last = Instant::now() >= until;
        if !last {
            link(step, until, out.clone(), done.clone());
        }
        record(&out);
        if last {
            let _ = done.send(());
        }
    });
}

fn spin_for(ns: u64) {
    let end = thread_cpu_ns() + ns;
    while thread_cpu_ns() < end {
        std::hint::spin_loop();
    }
}

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; we set one bit.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The calling thread's comm (prctl PR_SET_NAME; at most 15 bytes are kept).
fn set_name(name: &str) {
    let c = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: a NUL-terminated string the kernel copies.
    unsafe { libc::prctl(libc::PR_SET_NAME, c.as_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// A pipe: (read end, write end).
fn pipe() -> (i32, i32) {
    let mut fds = [0i32; 2];
    // SAFETY: two ints for the kernel to fill.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0, "pipe");
    (fds[0], fds[1])
}

/// One byte from `fd`; false at end-of-file.
fn read_byte(fd: i32, b: &mut [u8; 1]) -> bool {
    // SAFETY: a one-byte buffer we own.
    unsafe { libc::read(fd, b.as_mut_ptr() as *mut libc::c_void, 1) == 1 }
}

fn write_byte(fd: i32, b: &[u8; 1]) {
    // SAFETY: a one-byte buffer we own.
    unsafe { libc::write(fd, b.as_ptr() as *const libc::c_void, 1) };
}

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).cloned().unwrap_or_default();
    let out_path = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let out = Arc::new(Mutex::new(Vec::new()));
    let duration = Duration::from_millis(arg(&args, "--duration-ms", 1000));
    let start = Instant::now();
    let mut handles = Vec::new();
    match mode.as_str() {
        "busy-sleep" => {
            let work = arg(&args, "--work-ms", 5) * 1_000_000;
            let sleep = Duration::from_millis(arg(&args, "--sleep-ms", 5));
            for _ in 0..arg(&args, "--threads", 4) {
                let out = out.clone();
                handles.push(std::thread::spawn(move || {
                    while start.elapsed() < duration {
                        spin_for(work);
                        std::thread::sleep(sleep);
                    }
                    record(&out);
                }));
            }
        }
        "spin" => {
            let cpu = arg(&args, "--cpu", 0) as usize;
            // Pinned before the spawns too, so the threads inherit the mask: a thread
            // that pinned only itself could first wait (and run) on another CPU.
            pin(cpu);
            let rename = args.iter().any(|a| a == "--rename");
            for i in 0..arg(&args, "--threads", 3) {
                let out = out.clone();
                handles.push(std::thread::spawn(move || {
                    pin(cpu);
                    if rename {
                        set_name(&format!("spin-{i}"));
                    }
                    while start.elapsed() < duration {
                        spin_for(100_000);
                    }
                    record(&out);
                }));
            }
            if rename {
                set_name("spinmain");
                while start.elapsed() < duration {
                    spin_for(100_000);
                }
            }
        }
        "churn" => {
            let per_sec = arg(&args, "--per-sec", 1000).max(1);
            let gap = Duration::from_nanos(1_000_000_000 / per_sec);
            let mut next = Instant::now();
            while start.elapsed() < duration {
                let h = std::thread::spawn(|| spin_for(20_000));
                let _ = h.join();
                next += gap;
                if let Some(d) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
            }
        }
        "pingpong" => {
            let (a, b) = (
                arg(&args, "--cpu-a", 0) as usize,
                arg(&args, "--cpu-b", 1) as usize,
            );
            let (ping, pong) = (pipe(), pipe());
            // B answers each byte until A closes its end.
            let out_b = out.clone();
            handles.push(std::thread::spawn(move || {
                pin(b);
                let mut byte = [0u8];
                while read_byte(ping.0, &mut byte) {
                    write_byte(pong.1, &byte);
                }
                record(&out_b);
            }));
            let out_a = out.clone();
            handles.push(std::thread::spawn(move || {
                pin(a);
                let mut byte = [0u8];
                while start.elapsed() < duration {
                    for _ in 0..100 {
                        write_byte(ping.1, &byte);
                        if !read_byte(pong.0, &mut byte) {
                            break;
                        }
                    }
                }
                record(&out_a);
                // SAFETY: our own descriptor, closed once: B reads end-of-file.
                unsafe { libc::close(ping.1) };
            }));
        }
        "chain" => {
            let step = arg(&args, "--step-us", 200) * 1000;
            let until = start + duration;
            let (done, last) = std::sync::mpsc::channel();
            link(step, until, out.clone(), done);
            // The last link records before it says so; the others long before it.
            let _ = last.recv_timeout(duration + Duration::from_secs(30));
        }
        "net-flood" => {
            use std::io::Read as _;
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
            let addr = listener.local_addr().expect("local address");
            let out_r = out.clone();
            handles.push(std::thread::spawn(move || {
                let (mut conn, _) = listener.accept().expect("accept");
                let mut buf = vec![0u8; 1 << 16];
                while conn.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
                record(&out_r);
            }));
            let out_s = out.clone();
            handles.push(std::thread::spawn(move || {
                let mut conn = std::net::TcpStream::connect(addr).expect("connect");
                let buf = vec![0x5au8; 1 << 16];
                while start.elapsed() < duration {
                    if conn.write_all(&buf).is_err() {
                        break;
                    }
                }
                record(&out_s);
            }));
        }
        _ => {
            eprintln!(
                "usage: tracer-workload busy-sleep|spin|churn|pingpong|chain|net-flood --out FILE [options]"
            );
            std::process::exit(2);
        }
    }
    for h in handles {
        let _ = h.join();
    }
    record(&out);
    if let Some(p) = out_path {
        let mut f = File::create(&p).expect("cannot create --out file");
        for l in out.lock().unwrap().iter() {
            writeln!(f, "{l}").unwrap();
        }
    }
}
