//! Who may scrape: TLS and basic auth from a web config (curl with and without the
//! password, plain HTTP to the TLS port), and a public address refused without them.
use std::process::Command;

use tracer_tests::{require_root, tracer_bin};

use super::{certificate, curl, free_port, scratch, start_serve};

#[test]
#[ignore = "needs root"]
fn tls_and_basic_auth_from_a_web_config() {
    require_root();
    let dir = scratch("serve-tls");
    let (cert, key) = certificate(&dir);
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: {}\n  key_file: {}\nbasic_auth_users:\n  prom: {hash}\n",
            cert.display(),
            key.display()
        ),
    )
    .unwrap();
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}/metrics");
    let cacert = cert.display().to_string();
    let good = ["--cacert", &cacert, "-u", "prom:s3cret"];
    let _serve = start_serve(
        &[
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--web.config.file",
            &web.display().to_string(),
        ],
        &url,
        &good,
    );
    assert_eq!(curl(&["--cacert", &cacert, &url]).0, 401, "no password");
    assert_eq!(
        curl(&["--cacert", &cacert, "-u", "prom:wrong", &url]).0,
        401
    );
    assert_eq!(
        curl(&["--cacert", &cacert, "-u", "eve:s3cret", &url]).0,
        401
    );
    let (code, body, _) = curl(&[good[0], good[1], good[2], good[3], &url]);
    assert_eq!(code, 200);
    assert!(body.contains("tracer_info"));
    // Plain HTTP to the TLS port is not served.
    assert_ne!(curl(&[&format!("http://127.0.0.1:{port}/metrics")]).0, 200);
}

#[test]
#[ignore = "needs root"]
fn a_public_address_needs_tls_and_users_or_an_explicit_flag() {
    require_root();
    let out = Command::new(tracer_bin())
        .args(["serve", "--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--insecure-listen"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    let bad = scratch("serve-badweb").join("web.yml");
    std::fs::write(&bad, "basic_auth_users:\n  a: plaintext\n").unwrap();
    let out = Command::new(tracer_bin())
        .args(["serve", "--web.config.file"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bcrypt"));
}
