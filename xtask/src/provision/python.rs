//! What the end-to-end tests of `tracer record` / `tracer slow` need beyond the build:
//! Perfetto's official generated protos (the `perfetto` PyPI package) in a venv under the
//! target directory, and libbpf-tools for `runqslower`. Installed here so a fresh
//! machine (and CI) gets them from `cargo xtask test` alone.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{ensure, Context, Result};

use crate::{apt::Apt, cmd};

/// The venv's python, made and filled when missing; the tests find it through
/// `TRACER_PERFETTO_PYTHON`.
pub fn perfetto_python(target: &Path, apt: &mut Apt) -> Result<PathBuf> {
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
    let make = || cmd::succeeds(Command::new("python3").args(["-m", "venv"]).arg(&venv));
    if !make() {
        // Debian's python3 leaves venv (ensurepip) to python3-venv.
        apt.install(&["python3-venv"])?;
        let _ = std::fs::remove_dir_all(&venv);
        ensure!(make(), "python3 -m venv {} failed", venv.display());
    }
    cmd::run(Command::new(&python).args(["-m", "pip", "install", "--quiet", "perfetto"]))
        .context("pip install perfetto (Perfetto's official protos for the record tests)")?;
    ensure!(
        has_protos(&python),
        "the perfetto package has no perfetto_trace_pb2"
    );
    Ok(python)
}

/// libbpf-tools, for `runqslower` (tracer slow is checked against it).
pub fn runqslower(apt: &mut Apt) -> Result<()> {
    let have = ["/usr/sbin/runqslower", "/usr/bin/runqslower"]
        .iter()
        .any(|p| Path::new(p).exists());
    if !have {
        apt.install(&["libbpf-tools"])?;
    }
    Ok(())
}
