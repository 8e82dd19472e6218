//! The tracer binary, end to end, over a fixture root: a snapshot in JSON and text, the
//! error off pseries, SIGINT and SIGTERM ending the window with the settings restored,
//! and the run after a SIGKILL restoring them.
use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use tracer::pseries::vcpudispatch;

use super::{dtl_fixture, Fixture};

/// The tracer binary: $TRACER_BIN (set by `cargo xtask test`), else beside this test's
/// own target directory (`cargo test` in the workspace builds it), else
/// ../target/debug/tracer. Missing is a failure: these tests never pass without running.
fn tracer_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TRACER_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "TRACER_BIN={} is not a file", p.display());
        return p;
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(|d| d.join("tracer")));
    let fallback = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/debug/tracer");
    beside
        .into_iter()
        .chain([fallback])
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "the tracer binary was not found: build it (`cargo xtask build`, or `cargo test` \
                 in the workspace), or set TRACER_BIN"
            )
        })
}

#[test]
fn cli_snapshot_json_and_text() {
    let bin = tracer_bin();
    let f = Fixture::pseries("cli");
    dtl_fixture(&f);
    let out = Command::new(&bin)
        .arg("--root")
        .arg(f.path("/"))
        .args(["dtl", "--duration", "0", "--raw", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["mode"], "raw");
    assert_eq!(j["dtl"]["entries"], 15);
    assert_eq!(j["dtl"]["lost"], 2);
    assert_eq!(j["dtl"]["dispatch_reasons"]["decrementer_interrupt"], 10);
    assert_eq!(j["vcpus"][0]["total_disp"], 6839);

    let out = Command::new(&bin)
        .arg("--root")
        .arg(f.path("/"))
        .args(["dtl", "--duration", "0"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("numa_home") && text.contains("cpu3"),
        "{text}"
    );

    let empty = Fixture::new("cli-x86");
    let out = Command::new(&bin)
        .arg("--root")
        .arg(empty.path("/"))
        .args(["dtl"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a pseries partition:") && err.contains("vcpudispatch_stats not found"),
        "{err}"
    );
    // Where to look instead on this machine.
    assert!(
        err.contains("`tracer run`") && err.contains("steal time"),
        "{err}"
    );
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn cli_sigint_and_sigterm_end_the_window_and_restore() {
    let bin = tracer_bin();
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let f = Fixture::pseries("cli-signal");
        let child = Command::new(&bin)
            .arg("--root")
            .arg(f.path("/"))
            .args(["dtl", "--duration", "60s", "--dtl-freq", "100", "--json"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for("the frequency change", || {
            fs::read_to_string(f.path(vcpudispatch::FREQ_PATH)).is_ok_and(|s| s == "100\n")
        });
        // SAFETY: signalling our own child.
        unsafe { libc::kill(child.id() as i32, sig) };
        let start = Instant::now();
        let out = child.wait_with_output().unwrap();
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(j["interrupted"], true);
        assert_eq!(
            f.read(vcpudispatch::FREQ_PATH),
            "50\n",
            "restored after signal {sig}"
        );
        assert!(!f.path(vcpudispatch::STATE_PATH).exists());
    }
}

#[test]
fn cli_after_sigkill_the_next_run_restores() {
    let bin = tracer_bin();
    let f = Fixture::pseries("cli-kill");
    let mut child = Command::new(&bin)
        .arg("--root")
        .arg(f.path("/"))
        .args(["dtl", "--duration", "60s", "--dtl-freq", "100"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the frequency change", || {
        fs::read_to_string(f.path(vcpudispatch::FREQ_PATH)).is_ok_and(|s| s == "100\n")
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let state = f.read(vcpudispatch::STATE_PATH);
    assert!(state.contains(&format!("pid {}", child.id())), "{state}");
    assert_eq!(
        f.read(vcpudispatch::FREQ_PATH),
        "100\n",
        "left changed by the kill"
    );

    let out = Command::new(&bin)
        .arg("--root")
        .arg(f.path("/"))
        .args(["dtl", "--duration", "0"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("restored DTL settings") && err.contains("vcpudispatch_stats_freq=50"),
        "{err}"
    );
    assert_eq!(f.read(vcpudispatch::FREQ_PATH), "50\n");
    assert!(!f.path(vcpudispatch::STATE_PATH).exists());
}
