//! Issue 25 items 2, 7 and 8 as a hostile local user would try them: the privileges of
//! every command once attached, read from outside in /proc (and the securebits from the
//! tracer's own debug line); files `nobody` plants in /tmp-like directories (links for the
//! top log's PIDs and for user-named outputs, a 0666 file to read what root writes);
//! `-- COMMAND` run through sudo's variables.
use std::{
    os::unix::{fs::MetadataExt as _, process::CommandExt as _},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use tracer_tests::{require_root, tracer_bin, wait_held};

const NOBODY: u32 = 65534;
const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

/// Whether the shell printed `marker` followed by an exit code on a line of its own (the
/// prompt may come first when it raced the typed command; the command line itself has
/// `marker$?`, not a digit).
fn printed(screen: &str, marker: &str) -> bool {
    screen.lines().any(|l| {
        l.trim_start_matches("# ")
            .strip_prefix(marker)
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    })
}

/// Runs `argv` as `nobody` (a local user without privileges), asserting it worked.
fn as_nobody(argv: &[&str]) {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{argv:?} as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A directory like /tmp (sticky, world-writable) of the test's own, and a victim: a
/// root-owned file in a directory only root can enter.
struct Tmp {
    dir: PathBuf,
    safe: PathBuf,
}

impl Tmp {
    fn new(tag: &str) -> Tmp {
        let base = std::env::temp_dir().join(format!("tracer-nb-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let dir = base.join("tmp");
        let safe = base.join("root-only");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&safe).unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::fs::set_permissions(&safe, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::write(safe.join("victim"), "precious\n").unwrap();
        Tmp { dir, safe }
    }
    fn victim(&self) -> PathBuf {
        self.safe.join("victim")
    }
    fn assert_victim_untouched(&self, what: &str) {
        assert_eq!(
            std::fs::read_to_string(self.victim()).unwrap(),
            "precious\n",
            "{what} wrote through nobody's link into root's file"
        );
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.dir.parent().unwrap());
    }
}

/// Every thread's (comm, CapEff, CapPrm, CapBnd, CapAmb, NoNewPrivs) of process `pid`.
fn thread_states(pid: u32) -> Vec<(String, [String; 5])> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = e.unwrap().path();
        let Ok(status) = std::fs::read_to_string(dir.join("status")) else {
            continue;
        };
        let f = |k: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(k))
                .map(|v| v.trim().to_string())
                .unwrap_or_default()
        };
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        v.push((
            comm.trim().to_string(),
            [
                f("CapEff:"),
                f("CapPrm:"),
                f("CapBnd:"),
                f("CapAmb:"),
                f("NoNewPrivs:"),
            ],
        ));
    }
    v
}

const NONE: &str = "0000000000000000";
/// offcpu's: CAP_DAC_READ_SEARCH (2), CAP_SYS_PTRACE (19), CAP_SYSLOG (34),
/// CAP_CHECKPOINT_RESTORE (40).
const SYMBOLIZE: &str = "0000010400080004";

