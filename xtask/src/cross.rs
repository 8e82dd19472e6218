//! `cargo xtask cross-test`: the tracer's unit tests (the DTL and procfs parsers above
//! all) built for foreign targets and run under qemu-user: powerpc64le, so the
//! big-endian decoding is proven on a POWER target without POWER hardware, and aarch64.
//!
//! Provisions what it needs through `provision::cross_test` (the toolchains vm-test uses too). The
//! tests see `TRACER_UNDER_QEMU=1`, so tests that need the live kernel (BPF, perf
//! events) can skip cleanly: qemu-user emulates neither.
use std::process::Command;

use anyhow::{Context, Result};

use crate::toolchain::{self, Cross};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrossArch {
    #[value(name = "aarch64")]
    Aarch64,
    #[value(name = "ppc64le")]
    Ppc64le,
    #[value(name = "all")]
    All,
}

#[derive(clap::Args, Debug)]
pub struct CrossTestArgs {
    /// Which targets to test.
    #[arg(long, value_enum, default_value_t = CrossArch::All)]
    pub arch: CrossArch,
}

/// The toolchains `arch` stands for.
pub fn chosen(arch: CrossArch) -> Vec<&'static Cross> {
    match arch {
        CrossArch::Aarch64 => vec![&toolchain::AARCH64],
        CrossArch::Ppc64le => vec![&toolchain::PPC64LE],
        CrossArch::All => vec![&toolchain::PPC64LE, &toolchain::AARCH64],
    }
}

/// Provisions each toolchain and builds the eBPF objects, then runs `cargo test -p
/// tracer --lib` for each target under qemu-user.
pub fn cross_test(args: CrossTestArgs) -> Result<()> {
    let crosses = chosen(args.arch);
    crate::provision::cross_test(&crosses)?;
    // The eBPF objects once, with the provisioned bpf-linker: the tracer's build script
    // embeds them from TRACER_EBPF_DIR instead of building them per target.
    let tools = crate::provision::build()?;
    let ebpf_dir = crate::compile::build_ebpf(&tools, &crate::target_dir()?)?;
    for cross in crosses {
        let env_target = cross.rust_target.to_uppercase().replace('-', "_");
        let mut cargo = Command::new("cargo");
        cargo
            .current_dir(crate::workspace_root())
            .args([
                "test",
                "-p",
                "tracer",
                "--lib",
                "--target",
                cross.rust_target,
            ])
            .env(format!("CARGO_TARGET_{env_target}_RUNNER"), cross.runner())
            .env("TRACER_UNDER_QEMU", "1")
            .env("TRACER_EBPF_DIR", &ebpf_dir);
        cross.env(&mut cargo);
        crate::cmd::run(&mut cargo)
            .with_context(|| format!("the {} unit tests failed", cross.rust_target))?;
    }
    Ok(())
}
