//! `run`: the plan from the seed, its parts each run by its own thread(s) or process.

use std::{
    io::{BufRead, Write},
    sync::{
        atomic::{AtomicBool, AtomicU32, Ordering},
        Arc,
    },
    time::Duration,
};

use tracer_tests::gettid;

use crate::edges::{self, Started};
use crate::truth::{birth_ns, emit, now_ns, pid, record, record_with, record_zombie, set_word, GO};
use crate::work::{futex_wait, futex_wake, move_to, solo, spin_ns, Rng};
use crate::{arg, num};

/// The scenario parts beyond the base plan asked for on the command line (see `edges`).
struct Parts {
    /// `--startup T,C`: ms after `ready` to start a thread and to fork a child (0: none).
    startup: Option<(u64, u64)>,
    sleepers: bool,
    pinned: bool,
    short: u64,
    names: bool,
    /// `--leave`: one more child that leaves the target cgroup halfway through.
    leave: bool,
    /// `--exec-thread`: one more child whose second thread execs.
    exec_thread: bool,
    /// `--crowd N`: N threads asleep from before the window to the main thread's end.
    crowd: u64,
}

impl Parts {
    fn of(args: &[String]) -> Parts {
        let has = |f: &str| args.iter().any(|a| a == f);
        Parts {
            startup: arg(args, "--startup").and_then(|v| {
                let (t, c) = v.split_once(',')?;
                Some((t.parse().ok()?, c.parse().ok()?))
            }),
            sleepers: has("--sleepers"),
            pinned: has("--pinned"),
            short: num(args, "--short", 0),
            names: has("--names"),
            leave: has("--leave"),
            exec_thread: has("--exec-thread"),
            crowd: num(args, "--crowd", 0),
        }
    }
}

/// The plan's parts, each run by its own thread(s) or process.
pub(crate) fn run(args: &[String], out: &str) {
    let start = birth_ns();
    let seed = num(args, "--seed", 1);
    let ms = num(args, "--ms", 1000);
    let edge = args.iter().any(|a| a == "--edge");
    let go = args.iter().any(|a| a == "--go");
    let cg_in = arg(args, "--cg-in");
    let cg_out = arg(args, "--cg-out");
    let parts = Parts::of(args);
    let mut rng = Rng::new(seed);
    // Those parts draw from their own generator: the rest of the plan stays
    // what the seed made it before they existed.
    let mut xrng = Rng::new(seed ^ 0x2424_2424);
    let mut started = Started::default();
    if parts.names {
        edges::set_name(edges::MAIN_NAME);
    }
    let main_name = if parts.names {
        edges::name_field(edges::MAIN_NAME)
    } else {
        String::new()
    };
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
    let names = parts.names;
    let resident = std::thread::spawn(move || {
        let born = birth_ns();
        let name = if names {
            edges::set_name(edges::RESIDENT_NAME);
            edges::name_field(edges::RESIDENT_NAME)
        } else {
            String::new()
        };
        while gate2.load(Ordering::Acquire) == 0 {
            futex_wait(&gate2, 0, 1_000_000_000);
        }
        record_with(&out2, "base", "resident", "", born, &name);
        solo(&mut rrng, now_ns() + ms * 1_000_000);
        record_with(&out2, "end", "resident", "", born, &name);
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
    // Threads and a process there before the window, for the parts that need them.
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    if let Some(delays) = parts.startup {
        let work = xrng.range(100, 400);
        let seed = xrng.next();
        started
            .threads
            .push(edges::startup(out, delays, work, seed, ready_rx));
    }
    if parts.sleepers {
        edges::sleepers_before(out, &mut started);
    }
    let crowd = (parts.crowd > 0).then(|| edges::Crowd::start(out, parts.crowd));
    if go {
        println!("ready {} {} {}", pid(), gettid(), resident_tid);
        let _ = std::io::stdout().flush();
        let _ = ready_tx.send(std::time::Instant::now());
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    } else {
        let _ = ready_tx.send(std::time::Instant::now());
    }
    set_word(out, GO);
    for j in &mut joiners {
        if let Some(mut s) = j.stdin.take() {
            let _ = s.write_all(b"go\n");
        }
    }
    let t_go = now_ns();
    record_with(out, "base", "main", "", start, &main_name);
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
            let born = birth_ns();
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
            let born = birth_ns();
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
            let born = birth_ns();
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
                let born = birth_ns();
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
            let born = birth_ns();
            std::thread::sleep(Duration::from_millis(delay));
            for _ in 0..n {
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                let spin = brng.range(10_000, 500_000);
                let o2 = o.clone();
                let h = std::thread::spawn(move || {
                    let b = birth_ns();
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
    if parts.leave && cg_out.is_some() {
        // Lives half the run and leaves the target cgroup halfway through its life.
        let mut c = std::process::Command::new(&exe);
        c.args(["child", "--out", out, "--kind", "leave"])
            .args(["--seed", &xrng.next().to_string()])
            .args(["--ms", &(ms / 2).max(40).to_string()]);
        if let Some(cg) = &cg_out {
            c.args(["--cg-out", cg]);
        }
        // Where it may come back to (one in two do, see `roles::child`).
        if let Some(cg) = &cg_in {
            c.args(["--cg-in", cg]);
        }
        children.push((ms / 8, c));
    }
    if parts.exec_thread {
        let mut c = std::process::Command::new(&exe);
        // Short enough to end well inside the window even on a busy machine.
        c.args(["child", "--out", out, "--kind", "exec-thread"])
            .args(["--seed", &xrng.next().to_string()])
            .args(["--ms", &(ms / 10).max(20).to_string()]);
        children.push((ms / 10, c));
    }
    if parts.sleepers {
        let at = t_go + xrng.range(ms / 4, ms * 3 / 4) * 1_000_000;
        edges::sleeper_close(out, at, xrng.next(), &mut started);
    }
    if parts.pinned {
        edges::pinned(out, xrng.next(), &mut started);
    }
    if parts.short > 0 {
        edges::short(out, parts.short, xrng.next(), ms, &mut started);
    }
    if parts.names {
        edges::named(out, end_at, xrng.next(), &mut started);
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
    if let Some(c) = crowd {
        c.release();
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    for h in started.threads.drain(..) {
        let _ = h.join();
    }
    let _ = resident.join();
    for mut p in procs.into_iter().chain(joiners) {
        record_zombie(out, p.id());
        let _ = p.wait();
    }
    if parts.sleepers {
        edges::finish(out, start, &mut started);
    }
    edges::reap(out, &mut started);
    record_with(out, "end", "main", "", start, &main_name);
    emit(out, "{\"ev\":\"done\"}");
}
