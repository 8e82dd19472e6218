//! A real Prometheus server (Debian's `prometheus`, which `cargo xtask test` installs)
//! for the tests of contrib/: started on a free loopback port with a config of the
//! test's, queried through its HTTP API with curl, stopped on drop.
use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

/// A free loopback port (bound, then released for the child to take).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child stopped with SIGTERM on drop (then SIGKILL after 10 s).
pub struct Stopped(pub Child);

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's PID.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// GET `url` with `args` (curl's); (HTTP status, body).
pub fn curl(url: &str, args: &[&str]) -> (u32, String) {
    let out = Command::new("curl")
        .args(["-sS", "-m", "20", "-w", "\n%{http_code}"])
        .args(args)
        .arg(url)
        .output()
        .expect("curl (cargo xtask test installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_string())
}

pub struct Prometheus {
    _child: Stopped,
    pub port: u16,
    log: std::path::PathBuf,
}

impl Prometheus {
    /// Starts Prometheus on `config` (YAML text) with its data under `dir`, and waits
    /// until it is ready.
    pub fn start(dir: &Path, config: &str) -> Prometheus {
        let port = free_port();
        let cfg = dir.join("prometheus.yml");
        std::fs::write(&cfg, config).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            // Debug logs each failed scrape with its error (`failed_scrapes`).
            .arg("--log.level=debug")
            .stdout(Stdio::null())
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("prometheus.log")).unwrap(),
            ))
            .spawn()
            .expect("prometheus (cargo xtask test installs Debian's package)");
        let mut child = Stopped(child);
        let t = Instant::now();
        while curl(&format!("http://127.0.0.1:{port}/-/ready"), &[]).0 != 200 {
            if let Ok(Some(st)) = child.0.try_wait() {
                let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
                panic!("prometheus exited ({st}): {log}");
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "prometheus never got ready"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Prometheus {
            _child: child,
            port,
            log: dir.join("prometheus.log"),
        }
    }

    /// Prometheus's log lines of the scrapes that failed, each with its error.
    pub fn failed_scrapes(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("msg=\"Scrape failed\""))
            .map(str::to_string)
            .collect()
    }

    /// GET an API path with curl's `args`; the `data` of a success, else the error.
    pub fn api(&self, path: &str, args: &[&str]) -> Result<Value, String> {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        let (code, body) = curl(&url, args);
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| format!("HTTP {code}, not JSON ({e}): {body}"))?;
        if code != 200 || v["status"] != "success" {
            return Err(format!(
                "HTTP {code}: {} {}",
                v["errorType"].as_str().unwrap_or(""),
                v["error"].as_str().unwrap_or(&body)
            ));
        }
        Ok(v["data"].clone())
    }

    /// An instant query: its result vector, or Prometheus's error (a parse error, say).
    pub fn query(&self, q: &str) -> Result<Vec<Value>, String> {
        let data = self.api(
            "/api/v1/query",
            &["-G", "--data-urlencode", &format!("query={q}")],
        )?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }
}

/// The number in an instant vector's sample (`[time, "value"]`).
pub fn sample_value(s: &Value) -> f64 {
    s["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// `tracer serve` on a free loopback port with `args` besides `--listen`, its stderr in
/// `dir/serve.log`, once it answers `/metrics`; (the child, stopped on drop, and its
/// `host:port`).
pub fn serve(dir: &Path, args: &[&std::ffi::OsStr]) -> (Stopped, String) {
    let target = format!("127.0.0.1:{}", free_port());
    let log = dir.join("serve.log");
    let child = Stopped(
        Command::new(crate::tracer_bin())
            .args(["serve", "--listen", &target])
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .expect("tracer serve starts"),
    );
    let t = Instant::now();
    while curl(&format!("http://{target}/metrics"), &[]).0 != 200 {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "tracer serve never answered: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    (child, target)
}
