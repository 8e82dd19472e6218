//! Developer tasks for the tracer workspace, run as `cargo xtask <command>`.

mod apt;
mod bench;
mod cmd;
mod cross;
mod elf;
mod json;
mod package;
mod setup;
mod testdeps;
mod toolchain;
mod torture;
mod vm;

use std::{
    env,
    ffi::OsString,
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::{Command, ExitCode, ExitStatus},
};

use anyhow::{bail, ensure, Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Build, run and test the tracer")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building the eBPF programs needs: nightly's rust-src and a matching bpf-linker
    Setup,
    /// Build the eBPF object (always optimized) and the tracer binary
    Build {
        /// Build the tracer binary in release mode
        #[arg(long)]
        release: bool,
        /// Build a statically linked binary (musl) that runs on any Linux distribution;
        /// as root, also check that it runs in an empty chroot
        #[arg(long = "static")]
        static_bin: bool,
    },
    /// Install the release binary, man pages and bash/zsh/fish completions (and a manifest)
    Install(package::InstallArgs),
    /// Remove exactly what `cargo xtask install` wrote (from its manifest)
    Uninstall(package::UninstallArgs),
    /// Build a Debian package (target/deb/tracer_VERSION_ARCH.deb) with dpkg-deb
    Deb(package::DebArgs),
    /// Build, then run the tracer as root (through sudo when needed): `cargo xtask run -- ARGS`
    Run {
        /// Build the tracer binary in release mode
        #[arg(long)]
        release: bool,
        /// Arguments for the tracer
        #[arg(last = true)]
        args: Vec<OsString>,
    },
    /// Build, then run all tests; the end-to-end tests load BPF programs and need root
    Test {
        /// Run only the unit tests, which need no root
        #[arg(long)]
        unit: bool,
    },
    /// Run the tracer's unit tests built for powerpc64le and aarch64 under qemu-user (installs what it needs)
    CrossTest(cross::CrossTestArgs),
    /// Measure the tracer's cost against libbpf-tools, bpftrace and an empty program (root)
    Bench(bench::BenchArgs),
    /// Boot Debian's kernels (x86_64, ppc64le pseries, aarch64 virt) under qemu and run the tracer's checks inside
    VmTest(vm::VmTestArgs),
    /// Randomized differential harness: random workloads under every target and probe mode, checked against the threads' own schedstat (root)
    Torture(torture::TortureArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Setup => setup::setup().map(|_| ExitCode::SUCCESS),
        Task::Build {
            release,
            static_bin: true,
        } => package::build_static(release).map(|_| ExitCode::SUCCESS),
        Task::Build { release, .. } => build(release).map(|_| ExitCode::SUCCESS),
        Task::Install(args) => package::install(&args).map(|_| ExitCode::SUCCESS),
        Task::Uninstall(args) => package::uninstall(&args).map(|_| ExitCode::SUCCESS),
        Task::Deb(args) => package::deb(&args).map(|_| ExitCode::SUCCESS),
        Task::Run { release, args } => run(release, &args),
        Task::Test { unit } => test(unit).map(|_| ExitCode::SUCCESS),
        Task::CrossTest(args) => cross::cross_test(args).map(|_| ExitCode::SUCCESS),
        Task::Bench(args) => bench::bench(args).map(|_| ExitCode::SUCCESS),
        Task::VmTest(args) => vm::vm_test(args).map(|_| ExitCode::SUCCESS),
        Task::Torture(args) => torture::torture(args).map(|_| ExitCode::SUCCESS),
    };
    // `{:#}` prints the whole context chain on one line, without a backtrace.
    result.unwrap_or_else(|e| {
        eprintln!("xtask: error: {e:#}");
        ExitCode::FAILURE
    })
}

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives inside the workspace")
}

/// Cargo's target directory, absolute, so every cargo we start agrees on it.
fn target_dir() -> Result<PathBuf> {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => std::path::absolute(dir).context("cannot resolve CARGO_TARGET_DIR"),
        None => Ok(workspace_root().join("target")),
    }
}

/// A `cargo` command run from the workspace root. In CI the lock file must already be
/// up to date (`--locked`), so a stale Cargo.lock fails instead of being re-resolved.
fn cargo(toolchain: Option<&str>, subcommand: &str, target: &Path) -> Command {
    let mut cmd = Command::new("cargo");
    cmd.current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", target);
    cmd.args(toolchain.map(|t| format!("+{t}"))).arg(subcommand);
    if env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false") {
        cmd.arg("--locked");
    }
    cmd
}

struct Built {
    bin: PathBuf,
    ebpf_obj: PathBuf,
}

fn build(release: bool) -> Result<Built> {
    let tools = setup::setup()?;
    let target = target_dir()?;
    let ebpf_obj = build_ebpf(&tools, &target)?;

    let mut tracer = cargo(None, "build", &target);
    tracer
        .args(["--package", "tracer"])
        .env("TRACER_EBPF_OBJ", &ebpf_obj);
    if release {
        tracer.arg("--release");
    }
    cmd::run(&mut tracer).context("building the tracer failed: fix the errors above and re-run")?;

    let bin = target
        .join(if release { "release" } else { "debug" })
        .join("tracer");
    ensure!(
        bin.exists(),
        "cargo reported success but built no {}",
        bin.display()
    );
    println!("xtask: built {}", bin.display());
    Ok(Built { bin, ebpf_obj })
}

