//! The processes `run` spawns: `child` (plain, exec-main, exec-thread, leave), `joiner`,
//! and `post-exec`, the program an exec'ing thread becomes.

use std::{
    io::BufRead,
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};

use crate::truth::{birth_ns, now_ns, record};
use crate::work::{exec_self, futex_wait, futex_wake, move_to, solo, spin_ns, Rng};
use crate::{arg, num};

/// The program an exec'ing thread becomes: spins, then records its task's total, which
/// includes the time before the exec (same task).
pub(crate) fn post_exec(args: &[String], out: &str) {
    let born = num(args, "--born", now_ns());
    spin_ns(num(args, "--spin-us", 1000) * 1000);
    let grp = arg(args, "--grp").unwrap_or_default();
    record(out, "end", "post-exec", &grp, born);
}

/// A child process of the workload. Kinds: `plain` (a thread or two of random steps and
/// a fork(2)ed grandchild), `exec-main` (its main thread execs), `exec-thread` (a second
/// thread execs while the main thread waits to be reaped), `leave` (moves itself out of
/// the target cgroup midway), `short` (random steps for `--ms`, then exit).
pub(crate) fn child(args: &[String], out: &str) {
    let born = birth_ns();
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
                let tborn = birth_ns();
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
            // One in two come back for the last quarter of their life (a hostile test
            // pass, 2026-12-07: the runtime of a spinner's time outside was counted at
            // its return). Its own generator, so the other draws stay the seed's.
            let cg_in =
                arg(args, "--cg-in").filter(|_| Rng::new(seed ^ 0x5e70).next().is_multiple_of(2));
            solo(&mut rng, born + ms * 500_000);
            std::thread::sleep(Duration::from_millis(1));
            record(out, "leave", "leave", "", born);
            if !cg_out.is_empty() {
                move_to(&cg_out);
            }
            // Ends the slice the move happened in, so that slice holds no work done
            // outside the cgroup.
            std::thread::sleep(Duration::from_millis(1));
            if let Some(cg_in) = cg_in {
                solo(&mut rng, born + ms * 750_000);
                // Its record at the start of a slice, then the move: the slice it moved
                // in counts whole (from its switch-in), as its truth does from here.
                std::thread::sleep(Duration::from_millis(1));
                record(out, "rejoin", "leave", "", born);
                move_to(&cg_in);
                std::thread::sleep(Duration::from_millis(1));
            }
            solo(&mut rng, until);
            record(out, "end", "leave", "", born);
        }
        Some("short") => {
            // A process of a few tens of ms: random steps, then its record, then exit.
            solo(&mut rng, until);
            record(out, "end", "short", "", born);
        }
        _ => {
            let mut rng2 = Rng::new(rng.next());
            let (out2, until2) = (out.to_string(), until);
            let t = std::thread::spawn(move || {
                let tborn = birth_ns();
                solo(&mut rng2, until2);
                record(&out2, "end", "child-thread", "", tborn);
            });
            // This process has one other thread; fork(2) from the main thread and keep to
            // async-signal-safe work plus our own spin in the grandchild.
            // SAFETY: the grandchild only spins, reads /proc and writes, then _exits.
            let g = unsafe { libc::fork() };
            if g == 0 {
                let gborn = birth_ns();
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
pub(crate) fn joiner(args: &[String], out: &str) {
    let born = birth_ns();
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
    // Before the sleep: the slice in which it moves begins after this record.
    record(out, "pre-join", "joiner", "", born);
    std::thread::sleep(Duration::from_millis(1));
    if let Some(cg) = arg(args, "--cg-in") {
        move_to(&cg);
    }
    record(out, "join", "joiner", "", born);
    solo(&mut rng, t0 + ms * 1_000_000);
    record(out, "end", "joiner", "", born);
}
