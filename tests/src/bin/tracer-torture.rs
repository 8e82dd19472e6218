//! The randomized workload of `cargo xtask torture`. From a seed it plans threads that
//! spin, sleep, yield, block on pipes and futexes, change affinity, exit at random times,
//! fork, exec (from a main and from a non-main thread) and move between cgroups. Every
//! thread writes its own ground truth (schedstat on-CPU, run_delay and slices,
//! CLOCK_THREAD_CPUTIME_ID, wall-clock times) as one JSON line into the `--out` file (a
//! shared mapping: no system call, no blocking) just before it ends, so truth from several
//! processes and from programs that replaced themselves by exec lands in one file.
//!
//! Usage:
//!   tracer-torture run --seed S --out F --ms D [--go] [--cg-in DIR --cg-out DIR] [--edge]
//!     `--go`: print `ready PID MAIN_TID RESIDENT_TID` and wait for a line on stdin (the
//!     driver sends it once the tracer has attached); the two pre-existing threads record a
//!     baseline then. `--edge`: the last threads end in a spread of ±40 ms around D, so
//!     some exit while the window closes.
//!   tracer-torture post-exec --out F --grp G --spin-us U     (what the exec'ing threads run)
//!   tracer-torture child --out F --seed S --kind K --cg-out DIR (spawned by `run`)
//!   tracer-torture joiner --out F --seed S --cg-in DIR --ms D (spawned by `run`)
//!   tracer-torture window-open --pid TRACER_PID   (prints the window's opening, ns)
//!
//! Times are CLOCK_MONOTONIC ns, the clock of the tracer's window.
use std::{
    ffi::CString,
    io::{BufRead, Write},
    os::fd::AsRawFd,
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};
use tracer_tests::{clock_ns, gettid, thread_cpu_ns};

/// splitmix64: small, deterministic, good enough to pick a plan.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [lo, hi].
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// CLOCK_MONOTONIC, the clock of the tracer's window (`WINDOW[0]` and `duration_ns`).
fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn pid() -> u32 {
    std::process::id()
}

/// schedstat of the calling thread: on-CPU ns, run_delay ns, slices (pcount).
fn schedstat() -> [u64; 3] {
    let s = std::fs::read_to_string(format!("/proc/self/task/{}/schedstat", gettid()))
        .unwrap_or_default();
    let mut v = s.split_whitespace().filter_map(|x| x.parse().ok());
    [
        v.next().unwrap_or(0),
        v.next().unwrap_or(0),
        v.next().unwrap_or(0),
    ]
}

/// The truth file: a shared mapping every process of the workload appends to, so a
/// record costs no system call and cannot block (an O_APPEND write to a file can sleep on
/// the inode lock, adding slices and waits the record no longer shows). The first 8 bytes
/// count the bytes used after the 64-byte header; lines follow.
/// Small: a process unmaps it on exit after its last record (8 MiB cost ~1 ms there).
const TRUTH_SIZE: usize = 1 << 20;
const TRUTH_HEADER: usize = 64;
static TRUTH: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Maps the truth file (creating it when `create`), once per process; fork(2)ed children
/// inherit the mapping.
fn truth_map(out: &str, create: bool) -> *mut u8 {
    *TRUTH.get_or_init(|| {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .open(out)
            .unwrap_or_else(|e| {
                eprintln!("tracer-torture: cannot open {out}: {e}");
                std::process::exit(3)
            });
        if create {
            f.set_len(TRUTH_SIZE as u64)
                .expect("cannot size the truth file");
        }
        // SAFETY: a shared read-write mapping of a file of TRUTH_SIZE bytes, kept for the
        // life of the process.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                TRUTH_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                f.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            eprintln!("tracer-torture: cannot map {out}");
            std::process::exit(3);
        }
        p as usize
    }) as *mut u8
}

/// Appends one line to the truth file: an atomic reservation, then a copy.
fn emit(out: &str, line: &str) {
    let base = truth_map(out, false);
    let n = line.len() + 1;
    // SAFETY: the first 8 bytes of the mapping are the shared, aligned counter.
    let used = unsafe { std::sync::atomic::AtomicU64::from_ptr(base.cast()) };
    let off = used.fetch_add(n as u64, Ordering::SeqCst) as usize + TRUTH_HEADER;
    if off + n > TRUTH_SIZE {
        eprintln!("tracer-torture: the truth file is full");
        std::process::exit(3);
    }
    // SAFETY: [off, off + n) is inside the mapping and reserved for this line alone.
    unsafe {
        std::ptr::copy_nonoverlapping(line.as_ptr(), base.add(off), line.len());
        *base.add(off + line.len()) = b'\n';
    }
}

