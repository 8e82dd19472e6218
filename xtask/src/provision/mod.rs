//! Everything the xtask installs or downloads, in one place. Each command calls the
//! function here named after it for what it needs (each piece checked first, installed
//! only when missing, so a second run changes nothing), and `cargo xtask setup` calls
//! them all ([`setup`]). A fresh machine needs only rustup's stable and nightly toolchains:
//!
//! | need            | what                                                              | from     |
//! |-----------------|-------------------------------------------------------------------|----------|
//! | [`build`]       | nightly's rust-src, bpf-linker built against the nightly's LLVM   | rustup, crates.io |
//! | [`static_binary`] | the `<arch>-unknown-linux-musl` target, musl-tools              | rustup, apt |
//! | [`lints`]       | rustfmt, clippy; g++ for libFuzzer (the fuzz crate is linted and its seeds run as tests); groff (the unit tests render the man pages with `groff -ww`) | rustup, apt |
//! | [`e2e`]         | libbpf-tools, libxml2-utils, tmux, chromium, prometheus, curl, openssl, python3-venv; Perfetto's protos, kubernetes-validate | apt, PyPI |
//! | [`deb`]         | dpkg-dev, binutils, man-db (tests/tests/install.rs), lintian (`--lintian`) | apt      |
//! | [`torture`]     | Perfetto's protos                                                 | PyPI     |
//! | [`bench`]       | libbpf-tools, bpftrace, linux-perf, bpftool                       | apt      |
//! | [`cross_test`]  | the cross targets, their gcc, libc and binutils, qemu-user-static | rustup, apt |
//! | [`vm_test`]     | qemu-system-*, the dpkg architectures and cross toolchains of the guests | apt |
//! | [`guest`]       | per guest: the kernels of tests/vm/kernels, busybox-static, libbpf-tools (downloaded into `target/vm-cache`, never installed) | apt |

mod apt;
mod cross;
pub mod guest;
mod python;
mod rust;

use std::path::{Path, PathBuf};

use anyhow::Result;

pub use apt::Apt;
pub use cross::Use;
pub use rust::Tools;

use crate::{arch::ARCHES, toolchain::Cross};

/// What the eBPF build needs (every command that builds calls this).
pub fn build() -> Result<Tools> {
    rust::ebpf_tools()
}

/// The static (musl) binary: the rustup target, and a C compiler for musl: `ring` (TLS
/// for `tracer serve`) compiles C, and cc-rs looks for `<arch>-linux-musl-gcc`, which
/// Debian's musl-tools names musl-gcc.
pub fn static_binary(target: &str) -> Result<()> {
    rust::target(target)?;
    Apt::new().ensure("a C compiler for musl (ring)", &["musl-tools"])
}

/// The lint gates of `cargo xtask test` (rustfmt, clippy), a C++ compiler for
/// libFuzzer, which the fuzz crate (tracer/fuzz, a workspace member) links, and groff,
/// with which the unit tests render every man page and fail on any warning
/// (tracer/src/cli/man/tests.rs).
pub fn lints() -> Result<()> {
    rust::component("rustfmt")?;
    rust::component("clippy")?;
    rust::nightly_component("clippy")?;
    Apt::new().install_missing(&[("c++", "g++"), ("groff", "groff-base")])
}

/// The programs [`e2e`] installed that the tests are told about.
pub struct E2e {
    /// The python with Perfetto's protos (`TRACER_PERFETTO_PYTHON`).
    pub perfetto_python: PathBuf,
    /// kubernetes-validate (`TRACER_KUBERNETES_VALIDATE`).
    pub kubernetes_validate: PathBuf,
}

/// What the end-to-end tests (and tests/tests/contrib.rs's checks of contrib/) run
/// beside the tracer.
pub fn e2e() -> Result<E2e> {
    let mut apt = Apt::new();
    // The offcpu test compares with libbpf-tools' offcputime and checks its SVG with xmllint.
    let missing: Vec<&str> = [("offcputime", "libbpf-tools"), ("xmllint", "libxml2-utils")]
        .into_iter()
        .filter(|(bin, _)| !apt::on_path(bin))
        .map(|(_, pkg)| pkg)
        .collect();
    apt.install(&missing)?;
    // The real consumers of `tracer top` and `--heatmap`: a terminal and a browser.
    apt.ensure(
        "tracer top's terminal test and the heatmap's browser test",
        &["tmux", "chromium"],
    )?;
    // tracer serve's consumers: a Prometheus server and promtool (also for contrib/'s
    // rules and dashboard), curl for TLS and basic auth, openssl for the test's certificate.
    apt.ensure(
        "tracer serve's Prometheus, promtool and TLS tests",
        &["prometheus", "curl", "openssl"],
    )?;
    // The record* and slow* tests: Perfetto's protos (a venv under target/) and
    // libbpf-tools' runqslower (tracer slow is checked against it).
    let target = crate::target_dir()?;
    let perfetto_python = python::perfetto(&target, &mut apt)?;
    // contrib/kubernetes/daemonset.yaml against the Kubernetes API schemas.
    let kubernetes_validate = python::kubernetes_validate(&target, &mut apt)?;
    let runqslower = ["/usr/sbin/runqslower", "/usr/bin/runqslower"]
        .iter()
        .any(|p| Path::new(p).exists());
    if !runqslower {
        apt.install(&["libbpf-tools"])?;
    }
    Ok(E2e {
        perfetto_python,
        kubernetes_validate,
    })
}

