//! The scenario parts beyond the base plan: threads and a forked child born while the tracer
//! starts (`--startup`), threads and a process asleep across the window's edges
//! (`--sleepers`), pipe ping-pong partners pinned to one CPU and to two (`--pinned`),
//! processes living tens of milliseconds (`--short`), and names that are not UTF-8 or
//! hold control bytes (`--names`). Each draws from its own generator, so the plans of
//! the other parts stay what their seed made them.

use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        mpsc::{Receiver, Sender},
        Arc,
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use crate::truth::{
    birth_ns, now_ns, record, record_with, record_zombie, set_word, wait_word, word_set, FIN, GO,
};
use crate::work::{futex_wait, futex_wake, set_affinity, solo, spin_ns, Rng};

/// Names the `--names` scenario gives: the main thread (the process's name) and the
/// resident are not UTF-8, the third is UTF-8 with control bytes (it must come back
/// exactly). At most 15 bytes (TASK_COMM_LEN - 1).
pub(crate) const MAIN_NAME: &[u8] = b"tort\xe9\xff\x01main";
pub(crate) const RESIDENT_NAME: &[u8] = b"res\x1b[7m\xc3";
pub(crate) const CONTROL_NAME: &[u8] = b"ctl\x07\x1b[2J\t\n";

/// Renames the calling thread (prctl PR_SET_NAME takes bytes, not UTF-8).
pub(crate) fn set_name(name: &[u8]) {
    let mut buf = [0u8; 16];
    let n = name.len().min(15);
    buf[..n].copy_from_slice(&name[..n]);
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes from buf.
    unsafe { libc::prctl(libc::PR_SET_NAME, buf.as_ptr()) };
}

/// The record field naming a thread's name, as hex bytes.
pub(crate) fn name_field(name: &[u8]) -> String {
    let hex: String = name.iter().take(15).map(|b| format!("{b:02x}")).collect();
    format!(",\"name_hex\":\"{hex}\"")
}

/// Threads and processes the parts started, for the main thread to wait for.
#[derive(Default)]
pub(crate) struct Started {
    pub(crate) threads: Vec<JoinHandle<()>>,
    /// Joined only after FIN (the sleepers).
    pub(crate) sleepers: Vec<JoinHandle<()>>,
    /// fork(2)ed processes (waited for with waitpid), after FIN.
    pub(crate) forked: Vec<libc::pid_t>,
}

/// A fork(2)ed child that runs `f` and ends with `_exit` (no atexit work of the parent).
fn fork_child(f: impl FnOnce()) -> libc::pid_t {
    // SAFETY: the child runs `f` (our own spinning, sleeping, /proc reads and records into
    // the shared mapping) and ends with _exit; glibc's fork handlers keep malloc usable.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        f();
        // SAFETY: ends the child without running the parent's atexit handlers.
        unsafe { libc::_exit(0) };
    }
    pid
}

/// CPU time each link of the start-up chain works before it starts the next.
const CHAIN_STEP_NS: u64 = 1_000_000;
/// Links the chain goes on for once GO is set (the tracer has attached).
const CHAIN_AFTER_GO: u32 = 20;

/// One link of the start-up chain: works, starts the next link (until `left` links after
/// GO), records its whole life and ends. Each link's parent is the link before, so every
/// link born after the tracer read /proc descends from a thread it never listed (before
/// the fix of -p's seeding, every such link was lost). `done` is dropped by the last.
fn chain_link(out: String, done: Sender<()>, left: u32) {
    let b = birth_ns();
    spin_ns(CHAIN_STEP_NS);
    let left = if word_set(&out, GO) {
        left.saturating_sub(1)
    } else {
        left
    };
    if left > 0 {
        let (o, d) = (out.clone(), done.clone());
        std::thread::spawn(move || chain_link(o, d, left));
    }
    record(&out, "end", "chain", "", b);
    drop(done);
}

