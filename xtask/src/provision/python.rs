//! The PyPI packages, each in a venv under the target directory: Perfetto's official
//! generated protos (the `perfetto` package), which decode `tracer record`'s traces for
//! the end-to-end tests and the torture harness (tests/perfetto/rebuild.py), and
//! `kubernetes-validate`, which checks contrib/kubernetes/daemonset.yaml against the
//! Kubernetes API schemas it bundles (tests/tests/contrib.rs).
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{ensure, Context, Result};

use super::apt::Apt;
use crate::cmd;

/// The venv's python, made and filled when missing; the tests find it through
/// `TRACER_PERFETTO_PYTHON`.
pub fn perfetto(target: &Path, apt: &mut Apt) -> Result<PathBuf> {
    let venv = target.join("perfetto-venv");
    let python = venv.join("bin/python");
    let has_protos = |py: &Path| {
        cmd::succeeds(Command::new(py).args([
            "-c",
            "from perfetto.protos.perfetto.trace import perfetto_trace_pb2",
        ]))
    };
    if python.exists() && has_protos(&python) {
        return Ok(python);
    }
    make_venv(&venv, apt)?;
    cmd::run(Command::new(&python).args(["-m", "pip", "install", "--quiet", "perfetto"]))
        .context("pip install perfetto (Perfetto's official protos for the record tests)")?;
    ensure!(
        has_protos(&python),
        "the perfetto package has no perfetto_trace_pb2"
    );
    Ok(python)
}

/// The `kubernetes-validate` program of its venv, installed when missing; the tests
/// find it through `TRACER_KUBERNETES_VALIDATE`.
pub fn kubernetes_validate(target: &Path, apt: &mut Apt) -> Result<PathBuf> {
    let venv = target.join("k8s-venv");
    let program = venv.join("bin/kubernetes-validate");
    let works = |p: &Path| cmd::succeeds(Command::new(p).arg("--version"));
    if program.exists() && works(&program) {
        return Ok(program);
    }
    make_venv(&venv, apt)?;
    cmd::run(Command::new(venv.join("bin/python")).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "kubernetes-validate",
    ]))
    .context("pip install kubernetes-validate (checks contrib/kubernetes/daemonset.yaml)")?;
    ensure!(
        works(&program),
        "{} does not run after pip installed it",
        program.display()
    );
    Ok(program)
}

/// `python3 -m venv DIR`, installing python3-venv when Debian's python3 lacks it.
fn make_venv(venv: &Path, apt: &mut Apt) -> Result<()> {
    let make = || cmd::succeeds(Command::new("python3").args(["-m", "venv"]).arg(venv));
    if !make() {
        // Debian's python3 leaves venv (ensurepip) to python3-venv.
        apt.install(&["python3-venv"])?;
        let _ = std::fs::remove_dir_all(venv);
        ensure!(make(), "python3 -m venv {} failed", venv.display());
    }
    Ok(())
}
