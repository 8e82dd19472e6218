//! Helpers for the end-to-end tests: find the binaries, run the tracer, read the
//! workloads' ground truth.
use std::{
    path::PathBuf,
    process::{Command, Output},
};

use serde_json::Value;

mod procs;
pub use procs::{status_count, Background, Spinner};

mod compile;
pub use compile::std_only_workload;

pub mod contrib;
pub mod kernel;
pub mod prometheus;

/// A clock in ns (`CLOCK_MONOTONIC`: the tracer's window; `CLOCK_THREAD_CPUTIME_ID`: the
/// calling thread's own CPU time), for the workloads that record their truth.
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid timespec pointer.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The calling thread's CPU time, ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The calling thread's TID.
pub fn gettid() -> u32 {
    // SAFETY: no arguments.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// The tracer binary: `TRACER_BIN` (set by `cargo xtask test`), else the workspace's
/// debug build.
pub fn tracer_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TRACER_BIN") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/tracer")
}

/// End-to-end tests load BPF programs: they need root. They are `#[ignore = "needs root"]`
/// (a plain `cargo test` as a user passes without claiming to have run them) and
/// `cargo xtask test` runs them as root with `--include-ignored`; run without root, they
/// fail loudly here, never skip silently.
pub fn require_root() {
    // SAFETY: no arguments.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "end-to-end tests load BPF programs and must run as root (cargo xtask test)"
    );
    assert!(
        tracer_bin().exists(),
        "{} is missing: build it with `cargo xtask build`",
        tracer_bin().display()
    );
}

/// Runs the tracer with `args`; panics with its stderr when it cannot be started.
pub fn run_tracer(args: &[&str]) -> Output {
    Command::new(tracer_bin())
        .args(args)
        .output()
        .expect("cannot start the tracer binary")
}

/// A tracer run and its memory: [`run_tracer_rss`].
pub struct RssRun {
    pub out: Output,
    /// The tracer's own peak RSS (KiB): its `VmHWM`, read every 20 ms until it exits.
    pub peak_kib: u64,
    /// Its resident set (`VmRSS`, KiB) at each reading, with the ms since the start.
    pub timeline: Vec<(u64, u64)>,
    /// `wait4`'s peak (KiB), which is also its children's (a `-- CMD` workload) when
    /// larger.
    pub wait4_kib: u64,
}

impl RssRun {
    /// The resident set every `every_ms`, for a failure message.
    pub fn timeline_text(&self, every_ms: u64) -> String {
        let mut next = 0;
        let mut parts = Vec::new();
        for &(ms, kib) in &self.timeline {
            if ms >= next {
                parts.push(format!(
                    "{:.1}s {:.1}",
                    ms as f64 / 1e3,
                    kib as f64 / 1024.0
                ));
                next = ms + every_ms;
            }
        }
        format!("RSS (MiB) over time: {}", parts.join(", "))
    }
}

/// `VmHWM` and `VmRSS` (KiB) of a live process.
fn hwm_rss_kib(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        let l = s.lines().find(|l| l.starts_with(name))?;
        l.split_whitespace().nth(1)?.parse().ok()
    };
    Some((field("VmHWM:")?, field("VmRSS:")?))
}

