//! Developer tasks for the tracer workspace, run as `cargo xtask <command>`.
//!
//! The commands' own modules: `compile` (build, run), `suite` (test), `package` (install,
//! uninstall, deb, the static binary), `cross` (cross-test), `bench`, `vm` (vm-test),
//! `torture`; `docs` is the docs drift test. What they install comes from `provision`, the one place that does (and all
//! of it for `setup`). Below them: `arch` and `toolchain` (the guest architectures and
//! cross toolchains), `workspace`, `cmd`, `elf`, `json`.

mod arch;
mod bench;
mod cmd;
mod compile;
mod cross;
#[cfg(test)]
mod docs;
mod elf;
mod json;
mod package;
mod provision;
mod suite;
mod toolchain;
mod torture;
mod vm;
mod workspace;

use std::{ffi::OsString, process::ExitCode};

use clap::{Parser, Subcommand};

pub use compile::{build, Built};
pub use workspace::{cargo, exit_code, is_root, target_dir, workspace_root};

#[derive(Parser)]
#[command(about = "Build, run and test the tracer")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install everything every other command needs, and run nothing else (each command
    /// also installs its own part when missing)
    ///
    /// Rust (rustup, crates.io): nightly's rust-src, a bpf-linker built against the
    /// nightly's LLVM, rustfmt, clippy, the musl target and the powerpc64le and aarch64
    /// targets. Debian (apt): the cross gcc, libc and binutils of those targets,
    /// qemu-user-static, qemu-system-x86/ppc/arm, musl-tools, g++, libbpf-tools, bpftrace,
    /// linux-perf, bpftool, libxml2-utils, tmux, chromium, prometheus, curl, openssl,
    /// dpkg-dev, binutils, man-db, lintian, python3-venv. PyPI: perfetto, in
    /// target/perfetto-venv, and kubernetes-validate, in target/k8s-venv. Downloaded into target/vm-cache, never installed: the kernels
    /// of tests/vm/kernels, busybox-static and libbpf-tools for each guest architecture.
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
        Task::Setup => provision::setup().map(|_| ExitCode::SUCCESS),
        Task::Build {
            release,
            static_bin: true,
        } => package::build_static(release).map(|_| ExitCode::SUCCESS),
        Task::Build { release, .. } => build(release).map(|_| ExitCode::SUCCESS),
        Task::Install(args) => package::install(&args).map(|_| ExitCode::SUCCESS),
        Task::Uninstall(args) => package::uninstall(&args).map(|_| ExitCode::SUCCESS),
        Task::Deb(args) => package::deb(&args).map(|_| ExitCode::SUCCESS),
        Task::Run { release, args } => compile::run(release, &args),
        Task::Test { unit } => suite::test(unit).map(|_| ExitCode::SUCCESS),
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