/// Builds the eBPF programs with nightly, `-Z build-std=core` and bpf-linker. The object
/// is little-endian BPF (bpfel) whatever the host; always optimized, since the verifier
/// rejects unoptimized code.
fn build_ebpf(tools: &setup::Tools, target: &Path) -> Result<PathBuf> {
    // bpf-linker goes on PATH (rather than `-C linker`) so the build flags, and with them
    // cargo's cache, match a hand-run `PATH=... cargo +nightly build` of the same object.
    let path = env::var_os("PATH").unwrap_or_default();
    let linker_dir = tools
        .bpf_linker
        .parent()
        .context("bpf-linker has no parent directory")?;
    let path =
        env::join_paths(std::iter::once(linker_dir.to_path_buf()).chain(env::split_paths(&path)))
            .context("the bpf-linker directory cannot go on PATH: its path contains ':'")?;
    let mut ebpf = cargo(Some("nightly"), "build", target);
    ebpf.current_dir(workspace_root().join("tracer-ebpf"))
        .args([
            "--package",
            "tracer-ebpf",
            "--release",
            "--target",
            "bpfel-unknown-none",
        ])
        .args(["-Z", "build-std=core"])
        .env("PATH", path)
        .env(
            "CARGO_TARGET_BPFEL_UNKNOWN_NONE_RUSTFLAGS",
            "-C debuginfo=2 -C link-arg=--btf",
        )
        // These would override the target-specific flags above.
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    cmd::run(&mut ebpf)
        .context("building the eBPF programs failed: fix the errors above and re-run")?;

    let obj = target.join("bpfel-unknown-none/release/tracer");
    ensure!(
        obj.exists(),
        "cargo reported success but built no {}",
        obj.display()
    );
    println!("xtask: built eBPF object {}", obj.display());
    Ok(obj)
}

fn is_root() -> Result<bool> {
    // The second field of `Uid:` is the effective uid.
    let status = std::fs::read_to_string("/proc/self/status")
        .context("cannot read /proc/self/status: is /proc mounted?")?;
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .context("/proc/self/status has no Uid line")?;
    Ok(euid == "0")
}

fn run(release: bool, args: &[OsString]) -> Result<ExitCode> {
    let built = build(release)?;
    let mut tracer = if is_root()? {
        Command::new(&built.bin)
    } else {
        let mut sudo = Command::new("sudo");
        sudo.arg("-E").arg(&built.bin);
        sudo
    };
    let status = cmd::status(tracer.args(args))?;
    Ok(exit_code(status))
}

/// The child's exit code, or 128 + signal number like a shell when it was killed.
fn exit_code(status: ExitStatus) -> ExitCode {
    let code = status
        .code()
        .or(status.signal().map(|s| 128 + s))
        .unwrap_or(1);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn test(unit_only: bool) -> Result<()> {
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
    let mut failed = Vec::new();
    // Formatting first: it takes a second and needs no build.
    if !lint_fmt()? {
        failed.push("`cargo fmt --all --check`");
    }
    let built = build(false)?;
    let target = target_dir()?;
    let with_artifacts = |cmd: &mut Command| {
        cmd.env("TRACER_BIN", &built.bin)
            .env("TRACER_EBPF_OBJ", &built.ebpf_obj);
    };
    if !lint_clippy(&target, &with_artifacts)? {
        failed.push("clippy");
    }

    // tracer-ebpf only builds for the BPF target; tracer-tests is the end-to-end suite.
    // Tests that need root or a kernel feature are `#[ignore = "needs root"]`, so a plain
    // `cargo test` as a user passes; as root they all run here, and one that cannot run
    // fails.
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
        // offcpu_e2e compares with libbpf-tools' offcputime and checks its SVG with xmllint.
        let on_path = |b: &str| {
            std::env::var_os("PATH")
                .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(b).is_file()))
                || Path::new("/usr/sbin").join(b).is_file()
        };
        let missing: Vec<&str> = [("offcputime", "libbpf-tools"), ("xmllint", "libxml2-utils")]
            .into_iter()
            .filter(|(bin, _)| !on_path(bin))
            .map(|(_, pkg)| pkg)
            .collect();
        apt::Apt::new().install(&missing)?;
        // install_e2e installs the package with dpkg and reads its pages with man: the
        // package is built (and checked by lintian) once here, and the tests get its path.
        let deb = match package::prepare_e2e() {
            Ok(deb) => Some(deb),
            Err(e) => {
                println!("xtask: the Debian package: {e:#}");
                failed.push("the Debian package");
                None
            }
        };
        // The real consumers of `tracer top` and `--heatmap`: a terminal and a browser.
        apt::ensure(
            "tracer top's terminal test and the heatmap's browser test",
            &["tmux", "chromium"],
        )?;
        // tracer serve's consumers: a Prometheus server and promtool, curl for TLS and
        // basic auth, openssl for the test's certificate.
        apt::ensure(
            "tracer serve's Prometheus, promtool and TLS tests",
            &["prometheus", "curl", "openssl"],
        )?;
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
        // record_*_e2e and slow_e2e: Perfetto's protos (a venv under target/) and runqslower.
        let mut apt = apt::Apt::new();
        e2e.env(
            "TRACER_PERFETTO_PYTHON",
            testdeps::perfetto_python(&target, &mut apt)?,
        );
        testdeps::runqslower(&mut apt)?;
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
    setup::ensure_component("rustfmt")?;
    let mut fmt = Command::new("cargo");
    fmt.current_dir(workspace_root())
        .args(["fmt", "--all", "--check"]);
    Ok(cmd::status(&mut fmt)?.success())
}

/// Clippy over every host crate and target (tests, benches, bins), warnings as errors.
fn lint_clippy(target: &Path, with_artifacts: &dyn Fn(&mut Command)) -> Result<bool> {
    setup::ensure_component("clippy")?;
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
