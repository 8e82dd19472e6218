//! Output that cannot be written: a reader that went away ends the run quietly and
//! leaves nothing attached; a failed write is a one-line error.
use std::{
    collections::BTreeSet,
    io::BufRead as _,
    process::{Child, Command, ExitStatus, Stdio},
    time::{Duration, Instant},
};

use tracer_tests::{held_programs, require_root, tracer_bin, wait_held};

use super::stderr_of;

/// Like [`wait_within`], and then checks that every program the tracer was seen holding
/// (`seen` before, and while it ran) is gone from the kernel: nothing left attached.
fn wait_detached(
    child: &mut Child,
    limit: Duration,
    what: &str,
    seen: BTreeSet<u32>,
    expect_held: bool,
) -> ExitStatus {
    let t = Instant::now();
    let mut held = seen;
    let st = loop {
        held.extend(held_programs(child.id()));
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(
        !expect_held || !held.is_empty(),
        "{what}: never seen holding programs"
    );
    let left = tracer_tests::wait_unloaded(&held);
    assert!(left.is_empty(), "{what}: left loaded {left:?}");
    st
}

/// Runs the tracer with `args`, its reader going away once it has loaded (so the test
/// sees its programs): it ends by SIGPIPE's status, quietly, leaving nothing attached.
fn reader_gone_once_loaded(args: &[&str], what: &str) {
    let mut child = Command::new(tracer_bin())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let seen = wait_held(child.id());
    drop(child.stdout.take());
    let st = wait_detached(&mut child, Duration::from_secs(10), what, seen, true);
    let err = stderr_of(&mut child);
    assert_eq!(st.code(), Some(141), "{what}: {err}");
    assert!(err.is_empty(), "{what}: quiet: {err}");
}

#[test]
#[ignore = "needs root"]
fn a_closed_pipe_ends_the_run_quietly_and_detaches() {
    require_root();
    // Interval mode: the reader takes one line and goes away (`| head -1`).
    let t = Instant::now();
    let mut child = Command::new(tracer_bin())
        .args(["run", "-i", "200ms", "-d", "30s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(first.starts_with("tracer interval 1"), "{first}");
    let st = wait_detached(
        &mut child,
        Duration::from_secs(10),
        "-i with a closed pipe",
        BTreeSet::new(),
        true,
    );
    let err = stderr_of(&mut child);
    assert_eq!(st.code(), Some(141), "{err}");
    assert!(err.is_empty(), "quiet: {err}");
    assert!(t.elapsed() < Duration::from_secs(10));

    // No -d and nothing printed yet: the run ends once the reader has gone, rather
    // than running on for nobody.
    let t = Instant::now();
    reader_gone_once_loaded(&["run"], "no -d, a closed pipe");
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t.elapsed()
    );

    // A short run whose reader has gone (`| true`).
    reader_gone_once_loaded(&["run", "-d", "500ms"], "-d with a closed pipe");
}

#[test]
#[ignore = "needs root"]
fn a_failed_write_is_a_one_line_error() {
    require_root();
    for args in [
        &["run", "-d", "300ms"][..],
        &["run", "-i", "200ms", "-d", "30s"],
        &["check"],
    ] {
        let t = Instant::now();
        let mut child = Command::new(tracer_bin())
            .args(args)
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let st = wait_detached(
            &mut child,
            Duration::from_secs(10),
            "writing to /dev/full",
            BTreeSet::new(),
            args[0] == "run",
        );
        let err = stderr_of(&mut child);
        assert_eq!(st.code(), Some(2), "{args:?}: {err}");
        assert_eq!(
            err,
            "tracer: error: cannot write the report to standard output: No space left on device (os error 28)\n",
            "{args:?}"
        );
        assert!(t.elapsed() < Duration::from_secs(5), "{args:?}");
    }
}
