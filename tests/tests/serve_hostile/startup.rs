//! What is settled when the exporter starts: hostile web configs (a cost-31 hash, an alias
//! bomb, `cert_file: /dev/zero`) refused in one line, quickly and in little memory, and
//! `--listen` with port 0 reporting the port it got.
use std::{
    io::Read as _,
    process::{Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::sleep,
    time::{Duration, Instant},
};

use tracer_tests::{require_root, tracer_bin};

use super::{curl, free_port, scratch, Killed};

/// Runs the tracer with `args`, killed after `secs` (the old exporter accepted these
/// configs and served on: the test must fail, not hang): (output, peak RSS in KiB
/// from wait4, whether it had to be killed).
#[allow(clippy::zombie_processes)] // reaped by wait4, which std does not know of
fn run_bounded(args: &[&str], secs: u64) -> (std::process::Output, u64, bool) {
    let mut child = Command::new(tracer_bin())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = child.stderr.take().unwrap();
    let err_t = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let pid = child.id() as i32;
    let reaped = Arc::new(AtomicBool::new(false));
    let killed = Arc::new(AtomicBool::new(false));
    let (r, k) = (reaped.clone(), killed.clone());
    std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(secs) {
            if r.load(Ordering::SeqCst) {
                return;
            }
            sleep(Duration::from_millis(20));
        }
        if !r.load(Ordering::SeqCst) {
            k.store(true, Ordering::SeqCst);
            // SAFETY: kill(2) on our own child, not reaped yet.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    });
    let mut status = 0;
    // SAFETY: zeroed rusage is valid; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child.
    while unsafe { libc::wait4(pid, &mut status, 0, &mut ru) } < 0 {}
    reaped.store(true, Ordering::SeqCst);
    let stderr = err_t.join().unwrap();
    let out = std::process::Output {
        status: std::os::unix::process::ExitStatusExt::from_raw(status),
        stdout: Vec::new(),
        stderr,
    };
    (out, ru.ru_maxrss as u64, killed.load(Ordering::SeqCst))
}

/// Issue 25 items 4 and 6: a cost-31 hash was accepted (one request hung the exporter,
/// which then ignored SIGTERM); an alias bomb reached 4.6 GB in 6 s, `cert_file:
/// /dev/zero` 4.0 GB. Each is refused at start-up in one line, quickly, in little memory.
#[test]
#[ignore = "needs root"]
fn bad_web_configs_are_refused_in_one_line() {
    require_root();
    let dir = scratch("serve-webcfg");
    let cost31 = bcrypt::hash("x", 4).unwrap().replacen("$04$", "$31$", 1);
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for (i, c) in ('b'..='i').enumerate() {
        let refs = vec![format!("*{}", (b'a' + i as u8) as char); 10].join(", ");
        bomb += &format!("{c}: &{c} [{refs}]\n");
    }
    for (name, text, want) in [
        (
            "cost31",
            format!("basic_auth_users:\n  alice: {cost31}\n"),
            "bcrypt cost 31 is above 14",
        ),
        ("bomb", bomb, "aliases expand to more than"),
        (
            "zero",
            "tls_server_config:\n  cert_file: /dev/zero\n  key_file: /dev/zero\nbasic_auth_users:\n  a: $2y$04$abcdefghijklmnopqrstuu\n".to_string(),
            "",
        ),
    ] {
        let cfg = dir.join(format!("{name}.yml"));
        // The zero case needs a valid user line: take a real hash.
        let text = text.replace("$2y$04$abcdefghijklmnopqrstuu", &bcrypt::hash("x", 4).unwrap());
        std::fs::write(&cfg, text).unwrap();
        let t = Instant::now();
        let listen = format!("127.0.0.1:{}", free_port());
        let args = ["serve", "--listen", &listen, "--web.config.file", cfg.to_str().unwrap()];
        let (out, rss_kib, killed) = run_bounded(&args, 15);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!killed, "{name}: accepted (still running after 15 s; peak {rss_kib} KiB): {err}");
        let want = if want.is_empty() { "/dev/zero is not a regular file" } else { want };
        assert_eq!(out.status.code(), Some(2), "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{name}: one line: {err}");
        assert!(t.elapsed() < Duration::from_secs(5), "{name}: {:?}", t.elapsed());
        assert!(rss_kib < 100 * 1024, "{name}: {rss_kib} KiB");
    }
}

/// Issue 25 item 9: `serve --listen 127.0.0.1:0` said it served on port 0.
#[test]
#[ignore = "needs root"]
fn port_0_reports_the_port_it_got() {
    require_root();
    let mut child = Killed(
        Command::new(tracer_bin())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut err = child.0.stderr.take().unwrap();
    let mut line = Vec::new();
    let t = Instant::now();
    let mut b = [0u8; 1];
    while !line.ends_with(b"\n") && t.elapsed() < Duration::from_secs(30) {
        if err.read(&mut b).unwrap_or(0) == 1 {
            line.push(b[0]);
        }
    }
    let line = String::from_utf8_lossy(&line);
    let port: u16 = line
        .split("http://127.0.0.1:")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    assert_ne!(port, 0, "{line}");
    let (code, body, _) = curl(&[&format!("http://127.0.0.1:{port}/metrics")]);
    assert_eq!(code, 200);
    assert!(body.contains("tracer_info"));
}