/// `--startup T,C`: a starter thread, there before `ready`, that T ms after `ready` starts
/// a thread and C ms after it forks a child (0: not that one), both while the tracer
/// resolves its targets, verifies and attaches. Each waits for GO, then records a baseline
/// and works `work_ms`: from its first slice inside the window it must be traced. From
/// `ready` on, a chain of short threads, each started by the one before, is born at every
/// moment of the start-up and goes on a little past GO.
pub(crate) fn startup(
    out: &str,
    delays: (u64, u64),
    work_ms: u64,
    seed: u64,
    ready: Receiver<Instant>,
) -> JoinHandle<()> {
    let out = out.to_string();
    std::thread::spawn(move || {
        let born = birth_ns();
        let Ok(at) = ready.recv() else { return };
        let (chain_tx, chain_done) = std::sync::mpsc::channel::<()>();
        {
            let o = out.clone();
            std::thread::spawn(move || chain_link(o, chain_tx, CHAIN_AFTER_GO));
        }
        let mut rng = Rng::new(seed);
        let after = |ms: u64| {
            if let Some(d) = (at + Duration::from_millis(ms)).checked_duration_since(Instant::now())
            {
                std::thread::sleep(d);
            }
        };
        let worker = |role: &'static str, out: String, mut rng: Rng| {
            move || {
                let b = birth_ns();
                wait_word(&out, GO);
                record(&out, "base", role, "", b);
                solo(&mut rng, now_ns() + work_ms * 1_000_000);
                record(&out, "end", role, "", b);
            }
        };
        let mut thread = None;
        let mut child = 0;
        let mut order = [(delays.0, 0), (delays.1, 1)];
        order.sort();
        for (ms, which) in order {
            if ms == 0 {
                continue;
            }
            after(ms);
            let r = Rng::new(rng.next());
            if which == 0 {
                thread = Some(std::thread::spawn(worker("startup", out.clone(), r)));
            } else {
                child = fork_child(worker("startup-child", out.clone(), r));
            }
        }
        wait_word(&out, GO);
        record(&out, "base", "starter", "", born);
        if let Some(t) = thread {
            let _ = t.join();
        }
        if child > 0 {
            // Its exit path runs after its last record (random seed 420271: 1.4 ms).
            record_zombie(&out, child as u32);
            // SAFETY: reaps our own child.
            unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
        }
        // Err once the chain's last link dropped its sender: the chain has ended.
        let _ = chain_done.recv();
        record(&out, "end", "starter", "", born);
    })
}

/// `--sleepers`, before `ready`: a thread and a forked process that block before the
/// window opens until the driver has seen it close (FIN): asleep the whole window.
pub(crate) fn sleepers_before(out: &str, s: &mut Started) {
    let o = out.to_string();
    s.sleepers.push(std::thread::spawn(move || {
        let b = birth_ns();
        record(&o, "base", "sleep-whole", "", b);
        wait_word(&o, FIN);
        record(&o, "end", "sleep-whole", "", b);
    }));
    let o = out.to_string();
    s.forked.push(fork_child(move || {
        let b = birth_ns();
        record(&o, "base", "sleep-proc", "", b);
        wait_word(&o, FIN);
        record(&o, "end", "sleep-proc", "", b);
    }));
}

/// `--crowd N`, before `ready`: N threads (small stacks) asleep from before the window
/// until the main thread's work ends: thousands of threads no program sees before the
/// final read (reads were once quadratic in them, 2026-12-07), and with `-p` more
/// per-thread counters than a low descriptor limit allows. [`Crowd::release`] lets
/// them end one at a time, joined before the next: 2,000 threads of one process exiting
/// at once spin 1-2.6 ms each on its mmap lock (seed 121), and even a chain of them,
/// each waking the next, took 14-27 slices each in the exit path (seed 1002378), which
/// ftrace and the tracer agree on but a record before the exit cannot show. Released
/// around a close (`--edge`), some die between it and the final read (seed 1002165).
pub(crate) struct Crowd {
    turns: Arc<Vec<AtomicU32>>,
    threads: Vec<JoinHandle<()>>,
}

impl Crowd {
    pub(crate) fn start(out: &str, n: u64) -> Crowd {
        let turns: Arc<Vec<AtomicU32>> = Arc::new((0..n).map(|_| AtomicU32::new(0)).collect());
        let threads = (0..n as usize)
            .map(|k| {
                let o = out.to_string();
                let t = turns.clone();
                std::thread::Builder::new()
                    .stack_size(64 << 10)
                    .spawn(move || {
                        let b = birth_ns();
                        record(&o, "base", "crowd", "", b);
                        while t[k].load(Ordering::SeqCst) == 0 {
                            futex_wait(&t[k], 0, 1_000_000_000);
                        }
                        record(&o, "end", "crowd", "", b);
                    })
                    .expect("cannot start a crowd thread")
            })
            .collect();
        Crowd { turns, threads }
    }

    /// Ends the crowd, one thread at a time.
    pub(crate) fn release(self) {
        for (k, h) in self.threads.into_iter().enumerate() {
            self.turns[k].store(1, Ordering::SeqCst);
            futex_wake(&self.turns[k]);
            let _ = h.join();
        }
    }
}

/// `--sleepers`, after GO: a thread that works until `block_at`, records where it stops
/// (`block`: its last record inside the window) and sleeps past the close until FIN.
pub(crate) fn sleeper_close(out: &str, block_at: u64, seed: u64, s: &mut Started) {
    let o = out.to_string();
    s.sleepers.push(std::thread::spawn(move || {
        let b = birth_ns();
        let mut rng = Rng::new(seed);
        solo(&mut rng, block_at);
        record(&o, "block", "sleep-close", "", b);
        wait_word(&o, FIN);
        record(&o, "end", "sleep-close", "", b);
    }));
}

/// The main thread at its end with `--sleepers`: records where it stops inside the window,
/// waits for the driver's end of stdin (the tracer has ended), releases the sleepers.
pub(crate) fn finish(out: &str, start: u64, s: &mut Started) {
    record(out, "block", "main", "", start);
    let mut line = String::new();
    let _ = std::io::BufRead::read_line(&mut std::io::stdin().lock(), &mut line);
    set_word(out, FIN);
    for h in s.sleepers.drain(..) {
        let _ = h.join();
    }
}

