//! The truth file every thread of the workload writes its record into, and what a
//! record holds: schedstat, CLOCK_THREAD_CPUTIME_ID and wall-clock times.

use std::{os::fd::AsRawFd, sync::atomic::Ordering};

use tracer_tests::{clock_ns, gettid, thread_cpu_ns};

/// CLOCK_MONOTONIC, the clock of the tracer's window (`WINDOW[0]` and `duration_ns`).
pub(crate) fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// When the calling thread was born, as its first instruction can tell from the kernel:
/// now less what schedstat already counts for it (the run-queue wait since the clone's
/// wakeup and its run since). Time asleep before (an exec reading its binary) is not in
/// schedstat: then this is later than the birth, which only loosens the bounds.
pub(crate) fn birth_ns() -> u64 {
    let [run, wait, _] = schedstat();
    now_ns().saturating_sub(run + wait)
}

pub(crate) fn pid() -> u32 {
    std::process::id()
}

/// schedstat of the calling thread: on-CPU ns, run_delay ns, slices (pcount).
pub(crate) fn schedstat() -> [u64; 3] {
    let s = std::fs::read_to_string(format!("/proc/self/task/{}/schedstat", gettid()))
        .unwrap_or_default();
    let mut v = s.split_whitespace().filter_map(|x| x.parse().ok());
    [
        v.next().unwrap_or(0),
        v.next().unwrap_or(0),
        v.next().unwrap_or(0),
    ]
}

/// Waits for child `pid` to end without reaping it, and records its final schedstat (a
/// zombie's is final: its exit path, which follows its own last record, ran). The
/// harness takes it as the upper end of the child's truth.
pub(crate) fn record_zombie(out: &str, pid: u32) {
    let tracer_truth::zombie::Zombie::Exited(Some(f)) = tracer_truth::zombie::zombie(pid, true)
    else {
        return;
    };
    emit(
        out,
        &format!(
            "{{\"ev\":\"exit\",\"role\":\"zombie\",\"grp\":\"\",\"tid\":{pid},\"pid\":{pid},\"run_ns\":{},\"wait_ns\":{},\"slices\":{},\"cpu_ns\":0,\"t_ns\":{},\"born_ns\":0}}",
            f.run_ns,
            f.wait_ns,
            f.slices,
            now_ns()
        ),
    );
}

/// The truth file: a shared mapping every process of the workload appends to, so a
/// record costs no system call and cannot block (an O_APPEND write to a file can sleep on
/// the inode lock, adding slices and waits the record no longer shows). The first 8 bytes
/// count the bytes used after the 64-byte header; lines follow.
/// Small: a process unmaps it on exit after its last record (8 MiB cost ~1 ms there);
/// 2 MiB holds a `--crowd` of 3,000 threads' two records (~220 bytes each) besides the rest.
pub(crate) const TRUTH_SIZE: usize = 2 << 20;
pub(crate) const TRUTH_HEADER: usize = 64;
pub(crate) static TRUTH: std::sync::OnceLock<usize> = std::sync::OnceLock::new();

/// Maps the truth file (creating it when `create`), once per process; fork(2)ed children
/// inherit the mapping.
pub(crate) fn truth_map(out: &str, create: bool) -> *mut u8 {
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

/// Words of the truth file's header after the byte counter, shared by every process of
/// the workload (forked children inherit the mapping; spawned ones map the file): `GO` is
/// set once the tracer has attached (or at once without `--go`), `FIN` once the driver has
/// seen the tracer end (`--fin`). Waited for with shared futexes.
pub(crate) const GO: usize = 8;
pub(crate) const FIN: usize = 12;

fn word(out: &str, at: usize) -> &'static std::sync::atomic::AtomicU32 {
    let base = truth_map(out, false);
    // SAFETY: `at` is a 4-byte aligned offset inside the 64-byte header of the mapping,
    // which lives as long as the process; the word is only accessed atomically.
    unsafe { std::sync::atomic::AtomicU32::from_ptr(base.add(at).cast()) }
}

/// Sets a header word and wakes every thread of every process waiting for it.
pub(crate) fn set_word(out: &str, at: usize) {
    let w = word(out, at);
    w.store(1, Ordering::SeqCst);
    // SAFETY: a shared (not private) FUTEX_WAKE on a live word of a MAP_SHARED mapping.
    unsafe { libc::syscall(libc::SYS_futex, w.as_ptr(), libc::FUTEX_WAKE, i32::MAX) };
}

/// Whether a header word is set, without waiting.
pub(crate) fn word_set(out: &str, at: usize) -> bool {
    word(out, at).load(Ordering::SeqCst) != 0
}

/// Blocks (one futex wait, no polling) until a header word is set.
pub(crate) fn wait_word(out: &str, at: usize) {
    let w = word(out, at);
    while w.load(Ordering::SeqCst) == 0 {
        // SAFETY: a shared FUTEX_WAIT on a live word, no timeout: sleeps while it is 0.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                w.as_ptr(),
                libc::FUTEX_WAIT,
                0,
                std::ptr::null::<libc::timespec>(),
            )
        };
    }
}

/// Appends one line to the truth file: an atomic reservation, then a copy.
pub(crate) fn emit(out: &str, line: &str) {
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
pub(crate) fn record(out: &str, ev: &str, role: &str, grp: &str, born: u64) {
    record_with(out, ev, role, grp, born, "");
}

/// [`record`] with more fields (`extra`: `,"key":value...`), e.g. the thread's name.
pub(crate) fn record_with(out: &str, ev: &str, role: &str, grp: &str, born: u64, extra: &str) {
    let cpu = thread_cpu_ns();
    let [run, wait, slices] = schedstat();
    let t = now_ns();
    emit(
        out,
        &format!(
            "{{\"ev\":\"{ev}\",\"role\":\"{role}\",\"grp\":\"{grp}\",\"tid\":{},\"pid\":{},\"run_ns\":{run},\"wait_ns\":{wait},\"slices\":{slices},\"cpu_ns\":{cpu},\"t_ns\":{t},\"born_ns\":{born}{extra}}}",
            gettid(),
            pid()
        ),
    );
}
