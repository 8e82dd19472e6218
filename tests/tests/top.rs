//! `tracer top` in a real terminal: tmux (Debian's package, installed by `cargo xtask
//! test`) runs it on a known workload at 80x24, `send-keys` filters, expands, sorts and
//! selects, `capture-pane` reads the screen. The threads' CPU% must match what the kernel
//! accounted to them over the same interval (schedstat's run time, read by this test at
//! each redraw), and the terminal must come back (no alternate screen, canonical mode) after
//! q, Ctrl-C and SIGTERM.
use std::{
    collections::BTreeMap,
    process::{Child, Command},
    thread::sleep,
    time::{Duration, Instant},
};

use tracer_tests::{clock_ns, require_root, tracer_bin};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

/// A detached tmux session of 80x24 running a plain shell; killed when dropped.
struct Tmux {
    name: String,
}

fn tmux_out(args: &[&str]) -> String {
    let o = Command::new("tmux")
        .args(args)
        .output()
        .expect("tmux is missing: `cargo xtask test` installs Debian's tmux");
    assert!(
        o.status.success(),
        "tmux {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

impl Tmux {
    fn new(tag: &str) -> Tmux {
        let name = format!("tracer-top-{tag}-{}", std::process::id());
        // In a directory of its own: the export key writes there.
        let dir = Self::dir_of(&name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        tmux_out(&[
            "new-session",
            "-d",
            "-s",
            &name,
            "-x",
            "80",
            "-y",
            "24",
            "-c",
            dir.to_str().unwrap(),
            "sh",
        ]);
        Tmux { name }
    }
    fn dir_of(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(name)
    }
    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", &self.name];
        a.extend(keys);
        tmux_out(&a);
    }
    fn literal(&self, text: &str) {
        tmux_out(&["send-keys", "-t", &self.name, "-l", text]);
    }
    fn screen(&self) -> String {
        tmux_out(&["capture-pane", "-p", "-t", &self.name])
    }
    fn format(&self, f: &str) -> String {
        tmux_out(&["display", "-p", "-t", &self.name, f])
            .trim()
            .to_string()
    }
    /// Polls the screen until `pred` holds (up to `secs`), returning it.
    fn wait(&self, secs: u64, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let t = Instant::now();
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(
                t.elapsed().as_secs() < secs,
                "waited {secs} s for {what}; the screen:\n{s}"
            );
            sleep(Duration::from_millis(20));
        }
    }
    /// Starts `tracer top ARGS` in the shell and waits for its first interval.
    fn start_top(&self, args: &str) {
        self.literal(&format!(
            "{} top {args}; echo tracer-exited-$?",
            tracer_bin().display()
        ));
        self.keys(&["Enter"]);
        self.wait(30, "the first interval", |s| s.contains(" #1 "));
        assert_eq!(
            self.format("#{alternate_on}"),
            "1",
            "top draws on the alternate screen"
        );
    }
    /// Waits for the tracer to end, then checks the terminal is the shell's again.
    fn assert_restored(&self, how: &str) {
        let s = self.wait(15, &format!("the tracer to end after {how}"), |s| {
            s.contains("tracer-exited-")
        });
        assert_eq!(
            self.format("#{alternate_on}"),
            "0",
            "alternate screen left on after {how}:\n{s}"
        );
        assert_eq!(
            self.format("#{cursor_flag}"),
            "1",
            "cursor hidden after {how}"
        );
        // Canonical mode and echo back (raw mode off): ask the terminal itself.
        let out = std::env::temp_dir().join(format!("tracer-top-stty-{}", std::process::id()));
        let _ = std::fs::remove_file(&out);
        self.literal(&format!("stty -a > {}", out.display()));
        self.keys(&["Enter"]);
        let t = Instant::now();
        let stty = loop {
            match std::fs::read_to_string(&out) {
                Ok(s) if s.contains("icanon") => break s,
                _ if t.elapsed().as_secs() > 10 => panic!("stty did not run after {how}"),
                _ => sleep(Duration::from_millis(20)),
            }
        };
        let words: Vec<&str> = stty.split_whitespace().collect();
        for w in ["icanon", "echo", "isig"] {
            assert!(words.contains(&w), "{w} still off after {how}: {stty}");
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .status();
        let _ = std::fs::remove_dir_all(Self::dir_of(&self.name));
    }
}

struct Workload(Child);

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Three busy-sleep threads (about 2/3 of a CPU each when they get it) for a minute.
fn workload() -> Workload {
    let c = Command::new(WORKLOAD)
        .args([
            "busy-sleep",
            "--threads",
            "3",
            "--work-ms",
            "8",
            "--sleep-ms",
            "4",
        ])
        .args(["--duration-ms", "60000", "--out", "/dev/null"])
        .spawn()
        .expect("cannot start the workload");
    let tasks = format!("/proc/{}/task", c.id());
    let t = Instant::now();
    while std::fs::read_dir(&tasks).map(|d| d.count()).unwrap_or(0) < 4 {
        assert!(
            t.elapsed().as_secs() < 5,
            "the workload's threads did not start"
        );
        sleep(Duration::from_millis(10));
    }
    Workload(c)
}

/// Run time (ns) the kernel accounted to each thread of `pid`: schedstat's first field.
fn run_ns(pid: u32) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let tid: u32 = e.unwrap().file_name().to_string_lossy().parse().unwrap();
        if let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat")) {
            out.insert(tid, s.split_whitespace().next().unwrap().parse().unwrap());
        }
    }
    out
}

