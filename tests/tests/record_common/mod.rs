//! What the end-to-end tests of `tracer record` and `tracer slow` share: Perfetto's
//! protos (`tests/perfetto/rebuild.py`), the agreement of a trace with the summary and
//! schedstat (the README's bounds), runqslower's lines, a small disk.
#![allow(dead_code)] // each test file uses its part

use std::{path::PathBuf, process::Command};

use serde_json::Value;
use tracer_tests::scratch;

pub const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

/// The Python with Perfetto's protos: `TRACER_PERFETTO_PYTHON`, else the venv `cargo
/// xtask test` makes under the target directory. Missing is a failure, not a skip.
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("TRACER_PERFETTO_PYTHON") {
        return PathBuf::from(p);
    }
    let target = PathBuf::from(WORKLOAD)
        .parent()
        .and_then(|p| p.parent())
        .expect("target dir")
        .to_path_buf();
    let p = target.join("perfetto-venv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: `cargo xtask test` installs Perfetto's protos there (python3 -m venv; pip install perfetto)",
        p.display()
    );
    p
}

/// Decodes and rebuilds a trace (see `tests/perfetto/rebuild.py`); panics when the file
/// is not a valid trace for Perfetto's protos.
pub fn rebuild(trace: &std::path::Path) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("perfetto/rebuild.py");
    let out = Command::new(python())
        .arg(&script)
        .arg(trace)
        .output()
        .expect("cannot run python");
    assert!(
        out.status.success(),
        "Perfetto's protos refused {}: {}",
        trace.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("rebuild.py JSON")
}

pub fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a number: {v}"))
}

pub fn per_cpu(v: &Value) -> Vec<u64> {
    v.as_array().expect("array").iter().map(u).collect()
}

/// What the summary and the trace say about losses must agree: every event the
/// programs sent was read or counted lost, per CPU, and written.
pub fn check_accounting(doc: &Value, rb: &Value) {
    let rec = &doc["record"];
    let (sent, read, lost) = (
        per_cpu(&rec["sent_per_cpu"]),
        per_cpu(&rec["read_per_cpu"]),
        per_cpu(&rec["lost_per_cpu"]),
    );
    for cpu in 0..sent.len() {
        assert_eq!(
            sent[cpu],
            read[cpu] + lost[cpu],
            "CPU {cpu}: sent {} != read {} + lost {}",
            sent[cpu],
            read[cpu],
            lost[cpu]
        );
    }
    // The switches written at the window's close are not from the kernel.
    assert_eq!(
        u(&rec["switches"]) - u(&rec["window_cuts"]) + u(&rec["wakeups"]) + u(&rec["task_events"]),
        read.iter().sum::<u64>(),
        "everything read is written"
    );
    assert_eq!(
        rb["ftrace_events"].as_array().expect("ftrace_events").len() as u64,
        u(&rec["task_events"]),
        "every task event is in the trace"
    );
    assert_eq!(
        u(&rb["event_order_errors"]),
        0,
        "ftrace events in timestamp order in each bundle"
    );
    assert_eq!(u(&rb["switches"]), u(&rec["switches"]));
    assert_eq!(u(&rb["wakings"]), u(&rec["wakeups"]));
    assert_eq!(u(&rb["bytes"]), u(&rec["bytes"]));
    assert_eq!(u(&rb["order_errors"]), 0, "per-CPU timestamps go forward");
    let end = &rb["stats"]["END_OF_TRACE"];
    for (cpu, l) in lost.iter().enumerate() {
        assert_eq!(
            u(&end[cpu.to_string()]["overrun"]),
            *l,
            "trace stats, CPU {cpu}"
        );
    }
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(
        rb["release"].as_str(),
        Some(release.trim()),
        "SystemInfo utsname"
    );
    // Every thread the summary lists is named in the trace, one asleep the whole window
    // included (98 of 451 threads, kernel threads asleep, were missing from a
    // system-wide trace).
    for t in doc["threads"].as_array().expect("threads") {
        let (tid, pid) = (u(&t["tid"]), u(&t["pid"]));
        if tid == 0 || pid == 0 || t.get("folded_threads").is_some() {
            continue;
        }
        assert!(
            rb["threads_named"].get(tid.to_string()).is_some(),
            "TID {tid} ({}) is in the summary but not named in the trace",
            t["comm"]
        );
    }
}

/// A tmpfs of `kib` KiB mounted for one test, unmounted when dropped.
pub struct SmallDisk(pub PathBuf);

