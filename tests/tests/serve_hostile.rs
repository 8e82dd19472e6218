//! Issue 25 items 3-6 and 10 against a real `tracer serve`, as hostile local users (and
//! networks) would try it: idle and half-sent HTTP requests, half TLS handshakes, floods
//! of wrong passwords, a cost-31 hash, an alias bomb, `cert_file: /dev/zero`, hundreds of
//! cgroups and cgroups named with bytes that are not UTF-8, while a real Prometheus (or
//! curl with the right password) keeps scraping.
use std::{
    io::{Read as _, Write as _},
    net::TcpStream,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    thread::sleep,
    time::{Duration, Instant},
};

use tracer_tests::require_root;

mod serve_common;
use serve_common::*;

#[path = "serve_hostile/cgroups.rs"]
mod cgroups;
#[path = "serve_hostile/startup.rs"]
mod startup;

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
    // One query: two queries a moment apart see windows a scrape apart (the final
    // chain of 2026-12-07 read "up for 25 of 24 scrapes", every one of them up).
    let up_all = prom
        .value("sum_over_time(up{job=\"tracer\"}[25s]) / count_over_time(up{job=\"tracer\"}[25s])");
    let all = prom.value("count_over_time(up{job=\"tracer\"}[25s])");
    // How long the scrapes took (a failed one counts its timeout), for the messages.
    let slowest_scrape = prom.value("max_over_time(scrape_duration_seconds{job=\"tracer\"}[25s])");
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
    let (up_all, all) = (up_all.unwrap_or(0.0), all.unwrap_or(0.0));
    let up = up_all * all;
    assert!(
        all >= 20.0 && up_all == 1.0,
        "Prometheus up in {up_all} of its scrapes (as a fraction; about {all} of them; slowest scrape {slowest_scrape:?} s); \
         failed scrapes: {:?}",
        prom.0.failed_scrapes()
    );
    eprintln!(
        "slow requests: {opened} opened; {} probes, slowest {:.2} s; up {up}/{all}, \
         slowest scrape {slowest_scrape:?} s",
        probes.len(),
        probes.iter().map(|p| p.1).fold(0.0, f64::max)
    );
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
