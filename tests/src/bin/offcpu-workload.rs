//! A workload for `tracer offcpu`: threads that wait in named functions for known times
//! and write down how long their waits took (a monotonic clock around each system
//! call), and two threads that spin on one CPU and preempt each other (their run-queue
//! wait is the scheduler's own, schedstat's second field).
//!
//! Every wait is a system call made by inline assembly inside the named function, so the
//! thread's user-space instruction pointer while it is off-CPU lies in that function (a
//! libc wrapper would stand in between, and Debian's libc has no frame pointers).
//! std only, no crates: the offcpu test (tests/tests/offcpu.rs) compiles it with plain `rustc`, once with
//! `-C force-frame-pointers=yes` and once without frame pointers, as cargo cannot set
//! codegen flags for one binary.
//!
//! Usage: offcpu-workload [--ms N] [--rounds N] [--delay-ms N] --out FILE
#[cfg(target_arch = "x86_64")]
mod imp {
    use std::{
        hint::black_box,
        io::Write as _,
        sync::atomic::{AtomicBool, AtomicU32, Ordering},
        time::{Duration, Instant},
    };

    const SYS_READ: i64 = 0;
    const SYS_WRITE: i64 = 1;
    const SYS_NANOSLEEP: i64 = 35;
    const SYS_GETTID: i64 = 186;
    const SYS_FUTEX: i64 = 202;
    const SYS_SCHED_SETAFFINITY: i64 = 203;
    const SYS_PIPE2: i64 = 293;
    const FUTEX_WAIT_PRIVATE: usize = 128;

    #[repr(C)]
    struct Timespec {
        sec: i64,
        nsec: i64,
    }