/// Runs the tracer with `args` like [`run_tracer`], and measures its own memory as it
/// runs. `wait4`'s figure alone would be the larger of the tracer's and its command's.
#[allow(clippy::zombie_processes)] // reaped by wait4, which std does not know of
pub fn run_tracer_rss(args: &[&str]) -> RssRun {
    use std::io::Read as _;
    let mut child = Command::new(tracer_bin())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("cannot start the tracer binary");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let pid = child.id();
    // Read until the process is a zombie (no memory left to read) or reaped.
    let mem_t = std::thread::spawn(move || {
        let t0 = std::time::Instant::now();
        let (mut peak, mut timeline) = (0, Vec::new());
        while let Some((hwm, rss)) = hwm_rss_kib(pid) {
            peak = peak.max(hwm);
            timeline.push((t0.elapsed().as_millis() as u64, rss));
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        (peak, timeline)
    });
    let mut status = 0;
    // SAFETY: zeroed rusage is valid; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    while unsafe { libc::wait4(pid as i32, &mut status, 0, &mut ru) } < 0 {}
    let stdout = out_t.join().unwrap();
    let stderr = err_t.join().unwrap();
    let (peak_kib, timeline) = mem_t.join().unwrap();
    let status = std::os::unix::process::ExitStatusExt::from_raw(status);
    RssRun {
        out: Output {
            status,
            stdout,
            stderr,
        },
        peak_kib,
        timeline,
        wait4_kib: ru.ru_maxrss as u64,
    }
}

/// The last JSON document of a tracer run that must have succeeded (its stderr shown
/// when it did not).
pub fn final_report(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "tracer failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    json_docs(out).pop().expect("a JSON report")
}

/// Runs `tracer run --json EXTRA -- PREFIX WORKLOAD ARGS --out F` (PREFIX e.g. `chrt -f
/// 20`) and returns the documents and the workload's ground truth (its threads'
/// schedstat and clocks at their end). `workload` is the tests'
/// `CARGO_BIN_EXE_tracer-workload`.
pub fn traced_workload(
    workload: &str,
    extra: &[&str],
    prefix: &[&str],
    args: &[&str],
    name: &str,
) -> (Vec<Value>, Vec<Truth>) {
    require_root();
    let out_file = scratch(name);
    let out_s = out_file.to_str().unwrap().to_string();
    let mut argv = vec!["run", "--json"];
    argv.extend_from_slice(extra);
    argv.push("--");
    argv.extend_from_slice(prefix);
    argv.push(workload);
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["--out", &out_s]);
    let out = run_tracer(&argv);
    final_report(&out);
    let docs = json_docs(&out);
    let truth = read_truth(&out_file);
    let _ = std::fs::remove_file(&out_file);
    (docs, truth)
}

/// Parses the tracer's JSON output (one document, or JSON Lines).
pub fn json_docs(out: &Output) -> Vec<Value> {
    let s = String::from_utf8_lossy(&out.stdout);
    s.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad JSON {e}: {l}")))
        .collect()
}

pub use tracer_truth::{within, Truth};

/// The ground truth `tracer-workload` wrote, one line per thread; it writes every figure,
/// so a line without its CPU clock or timeslices fails here.
pub fn read_truth(path: &std::path::Path) -> Vec<Truth> {
    let s = std::fs::read_to_string(path).expect("workload wrote no ground truth");
    let truth: Vec<Truth> = s
        .lines()
        .map(|l| {
            let t = Truth::parse(l).unwrap_or_else(|e| panic!("bad truth line ({e}): {l}"));
            assert!(
                t.cpu_ns.is_some() && t.slices.is_some(),
                "cpu_ns or slices missing in {l}"
            );
            t
        })
        .collect();
    // A loop over no truth checks nothing: an empty file is a failure, not a pass.
    assert!(
        !truth.is_empty(),
        "{}: the workload wrote no ground-truth line",
        path.display()
    );
    truth
}

/// The workload's worker threads (every line but the main thread's), exactly `n` of them:
/// a check looping over fewer would pass without checking.
pub fn workers(truth: &[Truth], n: usize) -> Vec<&Truth> {
    let w: Vec<&Truth> = truth.iter().filter(|t| t.tid != t.pid).collect();
    assert_eq!(w.len(), n, "expected {n} worker threads' truth: {truth:?}");
    w
}

/// A unique scratch path for one test.
pub fn scratch(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tracer-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// Thread object with this TID in a report.
pub fn thread(doc: &Value, tid: u64) -> Option<&Value> {
    doc["threads"]
        .as_array()?
        .iter()
        .find(|t| t["tid"].as_u64() == Some(tid))
}

/// The directory of the eBPF objects the tracer embeds (one per program family):
/// `TRACER_EBPF_DIR` (set by `cargo xtask test`), else the workspace's build of them.
pub fn ebpf_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("TRACER_EBPF_DIR") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/bpfel-unknown-none/release")
}

/// The eBPF objects, by file name (`tracer-ebpf`'s bins).
pub const EBPF_OBJECTS: [&str; 5] = [
    "tracer-sched",
    "tracer-record",
    "tracer-serve",
    "tracer-offcpu",
    "tracer-floor",
];