/// One truth record of the calling thread. `ev`: `base` (a baseline for a thread that
/// existed before the window), `end` (the thread's last record), `pre-exec`, `leader`
/// (a leader about to be reaped by a non-main thread's exec), `join`/`leave` (moved
/// into/out of the target cgroup). `born`: wall time the thread started (ns).
fn record(out: &str, ev: &str, role: &str, grp: &str, born: u64) {
    let cpu = thread_cpu_ns();
    let [run, wait, slices] = schedstat();
    let t = now_ns();
    emit(
        out,
        &format!(
            "{{\"ev\":\"{ev}\",\"role\":\"{role}\",\"grp\":\"{grp}\",\"tid\":{},\"pid\":{},\"run_ns\":{run},\"wait_ns\":{wait},\"slices\":{slices},\"cpu_ns\":{cpu},\"t_ns\":{t},\"born_ns\":{born}}}",
            gettid(),
            pid()
        ),
    );
}

fn spin_ns(ns: u64) {
    let end = thread_cpu_ns() + ns;
    while thread_cpu_ns() < end {
        std::hint::spin_loop();
    }
}

fn set_affinity(cpu: Option<usize>) {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    // SAFETY: a zeroed cpu_set_t is valid; we set bits within its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        match cpu {
            Some(c) => libc::CPU_SET(c % n, &mut set),
            None => (0..n).for_each(|c| libc::CPU_SET(c, &mut set)),
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn futex_wait(word: &AtomicU32, val: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as i64,
        tv_nsec: (timeout_ns % 1_000_000_000) as i64,
    };
    // SAFETY: word is a live AtomicU32; FUTEX_WAIT reads it and sleeps while it equals val.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            val,
            &ts,
        )
    };
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: as above.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            i32::MAX,
        )
    };
}