impl SmallDisk {
    pub fn new(name: &str, kib: u32) -> SmallDisk {
        let dir = scratch(name);
        std::fs::create_dir_all(&dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={kib}k"), "tmpfs"])
            .arg(&dir)
            .status()
            .expect("mount");
        assert!(ok.success(), "mounting a tmpfs on {}", dir.display());
        SmallDisk(dir)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// One `runqslower -P` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rqs {
    pub tid: u64,
    pub lat_us: u64,
    /// The local second of the day it printed.
    pub sod: u64,
    pub comm: String,
    pub prev_comm: String,
    pub prev_tid: u64,
}

/// One `runqslower -P` line. Its columns have fixed widths (`%-8s %-16s %-6d %14llu
/// %-16s %-6d`), and a comm may hold spaces.
pub fn runqslower_line(l: &str) -> Option<Rqs> {
    if l.len() < 47 || !l[..8].contains(':') {
        return None;
    }
    let hms: Vec<u64> = l[..8].split(':').filter_map(|x| x.parse().ok()).collect();
    let sod = *hms.first()? * 3600 + *hms.get(1)? * 60 + *hms.get(2)?;
    Some(Rqs {
        tid: l.get(26..32)?.trim().parse().ok()?,
        lat_us: l.get(33..47)?.trim().parse().ok()?,
        sod,
        comm: l.get(9..25)?.trim_end().to_string(),
        prev_comm: l.get(48..64).unwrap_or("").trim_end().to_string(),
        prev_tid: l.get(65..).and_then(|x| x.trim().parse().ok()).unwrap_or(0),
    })
}

/// Local second of the day of a Unix time in ns (what runqslower prints).
pub fn local_second_of_day(unix_ns: u64) -> u64 {
    let t = (unix_ns / 1_000_000_000) as libc::time_t;
    // SAFETY: localtime_r fills the zeroed tm.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    unsafe { libc::localtime_r(&t, &mut tm) };
    tm.tm_hour as u64 * 3600 + tm.tm_min as u64 * 60 + tm.tm_sec as u64
}

/// Reads a child's stdout as it comes (a pipe left unread fills up and stalls the
/// writer, which then loses events), until it closes.
pub fn drain(child: &mut std::process::Child) -> std::thread::JoinHandle<String> {
    use std::io::Read as _;
    let mut out = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    })
}

/// The README's bounds ("Accuracy") for one thread of a recorded run: `ours` is the
/// thread in `rebuild.py`'s output, `sum` in the summary, `t` its schedstat at its end.
/// On-CPU from the trace within 1 % or 1 ms (plus the machine's steal time, which the
/// trace's slices hold where the runtime does not) of schedstat and of the summary; as
/// many waits as the summary (within `gaps` + 2 next to a switch the kernel skipped the
/// program for); their sum between schedstat's `run_delay` (less 0.5 us a wait, see
/// `TRACE_WAIT_AFTER_ENQUEUE_NS`) and the summary's, each
/// widened by 2 % + 1 ms (a wait in the trace ends at the scheduler's boundary: where
/// the runtime begins, at the wakeup's enqueue when the kernel skipped the clock update,
/// as `run_delay` does; the summary's ends at the switch's tracepoint).
pub fn agree(t: &tracer_tests::Truth, sum: &Value, ours: &Value, steal: u64, gaps: Option<u64>) {
    let (on, waits, wait_ns) = (
        u(&ours["on_cpu_ns"]),
        u(&ours["runq_waits"]),
        u(&ours["runq_wait_ns"]),
    );
    let (s_on, s_waits, s_wait) = (
        u(&sum["on_cpu_ns"]),
        u(&sum["runq_waits"]),
        u(&sum["runq_wait_ns"]),
    );
    eprintln!(
        "tid {}: on-CPU trace {on} summary {s_on} schedstat {}; waits trace {waits}/{wait_ns} summary {s_waits}/{s_wait} schedstat {}",
        t.tid, t.run_ns, t.wait_ns
    );
    assert!(
        tracer_truth::ON_CPU
            .plus(steal as f64)
            .holds_ns(on, t.run_ns),
        "tid {}: on-CPU from the trace {on} ns, schedstat {} ns",
        t.tid,
        t.run_ns
    );
    assert!(
        tracer_truth::TRACE_VS_SUMMARY
            .plus(steal as f64)
            .holds_ns(on, s_on),
        "tid {}: on-CPU from the trace {on} ns, summary {s_on} ns",
        t.tid
    );
    let slack = gaps.map_or(0, |g| g + 2);
    assert!(
        waits.abs_diff(s_waits) <= slack,
        "tid {}: {waits} waits in the trace, summary {s_waits} (gaps {gaps:?})",
        t.tid
    );
    let (lo, hi) = tracer_truth::TRACE_WAITS_BETWEEN
        .range(s_wait.min(t.wait_ns) as f64, s_wait.max(t.wait_ns) as f64);
    let lo = lo - waits as f64 * tracer_truth::TRACE_WAIT_AFTER_ENQUEUE_NS;
    assert!(
        (lo..=hi).contains(&(wait_ns as f64)),
        "tid {}: run-queue wait from the trace {wait_ns} ns, summary {s_wait}, schedstat {} (allowed {lo:.0} ..= {hi:.0})",
        t.tid,
        t.wait_ns
    );
}
