//! Where `tracer record`'s trace goes, end to end as root: an unwritable path, a full
//! disk, standard output and a FIFO. Each ends with one line or a
//! valid trace, never a hang or a silently untraced command.
use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use tracer_tests::{final_report, require_root, run_tracer, scratch, tracer_bin};

mod record_common;
use record_common::*;

#[test]
#[ignore = "needs root"]
fn an_unwritable_output_is_one_line() {
    require_root();
    let out = run_tracer(&["record", "-o", "/nonexistent-dir/t.pftrace", "-d", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("cannot write the trace") && err.contains("/nonexistent-dir"),
        "{err}"
    );
}

/// A full disk ends the run cleanly: the report is printed (JSON here, with the notice
/// of the cut trace), the command is sent SIGTERM (as `perf record` does with its
/// workload) rather than left running untraced, the run fails with the write's error on
/// its last line, and the trace is cut back to its last whole packet and still ends with
/// the end-of-trace stats (room for them is kept with `fallocate`).
#[test]
#[ignore = "needs root"]
fn a_full_disk_ends_the_run_with_a_valid_trace() {
    require_root();
    let disk = SmallDisk::new("fulldisk", 64);
    let trace = disk.0.join("t.pftrace");
    let t = Instant::now();
    // System-wide with a busy workload: far more than 64 KiB in 20 s.
    let out = run_tracer(&[
        "record",
        "--json",
        "-o",
        trace.to_str().unwrap(),
        "-d",
        "20",
        "--",
        WORKLOAD,
        "churn",
        "--per-sec",
        "2000",
        "--duration-ms",
        "20000",
        "--out",
        "/dev/null",
    ]);
    let took = t.elapsed();
    assert_eq!(out.status.code(), Some(2), "a failed trace is an error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    let last = err.trim_end().lines().last().unwrap_or("");
    assert!(
        last.starts_with("tracer: error:")
            && last.contains("No space left")
            && last.contains("t.pftrace"),
        "the last line of stderr is the error: {err}"
    );
    assert!(
        took < Duration::from_secs(15),
        "the run and its command ended with the disk full, after {took:?}"
    );
    // The report, with what was written.
    let docs = tracer_tests::json_docs(&out);
    let doc = docs.last().expect("the report is printed");
    let notices = doc["notices"].to_string();
    assert!(notices.contains("could not be written"), "{notices}");
    assert!(notices.contains("SIGTERM"), "{notices}");
    assert_eq!(doc["command"]["state"], "killed", "{}", doc["command"]);
    assert_eq!(doc["command"]["exit_code"], 128 + 15, "{}", doc["command"]);
    assert!(u(&doc["record"]["bytes"]) > 0, "{}", doc["record"]);
    // Cut back to the last whole packet: Perfetto's protos read all of it.
    let rb = rebuild(&trace);
    assert_eq!(
        u(&rb["bytes"]),
        u(&doc["record"]["bytes"]),
        "the report counts the file"
    );
    assert_eq!(
        u(&rb["switches"]),
        u(&doc["record"]["switches"]),
        "the report counts the switches in the file"
    );
    assert!(
        rb["stats"]["END_OF_TRACE"].is_object(),
        "the end-of-trace stats fit after the cut: {}",
        rb["stats"]
    );
}

/// `-o -` and `-o /dev/stdout`: the trace alone on standard output (a file here), the
/// report on standard error, as `perf record -o -`.
#[test]
#[ignore = "needs root"]
fn a_trace_on_stdout_sends_the_report_to_stderr() {
    require_root();
    for o in ["-", "/dev/stdout"] {
        let file = scratch("stdout.pftrace");
        let out = Command::new(tracer_bin())
            .args(["record", "--json", "-o", o, "-d", "500ms"])
            .stdout(std::fs::File::create(&file).unwrap())
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rb = rebuild(&file);
        let err = String::from_utf8_lossy(&out.stderr);
        let doc: Value = err
            .lines()
            .rfind(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .unwrap_or_else(|| panic!("-o {o}: no report on stderr: {err}"));
        check_accounting(&doc, &rb);
        assert!(u(&rb["switches"]) > 0, "-o {o}");
        let _ = std::fs::remove_file(&file);
    }
}

/// A FIFO nobody reads yet: said on one line, then recorded once a reader comes.
#[test]
#[ignore = "needs root"]
fn a_fifo_without_a_reader_is_said_and_waited_for() {
    use std::io::{BufRead as _, BufReader, Read as _};
    require_root();
    let fifo = scratch("trace.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let _gone = Removed(fifo.clone());
    let child = Command::new(tracer_bin())
        .args([
            "record",
            "--json",
            "-o",
            fifo.to_str().unwrap(),
            "-d",
            "500ms",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A tracer that hangs on the FIFO must not outlive a failed test.
    let mut child = KillOnDrop(Some(child));
    let mut err = BufReader::new(child.get().stderr.take().unwrap());
    let mut line = String::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        let _ = err.read_line(&mut line);
        let _ = tx.send(line);
        let mut rest = String::new();
        let _ = err.read_to_string(&mut rest);
        rest
    });
    let said = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("nothing said within 10 s while waiting for a reader");
    assert!(
        said.contains("waiting for a reader") && said.contains("trace.fifo"),
        "{said}"
    );
    // Nothing is loaded while it waits.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        tracer_tests::held_programs(child.get().id()).is_empty(),
        "programs loaded before a reader came"
    );
    let mut data = Vec::new();
    std::fs::File::open(&fifo)
        .unwrap()
        .read_to_end(&mut data)
        .unwrap();
    let out = child.0.take().unwrap().wait_with_output().unwrap();
    let rest = t.join().unwrap();
    assert!(out.status.success(), "{said}{rest}");
    let file = scratch("from-fifo.pftrace");
    std::fs::write(&file, &data).unwrap();
    let rb = rebuild(&file);
    let doc = final_report(&out);
    check_accounting(&doc, &rb);
    let _ = std::fs::remove_file(&file);
}

/// A child killed if the test ends (or fails) before it was waited for.
struct KillOnDrop(Option<std::process::Child>);

impl KillOnDrop {
    fn get(&mut self) -> &mut std::process::Child {
        self.0.as_mut().expect("not waited for yet")
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A path removed when the test ends, however it ends.
struct Removed(std::path::PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A run that fails before it starts removes a regular file it left empty, never what
/// else `-o` named (`/dev/stdout` is a symlink too: main removed it).
#[test]
#[ignore = "needs root"]
fn a_failed_start_removes_no_device() {
    require_root();
    let link = scratch("devnull-link");
    std::os::unix::fs::symlink("/dev/null", &link).unwrap();
    let _gone = Removed(link.clone());
    // 4194303 is above any pid_max (2^22).
    let out = run_tracer(&["record", "-o", link.to_str().unwrap(), "-p", "4194303"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::symlink_metadata(&link).is_ok(),
        "the symlink -o named was removed"
    );
}