/// The interval number in the title line.
fn interval_of(screen: &str) -> Option<u64> {
    let title = screen.lines().next()?;
    let i = title.find(" #")? + 2;
    title[i..].split_whitespace().next()?.parse().ok()
}

/// Table rows as (id, comm, CPU%), the selection marker and tree signs stripped.
fn rows(screen: &str) -> Vec<(u32, String, f64)> {
    screen
        .lines()
        .skip_while(|l| !l.contains("COMM"))
        .skip(1)
        .take_while(|l| !l.starts_with('┌') && !l.is_empty())
        .filter_map(|l| {
            let mut w = l.trim_start_matches('>').split_whitespace();
            let id = w.next()?.trim_start_matches(['+', '-']).parse().ok()?;
            let comm = w.next()?.to_string();
            let cpu = w.next()?.parse().ok()?;
            Some((id, comm, cpu))
        })
        .collect()
}

#[test]
#[ignore = "needs root"]
fn top_shows_the_threads_cpu_use_and_restores_the_terminal_on_q() {
    require_root();
    let w = workload();
    let pid = w.0.id();
    let t = Tmux::new("q");
    t.start_top(&format!("-i 2s -p {pid}"));
    // Filter on the PID, expand the process, sort by the PID column (two steps left of
    // CPU%), select the second line (the first thread).
    t.keys(&["/"]);
    t.literal(&pid.to_string());
    t.keys(&["Enter", "Enter", "<", "<", "Down"]);
    // Until the last key has taken effect too: the selection on a thread, whose detail
    // pane is titled by its TID (a screen read between the keys once caught the
    // process still selected).
    let s = t.wait(
        10,
        "the expanded, PID-sorted table, a thread selected",
        |s| s.contains("PIDv") && rows(s).len() >= 4 && s.contains(" TID "),
    );
    let r = rows(&s);
    assert_eq!(r[0].0, pid, "the process first:\n{s}");
    let tids: Vec<u32> = r[1..].iter().map(|x| x.0).collect();
    let mut sorted = tids.clone();
    sorted.sort_by(|a, b| b.cmp(a));
    assert_eq!(tids, sorted, "threads by TID, largest first:\n{s}");
    // The workers; the main thread waits in join() from before the tracer started and
    // has no row (a thread with nothing in the window is left out).
    let workers: Vec<u32> = run_ns(pid).keys().copied().filter(|&t| t != pid).collect();
    let shown: Vec<u32> = sorted.iter().rev().copied().filter(|&t| t != pid).collect();
    assert_eq!(shown, workers, "{s}");
    assert!(
        s.contains(&format!("TID {}", r[1].0)),
        "the selected thread's detail:\n{s}"
    );

    // At each redraw, what the kernel accounted since the previous one.
    let mut last: Option<(u64, u64, BTreeMap<u32, u64>)> = None;
    let mut checked = 0;
    let started = Instant::now();
    while checked < 2 {
        assert!(
            started.elapsed().as_secs() < 30,
            "no two intervals to check"
        );
        let s = t.screen();
        let Some(iv) = interval_of(&s) else {
            sleep(Duration::from_millis(5));
            continue;
        };
        if last.as_ref().is_some_and(|l| l.0 == iv) {
            sleep(Duration::from_millis(5));
            continue;
        }
        let now = (iv, clock_ns(libc::CLOCK_MONOTONIC), run_ns(pid));
        if let Some((piv, pt, prev)) = &last {
            if *piv + 1 == iv {
                let wall = (now.1 - pt) as f64;
                let shown = rows(&s);
                for (tid, &ns) in now.2.iter().filter(|(&t, _)| t != pid) {
                    let truth = 100.0 * (ns - prev.get(tid).copied().unwrap_or(0)) as f64 / wall;
                    // The thread rows, under the process's own.
                    let got = shown[1..]
                        .iter()
                        .find(|r| r.0 == *tid)
                        .map(|r| r.2)
                        .unwrap_or_else(|| panic!("TID {tid} missing:\n{s}"));
                    eprintln!("interval {iv}: TID {tid} shows {got:.1}%, kernel {truth:.1}%");
                    assert!(
                        tracer_truth::TOP_CPU_PERCENT.holds(got, truth),
                        "TID {tid}: {got}% shown, {truth:.1}% accounted by the kernel:\n{s}"
                    );
                }
                checked += 1;
            }
        }
        last = Some(now);
    }

    // The export key writes the heatmap SVG of the history where top runs.
    t.keys(&["e"]);
    let s = t.wait(10, "the export's message", |s| {
        s.contains("heatmap written to")
    });
    let file = s
        .split("heatmap written to ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .to_string();
    let svg = std::fs::read_to_string(Tmux::dir_of(&t.name).join(&file)).unwrap();
    assert!(
        svg.contains("<svg") && svg.contains(r#"class="cell""#),
        "{svg}"
    );

    t.keys(&["q"]);
    t.assert_restored("q");
}

#[test]
#[ignore = "needs root"]
fn top_restores_the_terminal_on_ctrl_c_and_sigterm() {
    require_root();
    let w = workload();
    let pid = w.0.id();
    let t = Tmux::new("sig");
    t.start_top(&format!("-i 500ms -p {pid}"));
    t.keys(&["C-c"]);
    t.assert_restored("Ctrl-C");

    t.literal("clear");
    t.keys(&["Enter"]);
    t.start_top(&format!("-i 500ms -p {pid}"));
    // The tracer is the shell's child: the pane's process's only child.
    let shell: u32 = t.format("#{pane_pid}").parse().unwrap();
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
    let tracer: i32 = children.split_whitespace().next().unwrap().parse().unwrap();
    // SAFETY: a signal to a process this test started.
    assert_eq!(unsafe { libc::kill(tracer, libc::SIGTERM) }, 0);
    t.assert_restored("SIGTERM");
}

/// A terminal that goes away (the tmux server killed: a hung-up pty) ends `tracer top`:
/// it once kept spinning on the dead terminal's reads, waiting for its key thread.
#[test]
#[ignore = "needs root"]
fn top_ends_when_its_terminal_goes_away() {
    require_root();
    let w = workload();
    let pid = w.0.id();
    let t = Tmux::new("hangup");
    t.start_top(&format!("-i 500ms -p {pid}"));
    let shell: u32 = t.format("#{pane_pid}").parse().unwrap();
    let children = std::fs::read_to_string(format!("/proc/{shell}/task/{shell}/children")).unwrap();
    let tracer: u32 = children.split_whitespace().next().unwrap().parse().unwrap();
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", &t.name])
        .status();
    let start = std::time::Instant::now();
    // Gone, or a zombie nobody reaps yet: either way it ended.
    let running = || {
        std::fs::read_to_string(format!("/proc/{tracer}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, r)| r.trim_start().starts_with('Z'))
            })
            .is_some_and(|zombie| !zombie)
    };
    while running() {
        if start.elapsed() > std::time::Duration::from_secs(15) {
            // SAFETY: a signal to a process this test started.
            unsafe { libc::kill(tracer as i32, libc::SIGKILL) };
            panic!("tracer top still running 15 s after its terminal went away");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
#[ignore = "needs root"]
fn top_without_a_terminal_says_so() {
    require_root();
    let out = Command::new(tracer_bin())
        .args(["top", "-d", "1s"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tracer top draws on a terminal"), "{err}");
    assert!(out.stdout.is_empty(), "nothing drawn on a pipe");
}

/// `tracer top -- COMMAND`: the command's output would scribble over the screen; it goes
/// to a file instead, named when top ends, and the command's threads are on the screen.
#[test]
#[ignore = "needs root"]
fn a_commands_output_stays_off_the_screen_and_is_kept() {
    require_root();
    let t = Tmux::new("cmd");
    t.start_top("-i 300ms -- sh -c 'echo PID $$; while :; do echo NOISE-LINE; sleep 0.05; done'");
    let s = t.wait(10, "the command's shell in the table", |s| {
        s.contains(" sh")
    });
    assert!(
        !s.contains("NOISE-LINE"),
        "the command wrote on the screen:\n{s}"
    );
    sleep(Duration::from_millis(600));
    let s = t.screen();
    assert!(
        !s.contains("NOISE-LINE"),
        "the command wrote on the screen:\n{s}"
    );
    t.keys(&["q"]);
    t.assert_restored("q");
    let s = t.screen();
    let path = s
        .lines()
        .find_map(|l| {
            l.split_once("the command's output is in ")
                .map(|(_, p)| p.trim().to_string())
        })
        .unwrap_or_else(|| panic!("top did not say where the output went:\n{s}"));
    // `q` ends the window; the command goes on untraced (as documented): stop it here,
    // then read what it wrote up to then.
    let log = std::fs::read_to_string(&path).expect("the command's output file");
    let pid: i32 = log
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("PID "))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no PID line first: {log}"));
    // SAFETY: a signal to the shell this test started.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    sleep(Duration::from_millis(100));
    let log = std::fs::read_to_string(&path).expect("the command's output file");
    let _ = std::fs::remove_file(&path);
    let noise: Vec<&str> = log.lines().skip(1).collect();
    assert!(
        noise.len() >= 5 && noise.iter().all(|l| *l == "NOISE-LINE"),
        "{log}"
    );
}

/// `tracer top --runqlen`: three spinners on the last CPU keep two waiting there, and
/// that CPU's cell says so (`rq 2.0`) while the other CPUs' say how many wait on them.
#[test]
#[ignore = "needs root"]
fn top_runqlen_shows_the_waiting_beside_each_cpu() {
    require_root();
    let cpu = std::thread::available_parallelism().unwrap().get() - 1;
    let spin = Workload(
        Command::new(WORKLOAD)
            .args(["spin", "--threads", "3", "--cpu", &cpu.to_string()])
            .args(["--duration-ms", "60000", "--out", "/dev/null"])
            .spawn()
            .expect("cannot start the spinners"),
    );
    let t = Tmux::new("rq");
    t.start_top("-i 500ms --runqlen");
    // The CPU's cell: "  N[||||...] 100% st  - rq 2.0".
    let rq_of = |screen: &str| -> Option<f64> {
        let cell = format!("{cpu:>3}[");
        screen.lines().find_map(|l| {
            let rest = &l[l.find(&cell)?..];
            let rq = rest.split_once(" rq")?.1;
            rq.split_whitespace().next()?.parse().ok()
        })
    };
    let s = t.wait(20, "CPU's rq near 2", |s| {
        rq_of(s).is_some_and(|v| (1.8..=2.3).contains(&v))
    });
    t.keys(&["q"]);
    t.assert_restored("q");
    drop(spin);
    eprintln!("{}", s.lines().take(4).collect::<Vec<_>>().join("\n"));
}