    #[inline(always)]
    unsafe fn syscall4(nr: i64, a: usize, b: usize, c: usize, d: usize) -> i64 {
        let ret: i64;
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr => ret,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d,
            lateout("rcx") _, lateout("r11") _,
            options(nostack)
        );
        ret
    }

    fn ts(ms: u64) -> Timespec {
        Timespec {
            sec: (ms / 1000) as i64,
            nsec: ((ms % 1000) * 1_000_000) as i64,
        }
    }

    fn gettid() -> u64 {
        // SAFETY: no arguments.
        unsafe { syscall4(SYS_GETTID, 0, 0, 0, 0) as u64 }
    }

    /// Waits on a futex nobody wakes, for `ms` (its timeout).
    #[inline(never)]
    #[no_mangle]
    pub fn offcpu_futex_wait_here(word: &AtomicU32, ms: u64) -> u64 {
        let t = ts(ms);
        let t0 = Instant::now();
        // SAFETY: FUTEX_WAIT on our own word with a valid timeout.
        unsafe {
            syscall4(
                SYS_FUTEX,
                word as *const AtomicU32 as usize,
                FUTEX_WAIT_PRIVATE,
                0,
                &t as *const Timespec as usize,
            )
        };
        t0.elapsed().as_nanos() as u64
    }

    /// Reads one byte from a pipe the main thread writes to every `ms`.
    #[inline(never)]
    #[no_mangle]
    pub fn offcpu_pipe_read_here(fd: i32) -> u64 {
        let mut b = 0u8;
        let t0 = Instant::now();
        // SAFETY: read into our byte.
        unsafe { syscall4(SYS_READ, fd as usize, &mut b as *mut u8 as usize, 1, 0) };
        t0.elapsed().as_nanos() as u64
    }

    /// Writes one byte to the pipe: the waker of `offcpu_pipe_read_here` (`--wakers`).
    #[inline(never)]
    #[no_mangle]
    pub fn offcpu_pipe_write_here(fd: i32) {
        // SAFETY: one byte from a valid buffer.
        unsafe { syscall4(SYS_WRITE, fd as usize, b"x".as_ptr() as usize, 1, 0) };
    }

    /// Sleeps `ms`.
    #[inline(never)]
    #[no_mangle]
    pub fn offcpu_nanosleep_here(ms: u64) -> u64 {
        let t = ts(ms);
        let t0 = Instant::now();
        // SAFETY: valid timespec.
        unsafe { syscall4(SYS_NANOSLEEP, &t as *const Timespec as usize, 0, 0, 0) };
        t0.elapsed().as_nanos() as u64
    }

    /// Called now and then from the spin, which then is not a leaf function: rustc
    /// keeps frame pointers only in functions that call others (LLVM "non-leaf").
    #[inline(never)]
    #[no_mangle]
    pub fn offcpu_spin_tick(n: u64) -> u64 {
        black_box(n)
    }

    /// Spins until told to stop: preempted by its twin on the same CPU.
    #[inline(never)]
    #[no_mangle]
    pub fn offcpu_spin_here(stop: &AtomicBool) -> u64 {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            n = black_box(n.wrapping_add(1));
            if n & 0xf_ffff == 0 {
                n = offcpu_spin_tick(n);
            }
        }
        n
    }

    /// Named callers, so stacks have depth in the workload's own code.
    #[inline(never)]
    #[no_mangle]
    pub fn offcpu_futex_thread(rounds: u64, ms: u64) -> u64 {
        let word = AtomicU32::new(0);
        (0..rounds).map(|_| offcpu_futex_wait_here(&word, ms)).sum()
    }

    #[inline(never)]
    #[no_mangle]
    pub fn offcpu_pipe_thread(rounds: u64, fd: i32) -> u64 {
        (0..rounds).map(|_| offcpu_pipe_read_here(fd)).sum()
    }

    #[inline(never)]
    #[no_mangle]
    pub fn offcpu_sleep_thread(rounds: u64, ms: u64) -> u64 {
        (0..rounds).map(|_| offcpu_nanosleep_here(ms)).sum()
    }

    /// schedstat's run_delay of the calling thread (ns waiting on a run queue).
    fn run_delay() -> u64 {
        std::fs::read_to_string("/proc/thread-self/schedstat")
            .unwrap_or_default()
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    fn pin_to_cpu0() {
        let mask: u64 = 1;
        // SAFETY: an 8-byte CPU mask.
        unsafe { syscall4(SYS_SCHED_SETAFFINITY, 0, 8, &mask as *const u64 as usize, 0) };
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().collect();
        let get = |name: &str| {
            args.iter()
                .position(|a| a == name)
                .and_then(|i| args.get(i + 1))
                .cloned()
        };
        let ms: u64 = get("--ms").and_then(|v| v.parse().ok()).unwrap_or(20);
        let rounds: u64 = get("--rounds").and_then(|v| v.parse().ok()).unwrap_or(50);
        let out = get("--out").expect("--out FILE");
        // Time for tracers to attach by PID before the waits begin.
        let delay: u64 = get("--delay-ms").and_then(|v| v.parse().ok()).unwrap_or(0);
        std::thread::sleep(Duration::from_millis(delay));
        let pid = std::process::id();
        let mut fds = [0i32; 2];
        // SAFETY: valid array of two ints.
        unsafe { syscall4(SYS_PIPE2, fds.as_mut_ptr() as usize, 0, 0, 0) };
        let (rfd, wfd) = (fds[0], fds[1]);
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let spawn = |name: &str, f: Box<dyn FnOnce() -> u64 + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || (gettid(), f()))
                .unwrap()
        };
        let futex = spawn("w-futex", Box::new(move || offcpu_futex_thread(rounds, ms)));
        let pipe = spawn("w-pipe", Box::new(move || offcpu_pipe_thread(rounds, rfd)));
        let sleep = spawn("w-sleep", Box::new(move || offcpu_sleep_thread(rounds, ms)));
        let spinners: Vec<_> = (0..2)
            .map(|i| {
                let stop = stop.clone();
                spawn(
                    &format!("w-spin{i}"),
                    Box::new(move || {
                        pin_to_cpu0();
                        let d0 = run_delay();
                        offcpu_spin_here(&stop);
                        run_delay() - d0
                    }),
                )
            })
            .collect();
        // The pipe's writer: one byte every `ms`.
        for _ in 0..rounds {
            std::thread::sleep(Duration::from_millis(ms));
            offcpu_pipe_write_here(wfd);
        }
        let (futex_tid, futex_ns) = futex.join().unwrap();
        let (pipe_tid, pipe_ns) = pipe.join().unwrap();
        let (sleep_tid, sleep_ns) = sleep.join().unwrap();
        stop.store(true, Ordering::Relaxed);
        let spins: Vec<(u64, u64)> = spinners.into_iter().map(|h| h.join().unwrap()).collect();
        let mut f = std::fs::File::create(&out).expect("--out");
        writeln!(
            f,
            "{{\"pid\":{pid},\"futex_tid\":{futex_tid},\"futex_ns\":{futex_ns},\"pipe_tid\":{pipe_tid},\"pipe_ns\":{pipe_ns},\"sleep_tid\":{sleep_tid},\"sleep_ns\":{sleep_ns},\"spin_tids\":[{},{}],\"spin_run_delay_ns\":[{},{}]}}",
            spins[0].0, spins[1].0, spins[0].1, spins[1].1
        )
        .unwrap();
    }
}

#[cfg(target_arch = "x86_64")]
fn main() {
    imp::main()
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    eprintln!("offcpu-workload: x86_64 only (its system calls are inline assembly)");
    std::process::exit(1);
}