/// One random step of a solo thread.
fn random_step(rng: &mut Rng) {
    match rng.next() % 10 {
        0..=3 => spin_ns(rng.range(20_000, 4_000_000)),
        4..=5 => std::thread::sleep(Duration::from_nanos(rng.range(20_000, 4_000_000))),
        6 => {
            // SAFETY: no arguments.
            unsafe { libc::sched_yield() };
        }
        7 => set_affinity(if rng.chance(70) {
            Some(rng.range(0, 63) as usize)
        } else {
            None
        }),
        8 => {
            // A futex wait that times out: blocked in the futex code, woken by the timer.
            let w = AtomicU32::new(0);
            futex_wait(&w, 0, rng.range(20_000, 2_000_000));
        }
        _ => {
            // A pipe read that a timer-driven poll ends: blocked on a pipe.
            let mut fds = [0; 2];
            // SAFETY: fds has room for two descriptors.
            unsafe { libc::pipe(fds.as_mut_ptr()) };
            let mut p = libc::pollfd {
                fd: fds[0],
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd; then the pipe's two descriptors are closed.
            unsafe {
                libc::poll(&mut p, 1, rng.range(1, 3) as i32);
                libc::close(fds[0]);
                libc::close(fds[1]);
            }
        }
    }
}

/// Runs random steps until the wall time `until` (ns).
fn solo(rng: &mut Rng, until: u64) {
    while now_ns() < until {
        random_step(rng);
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn num(args: &[String], name: &str, default: u64) -> u64 {
    arg(args, name)
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Moves the calling process into a cgroup v2 directory.
fn move_to(cg: &str) {
    if let Err(e) = std::fs::write(format!("{cg}/cgroup.procs"), pid().to_string()) {
        eprintln!("tracer-torture: cannot move {} into {cg}: {e}", pid());
        std::process::exit(3);
    }
}

fn exec_self(args: &[&str]) -> ! {
    let exe = std::fs::read_link("/proc/self/exe").expect("/proc/self/exe");
    let exe = CString::new(exe.to_str().unwrap()).unwrap();
    let mut argv: Vec<CString> = vec![CString::new("tracer-torture").unwrap()];
    argv.extend(args.iter().map(|a| CString::new(*a).unwrap()));
    let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    // SAFETY: NUL-terminated argv of valid C strings; environ is the process's own.
    unsafe {
        libc::execv(exe.as_ptr(), ptrs.as_ptr());
    }
    eprintln!(
        "tracer-torture: exec failed: {}",
        std::io::Error::last_os_error()
    );
    std::process::exit(3);
}

/// Prints when the tracer with PID `--pid` opened its window (its `WINDOW` map holds
/// the CLOCK_MONOTONIC ns; 0 while closed), found through the map ids in its fdinfo, so
/// the driver knows the window's bounds exactly.
fn window_open(args: &[String]) {
    let pid = num(args, "--pid", 0);
    let dir = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).unwrap_or_else(|e| {
        eprintln!("tracer-torture: no fdinfo for PID {pid}: {e}");
        std::process::exit(1)
    });
    for e in dir.flatten() {
        let info = std::fs::read_to_string(e.path()).unwrap_or_default();
        let Some(id) = info
            .lines()
            .find_map(|l| l.strip_prefix("map_id:"))
            .and_then(|v| v.trim().parse::<u32>().ok())
        else {
            continue;
        };
        let named =
            aya::maps::MapInfo::from_id(id).is_ok_and(|i| i.name_as_str() == Some("WINDOW"));
        if !named {
            continue;
        }
        let value = aya::maps::MapData::from_id(id)
            .and_then(aya::maps::Map::from_map_data)
            .and_then(|m| {
                // `tracer_common::Window`: {open_ns, close_ns}.
                let a: aya::maps::Array<_, [u64; 2]> = aya::maps::Array::try_from(&m)?;
                a.get(&0, 0).map(|w| w[0])
            });
        match value {
            Ok(v) => {
                println!("{v}");
                return;
            }
            Err(e) => {
                eprintln!("tracer-torture: cannot read map {id}: {e}");
                std::process::exit(1);
            }
        }
    }
    eprintln!("tracer-torture: PID {pid} holds no WINDOW map");
    std::process::exit(1);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("window-open") {
        return window_open(&args);
    }
    let out = arg(&args, "--out").unwrap_or_else(|| {
        eprintln!("usage: tracer-torture run|post-exec|child|joiner --out FILE ...");
        std::process::exit(2)
    });
    // Mapped before any thread starts: records then never fault the mapping in.
    truth_map(&out, args.get(1).map(String::as_str) == Some("run"));
    match args.get(1).map(String::as_str) {
        Some("run") => run(&args, &out),
        Some("post-exec") => post_exec(&args, &out),
        Some("child") => child(&args, &out),
        Some("joiner") => joiner(&args, &out),
        _ => {
            eprintln!("usage: tracer-torture run|post-exec|child|joiner --out FILE ...");
            std::process::exit(2);
        }
    }
}

/// The program an exec'ing thread becomes: spins, then records its task's total, which
/// includes the time before the exec (same task).
fn post_exec(args: &[String], out: &str) {
    let born = num(args, "--born", now_ns());
    spin_ns(num(args, "--spin-us", 1000) * 1000);
    let grp = arg(args, "--grp").unwrap_or_default();
    record(out, "end", "post-exec", &grp, born);
}

/// A child process of the workload. Kinds: `plain` (a thread or two of random steps and
/// a fork(2)ed grandchild), `exec-main` (its main thread execs), `exec-thread` (a second
/// thread execs while the main thread waits to be reaped), `leave` (moves itself out of
/// the target cgroup midway).
fn child(args: &[String], out: &str) {
    let born = now_ns();
    let seed = num(args, "--seed", 1);
    let mut rng = Rng::new(seed);
    let grp = format!("c{}", seed);
    let ms = num(args, "--ms", 100);
    let until = born + ms * 1_000_000;
    match arg(args, "--kind").as_deref() {
        Some("exec-main") => {
            spin_ns(rng.range(1, ms.max(1)) * 500_000);
            record(out, "pre-exec", "exec-main", &grp, born);
            let spin = rng.range(1_000, 50_000).to_string();
            exec_self(&[
                "post-exec",
                "--out",
                out,
                "--grp",
                &grp,
                "--spin-us",
                &spin,
                "--born",
                &born.to_string(),
            ]);
        }
        Some("exec-thread") => {
            let (out2, grp2) = (out.to_string(), grp.clone());
            let spin_pre = rng.range(1, ms.max(1)) * 500_000;
            let spin_post = rng.range(1_000, 50_000).to_string();
            let ready = Arc::new(AtomicU32::new(0));
            let ready2 = ready.clone();
            let t = std::thread::spawn(move || {
                let tborn = now_ns();
                spin_ns(spin_pre);
                // The leader records itself, then blocks for good: the exec reaps it.
                while ready2.load(Ordering::Acquire) == 0 {
                    futex_wait(&ready2, 0, 1_000_000);
                }
                std::thread::sleep(Duration::from_millis(1));
                record(&out2, "pre-exec", "exec-thread", &grp2, tborn);
                exec_self(&[
                    "post-exec",
                    "--out",
                    &out2,
                    "--grp",
                    &grp2,
                    "--spin-us",
                    &spin_post,
                    "--born",
                    &born.to_string(),
                ]);
            });
            spin_ns(rng.range(1, ms.max(1)) * 200_000);
            record(out, "leader", "exec-thread", &grp, born);
            ready.store(1, Ordering::Release);
            futex_wake(&ready);
            let mut fds = [0; 2];
            // SAFETY: blocks reading a pipe nobody writes, until the exec kills this thread.
            unsafe {
                libc::pipe(fds.as_mut_ptr());
                let mut b = 0u8;
                libc::read(fds[0], (&mut b as *mut u8).cast(), 1);
            }
            let _ = t.join();
        }
        Some("leave") => {
            let cg_out = arg(args, "--cg-out").unwrap_or_default();
            solo(&mut rng, born + ms * 500_000);
            std::thread::sleep(Duration::from_millis(1));
            record(out, "leave", "leave", "", born);
            if !cg_out.is_empty() {
                move_to(&cg_out);
            }
            solo(&mut rng, until);
            record(out, "end", "leave", "", born);
        }
        _ => {
            let mut rng2 = Rng::new(rng.next());
            let (out2, until2) = (out.to_string(), until);
            let t = std::thread::spawn(move || {
                let tborn = now_ns();
                solo(&mut rng2, until2);
                record(&out2, "end", "child-thread", "", tborn);
            });
            // This process has one other thread; fork(2) from the main thread and keep to
            // async-signal-safe work plus our own spin in the grandchild.
            // SAFETY: the grandchild only spins, reads /proc and writes, then _exits.
            let g = unsafe { libc::fork() };
            if g == 0 {
                let gborn = now_ns();
                spin_ns(rng.range(100_000, 5_000_000));
                record(out, "end", "grandchild", "", gborn);
                // SAFETY: ends the grandchild without running the parent's atexit work.
                unsafe { libc::_exit(0) };
            }
            solo(&mut rng, until);
            let _ = t.join();
            if g > 0 {
                // SAFETY: reaps our own grandchild.
                unsafe { libc::waitpid(g, std::ptr::null_mut(), 0) };
            }
            record(out, "end", "child-main", "", born);
        }
    }
}

/// A process born outside the target cgroup: after `go` (a line on stdin, or at once with
/// `--no-go`) it records a baseline, works a while, moves itself into `--cg-in` (recording
/// the moment), works more and ends.
fn joiner(args: &[String], out: &str) {
    let born = now_ns();
    if !args.iter().any(|a| a == "--no-go") {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    }
    let mut rng = Rng::new(num(args, "--seed", 1));
    record(out, "base", "joiner", "", born);
    let ms = num(args, "--ms", 100);
    let t0 = now_ns();
    let first = t0 + rng.range(1, ms.max(1)) * 400_000;
    solo(&mut rng, first);
    std::thread::sleep(Duration::from_millis(1));
    if let Some(cg) = arg(args, "--cg-in") {
        move_to(&cg);
    }
    record(out, "join", "joiner", "", born);
    solo(&mut rng, t0 + ms * 1_000_000);
    record(out, "end", "joiner", "", born);
}

/// The plan's parts, each run by its own thread(s) or process.
fn run(args: &[String], out: &str) {
    let start = now_ns();
    let seed = num(args, "--seed", 1);
    let ms = num(args, "--ms", 1000);
    let edge = args.iter().any(|a| a == "--edge");
    let go = args.iter().any(|a| a == "--go");
    let cg_in = arg(args, "--cg-in");
    let cg_out = arg(args, "--cg-out");
    let mut rng = Rng::new(seed);
    emit(
        out,
        &format!(
            "{{\"ev\":\"start\",\"pid\":{},\"tid\":{},\"t_ns\":{start}}}",
            pid(),
            gettid()
        ),
    );
    let exe = std::fs::read_link("/proc/self/exe").expect("/proc/self/exe");

    // Joiners start outside the target cgroup, before this process moves into it.
    let mut joiners = Vec::new();
    if let Some(cg) = &cg_in {
        for _ in 0..rng.range(0, 2) {
            let mut c = std::process::Command::new(&exe);
            c.args(["joiner", "--out", out, "--cg-in", cg])
                .args(["--seed", &rng.next().to_string()])
                .args(["--ms", &(ms * 3 / 4).to_string()])
                .stdin(std::process::Stdio::piped());
            if !go {
                c.arg("--no-go");
            }
            joiners.push(c.spawn().expect("cannot start a joiner"));
        }
        move_to(cg);
    }

    // The resident thread exists before the window opens (a `-t` target with the main).
    let gate = Arc::new(AtomicU32::new(0));
    let (gate2, out2) = (gate.clone(), out.to_string());
    let mut rrng = Rng::new(rng.next());
    let until_all = |start: u64| start + ms * 1_000_000;
    let resident = std::thread::spawn(move || {
        let born = now_ns();
        while gate2.load(Ordering::Acquire) == 0 {
            futex_wait(&gate2, 0, 1_000_000_000);
        }
        record(&out2, "base", "resident", "", born);
        solo(&mut rrng, now_ns() + ms * 1_000_000);
        record(&out2, "end", "resident", "", born);
    });
    let resident_tid = {
        // The resident's TID: the only other task of this process.
        let mut tid = 0;
        for _ in 0..1000 {
            if let Ok(d) = std::fs::read_dir("/proc/self/task") {
                let others: Vec<u32> = d
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .filter(|t| *t != gettid())
                    .collect();
                if let Some(t) = others.first() {
                    tid = *t;
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        tid
    };
    if go {
        println!("ready {} {} {}", pid(), gettid(), resident_tid);
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    }
    for j in &mut joiners {
        if let Some(mut s) = j.stdin.take() {
            let _ = s.write_all(b"go\n");
        }
    }
    let t_go = now_ns();
    record(out, "base", "main", "", start);
    gate.store(1, Ordering::Release);
    futex_wake(&gate);

    let end_at = until_all(t_go);
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    let mut children = Vec::new();

    // Solo threads: start at a random offset, end at a random time (or at the end).
    for i in 0..rng.range(2, 6) {
        let mut trng = Rng::new(rng.next());
        let begin = t_go + trng.range(0, ms / 2) * 1_000_000;
        let end = if edge && i % 2 == 0 {
            end_at + trng.range(0, 80) * 1_000_000 - 40_000_000
        } else if trng.chance(30) {
            end_at
        } else {
            begin + trng.range(ms / 10, ms) * 1_000_000
        }
        .min(end_at + 40_000_000);
        let out = out.to_string();
        handles.push(std::thread::spawn(move || {
            let born = now_ns();
            if let Some(d) = begin.checked_sub(now_ns()) {
                std::thread::sleep(Duration::from_nanos(d));
            }
            solo(&mut trng, end);
            record(&out, "end", "solo", "", born);
        }));
    }

    // Pipe and futex ping-pong pairs.
    for _ in 0..rng.range(0, 2) {
        let rounds = rng.range(20, 400);
        let work = rng.range(10_000, 300_000);
        let mut a = [0; 2];
        let mut b = [0; 2];
        // SAFETY: room for two descriptors each.
        unsafe {
            libc::pipe(a.as_mut_ptr());
            libc::pipe(b.as_mut_ptr());
        }
        let (o1, o2) = (out.to_string(), out.to_string());
        handles.push(std::thread::spawn(move || {
            let born = now_ns();
            let mut byte = 1u8;
            for _ in 0..rounds {
                spin_ns(work);
                // SAFETY: valid pipe descriptors owned by this pair.
                unsafe {
                    libc::write(a[1], (&byte as *const u8).cast(), 1);
                    libc::read(b[0], (&mut byte as *mut u8).cast(), 1);
                }
            }
            byte = 0;
            // SAFETY: as above.
            unsafe { libc::write(a[1], (&byte as *const u8).cast(), 1) };
            record(&o1, "end", "pipe-a", "", born);
        }));
        handles.push(std::thread::spawn(move || {
            let born = now_ns();
            let mut byte = 1u8;
            loop {
                // SAFETY: valid pipe descriptors owned by this pair.
                unsafe { libc::read(a[0], (&mut byte as *mut u8).cast(), 1) };
                if byte == 0 {
                    break;
                }
                spin_ns(work / 2);
                // SAFETY: as above.
                unsafe { libc::write(b[1], (&byte as *const u8).cast(), 1) };
            }
            record(&o2, "end", "pipe-b", "", born);
        }));
    }
    for _ in 0..rng.range(0, 2) {
        let rounds = rng.range(20, 400) as u32;
        let work = rng.range(10_000, 300_000);
        let turn = Arc::new(AtomicU32::new(0));
        for side in 0..2u32 {
            let (turn, o) = (turn.clone(), out.to_string());
            handles.push(std::thread::spawn(move || {
                let born = now_ns();
                // Turn n is side n % 2's; the one who takes the last turn ends both.
                loop {
                    let t = turn.load(Ordering::Acquire);
                    if t >= 2 * rounds {
                        break;
                    }
                    if t % 2 != side {
                        futex_wait(&turn, t, 50_000_000);
                        continue;
                    }
                    spin_ns(work);
                    turn.store(t + 1, Ordering::Release);
                    futex_wake(&turn);
                }
                record(&o, "end", "futex", "", born);
            }));
        }
    }

    // A burst of short threads (exits in quick succession).
    if rng.chance(60) {
        let n = rng.range(10, 300);
        let delay = rng.range(0, ms / 2);
        let (o, stop2) = (out.to_string(), stop.clone());
        let mut brng = Rng::new(rng.next());
        handles.push(std::thread::spawn(move || {
            let born = now_ns();
            std::thread::sleep(Duration::from_millis(delay));
            for _ in 0..n {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let spin = brng.range(10_000, 500_000);
                let o2 = o.clone();
                let h = std::thread::spawn(move || {
                    let b = now_ns();
                    spin_ns(spin);
                    record(&o2, "end", "burst", "", b);
                });
                let _ = h.join();
            }
            record(&o, "end", "burst-parent", "", born);
        }));
    }

    // Child processes: plain (with a fork(2)ed grandchild), exec from the main thread,
    // exec from a second thread, and one that leaves the target cgroup midway.
    let kinds = ["plain", "exec-main", "exec-thread", "leave"];
    for _ in 0..rng.range(0, 3) {
        let kind = kinds[rng.range(0, if cg_out.is_some() { 3 } else { 2 }) as usize];
        let delay = rng.range(0, ms / 2);
        let cms = rng.range(ms / 10, ms / 2).max(10);
        let mut c = std::process::Command::new(&exe);
        c.args(["child", "--out", out, "--kind", kind])
            .args(["--seed", &rng.next().to_string()])
            .args(["--ms", &cms.to_string()]);
        if let Some(cg) = &cg_out {
            c.args(["--cg-out", cg]);
        }
        children.push((delay, c));
    }
    children.sort_by_key(|(d, _)| *d);
    let mut procs = Vec::new();
    for (delay, mut c) in children {
        if let Some(d) = (t_go + delay * 1_000_000).checked_sub(now_ns()) {
            std::thread::sleep(Duration::from_nanos(d));
        }
        procs.push(c.spawn().expect("cannot start a child"));
    }

    // The main thread works too until the end.
    solo(&mut rng, end_at);
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    let _ = resident.join();
    for mut p in procs.into_iter().chain(joiners) {
        let _ = p.wait();
    }
    record(out, "end", "main", "", start);
    emit(out, "{\"ev\":\"done\"}");
}