/// Starts `tracer ARGS` (debug log of the privilege policy on stderr), waits until it
/// holds its programs and has locked down, checks every thread, ends it with SIGINT.
fn check_locked(args: &[&str], caps: &str) {
    let child = Command::new(tracer_bin())
        .args(args)
        .env("RUST_LOG", PRIVILEGES_LOG)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let states = locked_states(pid, args);
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(pid as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    assert_locked(args, caps, &states, &String::from_utf8_lossy(&out.stderr));
}

/// `tmux -L SOCKET ARGS` (a server of the test's own): its stdout.
fn tmux(socket: &str, args: &[&str]) -> String {
    let o = Command::new("tmux")
        .args(["-L", socket])
        .args(args)
        .output()
        .expect("tmux (`cargo xtask test` installs it)");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The log that says what the privilege policy did (`securebits`, refusals).
const PRIVILEGES_LOG: &str = "tracer::sys::privileges=debug";

/// Waits until `pid` holds its programs, then (up to 10 s) until every thread has
/// locked down; its threads' states then.
fn locked_states(pid: u32, args: &[&str]) -> Vec<(String, [String; 5])> {
    assert!(!wait_held(pid).is_empty(), "{args:?} never attached");
    // Locked right after attaching: poll the state for a little while.
    let t = Instant::now();
    loop {
        let s = thread_states(pid);
        let done = s.iter().all(|(_, st)| st[4] == "1");
        if done || t.elapsed() > Duration::from_secs(10) {
            break s;
        }
        sleep(Duration::from_millis(50));
    }
}

/// Every thread holds `caps` alone, with an empty bounding set and no_new_privs; the
/// securebits (which cannot be read from outside) as the tracer logged them.
fn assert_locked(args: &[&str], caps: &str, states: &[(String, [String; 5])], err: &str) {
    assert!(!states.is_empty());
    for (comm, st) in states {
        assert_eq!(
            st,
            &[caps, caps, NONE, NONE, "1"].map(str::to_string),
            "{args:?}: thread {comm} (CapEff, CapPrm, CapBnd, CapAmb, NoNewPrivs)\n{err}"
        );
    }
    // NOROOT|NOROOT_LOCKED|NO_SETUID_FIXUP|..._LOCKED|KEEP_CAPS_LOCKED|NO_CAP_AMBIENT_RAISE|..._LOCKED
    assert!(
        err.contains("securebits 0xef"),
        "{args:?}: no securebits line: {err}"
    );
    assert!(!err.contains("could not lock"), "{args:?}: {err}");
}

/// `top` wants a terminal: it runs in tmux, its stderr (the log) in a file.
#[test]
#[ignore = "needs root"]
fn top_is_locked_down_once_attached() {
    require_root();
    let socket = format!("tracer-nb-locked-top-{}", std::process::id());
    let err_path = format!("/tmp/{socket}.err");
    let t = |args: &[&str]| tmux(&socket, args);
    // `exec`: the pane's process is the tracer itself.
    let cmd = format!(
        "RUST_LOG={PRIVILEGES_LOG} exec {} top -d 20s 2>{err_path}",
        tracer_bin().display()
    );
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "120",
            "-y",
            "30",
            &cmd,
        ],
    );
    let pid: u32 = t(&["display-message", "-p", "-t", "t", "#{pane_pid}"])
        .trim()
        .parse()
        .expect("tmux names the pane's process");
    let states = locked_states(pid, &["top"]);
    t(&["send-keys", "-t", "t", "q"]);
    let start = Instant::now();
    while Path::new(&format!("/proc/{pid}")).exists() && start.elapsed() < Duration::from_secs(10) {
        sleep(Duration::from_millis(50));
    }
    tmux(&socket, &["kill-server"]);
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&err_path);
    assert_locked(&["top"], NONE, &states, &err);
}