/// Names of every program in the tracer's eBPF objects, as the kernel shows them (cut to
/// 15 characters, BPF_OBJ_NAME_LEN less the NUL). Read from the objects themselves, so a
/// program added there is looked for without a list to keep up to date.
pub fn our_programs() -> &'static std::collections::BTreeSet<String> {
    static NAMES: std::sync::OnceLock<std::collections::BTreeSet<String>> =
        std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let mut names = std::collections::BTreeSet::new();
        for file in EBPF_OBJECTS {
            let path = ebpf_dir().join(file);
            let data = std::fs::read(&path).unwrap_or_else(|e| {
                panic!(
                    "cannot read the eBPF object {} ({e}): build it with `cargo xtask build`",
                    path.display()
                )
            });
            let obj = aya_obj::Object::parse(&data)
                .unwrap_or_else(|e| panic!("{} is not a BPF object: {e}", path.display()));
            assert!(
                !obj.programs.is_empty(),
                "{} holds no programs",
                path.display()
            );
            names.extend(
                obj.programs
                    .keys()
                    .map(|n| n.chars().take(15).collect::<String>()),
            );
        }
        names
    })
}

/// IDs and names of the tracer's programs loaded in the kernel right now (any process).
pub fn our_loaded_programs() -> std::collections::BTreeMap<u32, String> {
    aya::programs::loaded_programs()
        .filter_map(|p| p.ok())
        .filter_map(|p| Some((p.id(), p.name_as_str()?.to_string())))
        .filter(|(_, n)| our_programs().contains(n))
        .collect()
}

/// Programs of ours loaded now that were not in `before` (other tracers running on the
/// machine, e.g. a developer's, do not count).
pub fn new_programs(
    before: &std::collections::BTreeMap<u32, String>,
) -> std::collections::BTreeMap<u32, String> {
    our_loaded_programs()
        .into_iter()
        .filter(|(id, _)| !before.contains_key(id))
        .collect()
}

/// Restores a sysctl when dropped, also when the test fails.
pub struct SysctlGuard {
    path: PathBuf,
    old: String,
}

impl SysctlGuard {
    pub fn set(name: &str, value: &str) -> SysctlGuard {
        let path = PathBuf::from("/proc/sys").join(name.replace('.', "/"));
        let old = std::fs::read_to_string(&path).expect("readable sysctl");
        std::fs::write(&path, value).expect("writable sysctl");
        SysctlGuard { path, old }
    }
}

impl Drop for SysctlGuard {
    fn drop(&mut self) {
        let _ = std::fs::write(&self.path, self.old.trim());
    }
}

/// Waits (up to 20 s) until programs of ours that were not in `before` are loaded: the
/// tracer started by the test has attached. Returns whether it did.
pub fn wait_attached(before: &std::collections::BTreeMap<u32, String>) -> bool {
    let t = std::time::Instant::now();
    while new_programs(before).is_empty() && t.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    !new_programs(before).is_empty()
}

/// IDs of the BPF programs process `pid` holds (program fds and links), from its fdinfo.
/// Other tracers (other test runs) may load programs at the same time: a test that looks
/// at its own tracer's programs is not misled by them, as "any new program" can be.
pub fn held_programs(pid: u32) -> std::collections::BTreeSet<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Default::default();
    };
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path()).ok())
        .filter_map(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("prog_id:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .collect()
}

/// Waits (up to 20 s) until process `pid` holds BPF programs; returns them (empty if it
/// never did).
pub fn wait_held(pid: u32) -> std::collections::BTreeSet<u32> {
    let t = std::time::Instant::now();
    loop {
        let held = held_programs(pid);
        if !held.is_empty() || t.elapsed() > std::time::Duration::from_secs(20) {
            return held;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Starts the tracer with `args`, its output piped, and waits until it holds its
/// programs (it has attached).
pub fn spawn_attached<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> std::process::Child {
    let tracer = Command::new(tracer_bin())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the tracer");
    assert!(
        !wait_held(tracer.id()).is_empty(),
        "the tracer did not attach"
    );
    tracer
}

/// Waits (up to 5 s) until none of the programs `ids` is loaded; returns those still
/// loaded then.
pub fn wait_unloaded(ids: &std::collections::BTreeSet<u32>) -> std::collections::BTreeSet<u32> {
    let still = || -> std::collections::BTreeSet<u32> {
        aya::programs::loaded_programs()
            .filter_map(|p| Some(p.ok()?.id()))
            .filter(|id| ids.contains(id))
            .collect()
    };
    let t = std::time::Instant::now();
    while !still().is_empty() && t.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    still()
}

/// The figure `k` of a JSON row or document, which must be there.
pub fn ns(v: &Value, k: &str) -> u64 {
    v[k].as_u64()
        .unwrap_or_else(|| panic!("{k} missing in {v}"))
}

/// The probe modes this kernel offers, from `tracer check --json`: a mode the kernel
/// has but that fails to load (a verifier rejection) fails the test, never a skip.
pub fn probe_modes() -> Vec<String> {
    let out = run_tracer(&["check", "--json"]);
    let doc: Value = serde_json::from_slice(&out.stdout).expect("tracer check --json");
    let mut modes = Vec::new();
    for m in doc["probe_modes"].as_array().expect("probe_modes") {
        let name = m["name"].as_str().unwrap().to_string();
        match m["status"].as_str() {
            Some("ok") if name != "perf-sched" => modes.push(name),
            Some("ok") | Some("absent") => {}
            _ => panic!("probe mode {name} fails on this kernel: {m}"),
        }
    }
    assert!(!modes.is_empty(), "no probe mode works here: {doc}");
    modes
}

/// Nothing above the window: no CPU's sum (wall time of the traced slices), no thread's
/// on-CPU time — the scheduler's runtime, whose clock may run ahead of the tracer's by
/// a few microseconds at a wakeup preemption (hence the 20 µs).
pub fn assert_within_window(doc: &Value, what: &str) {
    let window = ns(doc, "duration_ns");
    for t in doc["threads"].as_array().unwrap() {
        assert!(
            ns(t, "on_cpu_ns") <= window + tracer_truth::ABOVE_THE_WINDOW_NS,
            "{what}: thread {} on-CPU {} ns above the {window} ns window",
            t["tid"],
            t["on_cpu_ns"]
        );
    }
    for c in doc["per_cpu"].as_array().into_iter().flatten() {
        assert!(
            ns(c, "on_cpu_ns") <= window,
            "{what}: CPU {} on-CPU {} ns above the {window} ns window",
            c["cpu"],
            c["on_cpu_ns"]
        );
    }
}

/// The first mount of filesystem type `fs` (with mount option `opt`, e.g. the v1 `cpu`
/// controller), from /proc/mounts.
pub fn mount_of(fs: &str, opt: Option<&str>) -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(2) == Some(&fs)
            && opt.is_none_or(|o| f.get(3).is_some_and(|x| x.split(',').any(|x| x == o))))
        .then(|| PathBuf::from(f[1]))
    })
}

