//! Issue 25 items 3-6 and 10 against a real `tracer serve`, as hostile local users (and
//! networks) would try it: idle and half-sent HTTP requests, half TLS handshakes, floods
//! of wrong passwords, a cost-31 hash, an alias bomb, `cert_file: /dev/zero`, hundreds of
//! cgroups and cgroups named with bytes that are not UTF-8, while a real Prometheus (or
//! curl with the right password) keeps scraping.
use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::sleep,
    time::{Duration, Instant},
};

use serde_json::Value;
use tracer_tests::{require_root, tracer_bin};

fn scratch(name: &str) -> PathBuf {
    let dir = tracer_tests::scratch(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Stopped with SIGTERM first (the exporter detaches its programs on the way out).
use tracer_tests::prometheus::Stopped as Killed;

/// (HTTP code, body, seconds taken).
fn curl(args: &[&str]) -> (u32, String, f64) {
    let t = Instant::now();
    let out = Command::new("curl")
        .args(["-sS", "-m", "20", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl (`cargo xtask test` installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (
        code.trim().parse().unwrap_or(0),
        body.to_string(),
        t.elapsed().as_secs_f64(),
    )
}

fn start_serve(extra: &[&str], url: &str, curl_extra: &[&str]) -> Killed {
    let child = Command::new(tracer_bin())
        .arg("serve")
        .args(extra)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("tracer serve starts");
    let mut k = Killed(child);
    let t = Instant::now();
    loop {
        let mut a = curl_extra.to_vec();
        a.push(url);
        if curl(&a).0 == 200 {
            return k;
        }
        if let Ok(Some(st)) = k.0.try_wait() {
            let mut err = String::new();
            let _ = k.0.stderr.take().unwrap().read_to_string(&mut err);
            panic!("tracer serve exited ({st}): {err}");
        }
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "never answered {url}"
        );
        sleep(Duration::from_millis(100));
    }
}

struct Prometheus {
    _child: Killed,
    port: u16,
}

impl Prometheus {
    fn start(dir: &Path, target: &str) -> Prometheus {
        let port = free_port();
        let cfg = dir.join("prometheus.yml");
        std::fs::write(
            &cfg,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: tracer\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (`cargo xtask test` installs Debian's package)");
        let p = Prometheus {
            _child: Killed(child),
            port,
        };
        let t = Instant::now();
        while curl(&[&format!("http://127.0.0.1:{port}/-/ready")]).0 != 200 {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "prometheus never got ready"
            );
            sleep(Duration::from_millis(200));
        }
        p
    }

    fn value(&self, q: &str) -> Option<f64> {
        let (code, body, _) = curl(&[
            "-G",
            &format!("http://127.0.0.1:{}/api/v1/query", self.port),
            "--data-urlencode",
            &format!("query={q}"),
        ]);
        assert_eq!(code, 200, "{q}: {body}");
        let v: Value = serde_json::from_str(&body).unwrap();
        v["data"]["result"][0]["value"][1].as_str()?.parse().ok()
    }
}

/// Attackers: `n` connections to `addr` that each send `prefix` and then nothing,
/// reopened as soon as the exporter closes one, until `stop`.
fn hold_open(
    addr: String,
    n: usize,
    prefix: &'static [u8],
    stop: Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<u64>> {
    (0..n)
        .map(|_| {
            let (addr, stop) = (addr.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut opened = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let Ok(mut s) = TcpStream::connect(&addr) else {
                        sleep(Duration::from_millis(10));
                        continue;
                    };
                    opened += 1;
                    let _ = s.write_all(prefix);
                    let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
                    let mut b = [0u8; 64];
                    // Until the exporter closes it (read 0 or an error other than a timeout).
                    while !stop.load(Ordering::Relaxed) {
                        match s.read(&mut b) {
                            Ok(0) => break,
                            Ok(_) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                            Err(_) => break,
                        }
                    }
                }
                opened
            })
        })
        .collect()
}

/// Issue 25 item 3: 200 half-sent requests for 150 s made Prometheus see up=0 for 141 of
/// 170 s. Now 200 of them (reconnecting as soon as they are dropped) for 30 s: every
/// Prometheus scrape and every curl probe succeeds.
#[test]
#[ignore = "needs root"]
fn half_sent_requests_do_not_keep_a_scraper_out() {
    require_root();
    let dir = scratch("serve-slowloris");
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("http://{listen}/metrics");
    let _serve = start_serve(&["--listen", &listen], &url, &[]);
    let prom = Prometheus::start(&dir, &listen);
    sleep(Duration::from_secs(3));
    let stop = Arc::new(AtomicBool::new(false));
    let attackers = hold_open(
        listen.clone(),
        200,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ",
        stop.clone(),
    );
    let t = Instant::now();
    let mut probes = Vec::new();
    while t.elapsed() < Duration::from_secs(30) {
        let (code, _, secs) = curl(&[&url]);
        probes.push((code, secs));
        sleep(Duration::from_millis(500));
    }
    let up = prom.value("sum_over_time(up{job=\"tracer\"}[25s])");
    let all = prom.value("count_over_time(up{job=\"tracer\"}[25s])");
    stop.store(true, Ordering::Relaxed);
    let opened: u64 = attackers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(opened >= 200, "the attack ran ({opened} connections)");
    let bad: Vec<_> = probes
        .iter()
        .filter(|(c, s)| *c != 200 || *s > 2.0)
        .collect();
    assert!(
        bad.is_empty(),
        "probes failed or took > 2 s: {bad:?} of {}",
        probes.len()
    );
    let (up, all) = (up.unwrap_or(0.0), all.unwrap_or(0.0));
    assert!(
        all >= 20.0 && up == all,
        "Prometheus up for {up} of {all} scrapes"
    );
    eprintln!(
        "slow requests: {opened} opened; {} probes, slowest {:.2} s; up {up}/{all}",
        probes.len(),
        probes.iter().map(|p| p.1).fold(0.0, f64::max)
    );
}

/// `openssl` makes a self-signed certificate for 127.0.0.1.
fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("c.pem"), dir.join("k.pem"));
    let st = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(st.success());
    (cert, key)
}

/// The beginning of a TLS ClientHello: a record header announcing 512 bytes, then only
/// the start of the handshake message.
const HALF_HELLO: &[u8] = &[
    0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
];

/// Issue 25 items 3 and 4: 200 half handshakes on the TLS port timed out 5 of 5
/// authorized probes; 40 clients with an unknown user pushed an authorized scrape to a
/// median of 18 s (bcrypt on the serving thread).
#[test]
#[ignore = "needs root"]
fn half_handshakes_and_password_floods_leave_authorized_scrapes_fast() {
    require_root();
    let dir = scratch("serve-tls-flood");
    let (cert, key) = certificate(&dir);
    let hash = bcrypt::hash("s3cret", 10).unwrap();
    let cfg = dir.join("web.yml");
    std::fs::write(
        &cfg,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  prom: {hash}\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("https://{listen}/metrics");
    let ok: &[&str] = &["--cacert", cert.to_str().unwrap(), "-u", "prom:s3cret"];
    let _serve = start_serve(
        &[
            "--listen",
            &listen,
            "--web.config.file",
            cfg.to_str().unwrap(),
        ],
        &url,
        ok,
    );
    let probe = |n: usize| -> Vec<(u32, f64)> {
        (0..n)
            .map(|_| {
                let mut a = ok.to_vec();
                a.push(&url);
                let (c, _, s) = curl(&a);
                sleep(Duration::from_millis(300));
                (c, s)
            })
            .collect()
    };
    // Half handshakes.
    let stop = Arc::new(AtomicBool::new(false));
    let half = hold_open(listen.clone(), 200, HALF_HELLO, stop.clone());
    sleep(Duration::from_secs(2));
    let during = probe(8);
    stop.store(true, Ordering::Relaxed);
    let opened: u64 = half.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(opened >= 200);
    assert!(
        during.iter().all(|(c, s)| *c == 200 && *s < 3.0),
        "authorized probes during 200 half handshakes: {during:?}"
    );
    // Wrong users and passwords, 40 clients as fast as they get answers.
    let stop = Arc::new(AtomicBool::new(false));
    let flood: Vec<_> = (0..40)
        .map(|i| {
            let (stop, url, cert) = (stop.clone(), url.clone(), cert.clone());
            std::thread::spawn(move || {
                let mut n = 0u32;
                let user = if i % 2 == 0 {
                    "bob:guess"
                } else {
                    "prom:guess"
                };
                while !stop.load(Ordering::Relaxed) {
                    let (c, _, _) = curl(&["--cacert", cert.to_str().unwrap(), "-u", user, &url]);
                    assert!(c == 401 || c == 503, "a wrong password got {c}");
                    n += 1;
                }
                n
            })
        })
        .collect();
    sleep(Duration::from_secs(2));
    let mut during = probe(10);
    stop.store(true, Ordering::Relaxed);
    let tried: u32 = flood.into_iter().map(|h| h.join().unwrap()).sum();
    during.sort_by(|a, b| a.1.total_cmp(&b.1));
    eprintln!("auth flood: {tried} wrong attempts; authorized probes {during:?}");
    assert!(tried >= 40, "the flood ran");
    assert!(
        during.iter().all(|(c, s)| *c == 200 && *s < 2.0),
        "authorized scrapes during the flood: {during:?}"
    );
    // A wrong password for a known user is refused (not served from the cache).
    let (c, _, _) = curl(&["--cacert", cert.to_str().unwrap(), "-u", "prom:wrong", &url]);
    assert_eq!(c, 401);
}

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

fn cgroup2_mount() -> PathBuf {
    tracer_tests::cgroup2_mount()
}

/// Cgroups made for a test (any bytes in their names) with a busy shell in each; the
/// shells are killed and the cgroups removed when dropped.
struct Cgroups {
    dirs: Vec<PathBuf>,
    shells: Vec<Child>,
}

impl Cgroups {
    fn new() -> Cgroups {
        Cgroups {
            dirs: Vec::new(),
            shells: Vec::new(),
        }
    }
    fn make(&mut self, dir: PathBuf) -> &Path {
        std::fs::create_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        self.dirs.push(dir);
        self.dirs.last().unwrap()
    }
    /// A shell in `dir` that works a little and sleeps, for `secs`.
    fn busy(&mut self, dir: &Path, secs: u32) {
        use std::os::unix::ffi::OsStrExt as _;
        let procs = dir.join("cgroup.procs");
        let mut script = b"echo $$ > '".to_vec();
        script.extend_from_slice(procs.as_os_str().as_bytes());
        script.extend_from_slice(
            format!(
                "' && end=$(($(date +%s)+{secs})); while [ $(date +%s) -lt $end ]; do i=0; \
                 while [ $i -lt 300 ]; do i=$((i+1)); done; sleep 0.2; done"
            )
            .as_bytes(),
        );
        let child = Command::new("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(&script))
            .spawn()
            .unwrap();
        self.shells.push(child);
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for s in &mut self.shells {
            let _ = s.kill();
            let _ = s.wait();
        }
        for d in self.dirs.iter().rev() {
            let t = Instant::now();
            while std::fs::remove_dir(d).is_err() && t.elapsed() < Duration::from_secs(5) {
                sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The value of each `family{...cgroup="LABEL"...}` sample, by label (as the text
/// format writes it, backslashes doubled).
fn by_cgroup(body: &str, family: &str) -> std::collections::BTreeMap<String, f64> {
    body.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| {
            let label = l
                .split("cgroup=\"")
                .nth(1)?
                .split("\"}")
                .next()?
                .to_string();
            Some((label, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect()
}

/// Scrapes `url` until `pred` holds for the body (up to 30 s).
fn scrape_until(url: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
    let t = Instant::now();
    loop {
        let (code, body, secs) = curl(&[url]);
        if code == 200 && pred(&body) {
            return body;
        }
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "{what}: HTTP {code} after {secs:.1} s:\n{body}"
        );
        sleep(Duration::from_millis(500));
    }
}

/// Issue 25 item 5: 1,500 cgroups made every scrape 141,353 lines; --max-series bounded
/// processes only. Now 40 busy cgroups against --max-cgroups 10: at most 10 series, the
/// rest in cgroup="other", and nothing lost (cgroups and processes sum to the same).
#[test]
#[ignore = "needs root"]
fn cgroup_series_are_bounded_and_the_rest_is_other() {
    require_root();
    let mount = cgroup2_mount();
    let me = std::process::id();
    let mut cg = Cgroups::new();
    for i in 0..40 {
        let d = cg
            .make(mount.join(format!("tracer-many-{me}-{i}")))
            .to_path_buf();
        cg.busy(&d, 60);
    }
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("http://{listen}/metrics");
    let _serve = start_serve(
        &[
            "--listen",
            &listen,
            "--max-cgroups",
            "10",
            "--cgroup-depth",
            "1",
        ],
        &url,
        &[],
    );
    scrape_until(&url, "overflow into cgroup=\"other\"", |b| {
        by_cgroup(b, "tracer_cgroup_on_cpu_seconds_total").contains_key("other")
    });
    sleep(Duration::from_secs(3));
    let body = scrape_until(&url, "a later scrape", |_| true);
    let series = by_cgroup(&body, "tracer_cgroup_on_cpu_seconds_total");
    let named = series.keys().filter(|k| *k != "other").count();
    assert!(
        named <= 10,
        "{named} cgroup series with --max-cgroups 10: {series:?}"
    );
    assert!(series["other"] > 0.0, "{series:?}");
    let overflow: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("tracer_cgroup_series_overflow_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    assert!(overflow > 0.0, "tracer_cgroup_series_overflow_total");
    let cg_sum: f64 = series.values().sum();
    let pr_sum: f64 = body
        .lines()
        .filter(|l| l.starts_with("tracer_process_on_cpu_seconds_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        (cg_sum - pr_sum).abs() <= 1e-6 * cg_sum.max(1.0),
        "cgroups {cg_sum} s, processes {pr_sum} s: the same deltas"
    );
    let lines = body.lines().count();
    eprintln!("40 busy cgroups, --max-cgroups 10: {named} named + other, {lines} lines");
}

/// Issue 24 item 11: a cgroup directory named with bytes that are not UTF-8 sent its
/// processes to cgroup="unknown", also below --cgroup-depth, where the label should be
/// its valid ancestor's: anyone who may make a cgroup could hide work from its series.
#[test]
#[ignore = "needs root"]
fn a_cgroup_named_with_any_bytes_gets_its_own_escaped_label() {
    use std::os::unix::ffi::OsStringExt as _;
    require_root();
    let mount = cgroup2_mount();
    let me = std::process::id();
    let bytes = |b: Vec<u8>| std::ffi::OsString::from_vec(b);
    let mut cg = Cgroups::new();
    let mut bad = format!("tracer-bad-{me}-").into_bytes();
    bad.extend_from_slice(b"\xff\x1b]2;x\x07");
    let bad = cg.make(mount.join(bytes(bad))).to_path_buf();
    cg.busy(&bad, 60);
    let parent = cg
        .make(mount.join(format!("tracer-top-{me}")))
        .to_path_buf();
    let child = cg
        .make(parent.join(bytes(b"\xfe-inner".to_vec())))
        .to_path_buf();
    cg.busy(&child, 60);
    let listen = format!("127.0.0.1:{}", free_port());
    let url = format!("http://{listen}/metrics");
    let _serve = start_serve(&["--listen", &listen, "--cgroup-depth", "1"], &url, &[]);
    // The text format doubles the backslash of the escape.
    let own = format!("/tracer-bad-{me}-\\\\xff\\\\x1b]2;x\\\\x07");
    let ancestor = format!("/tracer-top-{me}");
    let body = scrape_until(&url, "both cgroups' series", |b| {
        let s = by_cgroup(b, "tracer_cgroup_on_cpu_seconds_total");
        s.get(&own).is_some_and(|v| *v > 0.0) && s.get(&ancestor).is_some_and(|v| *v > 0.0)
    });
    // And the processes in them are not `unknown`.
    for line in body.lines().filter(|l| {
        l.starts_with("tracer_process_on_cpu_seconds_total{") && l.contains("comm=\"sh\"")
    }) {
        assert!(!line.contains("cgroup=\"unknown\""), "{line}");
    }
    // The exposition passes promtool whatever the names.
    let mut p = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    p.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = p.wait_with_output().unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(
        !said.contains("error") && !said.contains("invalid"),
        "promtool: {said}"
    );
}