/// Issue 25 item 7: after the drop, run and serve stayed uid 0 with a full bounding set,
/// no securebits and no_new_privs off; slow's and record's reader threads kept every
/// capability; offcpu kept them all.
#[test]
#[ignore = "needs root"]
fn every_command_is_locked_down_once_attached() {
    require_root();
    let dir = std::env::temp_dir().join(format!("tracer-nb-locked-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("t.pftrace");
    let trace = trace.to_str().unwrap();
    check_locked(&["run", "-d", "20s"], NONE);
    check_locked(&["run", "-d", "20s", "--", "sleep", "20"], NONE);
    check_locked(&["slow", "-d", "20s", "--min", "1s"], NONE);
    check_locked(&["record", "-d", "20s", "-o", trace], NONE);
    check_locked(&["offcpu", "-d", "20s"], SYMBOLIZE);
    check_locked(&["serve", "--listen", "127.0.0.1:0"], NONE);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `offcpu` keeps what it needs to symbolize another user's process.
#[test]
#[ignore = "needs root"]
fn offcpu_still_symbolizes_another_users_process_after_the_drop() {
    require_root();
    let out_file = std::env::temp_dir().join(format!("tracer-nb-offcpu-{}", std::process::id()));
    let mut w = Command::new(WORKLOAD)
        .args([
            "busy-sleep",
            "--threads",
            "1",
            "--work-ms",
            "1",
            "--sleep-ms",
            "5",
            "--duration-ms",
            "6000",
            "--out",
        ])
        .arg(&out_file)
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .unwrap();
    let pid = w.id().to_string();
    sleep(Duration::from_millis(200));
    let out = Command::new(tracer_bin())
        .args(["offcpu", "-p", &pid, "-d", "2s", "--folded", "--user-only"])
        .output()
        .unwrap();
    let _ = w.kill();
    let _ = w.wait();
    let _ = std::fs::remove_file(&out_file);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.lines()
            .any(|l| l.contains("main") || l.contains("std::thread")),
        "user frames of nobody's process are named:\n{text}"
    );
}

/// Issue 25 item 2: `tracer top -- CMD` wrote to /tmp/tracer-top-PID.log (0644, no
/// O_EXCL): links planted by nobody for the PID range made root write into root's file.
#[test]
#[ignore = "needs root"]
fn top_writes_the_commands_output_to_a_private_file() {
    require_root();
    let tmp = Tmp::new("toplog");
    // Links for the next PIDs, planted by nobody where top would write.
    let next: u32 = std::fs::read_to_string("/proc/sys/kernel/ns_last_pid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let victim = tmp.victim();
    // Made here and given to nobody (lchown), not by `ln` as nobody: that would use up
    // the very PIDs the links are for.
    for pid in next..next + 400 {
        let link = tmp.dir.join(format!("tracer-top-{pid}.log"));
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(NOBODY), Some(NOBODY)).unwrap();
    }
    let socket = format!("tracer-nb-top-{}", std::process::id());
    let t = |args: &[&str]| tmux(&socket, args);
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "120",
            "-y",
            "30",
            "sh",
        ],
    );
    let cmd = format!(
        "TMPDIR={} {} top -d 2s -- sh -c 'echo the-output; sleep 1' 2>/tmp/{socket}.err; echo top-$?",
        tmp.dir.display(),
        tracer_bin().display()
    );
    t(&["send-keys", "-t", "t", "-l", &cmd]);
    t(&["send-keys", "-t", "t", "Enter"]);
    let start = Instant::now();
    while !printed(&t(&["capture-pane", "-p", "-t", "t"]), "top-") {
        assert!(
            start.elapsed() < Duration::from_secs(40),
            "top did not end:\n{}",
            t(&["capture-pane", "-p", "-t", "t"])
        );
        sleep(Duration::from_millis(100));
    }
    tmux(&socket, &["kill-server"]);
    let err = std::fs::read_to_string(format!("/tmp/{socket}.err")).unwrap_or_default();
    let _ = std::fs::remove_file(format!("/tmp/{socket}.err"));
    tmp.assert_victim_untouched("top -- CMD");
    let path = err
        .lines()
        .find_map(|l| l.strip_prefix("tracer top: the command's output is in "))
        .unwrap_or_else(|| panic!("no log named: {err}"));
    let path = Path::new(path.trim());
    assert_eq!(std::fs::read_to_string(path).unwrap(), "the-output\n");
    let md = std::fs::symlink_metadata(path).unwrap();
    assert!(
        md.is_file() && md.uid() == 0 && md.mode() & 0o777 == 0o600,
        "{md:?}"
    );
    let d = std::fs::symlink_metadata(path.parent().unwrap()).unwrap();
    assert!(
        d.uid() == 0 && d.mode() & 0o022 == 0,
        "a directory only root writes"
    );
    // And nobody cannot read it.
    let peek = Command::new("cat")
        .arg(path)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    assert!(!peek.status.success(), "nobody read root's log");
}

