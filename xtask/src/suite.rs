//! `cargo xtask test`: the lint gates, the unit tests (the fuzz seeds among them), the
//! end-to-end tests as root and the short fixed-seed torture pass.

use std::{env, path::Path, process::Command};

use anyhow::{bail, ensure, Context, Result};

use crate::{cargo, cmd, is_root, package, provision, target_dir, torture, workspace_root};

pub fn test(unit_only: bool) -> Result<()> {
    if !unit_only && !is_root()? {
        bail!(
            "the end-to-end tests load BPF programs: run as root, e.g. `sudo -E cargo xtask test` \
             (or `cargo xtask test --unit` for the unit tests alone)"
        );
    }
    // With UPDATE_GOLDEN the golden tests rewrite their files instead of comparing: they
    // would pass without checking anything.
    if env::var_os("UPDATE_GOLDEN").is_some() {
        bail!(
            "UPDATE_GOLDEN is set: the golden tests would rewrite tracer/tests/golden instead of \
             checking it; unset it (update goldens with `UPDATE_GOLDEN=1 cargo test -p tracer --test golden`)"
        );
    }
    provision::lints()?;
    let mut failed = Vec::new();
    // Formatting first: it takes a second and needs no build.
    if !lint_fmt()? {
        failed.push("`cargo fmt --all --check`");
    }
    let built = crate::build(false)?;
    let target = target_dir()?;
    let with_artifacts = |cmd: &mut Command| {
        cmd.env("TRACER_BIN", &built.bin)
            .env("TRACER_EBPF_DIR", &built.ebpf_dir);
    };
    if !lint_clippy(&target, &with_artifacts)? {
        failed.push("clippy");
    }
    if !lint_clippy_ebpf(&target)? {
        failed.push("clippy (tracer-ebpf)");
    }

    // tracer-ebpf only builds for the BPF target; tracer-tests is the end-to-end suite.
    // Tests that need root or a kernel feature are `#[ignore = "needs root"]`, so a plain
    // `cargo test` as a user passes; as root they all run here, and one that cannot run
    // fails. `--workspace` includes the fuzz crate (tracer/fuzz): its seeds run as tests.
    let mut unit = cargo(None, "test", &target);
    unit.args([
        "--workspace",
        "--exclude",
        "tracer-tests",
        "--exclude",
        "tracer-ebpf",
    ]);
    if !unit_only {
        unit.args(["--", "--include-ignored"]);
    }
    with_artifacts(&mut unit);
    if !cmd::status(&mut unit)?.success() {
        failed.push("unit tests");
    }
    if !unit_only {
        let tools = provision::e2e()?;
        // The install test installs the package with dpkg and reads its pages with man: the
        // package is built (and checked by lintian) once here, and the tests get its path.
        let deb = match package::prepare_e2e() {
            Ok(deb) => Some(deb),
            Err(e) => {
                println!("xtask: the Debian package: {e:#}");
                failed.push("the Debian package");
                None
            }
        };
        // The end-to-end tests measure CPU time: run them one at a time.
        let mut e2e = cargo(None, "test", &target);
        // Every test binary runs even after one fails: CI shows all failures at once.
        e2e.args([
            "--no-fail-fast",
            "--package",
            "tracer-tests",
            "--",
            "--include-ignored",
            "--test-threads=1",
        ]);
        with_artifacts(&mut e2e);
        e2e.env(
            "TRACER_XTASK",
            env::current_exe().context("cannot find the xtask binary")?,
        );
        if let Some(deb) = &deb {
            e2e.env("TRACER_DEB", deb);
        }
        // The record* and slow* tests decode their traces with Perfetto's protos.
        e2e.env("TRACER_PERFETTO_PYTHON", &tools.perfetto_python);
        // tests/tests/contrib.rs checks contrib/kubernetes/daemonset.yaml with it.
        e2e.env("TRACER_KUBERNETES_VALIDATE", &tools.kubernetes_validate);
        if !cmd::status(&mut e2e)?.success() {
            failed.push("end-to-end tests");
        }
        // The short fixed-seed pass of the randomized harness (`cargo xtask torture`).
        if let Err(e) = torture::ci_pass(&built.bin) {
            println!("xtask: torture pass: {e:#}");
            failed.push("the torture pass");
        }
    }
    ensure!(
        failed.is_empty(),
        "{} failed: see the output above",
        failed.join(" and ")
    );
    println!("xtask: all tests passed");
    Ok(())
}

/// `cargo fmt --all --check`: a formatting diff fails the tests.
fn lint_fmt() -> Result<bool> {
    let mut fmt = Command::new("cargo");
    fmt.current_dir(workspace_root())
        .args(["fmt", "--all", "--check"]);
    Ok(cmd::status(&mut fmt)?.success())
}

/// Clippy over every host crate and target (tests, benches, bins, the fuzz crate),
/// warnings as errors.
fn lint_clippy(target: &Path, with_artifacts: &dyn Fn(&mut Command)) -> Result<bool> {
    let mut clippy = cargo(None, "clippy", target);
    clippy.args([
        "--workspace",
        "--exclude",
        "tracer-ebpf",
        "--all-targets",
        "--",
        "-D",
        "warnings",
    ]);
    with_artifacts(&mut clippy);
    Ok(cmd::status(&mut clippy)?.success())
}

/// Clippy over the eBPF crate, with the nightly and the target that build it.
fn lint_clippy_ebpf(target: &Path) -> Result<bool> {
    // Per family, as each is built: a family's feature alone.
    let mut ok = true;
    for family in crate::compile::EBPF_FAMILIES {
        let mut clippy = crate::compile::ebpf_cargo("clippy", target, family);
        clippy.args(["--", "-D", "warnings"]);
        ok &= cmd::status(&mut clippy)?.success();
    }
    Ok(ok)
}
