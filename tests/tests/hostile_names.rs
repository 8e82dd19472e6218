//! Issue 25 item 1 and issue 24 item 11 against the real consumer: a local user's
//! threads name themselves with escape sequences (OSC 2 sets a terminal's title, OSC 52
//! its clipboard), CR/LF and a screen clear, a bidi override and bytes that are not
//! UTF-8, while root runs `tracer top`, `slow`, `offcpu` (text, folded, SVG) and `run`
//! on them in tmux (Debian's package, installed by `cargo xtask test`). The pane title
//! and tmux's paste buffers must stay as they were, the screen must show the names
//! escaped, the flame graph must be XML (xmllint), and a process whose name is not
//! UTF-8 must be traced with -p, -t and top -p.
use std::{
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use serde_json::Value;
use tracer_tests::{require_root, tracer_bin};

const HOSTILE: &str = env!("CARGO_BIN_EXE_hostile-names");

/// The names, C-escaped for hostile-names (the bidi override as the character itself).
const NAMES: &[&str] = &[
    "\\e]2;OWNED\\a",
    "\\e]52;c;cm0K\\a",
    "ok\\r\\nfake\\e[2J",
    "\\e]0unterm",
    "evil\u{202e}gpj",
    "w\\xff\\xfe",
];

/// The hostile process (killed when dropped) and its PID.
struct Neighbour(Child, u32);

impl Neighbour {
    fn start(ms: u64, names: &[&str]) -> Neighbour {
        let mut c = Command::new(HOSTILE)
            .arg("--ms")
            .arg(ms.to_string())
            .args(names)
            .stdout(Stdio::piped())
            .spawn()
            .expect("hostile-names starts");
        let mut line = String::new();
        use std::io::BufRead as _;
        std::io::BufReader::new(c.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let pid = line.trim().parse().expect("its PID");
        // Let every thread take its name.
        sleep(Duration::from_millis(200));
        Neighbour(c, pid)
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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

fn tmux(args: &[&str]) -> String {
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

/// A tmux server of its own (its own socket: the buffers and options are the test's),
/// 200x50, a plain shell, set-clipboard on so that OSC 52 would land in a buffer.
struct Pane {
    socket: String,
    dir: std::path::PathBuf,
}

impl Pane {
    fn new(tag: &str) -> Pane {
        let socket = format!("tracer-hostile-{tag}-{}", std::process::id());
        let dir = std::env::temp_dir().join(&socket);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let p = Pane { socket, dir };
        p.t(&[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "200",
            "-y",
            "50",
            "-c",
            p.dir.to_str().unwrap(),
            "sh",
        ]);
        p.t(&["set-option", "-g", "set-clipboard", "on"]);
        p.t(&["set-option", "-g", "allow-rename", "on"]);
        p
    }
    fn t(&self, args: &[&str]) -> String {
        let mut a = vec!["-L", self.socket.as_str()];
        a.extend(args);
        tmux(&a)
    }
    fn title(&self) -> String {
        self.t(&["display", "-p", "-t", "t", "#{pane_title}"])
            .trim()
            .to_string()
    }
    fn buffers(&self) -> String {
        self.t(&["list-buffers"])
    }
    fn screen(&self) -> String {
        // The whole history: a run prints more than a screen.
        self.t(&["capture-pane", "-p", "-t", "t", "-S", "-2000"])
    }
    /// Types `cmd` into the shell, then waits (up to `secs`) for `marker` on screen.
    fn run(&self, cmd: &str, marker: &str, secs: u64) -> String {
        self.t(&[
            "send-keys",
            "-t",
            "t",
            "-l",
            &format!("{cmd}; echo {marker}-$?"),
        ]);
        self.t(&["send-keys", "-t", "t", "Enter"]);
        let t = Instant::now();
        loop {
            let s = self.screen();
            if printed(&s, &format!("{marker}-")) {
                return s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(secs),
                "waited {secs} s for {cmd}:\n{s}"
            );
            sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Pane {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What must hold after each command: the title as it was, no buffer, nothing spoofed.
fn assert_untouched(p: &Pane, title: &str, what: &str) {
    let now = p.title();
    assert!(
        now == title && !now.contains("OWNED"),
        "{what} set the pane title to {now:?} (was {title:?})"
    );
    let b = p.buffers();
    assert!(
        b.trim().is_empty(),
        "{what} put something in tmux's paste buffers: {b}"
    );
}

#[test]
#[ignore = "needs root"]
fn hostile_names_do_not_reach_the_terminal() {
    require_root();
    let n = Neighbour::start(120_000, NAMES);
    let p = Pane::new("names");
    let title = p.title();
    let bin = tracer_bin();
    let bin = bin.display();
    let pid = n.1;
    let svg = p.dir.join("off.svg");
    for (i, (what, cmd, secs)) in [
        ("run", format!("{bin} run -p {pid} -d 1s -L"), 30),
        ("slow", format!("{bin} slow -p {pid} -d 2s --min 1us"), 30),
        (
            "slow --json",
            format!("{bin} slow -p {pid} -d 1s --min 1us --json"),
            30,
        ),
        (
            "slow --off-cpu",
            format!("{bin} slow -p {pid} -d 1s --min 1us --off-cpu"),
            30,
        ),
        (
            "offcpu",
            format!(
                "{bin} offcpu -p {pid} -d 1s --top 0 --svg {}",
                svg.display()
            ),
            60,
        ),
        (
            "offcpu --folded",
            format!("{bin} offcpu -p {pid} -d 1s --folded"),
            60,
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let screen = p.run(&cmd, &format!("done{i}"), secs);
        assert!(
            screen.contains(&format!("done{i}-0")),
            "{what} failed:\n{screen}"
        );
        assert_untouched(&p, &title, what);
        assert!(
            screen.contains("\\x1b]2;OWNED\\x07")
                || screen.contains("\\x1b]2:OWNED\\x07")
                || screen.contains("\\u001b]2;OWNED\\u0007"),
            "{what} shows the name escaped:\n{screen}"
        );
        // The spoofed row and the bidi override come out as text on their line.
        assert!(
            screen.contains("ok\\r\\nfake") || what.starts_with("slow"),
            "{what}:\n{screen}"
        );
        p.t(&["clear-history", "-t", "t"]);
        p.t(&["send-keys", "-t", "t", "clear", "Enter"]);
        sleep(Duration::from_millis(200));
    }
    // The flame graph of those stacks is well-formed XML.
    let out = Command::new("xmllint")
        .arg("--noout")
        .arg(&svg)
        .output()
        .expect("xmllint (`cargo xtask test` installs libxml2-utils)");
    assert!(
        out.status.success(),
        "xmllint: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // top draws every cell from the names; q ends it.
    p.t(&[
        "send-keys",
        "-t",
        "t",
        "-l",
        &format!("{bin} top -p {pid}; echo top-$?"),
    ]);
    p.t(&["send-keys", "-t", "t", "Enter"]);
    let t = Instant::now();
    let screen = loop {
        let s = p.t(&["capture-pane", "-p", "-t", "t"]);
        if s.contains(" #2 ") {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "top never drew:\n{s}"
        );
        sleep(Duration::from_millis(100));
    };
    // Expand the process: every thread's name is on screen.
    p.t(&["send-keys", "-t", "t", "Enter"]);
    sleep(Duration::from_millis(1500));
    let expanded = p.t(&["capture-pane", "-p", "-t", "t"]);
    assert_untouched(&p, &title, "top");
    assert!(
        screen.contains("\\x1b]2;OWNE") && expanded.contains("\\x1b]52;c"),
        "top shows the names escaped:\n{expanded}"
    );
    p.t(&["send-keys", "-t", "t", "q"]);
    let t = Instant::now();
    while !printed(&p.screen(), "top-") {
        assert!(t.elapsed() < Duration::from_secs(15), "top did not end");
        sleep(Duration::from_millis(100));
    }
    assert_untouched(&p, &title, "top, after quitting");
}

/// Issue 24 item 11: `run -p P` of a live process whose name is not UTF-8 said "already
/// exited (a zombie ...)", `-t P` "stream did not contain valid UTF-8".
#[test]
#[ignore = "needs root"]
fn a_process_whose_name_is_not_utf8_is_traced() {
    require_root();
    let n = Neighbour::start(30_000, &["w\\xff\\xfe", "\\xc3\\x28bad"]);
    let pid = n.1.to_string();
    for target in [["-p", pid.as_str()], ["-t", pid.as_str()]] {
        let out = Command::new(tracer_bin())
            .arg("run")
            .args(target)
            .args(["-d", "500ms", "--json"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "run {target:?}: {err}");
        let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON report");
        let threads = doc["threads"].as_array().unwrap();
        let main = threads
            .iter()
            .find(|t| t["tid"].as_u64() == Some(n.1 as u64))
            .unwrap_or_else(|| panic!("{target:?}: the main thread is missing: {doc}"));
        assert_eq!(main["comm"], "w\\xff\\xfe", "{target:?}");
        assert!(main["slices"].as_u64().unwrap() > 5, "it ran: {main}");
        if target[0] == "-p" {
            assert!(
                threads.iter().any(|t| t["comm"] == "\\xc3(bad"),
                "the second thread: {doc}"
            );
        }
    }
    // top -p draws it (in tmux: top wants a terminal).
    let p = Pane::new("utf8");
    p.t(&[
        "send-keys",
        "-t",
        "t",
        "-l",
        &format!("{} top -p {pid} -d 3s; echo top-$?", tracer_bin().display()),
    ]);
    p.t(&["send-keys", "-t", "t", "Enter"]);
    let t = Instant::now();
    loop {
        let s = p.t(&["capture-pane", "-p", "-t", "t"]);
        if s.contains("w\\xff\\xfe") && s.contains(" #1 ") {
            break;
        }
        assert!(
            !printed(&s, "top-"),
            "top ended without showing the process:\n{s}"
        );
        assert!(t.elapsed() < Duration::from_secs(30), "{s}");
        sleep(Duration::from_millis(100));
    }
}