/// Building the Debian package (dpkg-shlibdeps, strip), and what checks it: man-db for
/// tests/tests/install.rs (`e2e_checks`), lintian (`lintian`).
pub fn deb(e2e_checks: bool, lintian: bool) -> Result<()> {
    let mut apt = Apt::new();
    if e2e_checks && !apt::present("man") {
        apt.install(&["man-db"])?;
    }
    let need: Vec<&str> = [("dpkg-shlibdeps", "dpkg-dev"), ("strip", "binutils")]
        .into_iter()
        .filter(|(prog, _)| !apt::on_path(prog))
        .map(|(_, pkg)| pkg)
        .collect();
    apt.install(&need)?;
    if lintian && !apt::present("lintian") {
        apt.install(&["lintian"])?;
    }
    Ok(())
}

/// `cargo xtask torture`: the python with Perfetto's protos, which rebuilds the traces of
/// `tracer record` scenarios.
pub fn torture() -> Result<PathBuf> {
    python::perfetto(&crate::target_dir()?, &mut Apt::new())
}

/// The programs `cargo xtask bench` compares with and inspects with.
pub struct BenchTools {
    pub perf: PathBuf,
    pub bpftool: PathBuf,
    pub cpudist: PathBuf,
    pub runqlat: PathBuf,
    pub bpftrace: PathBuf,
    pub offcputime: PathBuf,
}

/// `cargo xtask bench`: libbpf-tools, bpftrace and perf it compares with, and bpftool.
pub fn bench() -> Result<BenchTools> {
    Apt::new().ensure(
        "the bench's reference tools",
        &["libbpf-tools", "bpftrace", "linux-perf", "bpftool"],
    )?;
    Ok(BenchTools {
        perf: apt::binary("linux-perf", "perf")?,
        bpftool: apt::binary("bpftool", "bpftool")?,
        cpudist: apt::binary("libbpf-tools", "cpudist")?,
        runqlat: apt::binary("libbpf-tools", "runqlat")?,
        bpftrace: apt::binary("bpftrace", "bpftrace")?,
        offcputime: apt::binary("libbpf-tools", "offcputime")?,
    })
}

/// `cargo xtask cross-test`: each toolchain, with qemu-user to run its tests.
pub fn cross_test(crosses: &[&Cross]) -> Result<()> {
    let mut apt = Apt::new();
    for cross in crosses {
        cross::provision(cross, &mut apt, Use::BuildAndRun)?;
    }
    Ok(())
}

/// `cargo xtask vm-test`: the host's side of the guests `arches` (qemu, dpkg
/// architectures, cross toolchains); the guests' own files come from [`guest`] with the
/// returned `Apt`.
pub fn vm_test(arches: &[&crate::arch::Arch]) -> Result<Apt> {
    let mut apt = Apt::new();
    guest::host(&mut apt, arches)?;
    Ok(apt)
}

/// `cargo xtask setup`: everything any command needs, as in the table above.
pub fn setup() -> Result<()> {
    build()?;
    lints()?;
    static_binary(&crate::package::static_target())?;
    let crosses: Vec<&Cross> = ARCHES.iter().filter_map(|a| a.cross).collect();
    cross_test(&crosses)?;
    deb(true, true)?;
    e2e()?;
    bench()?;
    let mut apt = vm_test(&ARCHES)?;
    let cache = crate::target_dir()?.join("vm-cache");
    for arch in ARCHES {
        guest::busybox(&mut apt, arch, &cache)?;
        guest::libbpf_tools(&mut apt, arch, &cache)?;
    }
    for (arch, package) in guest::listed_kernels()? {
        guest::kernel(&mut apt, arch, &package, &cache)?;
    }
    println!("xtask: setup done: every command's tools are installed");
    Ok(())
}
