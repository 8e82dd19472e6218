#[test]
fn stat_state_and_starttime() {
    let line = "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 98765 1000 10";
    let head = |t: &[u8]| super::StatHead::parse(t).map(|h| (h.state, h.flags, h.start));
    assert_eq!(head(line.as_bytes()), Some(('S', 4194560, 98765)));
    assert_eq!(head(b"1 (x) Z"), None);
    // A name that is not UTF-8 (issue 24 item 11: the run took the process for gone).
    let line = b"42 (w\xff\xfe)) R 1 42 42 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 3 0 777 1000 10";
    assert_eq!(head(line), Some(('R', 4194560, 777)));
}

#[test]
fn watched_targets_end_with_their_process() {
    let root = crate::sys::root::Root::default();
    let mut child = std::process::Command::new("sleep")
        .arg("0.2")
        .spawn()
        .unwrap();
    let w = super::watch_process(&root, child.id()).unwrap();
    assert!(super::still_alive(&root, &w));
    // Exited but not reaped (a zombie) already counts as gone.
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert!(!super::still_alive(&root, &w));
    child.wait().unwrap();
    assert!(!super::still_alive(&root, &w));
    let me = super::watch_thread(
        &root,
        rustix::thread::gettid().as_raw_nonzero().get() as u32,
    )
    .unwrap();
    assert!(super::still_alive(&root, &me));
}

use super::*;

/// A fresh fixture directory under the system temp dir.
fn fixture(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tracer-procfs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("mkdir fixture");
    dir
}

fn put(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).expect("mkdir");
    }
    std::fs::write(p, text).expect("write fixture");
}

#[test]
fn schedstat_parses() {
    let p = Path::new("/proc/1/task/1/schedstat");
    assert_eq!(
        parse_schedstat("123456 7890 42\n", p).ok(),
        Some(Schedstat {
            run_ns: 123456,
            wait_ns: 7890,
            slices: 42
        })
    );
    for bad in ["", "1 2", "1 x 3", "-1 2 3", "99999999999999999999999 1 1"] {
        let e = parse_schedstat(bad, p).unwrap_err().to_string();
        assert!(e.contains("/proc/1/task/1/schedstat"), "{bad:?}: {e}");
    }
}

