//! What `serve.rs` and `serve_hostile.rs` share: a scratch directory, curl with its time,
//! a `tracer serve` that answers, a self-signed certificate and a Prometheus scraping one
//! target (the library's `tracer_tests::prometheus`, with the scrape config written
//! here).
use std::{
    io::Read as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use tracer_tests::tracer_bin;

pub use tracer_tests::prometheus::free_port;
/// Stopped with SIGTERM first (the exporter detaches its programs on the way out).
pub use tracer_tests::prometheus::Stopped as Killed;

/// A fresh directory for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    let dir = tracer_tests::scratch(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// curl with `args` (the URL among them): (HTTP code, body, seconds taken).
pub fn curl(args: &[&str]) -> (u32, String, f64) {
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

/// Starts the exporter with `extra` and waits until `url` answers 200 (curl with
/// `curl_extra`); its stderr is said if it exits first.
pub fn start_serve(extra: &[&str], url: &str, curl_extra: &[&str]) -> Killed {
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
            "tracer serve never answered {url}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `openssl` makes a self-signed certificate for 127.0.0.1 in `dir`: (cert, key).
pub fn certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
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

/// A Prometheus server scraping `target` every second.
pub struct Prometheus(pub tracer_tests::prometheus::Prometheus);

impl Prometheus {
    pub fn start(dir: &Path, target: &str) -> Prometheus {
        Prometheus(tracer_tests::prometheus::Prometheus::start(
            dir,
            &format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: tracer\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        ))
    }

    /// An instant query; the result vector (a failed query fails the test).
    pub fn query(&self, q: &str) -> Vec<serde_json::Value> {
        self.0.query(q).unwrap_or_else(|e| panic!("query {q}: {e}"))
    }

    /// The single value of an instant query, if there is one.
    pub fn value(&self, q: &str) -> Option<f64> {
        let r = self.query(q);
        r.first()?["value"][1].as_str()?.parse().ok()
    }
}