/// The cgroup v2 hierarchy (`/sys/fs/cgroup` on unified systems, `/sys/fs/cgroup/unified`
/// on hybrid ones); the cgroup tests need one.
pub fn cgroup2_mount() -> PathBuf {
    mount_of("cgroup2", None).expect("no cgroup2 mount: the cgroup tests need cgroup v2")
}

/// A cgroup v2 directory's CPU time so far (`cpu.stat` `usage_usec`, kept without any
/// controller), ns.
pub fn cgroup_usage_ns(cg: &std::path::Path) -> f64 {
    let s = std::fs::read_to_string(cg.join("cpu.stat")).expect("cpu.stat");
    s.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .expect("usage_usec")
        * 1e3
}

/// Cgroup directories a test made, removed (deepest first) on drop: their tasks killed
/// (`cgroup.kill` where the kernel has it) and each removal retried for up to 5 s while
/// they die. What existed before is left alone.
#[derive(Default)]
pub struct MadeDirs(Vec<PathBuf>);

impl MadeDirs {
    /// Makes `rel` under `base`, recording each missing component.
    pub fn dir(&mut self, base: &std::path::Path, rel: &str) -> PathBuf {
        let mut p = base.to_path_buf();
        for c in rel.split('/') {
            p.push(c);
            if !p.exists() {
                std::fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {p:?}: {e}"));
                self.0.push(p.clone());
            }
        }
        p
    }
}

impl Drop for MadeDirs {
    fn drop(&mut self) {
        for d in self.0.iter().rev() {
            let _ = std::fs::write(d.join("cgroup.kill"), "1");
            let t = std::time::Instant::now();
            while std::fs::remove_dir(d).is_err() && t.elapsed() < std::time::Duration::from_secs(5)
            {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    /// The object's program names include the ones the tracer loads outside the three
    /// probe-mode sets (the task iterator, the perf sched hooks, sched_stat_runtime), which
    /// the hand-kept list once missed.
    #[test]
    fn our_programs_come_from_the_object() {
        let names = super::our_programs();
        for n in [
            "dump_threads",
            "floor_switch",
            "sched_switch_bt",
            "sched_stat_runt",
        ] {
            assert!(names.contains(n), "{n} not in {names:?}");
        }
        assert!(
            names.iter().any(|n| n.starts_with("perf_sched_")),
            "{names:?}"
        );
        assert!(names.iter().all(|n| n.len() <= 15), "{names:?}");
    }
}