#[test]
fn cpu_lists() {
    assert_eq!(parse_cpu_list("0-3,5,7-8\n"), Ok(vec![0, 1, 2, 3, 5, 7, 8]));
    assert_eq!(parse_cpu_list("0"), Ok(vec![0]));
    assert_eq!(parse_cpu_list("\n"), Ok(vec![]));
    assert_eq!(parse_cpu_list("3,1-2,2"), Ok(vec![1, 2, 3]));
    for bad in ["a", "3-1", "0-", "-1", "0-4294967295", "1;2", "0--2"] {
        assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn fixture_tree() {
    let d = fixture("tree");
    let root = Root::new(&d);
    put(&d, "proc/100/task/100/schedstat", "10 20 3\n");
    put(&d, "proc/100/task/100/comm", "main\n");
    put(&d, "proc/100/task/101/schedstat", "1 2 3\n");
    put(&d, "proc/100/task/101/comm", "worker 1\n");
    std::fs::create_dir_all(d.join("proc/100/task/102")).expect("mkdir");
    put(&d, "proc/100/task/not-a-tid", "");
    put(
        &d,
        "proc/101/status",
        "Name:\tworker\nTgid:\t100\nPid:\t101\n",
    );
    put(&d, "proc/102/status", "Name:\tbroken\n");
    put(&d, "sys/devices/system/cpu/online", "0-1,4\n");
    put(&d, "proc/sys/kernel/osrelease", "6.18.0-test\n");
    put(&d, "proc/sys/kernel/pid_max", "4194304\n");

    assert_eq!(threads_of(&root, 100).ok(), Some(vec![100, 101, 102]));
    assert!(matches!(
        threads_of(&root, 7),
        Err(TracerError::NoSuchProcess(7))
    ));
    assert_eq!(schedstat(&root, 100, 101).ok().map(|s| s.slices), Some(3));
    assert!(matches!(
        schedstat(&root, 100, 999),
        Err(TracerError::NoSuchThread(999))
    ));
    let e = schedstat(&root, 100, 102).unwrap_err().to_string();
    assert!(e.contains("task/102/schedstat"), "{e}");
    assert_eq!(comm(&root, 100, 101).as_deref(), Some("worker 1"));
    assert_eq!(comm(&root, 100, 999), None);
    assert_eq!(tgid_of(&root, 101).ok(), Some(100));
    assert!(matches!(
        tgid_of(&root, 5),
        Err(TracerError::NoSuchThread(5))
    ));
    let e = tgid_of(&root, 102).unwrap_err().to_string();
    assert!(e.contains("102/status"), "{e}");
    assert_eq!(online_cpus(&root).ok(), Some(vec![0, 1, 4]));
    assert_eq!(kernel_release(&root).as_deref(), Some("6.18.0-test"));
    assert_eq!(
        read_sysctl(&root, "kernel.pid_max").ok().as_deref(),
        Some("4194304")
    );
    assert_eq!(
        read_sysctl(&root, "kernel/pid_max").ok().as_deref(),
        Some("4194304")
    );
    write_sysctl(&root, "kernel.pid_max", "32768").expect("write");
    assert_eq!(
        read_sysctl(&root, "kernel.pid_max").ok().as_deref(),
        Some("32768")
    );
    let e = read_sysctl(&root, "kernel.nope").unwrap_err().to_string();
    assert!(e.contains("proc/sys/kernel/nope"), "{e}");
    let e = write_sysctl(&root, "kernel.nope", "1")
        .unwrap_err()
        .to_string();
    assert!(e.contains("proc/sys/kernel/nope"), "{e}");
    assert!(!d.join("proc/sys/kernel/nope").exists());
    for bad in ["", "kernel..x", "../etc/passwd", "a//b", "."] {
        assert!(read_sysctl(&root, bad).is_err(), "{bad:?}");
    }

    let empty = Root::new(d.join("nothing"));
    let e = online_cpus(&empty).unwrap_err().to_string();
    assert!(e.contains("cpu/online"), "{e}");
    assert_eq!(kernel_release(&empty), None);
    let _ = std::fs::remove_dir_all(d);
}

/// Issue 24 item 11: a thread that names itself with bytes that are not UTF-8, in a
/// cgroup named so, is still a thread with a TGID, alive, in its cgroup.
#[test]
fn names_that_are_not_utf8_are_read_as_bytes() {
    let d = fixture("bytes");
    let root = Root::new(&d);
    let raw = |rel: &str, bytes: &[u8]| {
        let p = d.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    };
    raw(
        "proc/50/status",
        b"Name:\tw\xff\xfe\nUmask:\t0022\nTgid:\t50\nPid:\t50\n",
    );
    let stat = b"50 (w\xff\xfe) S 1 50 50 0 -1 4194560 100 0 0 0 5 6 0 0 20 0 1 0 4242 1000 10";
    raw("proc/50/stat", stat);
    raw("proc/50/task/50/stat", stat);
    raw("proc/50/task/50/comm", b"w\xff\xfe\n");
    raw("proc/50/cgroup", b"0::/hide\xff/inner\n");
    raw(
        "proc/mounts",
        b"cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n",
    );
    assert_eq!(tgid_of(&root, 50).ok(), Some(50));
    let w = watch_process(&root, 50).expect("watched");
    assert!(still_alive(&root, &w));
    assert!(watch_thread(&root, 50).is_some_and(|w| still_alive(&root, &w)));
    assert_eq!(
        comm_bytes(&root, 50, 50).as_deref(),
        Some(&b"w\xff\xfe"[..])
    );
    assert_eq!(
        cgroup_path(&root, 50).as_deref(),
        Some(&b"/hide\xff/inner"[..])
    );
    assert_eq!(
        cgroup2_mount(&root),
        Some(PathBuf::from("/sys/fs/cgroup/unified"))
    );
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn cgroup_on_a_plain_directory_is_refused() {
    let d = fixture("cg");
    put(&d, "cgroup.threads", "12\n\n10\n");
    assert_eq!(cgroup_threads(&d).ok(), Some(vec![10, 12]));
    put(&d, "cgroup.threads", "12\nx\n");
    assert!(matches!(
        cgroup_threads(&d),
        Err(TracerError::Cgroup { .. })
    ));
    let e = cgroup_threads(&d.join("missing")).unwrap_err().to_string();
    assert!(e.contains("missing"), "{e}");
    // A temp dir is not on cgroup2 (unless /tmp is very unusual).
    if let Err(e) = cgroup_id(&d) {
        assert!(e.to_string().contains("cgroup v2"), "{e}");
    }
    assert!(cgroup_id(&d.join("missing")).is_err());
    assert!(cgroup_id(&d.join("cgroup.threads")).is_err());
    let _ = std::fs::remove_dir_all(d);
}

#[test]
#[ignore = "needs root and a cgroup2 mount; cargo xtask test runs it as root"]
fn live_cgroup_of_this_process() {
    assert!(
        rustix::process::geteuid().is_root(),
        "needs root (creates a cgroup)"
    );
    let mount =
        cgroup2_mount(&Root::default()).expect("a cgroup2 mount (`tracer run --cgroup` needs one)");
    let text = std::fs::read_to_string("/proc/self/cgroup").expect("/proc/self/cgroup");
    let rel = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup2 line");
    let dir = mount.join(rel.trim_start_matches('/'));
    let id = cgroup_id(&dir).expect("cgroup id of our own cgroup");
    assert!(id > 0);
    let tids = cgroup_threads(&dir).expect("cgroup.threads");
    let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
    assert!(tids.contains(&me), "{me} not in {tids:?}");

    // A new child cgroup has its own id and no threads.
    let child = mount.join(format!("tracer-procfs-test-{}", std::process::id()));
    std::fs::create_dir(&child).unwrap_or_else(|e| panic!("creating {}: {e}", child.display()));
    let cid = cgroup_id(&child);
    let threads = cgroup_threads(&child);
    let _ = std::fs::remove_dir(&child);
    let cid = cid.expect("child cgroup id");
    assert!(cid > 0 && cid != id);
    assert_eq!(threads.ok(), Some(vec![]));
}

#[test]
fn live_this_process() {
    let root = Root::default();
    let pid = std::process::id();
    let handle = std::thread::spawn(|| {
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        std::thread::sleep(std::time::Duration::from_millis(300));
        tid
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    let tids = threads_of(&root, pid).expect("own threads");
    assert!(tids.contains(&pid));
    assert!(tids.len() >= 2, "{tids:?}");
    for &t in &tids {
        // Other tests' threads may end between the listing and this read.
        match tgid_of(&root, t) {
            Ok(g) => assert_eq!(g, pid),
            Err(TracerError::NoSuchThread(gone)) => assert_eq!(gone, t),
            Err(e) => panic!("TID {t}: {e}"),
        }
    }
    assert!(comm(&root, pid, pid).is_some());

    // The harness runs tests on their own threads: measure this one.
    let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
    let before = schedstat(&root, pid, me).expect("schedstat");
    let start = std::time::Instant::now();
    let mut x = 0u64;
    while start.elapsed() < std::time::Duration::from_millis(50) {
        x = std::hint::black_box(x.wrapping_add(1));
    }
    let after = schedstat(&root, pid, me).expect("schedstat");
    // Runtime is folded in at ticks and switches, so allow for a tick or two.
    assert!(
        after.run_ns >= before.run_ns + 5_000_000,
        "{before:?} -> {after:?}"
    );
    assert!(after.slices >= before.slices);
    assert!(after.wait_ns >= before.wait_ns);
    let _ = handle.join();

    let cpus = online_cpus(&root).expect("online cpus");
    assert!(!cpus.is_empty());
    assert!(kernel_release(&root).is_some_and(|r| !r.is_empty()));
    let pid_max: u32 = read_sysctl(&root, "kernel.pid_max")
        .expect("pid_max")
        .parse()
        .expect("number");
    assert!(pid_max >= 301);
    assert!(matches!(
        threads_of(&root, u32::MAX),
        Err(TracerError::NoSuchProcess(_))
    ));
}

#[test]
fn an_exiting_thread_is_not_taken_for_a_live_one() {
    // Field 9 is the flags: PF_EXITING (0x4) is set from `do_exit()` on.
    let line = |state: &str, flags: u64| {
        format!("42 (a (b) c) {state} 1 42 42 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 99")
    };
    let ok = |t: &[u8]| StatHead::parse(t).is_some_and(|h| h.alive() && !h.exiting());
    assert!(ok(line("S", 0x400040).as_bytes()));
    assert!(ok(line("R", 0x400000).as_bytes()));
    assert!(!ok(line("R", 0x400044).as_bytes()), "exiting");
    assert!(!ok(line("Z", 0x400000).as_bytes()), "a zombie");
    assert!(!ok(b"42 (cut"), "unreadable");
    let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
    assert!(thread_alive_not_exiting(
        &crate::sys::root::Root::default(),
        me
    ));
}

#[test]
fn a_threads_stat_is_its_own_not_its_processs() {
    // This thread burns CPU while another sleeps: the sleeper's own stat shows
    // none of it, where `/proc/TID/stat` (the whole process's sums) would.
    let root = crate::sys::root::Root::default();
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let sleeper = std::thread::spawn(move || {
        tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
            .unwrap();
        let _ = done_rx.recv();
    });
    let tid = rx.recv().unwrap();
    // 300 ms of this thread's CPU (30 ticks at USER_HZ 100), however loaded the machine.
    let cpu = || rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let t0 = cpu();
    while (cpu().tv_sec - t0.tv_sec) * 1_000_000_000 + (cpu().tv_nsec - t0.tv_nsec) < 300_000_000 {
        std::hint::spin_loop();
    }
    let cpu_ticks = |text: &[u8]| -> u64 {
        let f = stat_fields(text).unwrap();
        // utime and stime: fields 14 and 15, the first after the comm being 3.
        f[14 - 3].parse::<u64>().unwrap() + f[15 - 3].parse::<u64>().unwrap()
    };
    let own = cpu_ticks(&thread_stat(&root, tid).expect("the sleeper's stat"));
    let whole = cpu_ticks(&std::fs::read(format!("/proc/{tid}/stat")).unwrap());
    done_tx.send(()).unwrap();
    sleeper.join().unwrap();
    assert!(own <= 2, "the sleeper's own CPU ticks: {own}");
    assert!(whole >= 20, "the process's CPU ticks: {whole}");
}
