//! What the threads do: random steps (spin, sleep, yield, affinity, futex and pipe
//! waits) from a seeded plan, cgroup moves and exec.

use std::{ffi::CString, sync::atomic::AtomicU32, time::Duration};

use tracer_tests::thread_cpu_ns;

use crate::truth::{now_ns, pid};

/// The harness's generator (`tracer_truth::Rng`, splitmix64), seeded as the workload
/// always was (`Rng::new`).
pub(crate) use tracer_truth::Rng;

pub(crate) fn spin_ns(ns: u64) {
    let end = thread_cpu_ns() + ns;
    while thread_cpu_ns() < end {
        std::hint::spin_loop();
    }
}

pub(crate) fn set_affinity(cpu: Option<usize>) {
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

pub(crate) fn futex_wait(word: &AtomicU32, val: u32, timeout_ns: u64) {
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

pub(crate) fn futex_wake(word: &AtomicU32) {
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
pub(crate) fn random_step(rng: &mut Rng) {
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
pub(crate) fn solo(rng: &mut Rng, until: u64) {
    while now_ns() < until {
        random_step(rng);
    }
}

/// Moves the calling process into a cgroup v2 directory.
pub(crate) fn move_to(cg: &str) {
    if let Err(e) = std::fs::write(format!("{cg}/cgroup.procs"), pid().to_string()) {
        eprintln!("tracer-torture: cannot move {} into {cg}: {e}", pid());
        std::process::exit(3);
    }
}

pub(crate) fn exec_self(args: &[&str]) -> ! {
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
