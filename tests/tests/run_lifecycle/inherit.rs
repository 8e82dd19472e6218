//! What the traced command inherits: under the tracer, the signal state, umask, CPUs,
//! limits, nice, fds and environment a plain spawn would give it; a pipeline in it ends
//! without a broken pipe.
use std::{
    os::unix::process::CommandExt as _,
    path::Path,
    process::{Command, Stdio},
};

use tracer_tests::{require_root, run_tracer, scratch, tracer_bin};

/// A shell line writing what a process inherits (its own signal state, umask, CPUs,
/// capabilities, limits, nice, open fds, environment) to `file`: the same for the
/// command under the tracer and started directly. Only builtins, no fork: a shell blocks
/// every signal for a moment around a fork, which a child reading its status would see.
fn inherited_state_script(file: &Path) -> String {
    format!(
        "exec 2>/dev/null >{}; \
         while IFS= read -r l; do case \"$l\" in Sig[BIC]*|Umask*|Cpus_allowed_list*|NoNewPrivs*|Cap*) echo \"$l\";; esac; done </proc/self/status; \
         while IFS= read -r l; do echo \"$l\"; done </proc/self/limits; \
         read -r stat </proc/self/stat; set -- $stat; echo \"nice ${{19}}\"; \
         echo fds /proc/self/fd/*; export -p",
        file.display()
    )
}

/// The state `sh -c SCRIPT` sees, started by `tracer run` (true) or directly (false),
/// both spawned with `setup` applied first (as a parent shell would have set it).
fn observed(under_tracer: bool, setup: fn() -> std::io::Result<()>, name: &str) -> String {
    let file = scratch(name);
    let script = inherited_state_script(&file);
    let mut cmd = if under_tracer {
        let mut c = Command::new(tracer_bin());
        c.args(["run", "--as-root", "--", "sh", "-c", &script]);
        c
    } else {
        let mut c = Command::new("sh");
        c.args(["-c", &script]);
        c
    };
    // SAFETY: the closure only makes async-signal-safe calls.
    unsafe { cmd.pre_exec(setup) };
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = std::fs::read_to_string(&file).expect("the script wrote its state");
    let _ = std::fs::remove_file(&file);
    s
}

fn nothing() -> std::io::Result<()> {
    Ok(())
}

/// What a parent may hand down: SIGHUP ignored (nohup), SIGUSR1 blocked, a umask, a
/// lower fd limit, a nice level.
fn handed_down() -> std::io::Result<()> {
    // SAFETY: async-signal-safe calls on this (child) process only.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR1);
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        libc::umask(0o027);
        let lim = libc::rlimit {
            rlim_cur: 512,
            rlim_max: 4096,
        };
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::setpriority(libc::PRIO_PROCESS, 0, 3);
    }
    Ok(())
}

/// A signal-set line of /proc/PID/status (`SigIgn`, `SigBlk`) as a bit mask.
fn sigset(state: &str, key: &str) -> u64 {
    let v = state
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {state}"));
    u64::from_str_radix(v.trim(), 16).unwrap()
}

fn bit(sig: i32) -> u64 {
    1 << (sig - 1)
}

#[test]
#[ignore = "needs root"]
fn the_command_inherits_what_a_plain_spawn_gives() {
    require_root();
    let traced = observed(true, nothing, "inherit-plain-t");
    let plain = observed(false, nothing, "inherit-plain-p");
    assert_eq!(traced, plain, "under the tracer vs started directly");
    // As perf stat gives it: SIGPIPE not ignored (Rust's runtime ignores it in the
    // tracer), nothing blocked.
    assert_eq!(
        sigset(&traced, "SigIgn:") & bit(libc::SIGPIPE),
        0,
        "{traced}"
    );
    assert_eq!(sigset(&traced, "SigBlk:"), 0, "{traced}");
    // What the tracer itself was handed is passed on, not reset.
    let traced = observed(true, handed_down, "inherit-nohup-t");
    let plain = observed(false, handed_down, "inherit-nohup-p");
    assert_eq!(traced, plain, "under the tracer vs started directly");
    let ign = sigset(&traced, "SigIgn:");
    assert_ne!(ign & bit(libc::SIGHUP), 0, "SIGHUP stays ignored: {traced}");
    assert_eq!(ign & bit(libc::SIGPIPE), 0, "SIGPIPE is not: {traced}");
    assert_eq!(sigset(&traced, "SigBlk:"), bit(libc::SIGUSR1), "{traced}");
    assert!(traced.contains("Umask:\t0027"), "{traced}");
}

#[test]
#[ignore = "needs root"]
fn a_pipeline_in_the_command_ends_without_broken_pipe() {
    require_root();
    let out = run_tracer(&["run", "--", "sh", "-c", "yes | head -1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("Broken pipe"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("y\n"));
}
