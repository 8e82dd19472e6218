//! `tracer serve`'s cgroup series against the cgroup's own `cpu.stat`: processes of tens of milliseconds, gone before any scrape sees them alive, are
//! charged to the cgroup they ran in, and so is a cgroup whose name is not UTF-8. The
//! truth is the kernel's: `usage_usec` of each cgroup (cgroup v2 keeps it without any
//! controller), compared through `tracer_truth::SCRAPED_CGROUP` (2% or 5 ms, the larger:
//! the Prometheus test's `SCRAPED_ON_CPU` adds the two).
use std::{
    ffi::{OsStr, OsString},
    os::unix::ffi::{OsStrExt, OsStringExt},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use tracer_tests::{require_root, tracer_bin};

const WORKLOAD: &str = env!("CARGO_BIN_EXE_tracer-workload");

/// The cgroup v2 mount.
fn cgroup2() -> PathBuf {
    tracer_tests::cgroup2_mount()
}

/// A scratch cgroup, emptied and removed on drop.
struct Cg(PathBuf);

impl Drop for Cg {
    fn drop(&mut self) {
        let _ = std::fs::write(self.0.join("cgroup.kill"), "1");
        let t = Instant::now();
        while std::fs::remove_dir(&self.0).is_err() && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn scrape(port: u16) -> String {
    let out = Command::new("curl")
        .args(["-sS", "-m", "10"])
        .arg(format!("http://127.0.0.1:{port}/metrics"))
        .output()
        .expect("curl (cargo xtask test installs it)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The on-CPU seconds of the cgroup series whose label holds `tag`, and the labels.
fn series(body: &str, tag: &str) -> (f64, Vec<String>) {
    let mut sum = 0.0;
    let mut labels = Vec::new();
    for l in body
        .lines()
        .filter(|l| l.starts_with("tracer_cgroup_on_cpu_seconds_total{") && l.contains(tag))
    {
        if let Some((k, v)) = l.rsplit_once(' ') {
            sum += v.parse::<f64>().unwrap_or(0.0);
            labels.push(k.to_string());
        }
    }
    (sum, labels)
}

/// `n` processes one after the other, each moving itself into `cg` and then busy for
/// about 50 ms (5 ms of work, 1 ms asleep).
fn short_processes(cg: &OsStr, n: usize) {
    for _ in 0..n {
        let st = Command::new("sh")
            .arg("-c")
            .arg(
                "echo $$ > \"$1/cgroup.procs\" && exec \"$2\" busy-sleep --threads 1 \
                 --work-ms 5 --sleep-ms 1 --duration-ms 50",
            )
            .arg("sh")
            .arg(cg)
            .arg(WORKLOAD)
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(st.success(), "a short process in {:?}", cg);
    }
}

fn start_serve(port: u16) -> Child {
    let child = Command::new(tracer_bin())
        .args(["serve", "--listen", &format!("127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("tracer serve starts");
    let t = Instant::now();
    while !scrape(port).contains("tracer_") {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "tracer serve never answered"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

#[test]
#[ignore = "needs root"]
fn short_lived_processes_are_charged_to_their_cgroup_even_when_not_utf8() {
    require_root();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let root = cgroup2();
    let id = std::process::id();
    let plain_tag = format!("tracer-serve-short-{id}");
    let plain = Cg(root.join(&plain_tag));
    // Bytes that are not UTF-8 first, a tag the series label must still hold after them.
    let odd_tag = format!("nonutf8-{id}");
    let mut odd_name = b"tracer-\xff\xfe-".to_vec();
    odd_name.extend_from_slice(odd_tag.as_bytes());
    let odd = Cg(root.join(OsString::from_vec(odd_name)));
    for c in [&plain, &odd] {
        std::fs::create_dir(&c.0).expect("create a scratch cgroup");
    }
    let mut serve = start_serve(port);
    let mut problems = Vec::new();
    for (cg, tag) in [(&plain, &plain_tag), (&odd, &odd_tag)] {
        let before = (
            series(&scrape(port), tag).0,
            tracer_tests::cgroup_usage_ns(&cg.0),
        );
        short_processes(cg.0.as_os_str(), 20);
        // A read after the last one ended.
        std::thread::sleep(Duration::from_secs(2));
        let (secs, labels) = series(&scrape(port), tag);
        let (got, want) = (
            (secs - before.0) * 1e9,
            tracer_tests::cgroup_usage_ns(&cg.0) - before.1,
        );
        let tol = tracer_truth::SCRAPED_CGROUP.allowed(want);
        eprintln!(
            "{}: series {labels:?} grew {:.1} ms, cpu.stat {:.1} ms",
            String::from_utf8_lossy(cg.0.as_os_str().as_bytes()),
            got / 1e6,
            want / 1e6
        );
        if (got - want).abs() > tol {
            problems.push(format!(
                "cgroup {:?}: its series {labels:?} grew {:.1} ms while its cpu.stat says {:.1} ms \
                 (20 processes of ~50 ms; allowed ±{:.1} ms)",
                String::from_utf8_lossy(cg.0.as_os_str().as_bytes()),
                got / 1e6,
                want / 1e6,
                tol / 1e6
            ));
        }
    }
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(serve.id() as i32, libc::SIGTERM) };
    let _ = serve.wait();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