/// `--pinned`: two pipe ping-pong pairs, one with both partners on CPU 0 (the waker and
/// the woken share a CPU: the scheduler's credit moves between them), one across CPUs 0
/// and 1 (each wakeup crosses).
pub(crate) fn pinned(out: &str, seed: u64, s: &mut Started) {
    let mut rng = Rng::new(seed);
    let two = std::thread::available_parallelism().map_or(1, |n| n.get()) > 1;
    // The third pair's first side is a real-time (SCHED_FIFO) thread: the scheduler keeps
    // `prev_sum_exec_runtime` for the fair class only, which once made an RT thread's
    // slices span its whole life.
    for (a_cpu, b_cpu, role) in [
        (0, 0, "pin-same"),
        (0, usize::from(two), "pin-cross"),
        (usize::from(two), 0, "pin-rt"),
    ] {
        let rounds = rng.range(1000, 2000);
        let work = rng.range(5_000, 30_000);
        let mut a = [0; 2];
        let mut b = [0; 2];
        // SAFETY: room for two descriptors each.
        unsafe {
            libc::pipe(a.as_mut_ptr());
            libc::pipe(b.as_mut_ptr());
        }
        let (o1, o2) = (out.to_string(), out.to_string());
        s.threads.push(std::thread::spawn(move || {
            let born = birth_ns();
            set_affinity(Some(a_cpu));
            if role == "pin-rt" {
                set_fifo(1);
            }
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
            // Unpinned (and fair again) before its record, so its exit need not wait for
            // the busy CPU.
            set_fifo(0);
            set_affinity(None);
            record(&o1, "end", role, "", born);
        }));
        s.threads.push(std::thread::spawn(move || {
            let born = birth_ns();
            set_affinity(Some(b_cpu));
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
            set_affinity(None);
            record(&o2, "end", role, "", born);
        }));
    }
}

/// `--short N`: N processes of 10-60 ms each (exec'd copies of this program, `child
/// --kind short`), two alive at a time, started over the first half of the run.
pub(crate) fn short(out: &str, n: u64, seed: u64, ms: u64, s: &mut Started) {
    let out = out.to_string();
    s.threads.push(std::thread::spawn(move || {
        let born = birth_ns();
        let exe = std::fs::read_link("/proc/self/exe").expect("/proc/self/exe");
        let mut rng = Rng::new(seed);
        let gap = (ms / 2 / n.max(1)).max(1);
        let mut alive: std::collections::VecDeque<std::process::Child> = Default::default();
        for _ in 0..n {
            if alive.len() >= 2 {
                if let Some(mut c) = alive.pop_front() {
                    record_zombie(&out, c.id());
                    let _ = c.wait();
                }
            }
            let life = rng.range(10, 60);
            let c = std::process::Command::new(&exe)
                .args(["child", "--out", &out, "--kind", "short"])
                .args(["--seed", &rng.next().to_string()])
                .args(["--ms", &life.to_string()])
                .spawn()
                .expect("cannot start a short process");
            alive.push_back(c);
            std::thread::sleep(Duration::from_millis(rng.range(1, gap)));
        }
        for mut c in alive {
            record_zombie(&out, c.id());
            let _ = c.wait();
        }
        record(&out, "end", "spawner", "", born);
    }));
}

/// `--names`: a thread whose name is UTF-8 with control bytes.
pub(crate) fn named(out: &str, until: u64, seed: u64, s: &mut Started) {
    let o = out.to_string();
    s.threads.push(std::thread::spawn(move || {
        let b = birth_ns();
        set_name(CONTROL_NAME);
        let mut rng = Rng::new(seed);
        solo(&mut rng, until);
        record_with(&o, "end", "named", "", b, &name_field(CONTROL_NAME));
    }));
}

/// Waits for the fork(2)ed processes.
pub(crate) fn reap(out: &str, s: &mut Started) {
    for h in s.threads.drain(..) {
        let _ = h.join();
    }
    for p in s.forked.drain(..) {
        record_zombie(out, p as u32);
        // SAFETY: reaps our own child.
        unsafe { libc::waitpid(p, std::ptr::null_mut(), 0) };
    }
}

/// SCHED_FIFO at `prio` (1-99), or SCHED_OTHER for 0. Fails only without
/// CAP_SYS_NICE, and the torture harness runs as root: said on stderr all the same.
fn set_fifo(prio: i32) {
    let policy = if prio > 0 {
        libc::SCHED_FIFO
    } else {
        libc::SCHED_OTHER
    };
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: this thread (0), a valid sched_param.
    if unsafe { libc::sched_setscheduler(0, policy, &param) } != 0 {
        eprintln!(
            "tracer-torture: sched_setscheduler({prio}): {}",
            std::io::Error::last_os_error()
        );
    }
}