/// Issue 25 item 2: `record -o`, `offcpu --svg` and `run --heatmap` wrote through links
/// nobody owns in a sticky directory, and into a 0666 file nobody planted.
#[test]
#[ignore = "needs root"]
fn outputs_refuse_what_nobody_planted_in_a_sticky_directory() {
    require_root();
    let tmp = Tmp::new("outputs");
    let victim = tmp.victim();
    let victim = victim.to_str().unwrap();
    let link = |name: &str| {
        let p = tmp.dir.join(name);
        as_nobody(&["ln", "-s", victim, p.to_str().unwrap()]);
        p.to_str().unwrap().to_string()
    };
    let (rec, svg, heat) = (link("t.pftrace"), link("off.svg"), link("heat.svg"));
    let planted = tmp.dir.join("planted.pftrace");
    as_nobody(&["sh", "-c", &format!("umask 0; : > {}", planted.display())]);
    let planted = planted.to_str().unwrap().to_string();
    for (what, args) in [
        ("record -o", vec!["record", "-d", "1s", "-o", rec.as_str()]),
        (
            "offcpu --svg",
            vec!["offcpu", "-d", "1s", "--svg", svg.as_str()],
        ),
        (
            "run --heatmap",
            vec!["run", "-d", "1s", "-i", "200ms", "--heatmap", heat.as_str()],
        ),
        (
            "record -o (planted file)",
            vec!["record", "-d", "1s", "-o", planted.as_str()],
        ),
    ] {
        let t = Instant::now();
        let out = Command::new(tracer_bin()).args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what} wrote: {err}");
        assert!(
            err.contains("refusing to write")
                && (err.contains("protected_symlinks") || err.contains("protected_regular")),
            "{what}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{what}: one line: {err}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{what}: refused before tracing"
        );
        tmp.assert_victim_untouched(what);
    }
    assert_eq!(std::fs::metadata(&planted).unwrap().len(), 0);
    // top's `e` key writes tracer-top-HHMMSS.svg into the working directory: links for
    // the next minutes, planted by nobody there.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let names: Vec<String> = (0..240)
        .map(|s| {
            let secs = (now + s) as libc::time_t;
            // SAFETY: tm is plain data; localtime_r writes it.
            let mut tm: libc::tm = unsafe { std::mem::zeroed() };
            unsafe { libc::localtime_r(&secs, &mut tm) };
            format!(
                "tracer-top-{:02}{:02}{:02}.svg",
                tm.tm_hour, tm.tm_min, tm.tm_sec
            )
        })
        .collect();
    for n in &names {
        link(n);
    }
    let socket = format!("tracer-nb-e-{}", std::process::id());
    let t = |args: &[&str]| tmux(&socket, args);
    t(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "120",
        "-y",
        "30",
        "-c",
        tmp.dir.to_str().unwrap(),
        "sh",
    ]);
    t(&[
        "send-keys",
        "-t",
        "t",
        "-l",
        &format!("{} top", tracer_bin().display()),
    ]);
    t(&["send-keys", "-t", "t", "Enter"]);
    let start = Instant::now();
    while !t(&["capture-pane", "-p", "-t", "t"]).contains(" #2 ") {
        assert!(start.elapsed() < Duration::from_secs(30), "top never drew");
        sleep(Duration::from_millis(100));
    }
    t(&["send-keys", "-t", "t", "e"]);
    sleep(Duration::from_millis(700));
    let screen = t(&["capture-pane", "-p", "-t", "t"]);
    t(&["send-keys", "-t", "t", "q"]);
    sleep(Duration::from_millis(500));
    tmux(&socket, &["kill-server"]);
    tmp.assert_victim_untouched("top's e key");
    assert!(
        screen.contains("could not write") && screen.contains("refusing"),
        "top says why in its status line:\n{screen}"
    );
}

/// Issue 25 item 8: SUDO_UID=abc, or without SUDO_GID, ran the command as root; the
/// supplementary groups were dropped; HOME, USER and LOGNAME stayed root's.
#[test]
#[ignore = "needs root"]
fn the_command_runs_as_sudo_would_start_it() {
    require_root();
    let run = |env: &[(&str, &str)]| {
        let mut c = Command::new(tracer_bin());
        c.args([
            "run",
            "--",
            "sh",
            "-c",
            "id -u; id -G; echo $HOME $USER $LOGNAME",
        ])
        .env_remove("SUDO_UID")
        .env_remove("SUDO_GID");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    for (env, want) in [
        (
            &[("SUDO_UID", "abc"), ("SUDO_GID", "1")][..],
            "SUDO_UID=\"abc\" is not a numeric ID",
        ),
        (&[("SUDO_UID", "65534")][..], "without SUDO_GID"),
        (
            &[("SUDO_UID", "65534"), ("SUDO_GID", "x")][..],
            "SUDO_GID=\"x\"",
        ),
        (
            &[("SUDO_UID", "3999999999"), ("SUDO_GID", "1")][..],
            "names no user",
        ),
    ] {
        let t = Instant::now();
        let out = run(env);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {err}");
        assert!(
            err.contains(want) && err.trim().lines().count() == 1,
            "{env:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{env:?}: the command ran");
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "refused before attaching"
        );
    }
    // nobody in a group of its own for the test: `sudo -u nobody` would give it.
    let group = format!("tracer-e2e-{}", std::process::id());
    let made = Command::new("groupadd")
        .args(["-U", "nobody", &group])
        .status()
        .expect("groupadd (Debian's passwd package)");
    assert!(made.success(), "groupadd -U nobody {group}");
    let gid = std::fs::read_to_string("/etc/group")
        .unwrap()
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f[0] == group).then(|| f[2].to_string())
        })
        .unwrap();
    let out = run(&[("SUDO_UID", "65534"), ("SUDO_GID", "65534")]);
    let _ = Command::new("groupdel").arg(&group).status();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().take(3).collect();
    assert_eq!(lines[0], "65534", "{text}");
    let groups: Vec<&str> = lines[1].split_whitespace().collect();
    assert!(
        groups.contains(&"65534") && groups.contains(&gid.as_str()),
        "groups {groups:?} (want 65534 and {gid})"
    );
    assert_eq!(lines[2], "/nonexistent nobody nobody", "HOME USER LOGNAME");
}
